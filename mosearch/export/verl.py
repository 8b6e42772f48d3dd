"""A plan as verl configuration: the keys of a hydra config on verl 0.9.1's `ppo_trainer` (FSDP) or
`ppo_megatron_trainer` (train TP/PP > 1), for its v1 trainer (`trainer.use_v1`); launch.py adds the
defaults list and the command that starts it.

Colocated plans run `trainer.v1.trainer_mode: sync` (hybrid engine); disaggregated and async plans
run `separate_async` (standalone rollout nodes). Keys and meanings are listed in docs/export.md
with where verl defines them.
"""

from __future__ import annotations

from problems.placement.names import ASYNC, COLOCATED, DISAGGREGATED, PARAM_SHARDINGS
from problems.placement.plan import Plan
from mosearch.export import kernels as K
from mosearch.export import layout as L
from mosearch.export.context import ExportContext


def megatron(plan: Plan) -> bool:
    """verl's FSDP workers have no tensor/pipeline split and no expert parallelism: train TP, PP or EP needs
    Megatron."""
    return plan.train.tp > 1 or plan.train.pp > 1 or plan.train.ep > 1


def config_name(plan: Plan) -> str:
    """The verl config the keys are merged into (`--config-name`)."""
    return "ppo_megatron_trainer" if megatron(plan) else "ppo_trainer"


def off_policy_threshold(k: int) -> int:
    """verl v1 bounds the versions a trajectory *spans* (an on-policy one spans 1; it drops a
    trajectory when `step - prompt_step + 1 > threshold`, v1/replay_buffer.py); the plan bounds the
    lag k of the oldest version, so a lag of k spans k + 1 versions."""
    return k + 1


def _engine(plan: Plan, ctx: ExportContext) -> tuple[dict, dict]:
    """The Megatron or FSDP block of one trained model (the actor; the critic has the same layout,
    as the plan models them) and its optimizer overrides."""
    t = plan.train
    if megatron(plan):
        full = t.recompute  # Megatron's full recomputation of every layer (uniform, one layer a chunk)
        block = {
            "tensor_model_parallel_size": t.tp,
            "pipeline_model_parallel_size": t.pp,
            # a mixture of experts' EP (McoreEngineConfig); experts whole on their EP rank (expert TP 1), as the
            # model counts them (problems/placement/model/moe.py)
            **({"expert_model_parallel_size": t.ep, "expert_tensor_parallel_size": 1} if t.ep > 1 else {}),
            # ZeRO-1 style optimizer sharding is Megatron's distributed optimizer
            "use_distributed_optimizer": t.sharding != "none",
            # verl's param/optimizer_offload move states out between phases only; the plan's optimizer
            # offload (CPU Adam during the step) is Megatron's optimizer_cpu_offload below
            "param_offload": False,
            "optimizer_offload": False,
            "override_transformer_config": {
                "recompute_granularity": "full" if full else None,
                "recompute_method": "uniform" if full else None,
                "recompute_num_layers": 1 if full else None,
                # Megatron-core leaves both off unless asked (TransformerConfig defaults)
                **(K.megatron_fusions(ctx.elementwise_kernels) if ctx.elementwise_kernels else {}),
            },
        }
        optim = ({"override_optimizer_config": {"optimizer_cpu_offload": True, "optimizer_offload_fraction": 1.0}}
                 if t.optimizer_offload else {})
        return block, optim
    return {
        # fsdp_size 1 = no sharding (plain data parallel replicas); -1 = shard over all ranks
        "fsdp_size": 1 if t.sharding == "none" else -1,
        # ZeRO-2 keeps gathered parameters after forward; ZeRO-3/FSDP reshards them
        "reshard_after_forward": t.sharding in PARAM_SHARDINGS,
        "param_offload": False,
        "optimizer_offload": False,
    }, {}


def _train_block(plan: Plan, ctx: ExportContext) -> dict:
    t = plan.train
    block, optim = _engine(plan, ctx)
    actor: dict = {}
    if megatron(plan):
        actor["strategy"] = "megatron"
        actor["megatron"] = block
        if optim:
            actor["optim"] = optim
    else:
        actor["strategy"] = "fsdp2"
        actor["fsdp_config"] = block
    actor["ppo_micro_batch_size_per_gpu"] = t.micro_batch
    # the plan (and our trainer) take one optimizer step on the whole step's batch: one mini-batch
    # of all prompts, one epoch. pipeline_chunks only streams the batch; it is not an update count.
    if ctx.prompts_per_step is not None:
        actor["ppo_mini_batch_size"] = ctx.prompts_per_step
    actor["ppo_epochs"] = 1
    # verl's GRPO puts the KL term in the loss (low_var_kl); PPO puts it in the reward
    actor["use_kl_loss"] = ctx.algorithm == "grpo" and ctx.reference
    return actor


