"""A plan as RLinf configuration: `cluster` (num_nodes, component_placement over global GPU
indices, one labelled node group per GPU pool), the vLLM rollout and the actor's parallel layout.

Keys and meanings are listed in docs/export.md with where RLinf documents them.
"""

from __future__ import annotations

from problems.placement.plan import Plan
from mosearch.export import layout as L
from mosearch.export.context import ExportContext

# torch FSDP sharding strategies by the plan's sharding level
_FSDP_SHARDING = {"none": "no_shard", "zero1": "shard_grad_op", "zero2": "shard_grad_op",
                  "zero3": "full_shard", "fsdp": "full_shard"}


def _placement(plan: Plan, nodes: list[L.Node]) -> dict:
    if plan.execution.mode == "colocated":
        shared = L.gpu_indices(nodes, L.SHARED)
        every = sum(n.size for n in nodes)
        where = "all" if len(shared) == every else L.ranges(shared)
        return {"actor,rollout,reward": where}
    roll = L.ranges(L.gpu_indices(nodes, L.ROLLOUT))
    # rule-based rewards run beside the rollout engines, as in RLinf's disaggregated examples
    return {"rollout,reward": roll, "actor": L.ranges(L.gpu_indices(nodes, L.TRAIN))}


def _node_groups(nodes: list[L.Node]) -> list[dict]:
    groups: dict[str, list[int]] = {}
    for rank, n in enumerate(nodes):
        groups.setdefault(n.pool, []).append(rank)
    return [{"label": L.label(pool), "node_ranks": L.ranges(ranks)} for pool, ranks in groups.items()]


def _actor(plan: Plan) -> dict:
    t, colocated = plan.train, plan.execution.mode == "colocated"
    actor: dict = {"enable_offload": colocated}  # offload weights/optimizer while rollout runs
    if t.tp > 1 or t.pp > 1:
        actor["training_backend"] = "megatron"
        actor["offload_optimizer"] = t.optimizer_offload
        actor["model"] = {
            "tensor_model_parallel_size": t.tp,
            "pipeline_model_parallel_size": t.pp,
            "recompute_granularity": "full" if t.recompute else None,
            "recompute_method": "block" if t.recompute else None,
        }
        actor["optim"] = {"use_distributed_optimizer": t.sharding != "none"}
    else:
        actor["training_backend"] = "fsdp"
        actor["micro_batch_size"] = t.micro_batch
        actor["fsdp_config"] = {
            "strategy": "fsdp2",
            "sharding_strategy": _FSDP_SHARDING[t.sharding],
            "gradient_checkpointing": t.recompute,
        }
    return actor


def export(plan: Plan, ctx: ExportContext | None = None) -> dict:
    ctx = ctx or ExportContext()
    nodes = L.nodes(plan, ctx)
    tp, _ = L.rollout_tp(plan)
    mode = plan.execution.mode
    algorithm: dict = {
        "training_batch_size_per_gpu": plan.train.micro_batch,
        # one optimizer step on the whole step's batch, as the plan models (chunks only stream it)
        "n_minibatches": 1,
        "recompute_logprobs": True,
    }
    if mode == "async":
        algorithm["staleness_threshold"] = plan.execution.staleness_bound
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
            "component_placement": _placement(plan, nodes),
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
        "actor": _actor(plan),
    }
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
    for role in (L.SHARED,) if plan.execution.mode == "colocated" else (L.ROLLOUT, L.TRAIN):
        if not L.contiguous(L.gpu_indices(nodes, role)):
            out.append(f"{role} GPUs are not one contiguous range; RLinf's reasoning placement "
                       "(ModelParallelComponentPlacement) requires that and will refuse this layout.")
    _, same = L.rollout_tp(plan)
    if not same:
        out.append("pools use different rollout TP sizes; RLinf takes one: the most used one is emitted.")
    if plan.execution.mode == "async":
        out.append("algorithm.staleness_threshold is read by RLinf's async PPO workers (embodied runner); "
                   "its reasoning runner is synchronous, so check your runner supports it.")
    if plan.train.optimizer_offload and plan.train.tp == 1 and plan.train.pp == 1:
        out.append("optimizer_offload with FSDP: RLinf offloads optimizer state only between phases "
                   "(actor.enable_offload), not during the step.")
    if plan.weight_sync.route == "staged":
        out.append("weight_sync route 'staged' has no RLinf key.")
    if not ctx.has_cluster:
        out.append("no cluster spec: 8 GPUs per node assumed.")
    return out
