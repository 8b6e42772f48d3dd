"""A plan as RLinf configuration: `cluster` (num_nodes, component_placement over global GPU
indices, one labelled node group per GPU pool), the vLLM rollout and the actor's parallel layout.

Keys and meanings are listed in docs/export.md with where RLinf documents them.
"""

from __future__ import annotations

from problems.placement.plan import Plan
from mosearch.export import kernels as K
from mosearch.export import layout as L
from mosearch.export.context import ExportContext
from problems.placement.names import ASYNC, COLOCATED

# torch FSDP sharding strategies by the plan's sharding level
_FSDP_SHARDING = {"none": "no_shard", "zero1": "shard_grad_op", "zero2": "shard_grad_op",
                  "zero3": "full_shard", "fsdp": "full_shard"}


_DTYPE = {"bf16": "bf16", "fp16": "fp16", "fp8": "bf16"}  # fp8 trains with bf16 storage


def megatron(plan: Plan, ctx: ExportContext) -> bool:
    """RLinf trains with Megatron for TP/PP/EP, and for PPO (its critic workers are Megatron only)."""
    return plan.train.tp > 1 or plan.train.pp > 1 or plan.train.ep > 1 or ctx.algorithm == "ppo"


def _placement(plan: Plan, nodes: list[L.Node], ctx: ExportContext) -> dict:
    # the reasoning runner's collocated placement (ModelParallelComponentPlacement): actor (and the PPO
    # critic, on the actor's GPUs as planned), rollout and the rule-based reward on the same GPUs
    comps = "actor,critic,rollout,reward" if ctx.algorithm == "ppo" else "actor,rollout,reward"
    shared = L.gpu_indices(nodes, L.SHARED)
    every = sum(n.size for n in nodes)
    return {comps: "all" if len(shared) == every else L.ranges(shared)}


def _node_groups(nodes: list[L.Node]) -> list[dict]:
    groups: dict[str, list[int]] = {}
    for rank, n in enumerate(nodes):
        groups.setdefault(n.pool, []).append(rank)
    return [{"label": L.label(pool), "node_ranks": L.ranges(ranks)} for pool, ranks in groups.items()]


def _model(plan: Plan, ctx: ExportContext) -> dict:
    """The actor's (and critic's) training block."""
    t, colocated = plan.train, plan.execution.mode == COLOCATED
    if megatron(plan, ctx):
        return {
            "training_backend": "megatron",
            # between phases (colocated): weights, gradients and optimizer leave the GPUs while rollout runs
            "offload_optimizer": colocated, "offload_weight": colocated, "offload_grad": colocated,
            "model": {
                "tensor_model_parallel_size": t.tp,
                "pipeline_model_parallel_size": t.pp,
                # a mixture of experts' EP, experts whole on their rank (rlinf/config.py validate_megatron_cfg)
                **({"expert_model_parallel_size": t.ep, "expert_tensor_parallel_size": 1} if t.ep > 1 else {}),
                "recompute_granularity": "full" if t.recompute else None,
                "recompute_method": "block" if t.recompute else None,
                # build_transformer_config defaults: rope fusion off, activation fusion on
                **(K.megatron_fusions(ctx.elementwise_kernels) if ctx.elementwise_kernels else {}),
            },
            # ZeRO-1 style sharding is the distributed optimizer; the plan's optimizer offload (CPU Adam
            # during the step) is Megatron's optimizer_cpu_offload (rlinf/config.py validate_megatron_cfg)
            "optim": {"use_distributed_optimizer": t.sharding != "none",
                      "optimizer_cpu_offload": t.optimizer_offload},
        }
    fsdp: dict = {}
    if ctx.elementwise_kernels:  # Hugging Face modules: eager unless Liger patches them
        fsdp["use_liger_kernel"] = K.liger(ctx.elementwise_kernels)
    return {
        "training_backend": "fsdp",
        "enable_offload": colocated,  # offload the actor between phases (context switch)
        "fsdp_config": {
            **fsdp,
            "strategy": "fsdp2",
            "sharding_strategy": _FSDP_SHARDING[t.sharding],
            "gradient_checkpointing": t.recompute,
            # validate_fsdp_cfg requires it: weights in the workload's precision, gradients reduced in fp32
            "mixed_precision": {"param_dtype": _DTYPE.get(ctx.precision or "bf16", "fp32"),
                                "reduce_dtype": "fp32", "buffer_dtype": "fp32"},
        },
    }


