"""Everything the model reads, as arrays per pool and scalars per workload, built once per problem.

Efficiencies come from the GPU catalog (mfu, prefill_eff, decode_eff) and from DEFAULTS below; a
calibration passes `efficiencies={gpu_type: {key: value}}` to override any of them per GPU type.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from problems.errors import InputError
from problems.placement.model import fitted as _fitted
from problems.placement.model.executor_costs import StepCosts, step_costs
from problems.placement.model.lengths import Lengths, build as build_lengths
from problems.placement.corrections import apply as apply_corrections
from problems.placement.names import EAGER_PARTS
from problems.placement.specs import Cluster, Workload

# Per-GPU-type parameters beyond the catalog; each can be overridden per GPU type.
DEFAULTS = {
    # fixed time per decode step of an engine (scheduler, sampling, launch); 0 = pure roofline
    "decode_step_s": 0.0,
    # host time per running sequence and decode step during which the GPU waits (the engine's scheduler
    # and output processing work request by request between two steps). vLLM issue 10634 measured the GPU
    # idle for 5-6 ms between two decode steps of Llama-2-7B at batch 256: 5.5 ms / 256 = 21.5 us per
    # sequence. Engines that overlap scheduling with the GPU's step (SGLang's overlap scheduler, vLLM's
    # async scheduling) hide part of it; a calibration from the engine's own steps refits it
    "decode_seq_s": 21.5e-6,
    # host time per transformer layer and decode step of an engine run eagerly (no CUDA graphs: every
    # kernel launched from Python, as vLLM's `enforce_eager` does and verl up to 0.5 set by default); 0 with
    # CUDA graphs (vLLM's and SGLang's default). vLLM pull request 1440 measured Llama-2-7B (32 layers),
    # batch 1, 100 output tokens in 1.20 s eager and 1.05 s with CUDA graphs: 1.5 ms per step, 47 us per layer
    "decode_layer_s": 0.0,
    # fixed time per training micro-batch per pipeline stage (launch, sync, data), beyond the per-layer
    # floor `layer_s`; `mosearch profile` fits it (train_overhead_s), 0 by default
    "microbatch_s": 0.0,
    # fixed time per transformer layer per training micro-batch (forward + backward: kernel launches,
    # small-kernel inefficiency); the per-layer floor `c` mosearch/bench/model_validation.py fits from
    # measured layer times; 0 by default (catalog types with measured layers set it, see gpus.yaml)
    "layer_s": 0.0,
    # host time per transformer layer and micro-batch of a forward and of a backward pass of Hugging Face
    # layers run eagerly under bf16 autocast (`elementwise_kernels: eager`): the Python that launches each
    # kernel; the GPU waits when it is the longer (model/training.py takes the larger per layer). Measured
    # with this project's trainer on an H200 machine's host (16-core VM; transformers 5.17, PyTorch 2.11):
    # steps of 128-token micro-batches of Qwen2.5-0.5B/1.5B/3B with 1 and 4 micro-batches, with and without
    # recomputation (one more forward); 3.3-3.8 ms per layer and forward, 0.2-0.8 ms per backward
    # (results/bench/gpu_probe.md). Another host's CPU launches at its own speed: a job's `efficiencies` can
    # give its figures per GPU type
    "hf_layer_fwd_s": 3.6e-3,
    "hf_layer_bwd_s": 0.5e-3,
    # bytes per logit a training loss keeps beyond the logits and their fp32 log-softmax. 0: the log-softmax
    # and the entropy taken a chunk of positions at a time (this project's trainer, `_token_logp`; 6.1-6.8
    # bytes per bf16 logit in all, measured on the CPU with PyTorch's profiler). 8: both over all positions at
    # once (the entropy's fp32 exp and product): 14.00 bytes per bf16 logit on an H200, 13.99 by the same
    # CPU measurement (results/bench/gpu_probe.md, the trainer before it chunked)
    "loss_head_bytes": 0.0,
    # fixed orchestration time per rollout call (engine call + driver round trip) and per training
    # step (worker round trips, batch assembly): fitted from measured trainer runs by calibration
    "rollout_call_s": 0.0,
    "train_call_s": 0.0,
    # the driver's time per step outside the phases a run logs (rollout, training, sync): the rewards and
    # advantages, the step's metrics and bookkeeping; on the step's critical path in every mode. 0 by
    # default: `mosearch calibrate` fits it from a run's step time beyond its phases
    "step_call_s": 0.0,
    # fixed time of a colocated step's context switch beyond the bytes it moves (the engine's sleep and
    # wake calls, the trainer's hand-over): 0 by default (an executor's own switch work is in
    # model/executor_costs.py); `mosearch calibrate` fits it from a run's logged switch time
    "switch_call_s": 0.0,
    # orchestration time per generated sample on its engine (the engine's per-request work, the
    # outputs' trip to the driver, reward scoring): engines work on their shares at once; fitted
    # with rollout_call_s from measured runs by calibration, 0 by default
    "rollout_sample_s": 0.0,
    # extra time per micro-batch of a data-parallel rank when dp > 1 (DDP hooks, ranks contending for
    # host resources); fitted from measured runs by calibration, 0 by default
    "dp_microbatch_s": 0.0,
    # time per micro-batch of every rank's own training loop beyond the forward and backward the model
    # counts (batch assembly, the loss and its statistics, each pass's launch from Python): what a
    # micro-batch of one sample costs when the compute is tiny; fitted from measured single-rank runs
    # with different micro-batch counts by calibration, 0 by default
    "microbatch_loop_s": 0.0,
    # CUDA context + NCCL buffers + library workspaces per GPU. Sailor counts ~5 GB of fixed
    # overhead including the allocator (systems.md); the allocator is modelled separately here.
    "runtime_gb": 2.0,
    # share of dynamic (activation) memory a caching allocator leaves unusable: STWeaver reports
    # the PyTorch allocator wasting up to 43% (systems.md); 30% assumed, refit by calibration
    "alloc_waste": 0.30,
    # GPU <-> host copies for offload and context switching: PCIe4 x16 at ~25 GB/s achieved (assumed)
    "host_gbs": 25.0,
    # CPU Adam for optimizer offload: bytes of optimizer state streamed per second (assumed)
    "cpu_adam_gbs": 10.0,
    # weight sync (comm.engine_sync_s): the rate one copy is broadcast at (the profile's broadcast
    # grid; 0 = not profiled: only the route's links count), and, fitted from measured syncs (profile
    # `weight_sync` rows) after that send is taken out, the rate of the rest of a sync (packing the
    # bucket, the engines' reload, once per sync) and its fixed cost (calls, reload bookkeeping)
    "sync_send_gbs": 0.0,
    "sync_load_gbs": 0.0,
    "sync_overhead_s": 0.0,
    # latency of one collective inside a node per ring step (the alpha of the alpha-beta model):
    # NCCL's small-message all-reduce within an NVLink node takes tens of microseconds (nccl-tests
    # all_reduce_perf at 8 B - 64 KiB); ~10 us per step assumed. `mosearch profile` measures it
    "collective_latency_s": 10e-6,
    # latency of one point-to-point send (pipeline stage boundary); as above, measured by the profile
    "p2p_latency_s": 10e-6,
    # per-collective CPU cost of the framework around it beyond the collective (DTensor dispatch of
    # a TP all-reduce; FSDP's copy-in/out and hooks per all-gather / reduce-scatter): negligible for
    # CUDA-graph/overlapped GPU stacks (0 by default), measured on CPU by `mosearch profile`
    "tp_op_s": 0.0,
    "fsdp_op_s": 0.0,
    # fixed time of one inference kernel (launch and small-kernel floor; a decode step runs
    # DECODE_KERNELS_PER_LAYER per layer): the catalog's infer_fit where measured operators give it, else 0
    "kernel_s": 0.0,
    # 1 = TP over separate q/k/v and gate/up projections (mosearch's trainer, DTensor on HF layers:
    # a profiled device is run by it), 0 = Megatron's fused column-parallel blocks
    "tp_split_projections": 0.0,
}
# kinds of device without separate device memory: no offload traffic when switching context
HOST_MEMORY_KINDS = ("host-memory",)
# overrides for CPU "devices" (the local cluster): small fixed runtime, no PCIe hop; their engine's host work
# per sequence is in the per-sample cost the calibration fits from measured runs (rollout_sample_s)
KIND_DEFAULTS = {"host-memory": {"runtime_gb": 0.5, "collective_latency_s": 50e-6, "p2p_latency_s": 50e-6,
                                 "decode_seq_s": 0.0, "hf_layer_fwd_s": 0.0, "hf_layer_bwd_s": 0.0}}
# `decode_layer_s` of an engine run eagerly (vLLM pull request 1440's measurement, see DEFAULTS): what a run
# or a validation row whose engine has CUDA graphs off sets
EAGER_DECODE_LAYER_S = 47e-6

# elementwise_eff: achieved share of HBM bandwidth of the training step's element-wise kernels; the
# catalog's `train_fit` where measured layers give it, else decode_eff
# attn_eff: achieved share of the 16-bit peak of flash attention in training (catalog / generation prior,
# data/generations.yaml), never above mfu; a type without one runs its attention at mfu
SHARE_KEYS = ("mfu", "prefill_eff", "decode_eff", "elementwise_eff", "attn_eff")
EFFICIENCY_KEYS = (*SHARE_KEYS, *DEFAULTS)


@dataclass
class ModelContext:
    # pools, shape (P,)
    count: np.ndarray
    gpn: np.ndarray
    flops: np.ndarray  # peak FLOP/s per GPU in the workload's precision (GPUType.peak)
    mem: np.ndarray  # bytes per GPU
    hbm: np.ndarray  # bytes/s per GPU
    intra: np.ndarray  # bytes/s per GPU inside a node
    inter: np.ndarray  # bytes/s per node between nodes of the region
    price: np.ndarray  # $/GPU-h
    region: np.ndarray  # region index
    host_memory: np.ndarray  # bool: a CPU device (no offload copies)
    eff: dict[str, np.ndarray]  # efficiency name -> (P,)
    # regions
    region_bw: np.ndarray  # bytes/s, diagonal = inter-node bandwidth of the region
    region_lat: np.ndarray  # s
    region_egress: np.ndarray  # $/byte
    # workload scalars
    params: float
    layers: int
    hidden: int
    q_dim: int
    ffn: int
    vocab: int
    params_per_layer: float
    embedding_params: float
    kv_bytes_per_token: float
    bpe: int  # bytes per element of weights and activations
    samples: int
    prompt_len: int
    resp_mean: int
    resp_max: int
    has_reference: bool
    has_critic: bool
    # model and workload facts (defaults: what the shipped RL workloads run)
    heads: int = 1
    gated: bool = True  # gated MLP (3 matrices) or plain (2)
    flash: bool = True  # flash attention (no score matrix, causal half) or unfused (full s x s)
    matmul_params: float = 0.0  # weights a token multiplies per forward: layers + the LM head (no input embedding)
    kv_dim: int = 0  # kv_heads * head_dim (the K and V projections' width)
    # peak FLOP/s (P,) of the matmuls an FP8 run keeps in BF16: attention's QK^T / AV and the LM head
    # (Transformer Engine casts only its Linear layers to FP8, DotProductAttention stays BF16 unless
    # fp8_dpa is set; Megatron's output layer is not a TE module; torchao's float8 training in
    # torchtitan converts nn.Linear modules except `output`). None: every matmul at `flops`.
    flops_hp: np.ndarray | None = None
    # FP8 training: Transformer Engine's (and torchao's) Linear layers save the FP8 cast of their input
    fp8_linears: bool = False
    # the model trains with dropout after attention and after the MLP (Architecture.hidden_dropout > 0):
    # each keeps a 1-byte mask per element
    hidden_dropout: bool = False
    # torchtitan's selective "op" activation checkpointing: every second matmul and all element-wise
    # ops recomputed, attention kept (`selective_op_split`); a plain training job sets it
    selective_op: bool = False
    # Megatron sequence parallelism (Korthikanti et al. 2022, section 4.2.2): with TP, layer norms and
    # dropout run on 1/t of the sequence, so their kernels and stored activations shrink by t
    sequence_parallel: bool = False
    # tensors of the full state a weight sync gathers one by one, and those of them TP shards
    # (catalog.Architecture.state_tensors, tp_sharded_tensors)
    state_tensors: int = 0
    tp_sharded_tensors: int = 0
    # data split over data-parallel replicas: in proportion to replica speed (what mosearch's trainer
    # does with the plan's `train_speed`) or even (Megatron, DeepSpeed, verl: global_batch / dp each;
    # `predict` sets it for a plain training job)
    even_split: bool = False
    # an explicit pipeline (one layout, `predict`): layers per stage and the pool each stage runs on
    stage_layers: np.ndarray | None = None
    stage_pool: np.ndarray | None = None
    # the RL step's extra forward passes (old log-probs, reference, critic); False for a plain training job
    rl_passes: bool = True
    # virtual pipeline stages per rank (Megatron's interleaved 1F1B): the fill/drain bubble shrinks by
    # this factor, (p - 1) / (v m) of the step (Narayanan et al. 2021, section 2.2.2)
    interleave: int = 1
    # optimizer updates per step, each on an equal slice of the batch (the trainer's --mini-batches)
    updates: int = 1
    # ZeRO-3 / FSDP units free their gathered weights after forward and gather them again in backward
    # (FSDP2 `reshard_after_forward=True`, DeepSpeed ZeRO-3's default); False keeps them from forward to
    # backward (one gather per micro-batch fewer, the stage's weights held unsharded)
    reshard_after_forward: bool = True
    # sequence packing in training micro-batches (padding removed; verl use_remove_padding, AReaL)
    packing: bool = False
    # dynamic batching: an update's micro-batches are cut by a token budget per GPU, not a sample count
    # (EasyR1 `dynamic_batching`: micro_batch_size_per_device_for_update x the padded input length, its
    # dp_actor.update_policy at v0.3.2; verl `use_dynamic_bsz` with `ppo_max_token_len_per_gpu`): a rank runs
    # ceil(its tokens / budget) of them. None: `micro_batch` samples each
    micro_batch_tokens: float | None = None
    # element-wise operations of the training layers as PyTorch eager modules run them (several kernels each,
    # model/training.py `eager_elementwise_bytes`): the RMSNorms, and RoPE with the gated MLP's activation
    eager_norm: bool = False
    eager_rope: bool = False
    eager_act: bool = False
    # the trainer runs HF modules under PyTorch autocast with PyTorch's AdamW (names.AMP_AUTOCAST_HELP)
    amp_autocast: bool = False
    # a step's samples differ in length (an RL workload: mean response below the limit), so a micro-batch of
    # several is padded to its longest (memory.sdpa_paths); a training job of fixed-length sequences is not
    lengths_differ: bool = False
    # the response-length distribution (lengths.build) and the samples per prompt (prefix caching)
    lengths: Lengths | None = None
    group: int = 1
    # a mixture of experts (model/moe.py; all 0 for a dense model): routed experts per MoE layer and per
    # token, the MoE layers, all routed experts' parameters, the routed parameters one token runs in a MoE
    # layer, and the parameters per layer a token multiplies (averaged over the layers; the dense formulas
    # run on these)
    moe: bool = False
    experts: int = 0
    experts_per_token: int = 0
    moe_layers: int = 0
    expert_params: float = 0.0
    routed_active_per_moe_layer: float = 0.0
    active_params_per_layer: float = 0.0
    # the KV cache is split over an engine's TP ranks (KV heads); MLA's latent is one per token, every TP
    # rank holds all of it (vLLM's MLA backends replicate the latent cache over TP)
    kv_tp_split: bool = True
    # layers whose attention spans the whole context (sliding-window layers attend to their window); 0: all
    attn_layers: int = 0
    # the busiest EP rank's share of routed tokens over the mean (model/moe.py MOE_IMBALANCE when 0); 1 for runs
    # that force-balance the routing (benchmarks)
    moe_imbalance: float = 0.0
    # bf16 optimizer states (workload `optimizer_states: bf16`): 8 bytes per parameter, no fp32 master copy
    bf16_states: bool = False
    # HBM share of training's streaming passes (the optimizer step): the catalog's (or a calibration's)
    # decode_eff before the fitted rollout scale (model/fitted.py), (P,); None: decode_eff
    train_hbm_eff: np.ndarray | None = None
    # the step work of the executor that runs the plan (model/executor_costs.py) and its family's fitted terms
    # (model/fitted.py: step_s, sample_s, microbatch_s); this project's trainer by default
    steps: StepCosts = field(default_factory=lambda: step_costs(None))
    fitted_steps: dict = field(default_factory=dict)

    @property
    def compute_params_per_layer(self) -> float:
        """Weights a token multiplies per layer: the active ones of a mixture of experts."""
        return self.active_params_per_layer if self.moe else self.params_per_layer

    @property
    def unit_costs(self) -> dict[str, np.ndarray]:
        """Per pool (P,), for one GPU of an engine (divide by its TP): seconds to read the weights, per KV
        token read, matmul seconds per sequence-step, attention seconds per KV token (the decode roofline
        of model/rollout.py); formed once, when first asked (after any efficiencies are set)."""
        if "_unit_costs" not in self.__dict__:
            bw = self.hbm * self.eff["decode_eff"]
            fl = self.flops * self.eff["prefill_eff"]
            self.__dict__["_unit_costs"] = {
                "weights": self.weight_bytes / bw, "kv_read": self.kv_bytes_per_token / bw,
                "flop_seq": 2.0 * (self.matmul_params or self.params) / fl, "flop_kv": 4.0 * self.layers * self.q_dim / fl}
            if self.moe:  # a decode step reads the routed experts its tokens pick (model/moe.py decode_weight_s):
                # "weights" the rest, "expert_weights" one expert in every MoE layer
                per_expert = self.expert_params / max(self.moe_layers * self.experts, 1) * self.moe_layers
                self.__dict__["_unit_costs"].update(
                    weights=(self.params - self.expert_params) * self.bpe / bw, expert_weights=per_expert * self.bpe / bw,
                    flop_kv=4.0 * (self.attn_layers or self.layers) * self.q_dim / fl)
        return self.__dict__["_unit_costs"]

    @property
    def n_pools(self) -> int:
        return len(self.count)

    @property
    def weight_bytes(self) -> float:
        return self.params * self.bpe


def build_context(cluster: Cluster, workload: Workload,
                  efficiencies: dict[str, dict[str, float]] | None = None,
                  executor: str | None = None, executor_version: str | None = None) -> ModelContext:
    pools = cluster.pools
    efficiencies = efficiencies or {}
    names = {p.gpu.name for p in pools}
    for gpu, over in efficiencies.items():
        if gpu not in names:
            raise InputError(None, f"efficiencies.{gpu}", "not a GPU type of this cluster", ", ".join(sorted(names)))
        for key, value in over.items():
            if key not in EFFICIENCY_KEYS:
                raise InputError(None, f"efficiencies.{gpu}.{key}", "unknown efficiency", ", ".join(EFFICIENCY_KEYS))
            if not np.isfinite(value) or value < 0 or (key in SHARE_KEYS and not 0 < value <= 1):
                raise InputError(None, f"efficiencies.{gpu}.{key}", f"got {value!r}", "a finite number >= 0 (efficiencies in (0, 1])")
    eff: dict[str, list[float]] = {k: [] for k in EFFICIENCY_KEYS}
    train_hbm: list[float] = []
    for p in pools:
        row = {"mfu": p.gpu.mfu, "prefill_eff": p.gpu.prefill_eff, "decode_eff": p.gpu.decode_eff, **DEFAULTS,
               **p.gpu.train_fit, **p.gpu.infer_fit}
        # training's element-wise kernels default to the catalog's (or a calibration's) bandwidth share, not the
        # rollout engine's fitted one
        catalog_decode = row["decode_eff"]
        _fitted.apply_type(row, p.gpu)  # efficiencies fitted on published RL steps (model/fitted.py)
        row.update(KIND_DEFAULTS.get(p.link_kind, {}))
        row.update(efficiencies.get(p.gpu.name, {}))
        train_hbm.append(float(efficiencies.get(p.gpu.name, {}).get("decode_eff", catalog_decode)))
        # a cluster's calibration (`mosearch calibrate`): corrections on top of all of the above
        row = apply_corrections(row, cluster.corrections.get(p.gpu.name))
        row.setdefault("elementwise_eff", train_hbm[-1])
        row["attn_eff"] = min(row.get("attn_eff") or p.gpu.attn_eff or row["mfu"], row["mfu"])
        for k in EFFICIENCY_KEYS:
            eff[k].append(float(row[k]))
    m = workload.model
    steps = step_costs(executor, executor_version)
    arr = lambda f, dtype=float: np.array([f(p) for p in pools], dtype=dtype)  # noqa: E731
    ctx = ModelContext(
        count=arr(lambda p: p.count, np.int64),
        gpn=arr(lambda p: p.gpus_per_node, np.int64),
        flops=arr(lambda p: p.gpu.peak(workload.precision) * 1e12),
        mem=arr(lambda p: p.gpu.capacity_gb * 1e9),
        hbm=arr(lambda p: p.gpu.bandwidth_tbs * 1e12),
        intra=arr(lambda p: p.intra_gbs * 1e9),
        inter=arr(lambda p: p.inter_gbs * 1e9),
        price=arr(lambda p: p.gpu.price_usd_h),
        region=arr(lambda p: cluster.region_index(p.region), np.int64),
        host_memory=arr(lambda p: p.link_kind in HOST_MEMORY_KINDS, bool),
        eff={k: np.array(v) for k, v in eff.items()},
        region_bw=cluster.region_bw * 1e9,
        region_lat=cluster.region_latency.copy(),
        region_egress=cluster.region_egress / 1e9,
        params=float(m.params),
        layers=m.layers,
        hidden=m.hidden,
        q_dim=m.heads * m.hd,
        ffn=m.ffn,
        vocab=m.vocab,
        params_per_layer=float(m.params_per_layer),
        embedding_params=float(m.embedding_params),
        kv_bytes_per_token=float(m.kv_bytes_per_token(workload.bytes_per_param)),
        bpe=workload.bytes_per_param,
        samples=workload.samples_per_step,
        prompt_len=workload.prompt_len,
        resp_mean=workload.response_mean,
        resp_max=workload.response_max,
        has_reference=workload.has_reference,
        has_critic=workload.has_critic,
        heads=m.heads,
        gated=m.mlp == "gated",
        flash=workload.attention == "flash",
        matmul_params=float(m.layers * m.params_per_layer + m.vocab * m.hidden),
        kv_dim=m.kv_heads * m.hd,
        state_tensors=m.state_tensors,
        tp_sharded_tensors=m.tp_sharded_tensors,
        flops_hp=arr(lambda p: p.gpu.peak("bf16") * 1e12) if workload.precision == "fp8" else None,
        fp8_linears=workload.precision == "fp8",
        hidden_dropout=m.hidden_dropout > 0,
        lengths=build_lengths(workload.response_mean, workload.response_max, workload.response_sigma),
        group=workload.samples_per_prompt,
        packing=workload.sequence_packing,
        **dict(zip(("eager_norm", "eager_rope", "eager_act"), EAGER_PARTS[workload.elementwise_kernels])),
        amp_autocast=workload.amp_autocast,
        lengths_differ=workload.response_max > workload.response_mean,
        bf16_states=workload.optimizer_states == "bf16",
        train_hbm_eff=np.array(train_hbm),
        steps=steps,
        fitted_steps=_fitted.step_terms(steps.family),
    )
    for key, value in moe_fields(m).items():
        setattr(ctx, key, value)
    return ctx


def moe_fields(m) -> dict:
    """The ModelContext fields of a mixture of experts, MLA or sliding-window layers (none for a dense model,
    so its context is as before). A MoE's `ffn` is the MLP width a token runs in an average layer (its routed
    and shared experts), which the element-wise and activation terms read."""
    out: dict = {}
    if m.is_moe:
        active_ffn = (m.dense_layers * m.ffn + m.moe_layers * (m.experts_per_token + m.shared_experts) * m.expert_ffn)
        out.update(moe=True, experts=m.experts, experts_per_token=m.experts_per_token, moe_layers=m.moe_layers,
                   expert_params=float(m.routed_expert_params),
                   routed_active_per_moe_layer=float(m.experts_per_token * m.expert_params_each),
                   active_params_per_layer=float(m.active_params_per_layer),
                   matmul_params=float(m.layers * m.active_params_per_layer + m.vocab * m.hidden),
                   ffn=round(active_ffn / m.layers))
    if m.kv_lora_rank:
        out["kv_tp_split"] = False
    if m.sliding_layers:
        out["attn_layers"] = m.full_attention_layers
    return out
