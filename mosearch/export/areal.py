"""A plan as AReaL configuration: per-engine allocation strings (`rollout.backend`,
`actor.backend`), the legacy `allocation_mode`, the staleness bound and the cluster size.

Keys and meanings are listed in docs/export.md with where AReaL documents them.
"""

from __future__ import annotations

import math

from problems.placement.plan import Plan
from mosearch.export import kernels as K
from mosearch.export import layout as L
from mosearch.export.context import ExportContext
from problems.placement.names import ASYNC, COLOCATED


def _train_backend(plan: Plan) -> str:
    t = plan.train
    if t.pp > 1:  # AReaL's FSDP engine takes d, t, c only; pipeline stages need Megatron
        return f"megatron:d{t.dp}p{t.pp}t{t.tp}"
    return f"fsdp:d{t.dp}p1t{t.tp}"


def _rollout_backend(plan: Plan) -> str:
    tp, same = L.rollout_tp(plan)
    # one TP for all engines: with mixed TP sizes, as many engines of the chosen TP as the GPUs hold
    d = plan.rollout_engines if same else sum(
        p.rollout_gpus + p.shared_gpus for p in plan.pools if p.rollout_engines) // tp
    return f"vllm:d{d}p1t{tp}"


def _named(spec: str, name: str) -> str:
    backend, dims = spec.split(":", 1)
    return f"{backend}[{name}]:{dims}"


def node_size(plan: Plan, ctx: ExportContext) -> int:
    """AReaL's n_gpus_per_node: the largest count that every node's share of each role is a multiple of
    (the executor rules make it hold whole engines and TP groups); n_nodes x it = the plan's GPUs."""
    parts = []
    for n in L.nodes(plan, ctx):
        parts += [n.count(role) for role in (L.ROLLOUT, L.TRAIN, L.SHARED) if n.count(role)]
    return math.gcd(*parts) if parts else 1


