"""Score one explicit layout without a search: a plain training job, or the RL step of a plan file.

    from problems.placement.predict import TrainingJob, predict_training, predict_plan
    p = predict_training(TrainingJob(model="llama3.1-8b", gpu="H100", dp=8, seq_len=4096,
                                     global_batch=256, micro_batch=1))
    p["step_s"], p["breakdown"], p["memory_gb"], p["assumptions"]

Both go through the planner's own model (`model.training.train_times`, `model.evaluate` and the
memory functions): a training job becomes a one-layout model context (a cluster of its GPU types,
a workload of `global_batch` samples of `seq_len` tokens with forward + backward passes only), so
what `mosearch predict` prints is what the search scores. `predict_plan` re-scores a plan with the
settings a run actually used (batch, group size, lengths, optimizer updates per step).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from problems.errors import InputError
from problems.placement.catalog import Architecture, Precision, gpu_aliases, gpu_catalog, model_presets, nearest
from problems.placement.specs import (PRECISION_BYTES, Cluster, ElementwiseKernels, ModelSpec, Pool, Workload,
                                      load_cluster, resolve_architecture)
from problems.placement.names import (AMP_AUTOCAST_HELP, ASYNC, COLOCATED, EAGER_KERNELS, ELEMENTWISE_KERNELS_HELP,
                                      PRECISIONS, RECOMPUTE, SHARDINGS, params_sharded_by)
from problems.placement.plan import Sharding
from problems.placement.plancheck import check_plan
from problems.specio import Spec, load_model

# Per-node network of a DGX A100 (8 x 200 Gb/s HDR InfiniBand compute ports = 200 GB/s; NVIDIA DGX
# A100 datasheet); DGX H100 has 8 x 400 Gb/s. Give `inter_node_gbs` for other machines.
DEFAULT_INTER_NODE_GBS = 200.0


class GPUFigures(Spec):
    """Figures of a GPU variant that differs from the catalog's part (e.g. an H100 with 96 GB HBM2e)."""

    memory_gb: float | None = Field(default=None, gt=0)
    bandwidth_tbs: float | None = Field(default=None, gt=0)