def _model_block(plan: Plan, ctx: ExportContext) -> dict:
    m: dict = {"enable_gradient_checkpointing": plan.train.recompute}
    if ctx.model_dir is not None:
        m["path"] = ctx.model_dir
    if ctx.elementwise_kernels and not megatron(plan):  # Hugging Face modules: eager unless Liger patches them
        m["use_liger"] = K.liger(ctx.elementwise_kernels)
    return m


def _critic_block(plan: Plan, ctx: ExportContext) -> dict:
    """PPO's critic: a TrainingWorker in verl's one global pool (trainer_base._init_resource_pool_mgr),
    on the actor's GPUs with the actor's layout, as the plan models it."""
    block, optim = _engine(plan, ctx)
    critic: dict = {"ppo_micro_batch_size_per_gpu": plan.train.micro_batch, "model": _model_block(plan, ctx)}
    if megatron(plan):
        critic["megatron"] = block
        if optim:
            critic["optim"] = optim
    else:
        critic["fsdp"] = block
    return critic


def _rollout_block(plan: Plan, ctx: ExportContext, nodes: list[L.Node]) -> dict:
    tp, _ = L.rollout_tp(plan)
    colocated = plan.execution.mode == COLOCATED
    r: dict = {
        "name": "vllm",
        "mode": "async",
        "tensor_model_parallel_size": tp,
        "gpu_memory_utilization": plan.rollout.kv_mem_frac,
        "max_num_seqs": plan.rollout.max_num_seqs,
        # colocated: free the KV cache (vLLM sleep) while training holds the GPUs
        "free_cache_engine": colocated,
        # the trainer recomputes log-probs at the training micro-batch (as the plan models)
        "log_prob_micro_batch_size_per_gpu": plan.train.micro_batch,
    }
    if ctx.samples_per_prompt is not None:
        r["n"] = ctx.samples_per_prompt
    if ctx.experts and tp > 1:  # a mixture of experts: vLLM's enable_expert_parallel over the engine's GPUs
        # (verl's rollout config: expert_parallel_size = TP x DP, DP 1 here)
        r["expert_parallel_size"] = tp
    if not colocated:
        r.update(_nodes_of(L.per_node(nodes, L.ROLLOUT)))
        # separate_async refuses the `naive` backend (weights must cross to other nodes)
        r["checkpoint_engine"] = {"backend": "nccl"}
    return r


def _nodes_of(counts: list[int]) -> dict:
    shape = L.uniform(counts)
    if shape is None:  # uneven nodes: verl sizes a pool as nnodes x n_gpus_per_node (noted)
        return {"nnodes": len(counts), "n_gpus_per_node": max(counts)}
    return {"nnodes": shape[0], "n_gpus_per_node": shape[1]}


def export(plan: Plan, ctx: ExportContext | None = None) -> dict:
    ctx = ctx or ExportContext()
    nodes = L.nodes(plan, ctx)
    mode = plan.execution.mode
    colocated = mode == COLOCATED
    cfg: dict = {}
    if ctx.algorithm is not None:
        ppo = ctx.algorithm == "ppo"
        cfg["algorithm"] = {"adv_estimator": "gae" if ppo else "grpo", "use_kl_in_reward": ppo}
    if ctx.has_workload:
        cfg["data"] = {"train_batch_size": ctx.prompts_per_step}
        if ctx.prompt_len is not None and ctx.response_max is not None:
            cfg["data"].update(max_prompt_length=ctx.prompt_len, max_response_length=ctx.response_max)
    arr: dict = {
        # separate_async with hybrid_engine false serves rollout from the standalone nodes only
        "hybrid_engine": colocated,
        "model": _model_block(plan, ctx),
        "actor": _train_block(plan, ctx),
        "rollout": _rollout_block(plan, ctx, nodes),
    }
    if ctx.reference:
        arr["ref"] = {"log_prob_micro_batch_size_per_gpu": plan.train.micro_batch}
    cfg["actor_rollout_ref"] = arr
    if ctx.algorithm == "ppo":
        cfg["critic"] = _critic_block(plan, ctx)
    v1: dict = {"trainer_mode": "sync" if colocated else "separate_async"}
    if not colocated:
        # one weight sync per optimizer step, i.e. per plan step
        v1["separate_async"] = {"parameter_sync_step": 1}
        v1["sampler"] = {"max_off_policy_threshold": off_policy_threshold(plan.execution.staleness_bound)}
    role = L.SHARED if colocated else L.TRAIN
    cfg["trainer"] = {"use_v1": True, **_nodes_of(L.per_node(nodes, role)), "v1": v1}
    return cfg


