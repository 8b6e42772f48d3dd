"""A plan as AReaL configuration: per-engine allocation strings (`rollout.backend`,
`actor.backend`), the legacy `allocation_mode`, the staleness bound and the cluster size.

Keys and meanings are listed in docs/export.md with where AReaL documents them.
"""

from __future__ import annotations

import math

from problems.placement.plan import Plan
from mosearch.export import layout as L
from mosearch.export.context import ExportContext


def _train_backend(plan: Plan) -> str:
    t = plan.train
    if t.pp > 1:  # AReaL's FSDP engine takes d, t, c only; pipeline stages need Megatron
        return f"megatron:d{t.dp}p{t.pp}t{t.tp}"
    return f"fsdp:d{t.dp}t{t.tp}"


def _rollout_backend(plan: Plan) -> str:
    tp, same = L.rollout_tp(plan)
    # one TP for all engines: with mixed TP sizes, as many engines of the chosen TP as the GPUs hold
    d = plan.rollout_engines if same else sum(
        p.rollout_gpus + p.shared_gpus for p in plan.pools if p.rollout_engines) // tp
    return f"vllm:d{d}t{tp}"


def export(plan: Plan, ctx: ExportContext | None = None) -> dict:
    ctx = ctx or ExportContext()
    nodes = L.nodes(plan, ctx)
    mode = plan.execution.mode
    t = plan.train
    rollout_backend, train_backend = _rollout_backend(plan), _train_backend(plan)
    colocated = mode == "colocated"
    sep = "|" if colocated else "+"  # AReaL's grammar: '|' colocates, '+' disaggregates
    actor: dict = {
        "backend": train_backend,
        "gradient_checkpointing": plan.train.recompute,
        "offload": t.optimizer_offload,
        # decoupled PPO objective (behaviour vs proximal policy) corrects stale samples
        "use_decoupled_loss": mode == "async",
        "recompute_logprob": True,
    }
    # the plan takes one optimizer step on the whole step's batch (pipeline_chunks only streams it)
    actor["ppo_n_minibatches"] = 1
    if ctx.has_workload:
        # AReaL splits each rank's share of the batch into n_mbs micro-batches of the plan's size
        per_rank = ctx.prompts_per_step * ctx.samples_per_prompt / t.dp
        actor["mb_spec"] = {"n_mbs": max(1, math.ceil(per_rank / t.micro_batch))}
    if ctx.algorithm is not None and not ctx.reference:
        actor["kl_ctl"] = 0.0  # no reference model, no KL term (AReaL's default coefficient is 0.1)
    rollout: dict = {
        "backend": rollout_backend,
        "max_head_offpolicyness": plan.execution.staleness_bound,
        "max_concurrent_rollouts": plan.rollout.max_num_seqs * plan.rollout_engines,
    }
    if colocated:
        rollout["scheduling_strategy"] = {"type": "colocation", "target": "actor"}
    sizes = sorted({n.size for n in nodes})
    cfg: dict = {
        "allocation_mode": f"{rollout_backend}{sep}{train_backend}",
        "cluster": {"n_nodes": len(nodes), "n_gpus_per_node": sizes[-1]},
        "enable_offload": colocated,  # training state offloaded while vLLM generates
        "actor": actor,
        "rollout": rollout,
        "vllm": {
            "gpu_memory_utilization": plan.rollout.kv_mem_frac,
            "max_num_seqs": plan.rollout.max_num_seqs,
            "enable_sleep_mode": colocated,  # release the KV cache while training holds the GPUs
        },
    }
    if ctx.has_workload:
        cfg["train_dataset"] = {"batch_size": ctx.prompts_per_step}
        if ctx.prompt_len is not None:
            cfg["train_dataset"]["max_length"] = ctx.prompt_len  # prompts longer than this are filtered
        cfg["gconfig"] = {"n_samples": ctx.samples_per_prompt}
        if ctx.response_max is not None:
            cfg["gconfig"]["max_new_tokens"] = ctx.response_max
    if ctx.algorithm == "ppo":
        cfg["critic"] = {"backend": "${actor.backend}"}
    if ctx.reference or ctx.algorithm is None:
        cfg["ref"] = {"backend": "${actor.backend}"}
    return cfg


def notes(plan: Plan, ctx: ExportContext | None = None) -> list[str]:
    ctx = ctx or ExportContext()
    nodes = L.nodes(plan, ctx)
    out = []
    if len({n.gpu for n in nodes}) > 1:
        out.append("AReaL allocates GPUs by count, not type: rollout takes the first "
                   f"{L.role_gpus(plan, 'rollout') or L.role_gpus(plan, 'shared')} GPUs it is given. Pin each "
                   "engine to its GPU type yourself (per-engine scheduling_spec / Ray custom resources; "
                   "AReaL issue #1167). The intended layout is in the header above.")
    if len({n.size for n in nodes}) > 1:
        out.append("nodes have different GPU counts; cluster.n_gpus_per_node takes the largest.")
    _, same = L.rollout_tp(plan)
    if not same:
        out.append("pools use different rollout TP sizes; an AReaL allocation string has one: the most "
                   "used one is emitted and d is the total engine count.")
    if plan.train.sharding in ("none", "zero1", "zero2"):
        out.append(f"train sharding '{plan.train.sharding}': AReaL's FSDP engine always fully shards.")
    if plan.weight_sync.route == "staged":
        out.append("weight_sync route 'staged' has no AReaL key.")
    if plan.execution.mode != "colocated" and plan.execution.pipeline_chunks > 1:
        out.append(f"pipeline_chunks {plan.execution.pipeline_chunks} (streaming the step's batch) has no AReaL "
                   "key; one optimizer step per step is kept (ppo_n_minibatches 1).")
    if not ctx.has_workload:
        out.append("no workload spec: train_dataset.batch_size and gconfig.n_samples are left out.")
    if not ctx.has_cluster:
        out.append("no cluster spec: 8 GPUs per node assumed.")
    return out