class TrainingJob(Spec):
    """A plain (pre-)training or fine-tuning job on an explicit layout."""

    name: str = "job"
    model: str | ModelSpec
    precision: Precision = "bf16"
    attention: Literal["flash", "unfused"] = "flash"
    elementwise_kernels: ElementwiseKernels = Field(default="fused", description=ELEMENTWISE_KERNELS_HELP)
    amp_autocast: bool = Field(default=False, description=AMP_AUTOCAST_HELP)
    padded: bool = Field(default=False, description="a micro-batch's sequences differ in length and are padded to "
                                                    "seq_len with an attention mask (with amp_autocast: the trainer's "
                                                    "RL micro-batches; model/memory.py sdpa_paths)")
    seq_len: int = Field(gt=0)
    global_batch: int = Field(gt=0, description="sequences per optimizer step")
    micro_batch: int = Field(default=1, gt=0, description="sequences per micro-batch per data-parallel rank")
    dp: int = Field(default=1, gt=0)
    tp: int = Field(default=1, gt=0)
    pp: int = Field(default=1, gt=0)
    ep: int = Field(default=1, gt=0, description="expert-parallel size of a mixture of experts (model/moe.py): "
                                                 "divides dp*tp and the routed experts")
    moe_imbalance: float | None = Field(default=None, ge=1.0, description=(
        "a mixture of experts' busiest EP rank's routed tokens over the mean (default model/moe.py MOE_IMBALANCE; "
        "1 for a run that force-balances the routing)"))
    stage_layers: list[int] | None = Field(default=None, description="layers per pipeline stage (default even)")
    gpu: str = "H100"
    stage_gpus: list[str] | None = Field(default=None, description="GPU type per pipeline stage (default `gpu`)")
    replica_gpus: list[str] | None = Field(default=None, description="GPU type per data-parallel replica "
                                                                     "(heterogeneous data parallelism, even stages)")
    replica_stage_gpus: list[list[str]] | None = Field(
        default=None, description="GPU type per pipeline stage of each data-parallel replica (replicas whose stages "
                                  "run on different type sequences); one list of pp types per replica")
    gpus_per_node: int = Field(default=8, gt=0)
    inter_node_gbs: float | dict[str, float] = Field(
        default=DEFAULT_INTER_NODE_GBS, description="per-node network, GB/s: one figure, or one per GPU type (a "
                                                    "network per node group: {H100: 400, RTX-4090: 1.25})")
    reshard_after_forward: bool = Field(default=True, description="ZeRO-3 / FSDP: free gathered weights after "
                                        "forward and gather them again in backward (FSDP2's and DeepSpeed's default)")
    sharding: Sharding = "none"
    recompute: bool | Literal[tuple(RECOMPUTE)] = Field(  # type: ignore[valid-type]
        default=False, description="true or full: full activation recomputation; selective_op (or selective-op): "
                                   "torchtitan's selective op checkpointing (every second matmul and the "
                                   "element-wise ops recomputed)")
    sequence_parallel: bool = Field(default=False, description="Megatron sequence parallelism with TP (layer norms "
                                                               "and dropout on 1/tp of the tokens)")
    interleave: int = Field(default=1, gt=0, description="virtual pipeline stages per rank (interleaved 1F1B)")
    optimizer_offload: bool = False
    efficiencies: dict[str, dict[str, float]] = Field(default_factory=dict,
                                                      description="per GPU type: model parameters to override")
    gpu_types: dict[str, GPUFigures] = Field(default_factory=dict,
                                             description="per GPU type: datasheet figures of the variant used")

    @field_validator("recompute")
    @classmethod
    def _recompute_kind(cls, value):
        return RECOMPUTE.get(value, value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _layout(self) -> "TrainingJob":
        if self.stage_layers is not None and len(self.stage_layers) != self.pp:
            raise ValueError(f"stage_layers has {len(self.stage_layers)} entries for pp = {self.pp}")
        if self.stage_gpus is not None and len(self.stage_gpus) != self.pp:
            raise ValueError(f"stage_gpus has {len(self.stage_gpus)} entries for pp = {self.pp}")
        if self.replica_stage_gpus is not None:
            if len(self.replica_stage_gpus) != self.dp:
                raise ValueError(f"replica_stage_gpus has {len(self.replica_stage_gpus)} replicas for dp = {self.dp}")
            if any(len(r) != self.pp for r in self.replica_stage_gpus):
                raise ValueError(f"every replica of replica_stage_gpus needs pp = {self.pp} stage types")
            if self.stage_gpus is not None or self.replica_gpus is not None:
                raise ValueError("replica_stage_gpus replaces stage_gpus and replica_gpus: give one of them")
        if isinstance(self.inter_node_gbs, dict):
            if not self.inter_node_gbs or min(self.inter_node_gbs.values()) <= 0:
                raise ValueError("inter_node_gbs per GPU type must be > 0 GB/s")
        elif self.inter_node_gbs <= 0:
            raise ValueError(f"inter_node_gbs {self.inter_node_gbs} must be > 0 GB/s")
        if self.replica_gpus is not None:
            if len(self.replica_gpus) != self.dp:
                raise ValueError(f"replica_gpus has {len(self.replica_gpus)} entries for dp = {self.dp}")
            if self.stage_gpus is not None or self.stage_layers is not None:
                raise ValueError("replica_gpus takes even stages of one GPU type per replica: "
                                 "drop stage_gpus/stage_layers or replica_gpus")
        if self.stage_layers is not None and min(self.stage_layers) < 1:
            raise ValueError("every pipeline stage needs at least one layer")
        if self.global_batch % (self.dp * self.micro_batch):
            raise ValueError(f"global_batch {self.global_batch} is not a multiple of dp x micro_batch = "
                             f"{self.dp * self.micro_batch}")
        if (self.dp * self.tp) % self.ep:
            raise ValueError(f"ep {self.ep} must divide dp*tp = {self.dp * self.tp} (expert-parallel groups are "
                             "carved from one stage's data- and tensor-parallel ranks)")
        if self.gpus_per_node % self.tp:
            raise ValueError(f"tp {self.tp} does not tile a node of {self.gpus_per_node} GPUs (TP stays inside a node: "
                             "a divisor of gpus_per_node)")
        return self

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp


def load_job(path: str | Path) -> TrainingJob:
    return load_model(path, TrainingJob, "a training job (see `mosearch predict --help`)")


def _arch(job: TrainingJob, where: str | None) -> Architecture:
    return resolve_architecture(job.model, where)


def _job_context(job: TrainingJob, where: str | None):
    """(ModelContext, fields, cluster) of one training job, ready for `train_times`."""
    from problems.placement.model import build_context

    arch = _arch(job, where)
    why = arch.tp_problem(job.tp, kv_replicas=False)
    if why:
        raise InputError(where, "tp", why, "a divisor of the attention and KV heads")
    if arch.max_context is not None and job.seq_len > arch.max_context:
        raise InputError(where, "seq_len", f"{job.seq_len} tokens, beyond the {arch.max_context} of {arch.name}'s "
                         "context (max_position_embeddings)", f"at most {arch.max_context}")
    if job.ep > 1 and (not arch.is_moe or arch.experts % job.ep):
        raise InputError(where, "ep", f"{job.ep} for {arch.name}" + (f"'s {arch.experts} routed experts"
                         if arch.is_moe else ", a dense model"), "a divisor of the routed experts (1 for a dense model)")
    if job.pp > arch.layers:
        raise InputError(where, "pp", f"{job.pp} pipeline stages for the {arch.layers} layers of {arch.name}",
                         "at most one stage per layer")
    if job.stage_layers is not None and sum(job.stage_layers) != arch.layers:
        raise InputError(where, "stage_layers", f"sum {sum(job.stage_layers)} != the model's {arch.layers} layers",
                         "layers per stage adding up to the model's")
    if job.interleave > 1:  # virtual stages split each pipeline stage's layers into chunks
        if job.pp == 1:
            raise InputError(where, "interleave", f"{job.interleave} virtual stages per rank without a pipeline (pp 1)",
                             "1, or pp > 1")
        layers = job.stage_layers or _even_layers(arch.layers, job.pp)
        short = next((i for i, n in enumerate(layers) if n < job.interleave), None)
        if short is not None:
            raise InputError(where, "interleave", f"{job.interleave} virtual stages per rank for the {layers[short]} "
                             f"layer(s) of pipeline stage {short} ({arch.layers} layers over pp {job.pp})",
                             "at most the layers of every stage: a virtual stage holds at least one layer")
    if job.sequence_parallel and job.tp == 1:
        raise InputError(where, "sequence_parallel", "sequence parallelism with tp 1", "tp > 1 (it splits the layer "
                         "norms' and dropout's tokens over the tensor-parallel ranks), or no sequence parallelism")
    types = dict(gpu_catalog())
    aliases = gpu_aliases(types)
    for name, over in job.gpu_types.items():
        canonical = aliases.get(name.lower())
        if canonical is None:
            raise InputError(where, f"gpu_types.{name}", f"unknown GPU type {name!r}", "a catalog type")
        given = over.model_dump(exclude_none=True)
        src = {k: f"given in {where or 'the job'}" for k in given}
        if "memory_gb" in given and types[canonical].usable_memory_gb:
            given["usable_memory_gb"] = types[canonical].variant_usable_gb(given["memory_gb"])
            src["usable_memory_gb"] = f"the catalog {canonical}'s share of its memory_gb, scaled"
        types[canonical] = types[canonical].model_copy(update={**given, "sources": {**types[canonical].sources, **src}})
    per_replica = job.replica_gpus is not None
    labels = job.replica_gpus or job.stage_gpus or [job.gpu] * job.pp
    field = "replica_gpus" if per_replica else "stage_gpus" if job.stage_gpus else None
    names = []
    for i, g in enumerate(labels):
        canonical = aliases.get(g.lower())
        if canonical is None:
            key = f"{field}[{i}]" if field else "gpu"
            raise InputError(where, key, f"unknown GPU type {g!r}",
                             "a catalog type; nearest: " + (", ".join(nearest(g, list(types))) or ", ".join(types)))
        names.append(canonical)
    kinds = list(dict.fromkeys(names))  # pools in stage (or replica) order
    for k in kinds:
        why = types[k].precision_problem(job.precision)
        if why:
            common = [q for q in PRECISIONS if all(types[n].runs(q) for n in kinds)]
            raise InputError(where, "precision", why, f"a precision {', '.join(kinds)} run"
                             f"{'s' if len(kinds) == 1 else ''}: {', '.join(common)}" if common else
                             "GPU types that run it")
    per_type = {k: names.count(k) for k in kinds}  # stages (or replicas) of each type
    # GPUs of a type: dp replicas x tp x its stages, or its replicas x tp x pp
    gpus_of = {k: per_type[k] * job.tp * (job.pp if per_replica else job.dp) for k in kinds}
    nets = job.inter_node_gbs if isinstance(job.inter_node_gbs, dict) else {}
    for g in nets:
        if aliases.get(g.lower()) not in kinds:
            raise InputError(where, f"inter_node_gbs.{g}", "not a GPU type of this job", ", ".join(kinds))
    net = {aliases[g.lower()]: v for g, v in nets.items()}
    default_net = DEFAULT_INTER_NODE_GBS if nets else job.inter_node_gbs
    pools = [Pool(id=f"{k}@job", gpu=types[k], region="job", count=gpus_of[k],
                  gpus_per_node=job.gpus_per_node, intra_gbs=types[k].intra_node.bandwidth_gbs,
                  inter_gbs=net.get(k, default_net)) for k in kinds]
    cluster = Cluster(name=job.name, path=where or "<job>", pools=pools, regions=["job"],
                      region_bw=np.array([[min(p.inter_gbs for p in pools)]]), region_latency=np.array([[1e-5]]),
                      region_egress=np.zeros((1, 1)))
    workload = Workload(name=job.name, path=where or "<job>", model=arch, algorithm="grpo",
                        prompts_per_step=job.global_batch, samples_per_prompt=1, prompt_len=job.seq_len,
                        response_mean=0, response_max=0, max_staleness=0, precision=job.precision,
                        has_reference=False, has_critic=False, attention=job.attention,
                        elementwise_kernels=job.elementwise_kernels, amp_autocast=job.amp_autocast)
    for gpu in job.efficiencies:
        if aliases.get(gpu.lower()) not in kinds:
            raise InputError(where, f"efficiencies.{gpu}", "not a GPU type of this job", ", ".join(kinds))
    eff = {aliases[g.lower()]: v for g, v in job.efficiencies.items()}
    try:
        ctx = build_context(cluster, workload, eff)
    except InputError as err:
        raise InputError(where, err.key, err.problem, err.expected) from None
    ctx.rl_passes = False
    ctx.even_split = True  # a plain training job runs on a framework that splits the batch evenly
    ctx.interleave = job.interleave
    ctx.lengths_differ = job.padded
    ctx.selective_op = job.recompute == "selective_op"
    ctx.sequence_parallel = job.sequence_parallel
    ctx.reshard_after_forward = job.reshard_after_forward
    if job.moe_imbalance is not None:
        ctx.moe_imbalance = job.moe_imbalance
    # a pipeline over several GPU types or uneven stages takes the staged path; one type per replica
    # (even stages) is the planner's own layout, replicas in pools
    staged = not per_replica and (job.stage_layers is not None or len(kinds) > 1 or job.stage_gpus is not None)
    one = lambda v, dtype=np.int64: np.array([v], dtype=dtype)  # noqa: E731
    f = {"tp": one(job.tp), "pp": one(job.pp), "micro_batch": one(job.micro_batch), "dp": one(job.dp), "ep": one(job.ep),
         "train_gpus": np.array([[p.count for p in pools]], dtype=np.int64),
         "shared_gpus": np.zeros((1, len(pools)), dtype=np.int64),
         "recompute": one(int(job.recompute is True)), "sharding": one(SHARDINGS.index(job.sharding)),
         "optimizer_offload": one(int(job.optimizer_offload)),
         "stages_on_pool": np.array([[job.pp if per_replica else per_type[k] for k in kinds]], dtype=np.int64)}
    if staged:
        layers = job.stage_layers or _even_layers(arch.layers, job.pp)
        ctx.stage_layers = np.array(layers, dtype=float)
        ctx.stage_pool = np.array([kinds.index(n) for n in names], dtype=np.int64)
    return ctx, f, cluster


def _even_layers(layers: int, pp: int) -> list[int]:
    """Megatron's even partition: layers / pp per stage (the first stages take the remainder)."""
    base, extra = divmod(layers, pp)
    return [base + (i < extra) for i in range(pp)]


def _memory(ctx, f, tr) -> dict[str, float]:
    """Per GPU of the most loaded stage on the fullest GPU type, GB: model states by kind, activations,
    weights gathered by ZeRO-3 / FSDP, runtime, and the caching allocator's fragments; allocated and
    reserved (the figure an out-of-memory depends on: `model.memory`)."""
    from problems.placement.model.memory import train_memory

    m = train_memory(ctx, f, np.maximum(tr["dp"], 1), tr["micro_batches"])
    j = int(np.argmax(m["reserved"][0] / ctx.mem))  # the GPU type closest to running out
    gb = {k: float(np.broadcast_to(v[0], ctx.mem.shape)[j]) * 1e-9 for k, v in m.items()}
    parts = ("weights", "gradients", "optimizer", "activations", "gathered_weights", "unsharded_gradients",
             "weight_casts", "optimizer_step_temporaries")
    return {**{k: gb[k] for k in parts}, **({"reference": gb["reference"]} if ctx.has_reference else {}),
            "runtime": float(ctx.eff["runtime_gb"][j]), "allocator_waste": gb["reserved"] - gb["allocated"],
            "allocated": gb["allocated"], "reserved": gb["reserved"], "capacity": float(ctx.mem[j]) * 1e-9}


def predict_training(job: TrainingJob, where: str | None = None) -> dict:
    """Iteration time, throughput, breakdown and memory of one training job (see module doc). `fits`: the
    allocated peak of every GPU is within its capacity (what the job must hold); `tight`: it fits, but the
    reserved estimate (the allocated peak plus the caching allocator's assumed fragments) does not: such a
    configuration runs where the allocator fragments less than assumed (published runs did: torchtitan's 8B rows
    and this project's H200 steps reserve 5-20% less than the 30% assumed), so it is said, not refused.

    Replicas whose stages run on different type sequences (`replica_stage_gpus`): each distinct sequence
    is scored as a pipeline with the job's dp replicas (the even batch split waits for the slowest), and
    the slowest sequence sets the step; its data-parallel sync is taken over that sequence's links."""
    if job.replica_stage_gpus is not None:
        runs = [predict_training(job.model_copy(update={"replica_stage_gpus": None, "stage_gpus": list(seq)}), where)
                for seq in dict.fromkeys(tuple(r) for r in job.replica_stage_gpus)]
        worst = max(runs, key=lambda r: r["step_s"])
        mem = max(runs, key=lambda r: r["memory_gb"]["reserved"] / r["memory_gb"]["capacity"])
        worst = dict(worst, memory_gb=mem["memory_gb"], fits=all(r["fits"] for r in runs),
                     tight=any(r["tight"] for r in runs))
        worst["layout"] = dict(worst["layout"], stage_gpus=[], replica_stage_gpus=[list(r) for r in job.replica_stage_gpus])
        worst["assumptions"] = worst["assumptions"] + [
            "replicas with different stage types: the slowest replica's pipeline sets the step (the batch is split "
            "evenly); its gradient sync is modelled over that replica's GPU types"]
        return worst
    from problems.placement.model.training import train_times

    ctx, f, cluster = _job_context(job, where)
    tr = train_times(ctx, f, np.ones(1))
    step = float(tr["train_s"][0])
    tokens = job.global_batch * job.seq_len
    gpus = job.gpus
    # model FLOPs as Megatron-LM counts them (forward + backward, no recompute): what MFU compares with
    full = job.recompute is True
    model_flops = float(tr["train_flops"][0] - tr["selective_recompute_flops"][0]) / (1.0 + full / 3.0)
    peak = np.average([p.gpu.peak(job.precision) for p in cluster.pools], weights=[p.count for p in cluster.pools])
    sharded = params_sharded_by(job.sharding, job.dp)
    parts = {k: float(tr[k][0]) for k in ("train_compute_s", "pipeline_bubble_s", "tp_comm_s", "pp_comm_s",
                                          *(("ep_comm_s",) if ctx.moe else ()), "dp_sync_s", "optimizer_s")}
    stages = [int(x) for x in (ctx.stage_layers if ctx.stage_layers is not None else _even_layers(ctx.layers, job.pp))]
    return {
        "job": job.name, "model": _arch(job, where).name, "gpus": gpus,
        "layout": {"dp": job.dp, "tp": job.tp, "pp": job.pp, **({"ep": job.ep} if job.ep > 1 else {}),
                   "micro_batch": job.micro_batch,
                   "micro_batches_per_rank": int(tr["micro_batches"][0].max()),
                   "stage_layers": stages,
                   "stage_gpus": job.stage_gpus or ([] if job.replica_gpus else [job.gpu] * job.pp),
                   "replica_gpus": job.replica_gpus or []},
        "step_s": step,
        "samples_s": job.global_batch / step,
        "tokens_s": tokens / step,
        "tokens_s_per_gpu": tokens / step / gpus,
        "model_tflops_per_gpu": model_flops / step / gpus / 1e12,
        "mfu": model_flops / step / gpus / (peak * 1e12),
        "breakdown": parts,
        "memory_gb": (mem := _memory(ctx, f, tr)),
        "fits": bool(mem["allocated"] <= mem["capacity"]),
        "tight": bool(mem["allocated"] <= mem["capacity"] < mem["reserved"]),
        "assumptions": _assumptions(ctx, cluster, job.precision, job.attention, sharded)
                       + _sdpa_notes(ctx, job.micro_batch) + _interleave_notes(job.interleave, stages)
                       + _pipelined_fsdp_notes(sharded, job.pp),
    }


# what each precision means for the matmuls (`--precision`), as the frameworks run them by default
PRECISION_MEANING = {
    "bf16": "bf16 weights and activations, BF16 tensor-core matmuls",
    "fp16": "fp16 weights and activations, FP16 tensor-core matmuls",
    "fp8": "bf16 storage, FP8 tensor-core matmuls for the Linear layers (Transformer Engine, torchao float8)",
    "tf32": "fp32 storage, matmuls on TF32 tensor cores: what fp32 training runs at when TF32 is allowed "
            "(torch.backends.cuda.matmul.allow_tf32 = True, or torch.set_float32_matmul_precision('high'); "
            "Megatron-LM and most training scripts set it, and the catalog's layer fits of fp32 rows ran so)",
    "fp32": "fp32 storage, matmuls on the FP32 units: PyTorch's default for fp32 matmuls since 1.12 "
            "(allow_tf32 = False, float32_matmul_precision 'highest'); often 4-8x slower than tf32",
}


def _interleave_notes(interleave: int, stages: list[int]) -> list[str]:
    """The virtual stages of an interleaved pipeline, where they are uneven: the model divides the 1F1B
    bubble by `interleave`, as for equal ones."""
    uneven = [n for n in dict.fromkeys(stages) if n % interleave]
    if interleave == 1 or not uneven:
        return []
    split = {n: _even_layers(n, interleave) for n in uneven}
    return [f"interleave {interleave}: virtual stages of uneven layers ("
            + "; ".join(f"a {n}-layer stage as {', '.join(map(str, parts))}" for n, parts in split.items())
            + f"), as torchtitan splits them; Megatron-LM needs the virtual stages per rank to divide every stage's "
              f"layers. The bubble is taken as 1/{interleave} of 1F1B's, as for equal virtual stages"]


def prior_notes(cluster: Cluster) -> list[str]:
    """What the cluster's figures assume: its pools' uneven nodes (`Cluster.notes`), and one line per GPU
    type whose efficiencies come (partly) from its generation's prior."""
    out = list(cluster.notes)
    for p in cluster.pools:
        by_source: dict[str, list[str]] = {}
        for k, v in sorted(p.gpu.sources.items()):
            if str(v).startswith("prior of generation"):
                by_source.setdefault(str(v), []).append(k)
        for source, fields in by_source.items():
            out.append(f"{p.gpu.name}: {', '.join(fields)} from the {source}")
    from problems.placement.model.fitted import efficiency_note

    for p in cluster.pools:  # where the fitted published-run figures come from, or that none exist
        note = efficiency_note(p.gpu)
        if note:
            out.append(note)
    return list(dict.fromkeys(out))


def moe_notes(ctx) -> list[str]:
    """What a mixture of experts' figures assume (model/moe.py), one line; none for a dense model."""
    if not ctx.moe:
        return []
    from problems.placement.model.moe import A2A_OVERLAP, imbalance

    return [f"mixture of experts: compute on the active parameters; experts whole on their EP rank (expert TP 1, "
            f"TP-sharded at EP 1); dispatch/combine all-to-alls {A2A_OVERLAP:.0%} overlapped; the busiest rank "
            f"{imbalance(ctx):g} x the mean tokens; grouped-GEMM experts at the dense mfu; decode reads the experts "
            "its batch routes to (uniform routing)"]


def _sdpa_notes(ctx, micro_batch: int) -> list[str]:
    """One line where PyTorch's SDPA runs the trainer's attention other than as the flash attention asked for
    (model/memory.py `sdpa_paths`)."""
    from problems.placement.model.memory import sdpa_paths

    padded, math = (bool(x[0]) for x in sdpa_paths(ctx, np.array([micro_batch])))
    if math:
        return ["attention: PyTorch's math kernel, not flash (transformers passes enable_gqa to an fp32 grouped-query "
                "attention without padding, which only flash takes, in 16-bit): the fp32 s x s scores kept and all of "
                "them computed"]
    if padded:
        return ["attention: padded micro-batches, so the mask goes to SDPA: k and v kept with every query head and "
                "each layer's copy of the mask (one row of the padded length per token)"]
    return []


def _pipelined_fsdp_notes(params_sharded: bool, pp: int) -> list[str]:
    """One line where ZeRO-3 / FSDP runs in pipeline stages (model/memory.py pipelined_unsharded)."""
    from problems.placement.model.memory import pipelined_unsharded

    if not (params_sharded and bool(pipelined_unsharded(pp))):
        return []
    return ["ZeRO-3 / FSDP in pipeline stages (torch.distributed.pipelining): the stage's weights and its gradients "
            "(fp32 under mixed precision) stay unsharded from a layer's first backward to the step's end "
            "(gathered_weights, unsharded_gradients); its reduce-scatter runs once per step, which the time still "
            "charges per micro-batch (an over-estimate of the DP sync)"]


def _assumptions(ctx, cluster: Cluster, precision: str, attention: str, params_sharded: bool) -> list[str]:
    from problems.placement.model.memory import eager_layers
    from problems.placement.model.training import ADAMW_FOREACH_BYTES, GRAD_CLIP_BYTES

    host_f, host_b = float(ctx.eff["hf_layer_fwd_s"].max()), float(ctx.eff["hf_layer_bwd_s"].max())
    out = [f"precision {precision}: {PRECISION_BYTES[precision]} bytes per element; {PRECISION_MEANING[precision]}; "
           f"peak {', '.join(f'{p.gpu.name} {p.gpu.peak(precision):g}' for p in cluster.pools)} TFLOP/s",
           f"attention {attention}" + (" (no score matrix, causal half of the keys)" if ctx.flash
                                       else " (s x s scores computed, stored and passed through softmax/dropout)"),
           f"MLP {'gated (3 matrices)' if ctx.gated else 'plain (2 matrices)'}",
           "element-wise kernels: " + (", ".join(n for n, on in (("RMSNorm", ctx.eager_norm), ("RoPE", ctx.eager_rope),
                                                                  ("the MLP activation", ctx.eager_act)) if on)
                                       + " as eager PyTorch ops (several kernels each), the rest fused"
                                       if ctx.eager_norm or ctx.eager_rope or ctx.eager_act
                                       else "fused (one kernel per norm, RoPE and activation)"),
           *(["fp8: the layers' Linear matmuls at the fp8 peak; attention (QK^T, AV) and the LM head at the bf16 "
              "peak (Transformer Engine / torchao float8 convert Linear layers only)"] if precision == "fp8" else []),
           *(["selective op checkpointing: every second matmul and the element-wise ops recomputed, matmul and "
              "attention outputs kept (torchtitan)"] if ctx.selective_op else []),
           *(["sequence parallelism: layer norms and dropout on 1/tp of the tokens"] if ctx.sequence_parallel else []),
           "data split evenly over data-parallel ranks" if ctx.even_split else "data split by replica speed",
           "pipeline: 1F1B, sum of stage times + (micro-batches - 1) x the slowest stage; LM head on the last stage",
           # only where the layout shards the parameters (none, ZeRO-1/2 and a single replica gather nothing)
           *(["ZeRO-3 / FSDP: weights gathered in every forward" + (" and again in every backward" if
                                                                   ctx.reshard_after_forward else "")
              + ", gradients reduce-scattered, each micro-batch; prefetching hides what the micro-batch's compute "
              "covers"] if params_sharded else []),
           "memory: allocated, and reserved (allocated + the caching allocator's fragments of the dynamic memory, "
           "more with recomputation and virtual pipelines): an out-of-memory follows the reserved figure",
           *(["amp_autocast: memory as Hugging Face modules under PyTorch autocast keep it (their saved tensors per "
              "layer, the bf16 casts of the weights until backward), with AdamW's foreach temporaries at the "
              "optimizer step; that step's time is its foreach passes' traffic ("
              f"{ADAMW_FOREACH_BYTES + GRAD_CLIP_BYTES:g} bytes per parameter with the gradient clipping, where a "
              "fused Adam moves 32)"] if ctx.amp_autocast else []),
           *([f"eager layers wait on the host that launches their kernels: at least {host_f * 1e3:.1f} ms per layer "
              f"and forward, {host_b * 1e3:.1f} ms per backward (measured on an H200 machine's host)"]
             if eager_layers(ctx) and host_f > 0 else []),
           *moe_notes(ctx),
           *prior_notes(cluster)]
    for i, p in enumerate(cluster.pools):
        e = {k: float(v[i]) for k, v in ctx.eff.items()}
        out.append(f"{p.gpu.name}: mfu {e['mfu']:.2f}, element-wise bandwidth share {e['elementwise_eff']:.2f}, "
                   f"per-layer floor {e['layer_s'] * 1e3:.2f} ms, per-micro-batch {e['microbatch_s'] * 1e3:.2f} ms, "
                   + (f"flash attention at {e['attn_eff']:.2f} of the peak, its backward 2.5 forwards, "
                      if ctx.flash else "")
                   + f"runtime {e['runtime_gb']:.1f} GB, allocator waste {e['alloc_waste']:.0%} of activations, "
                   + f"capacity {p.gpu.capacity_gb:.1f} GB" + (f" (the runtime's figure for the {p.gpu.memory_gb:g} GB part)"
                                                              if p.gpu.usable_memory_gb else "")
                   + f" (sources: {', '.join(f'{k}={v}' for k, v in p.gpu.sources.items() if k in ('mfu', 'train_fit', 'attn_eff', 'usable_memory_gb'))})")
    return out


# ---------------------------------------------------------------- RL step of a plan


def predict_plan(plan_file: str | Path, *, plan=None, prompts_per_step: int | None = None, group_size: int | None = None,
                 prompt_len: int | None = None, response_mean: int | None = None, response_max: int | None = None,
                 mini_batches: int = 1, cluster=None, workload=None) -> dict:
    """The model's figures for one RL step of a plan with the settings a run actually used.

    `mini_batches` > 1: that many optimizer updates per step, each on a slice of the batch, and no
    elastic pipelining (the trainer trains on the whole batch then). `cluster`/`workload` replace
    the spec files the plan names (e.g. the cluster an emulated run really ran on)."""
    from problems.placement.executors import get as executor_named, scored_workload
    from problems.placement.model.fitted import apply_executor
    from problems.placement.planfiles import PlanInputs
    from problems.placement.problem import PlacementProblem

    loaded = plan is None
    inputs = PlanInputs.load(plan_file, plan)
    plan = inputs.plan
    cl = cluster or inputs.cluster()
    wl = workload or inputs.workload()
    if loaded:  # a plan given was checked where it was read
        check_plan(plan, wl, cl, str(plan_file))
    given = {"prompts_per_step": prompts_per_step, "group_size": group_size, "prompt_len": prompt_len,
             "response_mean": response_mean, "response_max": response_max, "mini_batches": mini_batches}
    for key, v in given.items():
        # a zero or negative setting would give negative or NaN times, not an error
        if v is not None and v <= 0:
            raise InputError("command line", "--" + key.replace("_", "-"), f"got {v}", "a positive integer")
    changes = {k: v for k, v in (("prompts_per_step", prompts_per_step), ("samples_per_prompt", group_size),
                                 ("prompt_len", prompt_len), ("response_mean", response_mean),
                                 ("response_max", response_max)) if v is not None}
    if "response_mean" in changes and "response_max" not in changes:
        changes["response_max"] = max(wl.response_max, changes["response_mean"])
    if response_max is not None and response_max < changes.get("response_mean", wl.response_mean):
        raise InputError("command line", "--response-max", f"{response_max} is below the mean response length "
                         f"{changes.get('response_mean', wl.response_mean)}", "at least --response-mean, or the "
                         "workload's response_len.mean")
    wl = dataclasses.replace(wl, **changes)
    # a plan of a front searched for an executor is scored as that executor runs the workload
    wl, executor_note = scored_workload(executor_named(plan.executor), wl)
    prob = PlacementProblem(cl, wl)
    prob.ctx.updates = int(mini_batches)
    # the executor's step work (model/executor_costs.py), without its search rules: the plan is scored as given
    apply_executor(prob.ctx, plan.executor)
    counts = {q.id: q.count for q in cl.pools}
    for i, p in enumerate(plan.pools):
        # encoding would clip the plan to the cluster and score another plan (a cluster file edited since)
        if p.used_gpus > counts.get(p.pool, p.used_gpus):
            raise InputError(str(plan_file), f"pools[{i}]", f"uses {p.used_gpus} GPUs of {p.pool}",
                             f"at most the {counts[p.pool]} its cluster {cl.name} has")
    try:
        x = prob.encode(plan)
    except ValueError as err:
        raise InputError(str(plan_file), getattr(err, "key", "pools"), str(err), "a plan of this cluster") from None
    r = prob.evaluate_matrix(x[None, :])
    out = {k: float(v[0]) for k, v in r.items()}
    out["samples_per_step"] = float(wl.samples_per_step)
    # generated tokens over the rollout phase (prefill and the long tail included): what a run measures
    # as its engines' generation rate, unlike decode_tokens_s (the engines' steady decode rate)
    out["generated_tokens_s"] = wl.samples_per_step * wl.response_mean / out["rollout_s"]
    out["fits"] = bool(out["peak_mem_frac"] <= 1.0 and out["kv_shortfall"] <= 0.0)
    # the CUDA context and libraries in the training peaks (PyTorch's own counters do not see them)
    train = {p.pool for p in plan.pools if p.train_gpus + p.shared_gpus}
    # the model's arrays follow the problem's pools (those that run the workload's precision)
    out["train_runtime_gb"] = float(max((prob.ctx.eff["runtime_gb"][i] for i, q in enumerate(prob.cluster.pools)
                                         if q.id in train), default=0.0))
    out["assumptions"] = (prior_notes(prob.cluster) + engine_notes(prob.ctx, prob.cluster) + moe_notes(prob.ctx)
                          + _sdpa_notes(prob.ctx, plan.train.micro_batch) + ([executor_note] if executor_note else []))
    return out


def engine_notes(ctx, cluster: Cluster) -> list[str]:
    """The rollout engine's per-step costs beyond the roofline, per GPU type (model/rollout.py EngineCosts)."""
    out = []
    for i, p in enumerate(cluster.pools):
        e = {k: float(v[i]) for k, v in ctx.eff.items()}
        out.append(f"{p.gpu.name} engines: host work {e['decode_seq_s'] * 1e6:.1f} us per running sequence and decode "
                   f"step (vLLM issue 10634: the GPU waits 5-6 ms between steps at batch 256), "
                   + (f"no CUDA graphs ({e['decode_layer_s'] * 1e6:.0f} us per layer and step)" if e["decode_layer_s"]
                      else "CUDA graphs on") + ", sampling over the whole vocabulary for each sequence")
    return list(dict.fromkeys(out))


# the cluster an emulated run really runs on: this machine's devices (problems/clusters/local.yaml)
LOCAL_CLUSTER = Path(__file__).resolve().parents[1] / "clusters" / "local.yaml"


def predict_run(plan_file: str | Path, summary: dict, local_cluster: str | Path | None = LOCAL_CLUSTER,
                inputs=None, adjust=None) -> tuple[dict, list[str]]:
    """(predicted figures, notes) for what a training run actually did, from its summary: its batch
    (prompts x group size), the prompt and response lengths it generated (mean, and the longest
    response), and its optimizer updates per step. A run whose work ran on this machine's CPU while
    the plan names other devices (`--emulate`, or a cluster whose GPU types are Ray custom resources
    on nodes without GPUs: `layout.device` cpu) is predicted on `local_cluster`'s devices with the
    layout it really ran (its engines and their TP, dp x tp x pp and sharding, as many devices as
    those take) and the model it trained, in fp32 (what the CPU runs). `inputs`: the run's PlanInputs
    (the plan and its specs, already read), else read from `plan_file`. `predicted["layout"]` says
    which layout the figures are for. `adjust`: Cluster -> Cluster applied to the cluster read (e.g. other
    run-fitted terms, problems/placement/runfit.py)."""
    from problems.placement.plan import PoolRoles, SpecRef
    from problems.placement.planfiles import PlanInputs

    inputs = inputs or PlanInputs.load(plan_file)
    plan = inputs.plan
    run, lay, meas = summary.get("run", {}), summary.get("layout", {}), summary.get("measured", {})
    mean = lambda k: max(1, round(meas[k])) if meas.get(k) else None  # noqa: E731
    longest = int(meas["response_tokens_max"]) if meas.get("response_tokens_max") else run.get("max_new_tokens")
    kw = dict(prompts_per_step=run.get("prompts_per_step"), group_size=run.get("group_size"),
              prompt_len=mean("prompt_tokens_mean"), response_mean=mean("response_tokens_mean"),
              response_max=longest, mini_batches=int(run.get("mini_batches") or 1))
    if kw["response_max"] is not None and kw["response_mean"] is not None:
        kw["response_max"] = max(kw["response_max"], kw["response_mean"])
    notes = []
    if meas.get("response_tokens_max") and run.get("max_new_tokens"):
        notes.append(f"responses as generated: mean {kw['response_mean']}, longest {kw['response_max']} tokens "
                     f"(allowed {run['max_new_tokens']})")
    wl = inputs.workload()
    model = run.get("model")
    presets = model_presets()
    if model and model.lower() in presets and presets[model.lower()].name != wl.model.name:
        wl = dataclasses.replace(wl, model=presets[model.lower()])
        notes.append(f"predicted for the model the run trained ({model}), not the workload's")
    elif model and model.lower() not in presets and model != wl.model.name:
        from problems.placement import hfmodel

        d = hfmodel.find(model)  # a model directory: the workload's own, or another one given with --model
        if d is not None and wl.model_dir is not None and d.resolve() == Path(wl.model_dir).resolve():
            pass
        elif d is not None:
            wl = dataclasses.replace(wl, model=hfmodel.architecture(d))
            notes.append(f"predicted for the model the run trained ({model}), not the workload's")
        else:
            notes.append(f"the run trained {model}; predicted for the workload's model {wl.model.name}")
    # this project's trainer: PPO's critic is a value head on the policy's last hidden state (no second model,
    # no passes of its own), and a reference model runs only for a KL term (kl_coef > 0)
    if wl.has_critic:
        wl = dataclasses.replace(wl, has_critic=False)
        notes.append("PPO's critic is the trainer's value head on the policy: no second model or passes")
    kl = run.get("kl_coef")
    if kl is not None and wl.has_reference != (kl > 0):
        wl = dataclasses.replace(wl, has_reference=kl > 0)
        notes.append(f"{'with' if kl > 0 else 'without'} a reference model's forward, as the run had (kl_coef {kl:g})")
    if kw["response_mean"] is None and kw["response_max"] is not None and kw["response_max"] < wl.response_mean:
        kw["response_mean"] = kw["response_max"]  # no lengths measured: none was longer than the run allowed
    cluster = None
    engines, dp = int(lay.get("engines") or plan.rollout_engines), int(lay.get("dp") or plan.train.dp)
    tp, pp = int(lay.get("tp") or plan.train.tp), int(lay.get("pp") or plan.train.pp)
    sharding = lay.get("sharding") or plan.train.sharding
    etp = max(lay.get("engine_tp") or [1])  # as the engines reported it (a summary without: 1, the CPU's)
    if local_cluster is not None:
        local = load_cluster(local_cluster)
        local = adjust(local) if adjust else local
        foreign = {p.gpu for p in plan.pools if p.used_gpus} - {q.gpu.name for q in local.pools}
        on_cpu = lay.get("emulated") or (lay.get("device") == "cpu" and foreign)
    if local_cluster is not None and on_cpu:
        colo = plan.execution.mode == COLOCATED
        ranks = dp * tp * pp
        devices = max(engines * etp, ranks) if colo else engines * etp + ranks
        per_node = 1 << max(0, (max(devices, etp, tp) - 1).bit_length())  # one machine: one node holds them all
        pool = dataclasses.replace(local.pools[0], count=devices, gpus_per_node=per_node)
        full = dataclasses.replace(local, pools=[pool])
        roles = PoolRoles(pool=pool.id, gpu=pool.gpu.name, region=pool.region,
                          rollout_gpus=0 if colo else engines * etp, train_gpus=0 if colo else ranks,
                          shared_gpus=devices if colo else 0, rollout_tp=etp)
        plan = plan.model_copy(update={
            "pools": [roles], "train": plan.train.model_copy(update={"dp": dp, "tp": tp, "pp": pp, "sharding": sharding}),
            "cluster": SpecRef(name=full.name, path=str(local_cluster), sha256="0" * 64)})
        wl = dataclasses.replace(wl, precision="fp32")
        # the emulated devices time-share this machine's cores: a process waiting for the other phase
        # uses none, so with phases one after the other the active phase's devices share them; with
        # phases overlapping (async, streamed chunks) the cores serve the step's work together (each
        # device at most a core), at least a fair share each
        overlap = plan.execution.mode == ASYNC or (not colo and plan.execution.pipeline_chunks > 1)
        share = min(1.0, _cores() / (devices if overlap else max(engines * etp, ranks)))
        if overlap and share < 1.0:
            alone = predict_plan(plan_file, plan=plan, cluster=full, workload=wl, **kw)
            work = engines * etp * alone["rollout_s"] + ranks * alone["train_s"]  # device-seconds per step
            share = min(1.0, max(share, _cores() * alone["step_s"] / work)) if work > 0 else 1.0
        cluster = _time_shared(full, share)
        why = "emulated" if lay.get("emulated") else (f"CPU run ({', '.join(sorted(foreign))} are Ray custom resources "
                                                     "on nodes without GPUs)")
        notes.append(f"{why}: predicted for what ran, on {devices} of {cluster.name}'s {pool.gpu.name} devices in fp32: "
                     f"{engines} engine(s) at TP {etp}, train dp={dp} tp={tp} pp={pp} sharding={sharding}"
                     + (f"; the {devices} devices share this machine's {_cores()} cores, each at {share:.2g} of a "
                        "device's speed (" + ("the cores shared by the step's work" if overlap else
                                               "the active phase's share of the cores") + ")" if share < 1 else ""))
    if lay.get("device") == "cuda" and wl.elementwise_kernels != EAGER_KERNELS:
        # this project's trainer runs Hugging Face's modules in eager PyTorch on GPUs too
        notes.append(f"predicted with elementwise_kernels {EAGER_KERNELS} (the trainer's Hugging Face modules run "
                     f"RMSNorm, RoPE and the MLP activation unfused); the plan assumed {wl.elementwise_kernels}")
        wl = dataclasses.replace(wl, elementwise_kernels=EAGER_KERNELS)
    if lay.get("device") == "cuda":  # the trainer's autocast, AdamW and loss (memory)
        wl = dataclasses.replace(wl, amp_autocast=True)
    ran = lay.get("precision")
    if ran and ran != wl.precision:
        notes.append(f"predicted in {ran}, the precision the training ranks ran (the workload names {wl.precision})")
        wl = dataclasses.replace(wl, precision=ran)
    if cluster is None:
        cluster = adjust(inputs.cluster()) if adjust else inputs.cluster()
    out = predict_plan(plan_file, plan=plan, cluster=cluster, workload=wl, **kw)
    if out.get("repaired"):
        notes.append("the model changed the layout to fit its cluster: these figures are not for the layout that ran")
    t = plan.train  # the layout the figures are for
    # the profiles the figures came from, per GPU type the layout used (what a run refits: runfit.py)
    out["profiles"] = {p.gpu: cluster.profiles[p.gpu] for p in plan.pools if p.used_gpus and p.gpu in cluster.profiles}
    out["layout"] = {"engines": plan.rollout_engines, "engine_tp": max(p.rollout_tp for p in plan.pools if p.rollout_engines),
                     "dp": t.dp, "tp": t.tp, "pp": t.pp, "sharding": t.sharding}
    return out, notes


def _time_shared(cluster: Cluster, share: float) -> Cluster:
    """The cluster with every device at `share` of its speed: compute and bandwidth figures scaled
    by it, per-call times (the efficiencies in seconds) by its inverse. How the model sees devices that
    are slices of fewer CPU cores, each busy process getting its share of them."""
    if share >= 1.0:
        return cluster
    pools = []
    for p in cluster.pools:
        g = p.gpu
        gpu = g.model_copy(update={
            "tflops": g.tflops * share, "bandwidth_tbs": g.bandwidth_tbs * share,
            "peak_tflops": {k: v * share for k, v in g.peak_tflops.items()},
            "intra_node": g.intra_node.model_copy(update={"bandwidth_gbs": g.intra_node.bandwidth_gbs * share})})
        pools.append(dataclasses.replace(p, gpu=gpu, intra_gbs=p.intra_gbs * share))
    eff = {gpu: {k: v / share if k.endswith("_s") else v * share if k.endswith(("_gbs", "_tbs")) else v
                 for k, v in e.items()} for gpu, e in cluster.efficiencies.items()}
    return dataclasses.replace(cluster, pools=pools, efficiencies=eff)


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def run_sync_s(summary: dict, cluster: Cluster | None, arch: Architecture | None = None) -> float | None:
    """The model's weight-sync time for the layout a run had (`model.sync.layout_sync_s`): its engines
    (regions, GPU types), the bytes of one copy it sent, its route, on the plan's cluster; with the
    workload's architecture, the source's gather of a cut or sharded trainer first. None when the run did
    not broadcast (the object store) or no cluster is given (its file was not found). A colocated run's sync is the
    hand-over (the engines map the trainer's buckets) when its summary says so."""
    from problems.placement.model.sync import layout_sync_s

    ws = summary.get("layout", {}).get("weight_sync") or {}
    if ws.get("path") != "broadcast" or not ws.get("copy_bytes") or cluster is None:
        return None
    if ws["sender_region"] not in cluster.regions or any(r not in cluster.regions for r in ws["engine_regions"]):
        return None
    return layout_sync_s(cluster, float(ws["copy_bytes"]), ws["engine_regions"], ws.get("engine_gpus") or [],
                         ws["sender_region"], ws["route"] == "staged", ws.get("transport") in ("shared_memory", "cuda_ipc"),
                         arch, summary["layout"])