def refusals(plan: Plan, ctx: ExportContext | None = None) -> list[str]:
    """Checks verl's validate_config (verl/utils/config.py) makes before it starts that this export
    fails: the step's samples must split evenly over the trainer's GPUs (over the Megatron DP ranks
    times the micro-batch when TP/PP are used)."""
    ctx = ctx or ExportContext()
    if not ctx.has_workload:
        return []
    cfg = export(plan, ctx)
    tr, t = cfg["trainer"], plan.train
    n_gpus = tr["nnodes"] * tr["n_gpus_per_node"]
    samples = ctx.prompts_per_step * ctx.samples_per_prompt
    if megatron(plan):
        if n_gpus % (t.tp * t.pp):
            return [f"verl will refuse this plan: its {n_gpus} trainer GPUs are not a multiple of TP x PP = {t.tp * t.pp}."]
        unit, what = n_gpus // (t.tp * t.pp) * t.micro_batch, "Megatron DP ranks x micro-batch"
    else:
        unit, what = n_gpus, "trainer GPUs"
    if samples % unit:
        return [f"verl will refuse this plan: {samples} samples per step do not split evenly over {unit} "
                f"({what}); verl's validate_config requires that."]
    return []


def _pool_roles(mode: str) -> dict[str, str]:
    if mode == COLOCATED:
        return {"trainer (actor + rollout)": L.SHARED}
    return {"actor_rollout_ref.rollout (standalone rollout)": L.ROLLOUT, "trainer (actor)": L.TRAIN}


def notes(plan: Plan, ctx: ExportContext | None = None) -> list[str]:
    ctx = ctx or ExportContext()
    nodes = L.nodes(plan, ctx)
    out = [f"a hydra config on verl 0.9.1's {config_name(plan)} (its defaults list): keys verl's YAML does not "
           "list merge as part of the file, so the command below starts it as it is."]
    out += refusals(plan, ctx)
    mode = plan.execution.mode
    if mode == DISAGGREGATED or (mode == ASYNC and plan.execution.staleness_bound == 0):
        out.append("verl's v1 trainer has no synchronous mode on separate rollout GPUs: this is separate_async "
                   "with max_off_policy_threshold 1 (a trajectory may span one policy version), which drops "
                   "samples that cross a weight update instead of waiting; the plan does not model that loss.")
    if mode != COLOCATED and plan.execution.pipeline_chunks > 1:
        out.append(f"pipeline_chunks {plan.execution.pipeline_chunks} (streaming the step's batch to training) has "
                   "no verl key: separate_async streams finished trajectories into its replay buffer and trains "
                   "once the step's batch is there; one optimizer step per plan step is kept.")
    types = {n.gpu for n in nodes}
    if len(types) > 1 and mode != COLOCATED:
        where = "; ".join(f"{name} on " + ", ".join(f"{n.pool} x{n.count(role)}" for n in nodes if n.count(role))
                          for name, role in _pool_roles(mode).items())
        out.append("verl sizes its pools by GPU count and cannot name a GPU type; the `ray start` lines give each "
                   "node Ray resources for the GPUs each role may take there and mosearch.export.launch_verl asks "
                   f"verl's pools for them, so that {where}.")
    for role in ((L.SHARED,) if mode == COLOCATED else (L.TRAIN, L.ROLLOUT)):
        counts = L.per_node(nodes, role)
        if L.uniform(counts) is None:
            out.append(f"{role} GPUs per node are uneven {counts}: verl's nnodes x n_gpus_per_node cannot express "
                       "them; the largest node is emitted, so verl asks Ray for more GPUs than the plan uses.")
    _, same = L.rollout_tp(plan)
    if not same:
        out.append("pools use different rollout TP sizes; verl takes one: the most used one is emitted.")
    if plan.weight_sync.route == "staged":
        out.append("weight_sync route 'staged' (one copy per region, then fan-out) has no verl key; "
                   "verl's checkpoint engine sends from the trainer ranks directly.")
    if ctx.elementwise_kernels:
        note = (K.megatron_note(ctx.elementwise_kernels, "verl") if megatron(plan)
                else K.liger_note(ctx.elementwise_kernels, "actor_rollout_ref.model.use_liger"))
        out += [note] if note else []
    note = ctx.weights_note(["actor_rollout_ref.model.path"] + (["critic.model.path"] if ctx.algorithm == "ppo" else []))
    out += [note] if note else []
    if not ctx.has_workload:
        out.append("no workload spec: algorithm, data sizes, ppo_mini_batch_size, rollout.n and the element-wise "
                   "kernel switches are left out.")
    if not ctx.has_cluster:
        out.append("no cluster spec: 8 GPUs per node assumed.")
    return out
