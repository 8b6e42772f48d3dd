"""A plan as verl configuration: the hydra keys of ppo_trainer (colocated) or of the fully-async
recipe (disaggregated, async), plus the arguments of verl's ResourcePoolManager.

Keys and meanings are listed in docs/export.md with where verl documents them.
"""

from __future__ import annotations

from problems.placement.plan import Plan
from mosearch.export import layout as L
from mosearch.export.context import ExportContext


def _train_block(plan: Plan, ctx: ExportContext, chunks: int) -> dict:
    t = plan.train
    actor: dict = {}
    if t.tp > 1 or t.pp > 1:  # verl's FSDP workers have no tensor/pipeline split: Megatron does
        actor["strategy"] = "megatron"
        actor["megatron"] = {
            "tensor_model_parallel_size": t.tp,
            "pipeline_model_parallel_size": t.pp,
            # ZeRO-1 style optimizer sharding is Megatron's distributed optimizer
            "use_distributed_optimizer": t.sharding != "none",
            "param_offload": False,
            "grad_offload": False,
            "optimizer_offload": t.optimizer_offload,
        }
    else:
        actor["strategy"] = "fsdp2"
        actor["fsdp_config"] = {
            # fsdp_size 1 = no sharding (plain data parallel replicas); -1 = shard over all ranks
            "fsdp_size": 1 if t.sharding == "none" else -1,
            # ZeRO-2 keeps gathered parameters after forward; ZeRO-3/FSDP reshards them
            "reshard_after_forward": t.sharding in ("zero3", "fsdp"),
            "param_offload": False,
            "optimizer_offload": t.optimizer_offload,
        }
    actor["ppo_micro_batch_size_per_gpu"] = t.micro_batch
    if ctx.prompts_per_step is not None:
        # verl counts ppo_mini_batch_size in prompts; one optimizer step per streamed chunk
        actor["ppo_mini_batch_size"] = max(1, ctx.prompts_per_step // chunks)
    return actor


def _rollout_block(plan: Plan, ctx: ExportContext) -> dict:
    tp, _ = L.rollout_tp(plan)
    r = {
        "name": "vllm",
        "mode": "async",
        "tensor_model_parallel_size": tp,
        "gpu_memory_utilization": plan.rollout.kv_mem_frac,
        "max_num_seqs": plan.rollout.max_num_seqs,
        # colocated: free the KV cache (vLLM sleep) while training holds the GPUs
        "free_cache_engine": plan.execution.mode == "colocated",
    }
    if ctx.samples_per_prompt is not None:
        r["n"] = ctx.samples_per_prompt
    return r


def _nodes_of(counts: list[int]) -> dict:
    shape = L.uniform(counts)
    if shape is None:  # uneven nodes: the closest hydra keys; resource_pool_spec has the truth
        return {"nnodes": len(counts), "n_gpus_per_node": max(counts)}
    return {"nnodes": shape[0], "n_gpus_per_node": shape[1]}


def export(plan: Plan, ctx: ExportContext | None = None) -> dict:
    ctx = ctx or ExportContext()
    nodes = L.nodes(plan, ctx)
    mode = plan.execution.mode
    chunks = plan.execution.pipeline_chunks
    config: dict = {}
    if ctx.prompts_per_step is not None:
        config["data"] = {"train_batch_size": ctx.prompts_per_step}
    config["actor_rollout_ref"] = {
        "hybrid_engine": mode == "colocated",
        "model": {"enable_gradient_checkpointing": plan.train.recompute},
        "actor": _train_block(plan, ctx, 1 if mode == "colocated" else chunks),
        "rollout": _rollout_block(plan, ctx),
    }
    ppo = ctx.algorithm == "ppo"
    if mode == "colocated":
        shared = L.per_node(nodes, L.SHARED)
        config["trainer"] = _nodes_of(shared)
        pools = {"global_pool": shared}
        mapping = {"ActorRollout": "global_pool", "RefPolicy": "global_pool"}
        if ppo:
            mapping["Critic"] = "global_pool"
    else:
        train, roll = L.per_node(nodes, L.TRAIN), L.per_node(nodes, L.ROLLOUT)
        config["trainer"] = _nodes_of(train)
        config["rollout"] = _nodes_of(roll)  # fully-async recipe: the Rollouter's own nodes
        k = plan.execution.staleness_bound
        config["async_training"] = {
            # samples beyond one sync window the Rollouter may produce, as a fraction of the
            # window; 1 ~ one step off-policy, so the plan's k versions map to k
            "staleness_threshold": float(k),
            # the plan streams the step's batch in `chunks` mini-batches and syncs once a step
            "trigger_parameter_sync_step": chunks,
            "require_batches": 1,
            "partial_rollout": mode == "async",
            "use_rollout_log_probs": True,
            # decoupled PPO (proximal log-probs recomputed by the trainer) as the plan assumes
            "compute_prox_log_prob": mode == "async",
        }
        pools = {"rollout_pool": roll, "trainer_pool": train}
        mapping = {"Rollout": "rollout_pool", "Actor": "trainer_pool", "RefPolicy": "trainer_pool"}
        if ppo:
            mapping["Critic"] = "trainer_pool"
    return {
        "config": config,
        "resource_pool_manager": {"resource_pool_spec": pools, "mapping": mapping},
        "gpu_types": {name: [f"{n.pool} x{n.count(role)}" for n in nodes if n.count(role)]
                      for name, role in _pool_roles(mode).items()},
    }


def _pool_roles(mode: str) -> dict[str, str]:
    if mode == "colocated":
        return {"global_pool": L.SHARED}
    return {"rollout_pool": L.ROLLOUT, "trainer_pool": L.TRAIN}


def notes(plan: Plan, ctx: ExportContext | None = None) -> list[str]:
    ctx = ctx or ExportContext()
    nodes = L.nodes(plan, ctx)
    out = []
    mode = plan.execution.mode
    if mode == "colocated":
        out.append("run with verl's main_ppo (hybrid engine: actor and vLLM share every GPU).")
    else:
        out.append("disaggregated/async: run with verl's fully_async_policy recipe (separate Rollouter and "
                   "Trainer nodes); staleness_threshold 0 with trigger_parameter_sync_step = pipeline_chunks "
                   "is its on-policy streaming mode.")
    types = {n.gpu for n in nodes}
    if len(types) > 1:
        out.append("verl's resource pools ask Ray for plain GPUs and cannot name a GPU type: start the "
                   "Rollouter/Trainer processes so that each pool lands on the nodes listed under gpu_types "
                   "(e.g. one Ray cluster per role, or custom resources with a patched RayResourcePool).")
    for role in ((L.SHARED,) if mode == "colocated" else (L.TRAIN, L.ROLLOUT)):
        counts = L.per_node(nodes, role)
        if L.uniform(counts) is None:
            out.append(f"{role} GPUs per node are uneven {counts}: nnodes x n_gpus_per_node cannot express "
                       "them; pass resource_pool_spec to ResourcePoolManager instead.")
    _, same = L.rollout_tp(plan)
    if not same:
        out.append("pools use different rollout TP sizes; verl takes one: the most used one is emitted.")
    if plan.weight_sync.route == "staged":
        out.append("weight_sync route 'staged' (one copy per region, then fan-out) has no verl key; "
                   "verl broadcasts from the trainer ranks directly.")
    if not ctx.has_workload:
        out.append("no workload spec: data.train_batch_size, ppo_mini_batch_size and rollout.n are left out.")
    if not ctx.has_cluster:
        out.append("no cluster spec: 8 GPUs per node assumed.")
    return out