def export(plan: Plan, ctx: ExportContext | None = None) -> dict:
    ctx = ctx or ExportContext()
    nodes = L.nodes(plan, ctx)
    tp, _ = L.rollout_tp(plan)
    algorithm: dict = {
        # rlinf/config.py validate_reasoning_cfg: the micro-batch of actor and critic
        "training_batch_size_per_gpu": plan.train.micro_batch,
        # one optimizer step on the whole step's batch, as the plan models (chunks only stream it)
        "n_minibatches": 1,
        "recompute_logprobs": True,
    }
    if ctx.samples_per_prompt is not None:
        algorithm["group_size"] = ctx.samples_per_prompt
    if ctx.algorithm is not None:
        ppo = ctx.algorithm == "ppo"
        algorithm["adv_type"] = "gae" if ppo else "grpo"
        algorithm["loss_type"] = "actor_critic" if ppo else "actor"
        if not ctx.reference:
            algorithm["kl_beta"] = 0.0  # no reference model, no KL term
    cfg: dict = {
        "cluster": {
            "num_nodes": len(nodes),
            "component_placement": _placement(plan, nodes, ctx),
            "node_groups": _node_groups(nodes),
        },
        "algorithm": algorithm,
        "rollout": {
            "rollout_backend": "vllm",
            "tensor_parallel_size": tp,
            "pipeline_parallel_size": 1,
            "gpu_memory_utilization": plan.rollout.kv_mem_frac,
            "max_running_requests": plan.rollout.max_num_seqs,
        },
        "actor": _model(plan, ctx),
    }
    if ctx.algorithm == "ppo":
        cfg["critic"] = {"use_critic_model": True, **_model(plan, ctx)}
    if ctx.model_dir is not None:  # rlinf/config.py reads both (the critic starts from the rollout's)
        for part in ("rollout", "actor"):
            cfg[part].setdefault("model", {})["model_path"] = ctx.model_dir
    if ctx.prompts_per_step is not None:
        cfg["data"] = {"rollout_batch_size": ctx.prompts_per_step}
        if ctx.prompt_len is not None and ctx.response_max is not None:
            # RLinf caps new tokens at runner.seq_length - data.max_prompt_length
            cfg["data"]["max_prompt_length"] = ctx.prompt_len
            cfg["runner"] = {"seq_length": ctx.prompt_len + ctx.response_max}
    return cfg


def notes(plan: Plan, ctx: ExportContext | None = None) -> list[str]:
    ctx = ctx or ExportContext()
    nodes = L.nodes(plan, ctx)
    out = ["start Ray on node i with RLINF_NODE_RANK=i, i as in the layout above; GPU indices count every "
           "GPU of each node in that order."]
    for role in (L.SHARED,) if plan.execution.mode == COLOCATED else (L.ROLLOUT, L.TRAIN):
        if not L.contiguous(L.gpu_indices(nodes, role)):
            out.append(f"{role} GPUs are not one contiguous range; RLinf's reasoning placement "
                       "(ModelParallelComponentPlacement) requires that and will refuse this layout.")
    _, same = L.rollout_tp(plan)
    if not same:
        out.append("pools use different rollout TP sizes; RLinf takes one: the most used one is emitted.")
    if plan.execution.mode == ASYNC:
        out.append("algorithm.staleness_threshold is read by RLinf's async PPO workers (embodied runner); "
                   "its reasoning runner is synchronous, so check your runner supports it.")
    if plan.train.optimizer_offload and plan.train.tp == 1 and plan.train.pp == 1:
        out.append("optimizer_offload with FSDP: RLinf offloads optimizer state only between phases "
                   "(actor.enable_offload), not during the step.")
    if plan.weight_sync.route == "staged":
        out.append("weight_sync route 'staged' has no RLinf key.")
    k = ctx.elementwise_kernels
    if k and megatron(plan, ctx):
        out += [n for n in [K.megatron_note(k, "RLinf")] if n]
    elif k and K.liger(k):
        out.append(K.liger_note(k, "actor.fsdp_config.use_liger_kernel").rstrip(".") + "; RLinf applies Liger only "
                   "to the model types qwen2.5, qwen2.5_vl, qwen3_vl, qwen3_moe and qwen3_vl_moe (actor.model.model_type): others run Hugging "
                   "Face's eager modules, training slower than predicted.")
    note = ctx.weights_note(["rollout.model.model_path", "actor.model.model_path"])
    out += [note] if note else []
    if not ctx.has_cluster:
        out.append("no cluster spec: 8 GPUs per node assumed.")
    return out