def export(plan: Plan, ctx: ExportContext | None = None) -> dict:
    ctx = ctx or ExportContext()
    mode = plan.execution.mode
    t = plan.train
    rollout_backend, train_backend = _rollout_backend(plan), _train_backend(plan)
    colocated = mode == COLOCATED
    beside_actor = {"type": "colocation", "target": "actor"}
    actor: dict = {
        "backend": train_backend,
        "gradient_checkpointing": plan.train.recompute,
        # AReaL's `offload` moves states out between phases (torch_memory_saver); the plan's optimizer
        # offload during the step has no AReaL key, so the executor rules leave it off
        "offload": False,
        # decoupled PPO objective (behaviour vs proximal policy) corrects stale samples
        "use_decoupled_loss": mode == ASYNC,
        "recompute_logprob": True,
    }
    if colocated:
        # rl_trainer._validate_cfg: colocated engines load weights from disk
        actor["weight_update_mode"] = "disk"
    # the plan takes one optimizer step on the whole step's batch (pipeline_chunks only streams it)
    actor["ppo_n_minibatches"] = 1
    if ctx.prompt_len is not None and ctx.response_max is not None:
        # AReaL packs each rank's share into micro-batches of at most max_tokens_per_mb tokens: the plan's
        # micro-batch of longest samples (n_mbs is a minimum count: 1)
        actor["mb_spec"] = {"n_mbs": 1, "max_tokens_per_mb": t.micro_batch * (ctx.prompt_len + ctx.response_max)}
    if ctx.algorithm is not None and not ctx.reference:
        actor["kl_ctl"] = 0.0  # no reference model, no KL term (AReaL's default coefficient is 0.1)
    rollout: dict = {
        "backend": rollout_backend,
        "max_head_offpolicyness": plan.execution.staleness_bound,
        "max_concurrent_rollouts": plan.rollout.max_num_seqs * plan.rollout_engines,
    }
    if colocated:
        # one engine per actor worker (LocalScheduler.create_workers: a colocated role has as many
        # replicas as its target; the executor rules give colocated plans TP-1 engines on every GPU)
        rollout["scheduling_strategy"] = dict(beside_actor)
    u = node_size(plan, ctx)
    sep = "|" if colocated else "+"  # AReaL's grammar: '|' colocates (components after the first named)
    cfg: dict = {
        "allocation_mode": f"{_named(rollout_backend, 'rollout')}{sep}{_named(train_backend, 'actor')}",
        # the distributed launchers start n_nodes x n_gpus_per_node GPUs, generation on whole nodes
        "cluster": {"n_nodes": plan.used_gpus // u, "n_gpus_per_node": u},
        # required by _validate_cfg with colocation (training state offloaded while vLLM generates)
        "enable_offload": colocated,
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
    # the critic (PPO) and the reference train / run on the actor's GPUs with its layout, as planned
    if ctx.algorithm == "ppo":
        cfg["critic"] = {"backend": train_backend, "scheduling_strategy": dict(beside_actor),
                         "gradient_checkpointing": plan.train.recompute, "offload": False}
    if ctx.reference or ctx.algorithm is None:
        cfg["ref"] = {"backend": train_backend, "scheduling_strategy": dict(beside_actor)}
    if ctx.model_dir is not None:
        cfg["tokenizer_path"] = ctx.model_dir
        for part in ("actor", "critic", "ref"):
            if part in cfg:
                cfg[part]["path"] = ctx.model_dir
    return cfg


def notes(plan: Plan, ctx: ExportContext | None = None) -> list[str]:
    ctx = ctx or ExportContext()
    nodes = L.nodes(plan, ctx)
    out = []
    if len({n.gpu for n in nodes}) > 1:
        out.append("AReaL allocates GPUs by count, not type: rollout takes the first "
                   f"{L.role_gpus(plan, 'rollout') or L.role_gpus(plan, 'shared')} GPUs it is given. On Slurm "
                   "(scheduler.type=slurm) set actor.scheduling_spec[0].nodelist and rollout.scheduling_spec[0]."
                   "nodelist to each role's nodes in the layout above (its Slurm scheduler passes them to sbatch "
                   "--nodelist); its Ray and local schedulers have no such key (AReaL issue #1167).")
    u = node_size(plan, ctx)
    if any(n.size != u for n in nodes):
        out.append(f"cluster.n_gpus_per_node is {u}: AReaL's launcher counts nodes of {u} GPU{'s' * (u > 1)} (n_nodes x "
                   f"n_gpus_per_node = the plan's {plan.used_gpus} GPUs); start it on the nodes of the layout above.")
    _, same = L.rollout_tp(plan)
    if not same:
        out.append("pools use different rollout TP sizes; an AReaL allocation string has one: the most "
                   "used one is emitted and d is the total engine count.")
    if plan.weight_sync.route == "staged":
        out.append("weight_sync route 'staged' has no AReaL key.")
    if plan.execution.mode != COLOCATED and plan.execution.pipeline_chunks > 1:
        out.append(f"pipeline_chunks {plan.execution.pipeline_chunks} (streaming the step's batch) has no AReaL "
                   "key; one optimizer step per step is kept (ppo_n_minibatches 1).")
    k = ctx.elementwise_kernels
    if k and plan.train.pp > 1:  # the Megatron engine (see _train_backend)
        out.append(f"workload assumes {K.WHAT[k]} (elementwise_kernels {k}); AReaL 1.0.4's Megatron engine has no "
                   "key for Megatron's RoPE and activation fusions (its model bridge sets them): the kernels it runs "
                   "may differ, and training time with them.")
    elif k and k != "eager" and plan.executor != "areal":  # an AReaL front's figures are already eager's
        out.append(f"workload assumes {K.WHAT[k]} (elementwise_kernels {k}); AReaL 1.0.4's FSDP engine runs Hugging "
                   "Face's eager modules (no switch): training slower and its activations larger than this plan "
                   "predicted (the export checked that they still fit); `mosearch plan --executor areal` scores "
                   "plans so.")
    note = ctx.weights_note(["actor.path", "tokenizer_path"] + (["critic.path"] if ctx.algorithm == "ppo" else [])
                            + (["ref.path"] if ctx.reference else []))
    out += [note] if note else []
    if not ctx.has_workload:
        out.append("no workload spec: train_dataset.batch_size and gconfig.n_samples are left out.")
    if not ctx.has_cluster:
        out.append("no cluster spec: 8 GPUs per node assumed.")
    return out
