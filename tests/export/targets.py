"""Exports started by the executors' own start-up code, as far as it runs without GPUs:

- verl 0.9.1: hydra compose of `ppo_trainer` / `ppo_megatron_trainer` with the export as command-line
  overrides (an unknown key fails), `verl.utils.config.validate_config` with verl's own
  need_reference_policy / need_critic, `omega_conf_to_dataclass` of actor, rollout and critic, the v1
  trainer class of the export's `trainer_mode` (its `__init__` asserts) and `_init_resource_pool_mgr`.
- AReaL 1.0.4: `to_structured_cfg` + `OmegaConf.to_object` (its launcher's config load), the per-engine
  and legacy allocation parsers, `PPOTrainer._validate_cfg`, `LocalScheduler.create_workers`' colocation
  rule (actor workers first, then each colocated role), `validate_config_for_distributed_launcher`.
- RLinf 0.3.0: its cluster config (`ClusterConfig`), `validate_reasoning_cfg`, the Megatron/FSDP actor
  checks of `validate_cfg`, `ModelParallelComponentPlacement` (what the reasoning entry point places)
  and every component's `get_placement` on the plan's nodes, described with RLinf's own NodeInfo /
  NodeGroupInfo (what its Ray node probe collects).

Each returns what the executor would ask for (GPUs, DP, TP/PP, critic layout, engines), so the tests
compare it with the plan. A refusal raises.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
from functools import lru_cache
from pathlib import Path

from omegaconf import OmegaConf

from mosearch.export import EXPORTERS
from mosearch.export import layout as L
from mosearch.export import verl as V


# ------------------------------------------------------------------------------------------- verl

def _hydra_value(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return v if v.replace("_", "").replace("-", "").replace(".", "").replace("/", "").isalnum() else repr(v)
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{_hydra_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(v)


def hydra_overrides(cfg: dict, prefix: str = "", add: bool = False) -> list[str]:
    """A nested export as the `key=value` arguments a user passes to verl's main_ppo; keys inside the
    open `override_*_config` dicts are added with `++`, as verl's docs do (a key verl's YAML does not list,
    such as apply_rope_fusion, needs it)."""
    out = []
    for k, v in cfg.items():
        key = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            out += hydra_overrides(v, key, add or k in ("override_optimizer_config", "override_ddp_config",
                                                                  "override_transformer_config"))
        else:
            out.append(f"{'++' if add else ''}{key}={_hydra_value(v)}")
    return out


@lru_cache(maxsize=1)
def _verl_hydra() -> None:
    """Hydra initialised once on verl's config directory (its repository caches the files it read, so
    each compose only merges: seconds per plan otherwise)."""
    import verl
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer/config"), version_base=None)


@lru_cache(maxsize=None)
def _verl_composed(config_name: str, groups: tuple[str, ...]):
    from hydra import compose

    _verl_hydra()
    return compose(config_name=config_name, overrides=list(groups))


def verl_compose(config_name: str, overrides: list[str]):
    """hydra compose of `config_name` with `overrides`, as main_ppo gets it. The defaults list (config
    groups such as model_engine=...) is composed by hydra once per config and group choice; the
    key=value overrides are then applied by hydra's own step of compose (ConfigLoaderImpl.
    _apply_overrides_to_config on the struct config), which is what compose does after loading."""
    import copy

    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides=overrides)
    groups = tuple(o.input_line for o in parsed if "." not in o.key_or_group and not o.is_add()
                   and o.key_or_group in ("model_engine",))
    keys = [o for o in parsed if o.input_line not in groups]
    config = copy.deepcopy(_verl_composed(config_name, groups))
    OmegaConf.set_struct(config, True)
    ConfigLoaderImpl._apply_overrides_to_config(keys, config)
    return config


def verl_start(cfg: dict, config_name: str, model_path: str, extra: tuple[str, ...] = ()):
    """(config, trainer) after verl's start-up up to the resource pools; raises on a refusal."""
    from hydra import compose

    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    overrides = hydra_overrides(cfg) + [f"actor_rollout_ref.model.path={model_path}",
                                        f"critic.model.path={model_path}", *extra]
    config = verl_compose(config_name, overrides)
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    if need_critic(config):
        omega_conf_to_dataclass(config.critic)
    OmegaConf.resolve(config)
    trainer = get_trainer_cls(config.trainer.v1.trainer_mode)(config=config)
    trainer._init_resource_pool_mgr()
    return config, trainer


def verl_asks(config, trainer) -> dict:
    """What verl would start: GPUs per node of each pool, Megatron/FSDP layout of actor and critic,
    rollout engines (llm_server.py: world size // (TP x DP x PP) replicas, hybrid or standalone)."""
    spec = trainer.resource_pool_manager.resource_pool_spec
    arr = config.actor_rollout_ref
    train_gpus = sum(spec["global_pool"])
    r = arr.rollout
    rollout_world = r.tensor_model_parallel_size * r.data_parallel_size * r.pipeline_model_parallel_size
    hybrid = bool(arr.hybrid_engine)
    standalone = r.nnodes * r.n_gpus_per_node if config.trainer.v1.trainer_mode == "separate_async" else 0

    def layout(block):
        if block.strategy == "megatron":
            m = block.megatron
            return {"strategy": "megatron", "tp": m.tensor_model_parallel_size, "pp": m.pipeline_model_parallel_size,
                    "cp": m.context_parallel_size,
                    "dp": train_gpus // (m.tensor_model_parallel_size * m.pipeline_model_parallel_size
                                         * m.context_parallel_size)}
        return {"strategy": block.strategy, "tp": 1, "pp": 1, "cp": 1, "dp": train_gpus}

    from verl.trainer.ppo.utils import need_critic

    return {
        "train_nodes": list(spec["global_pool"]),
        "rollout_nodes": [r.n_gpus_per_node] * r.nnodes if standalone else [],
        "actor": layout(arr.actor),
        "critic": layout(config.critic) if need_critic(config) else None,
        "rollout_tp": r.tensor_model_parallel_size,
        "engines": (train_gpus // rollout_world if hybrid else 0) + standalone // rollout_world,
        "mode": config.trainer.v1.trainer_mode,
        "hybrid": hybrid,
    }


# ------------------------------------------------------------------------------------------ AReaL

def areal_start(cfg: dict, algorithm: str) -> dict:
    """AReaL's config load, allocation parsing, trainer config check, scheduler colocation rule and
    distributed launcher check; returns what it would start."""
    from areal.api.alloc_mode import ModelAllocation, _AllocationMode
    from areal.api.cli_args import GRPOConfig, PPOConfig, to_structured_cfg
    from areal.infra.utils.launcher import validate_config_for_distributed_launcher
    from areal.trainer.rl_trainer import PPOTrainer

    given = OmegaConf.create({"experiment_name": "export", "trial_name": "t0", **cfg})
    structured = to_structured_cfg(given, GRPOConfig if algorithm == "grpo" else PPOConfig)
    for key in OmegaConf.missing_keys(structured):  # the user's own (names, paths, dataset)
        assert key not in ("actor.backend", "rollout.backend", "critic.backend"), key
        OmegaConf.update(structured, key, "user-given")
    config = OmegaConf.to_object(structured)

    # PPOTrainer.__init__ up to _validate_cfg (the offload flags as __init__ sets them)
    t = object.__new__(PPOTrainer)
    t.config = config
    t.actor_alloc = ModelAllocation.from_str(config.actor.backend, name="actor")
    t.rollout_alloc = ModelAllocation.from_str(config.rollout.backend, name="rollout")
    t._should_offload_rollout = t._is_actor_rollout_colocated(config)
    t._should_offload_actor = t._should_offload_rollout or config.actor.offload
    t._should_offload_critic = config.critic is not None and config.critic.offload
    t._should_offload_ref = config.ref is not None and config.ref.offload
    t._should_offload_teacher = False
    t._validate_cfg()
    allocs = {"actor": t.actor_alloc, "rollout": t.rollout_alloc}
    if config.critic is not None:
        allocs["critic"] = ModelAllocation.from_str(config.critic.backend, name="critic")
    if config.actor.kl_ctl > 0 and config.ref is not None:
        allocs["ref"] = ModelAllocation.from_str(config.ref.backend, name="ref")

    # the scheduler: actor workers (one per GPU) first, then the other roles in the trainer's order;
    # a colocated role reuses its target's workers and must have as many replicas
    workers = _areal_schedule(config, allocs)

    # the SPMD launchers' path: the legacy allocation string and the cluster size
    legacy = _AllocationMode.from_str(config.allocation_mode)
    with tempfile.TemporaryDirectory() as root:
        config.cluster.fileroot = root
        config.cluster.name_resolve.nfs_record_root = root
        validate_config_for_distributed_launcher(config)
    return {"allocs": allocs, "legacy": legacy, "workers": workers, "config": config}


def _areal_schedule(config, allocs) -> dict[str, int]:
    from areal.api.cli_args import SchedulingSpec
    from areal.api.scheduler_api import Job
    from areal.infra.scheduler.local import LocalScheduler

    s = object.__new__(LocalScheduler)
    s._workers, s._colocated_roles = {}, {}
    # past the replica rule, fork mode would start processes on the target's GPUs: their ids suffice
    s.delete_workers = lambda *a, **k: None  # nothing was started
    s.fork_workers = lambda role, target_role, command=None: [f"{role}/{i}" for i in range(len(s._workers[target_role]))]

    class _W:  # a worker the scheduler started (its id is all the colocation path reads)
        def __init__(self, wid):
            self.worker = type("Worker", (), {"id": wid})()

    counts = {}
    order = [("actor", config.actor, allocs["actor"].parallel.world_size)]
    for role, eng in (("critic", config.critic), ("ref", config.ref)):
        if role in allocs:
            order.append((role, eng, allocs[role].parallel.world_size))
    order.append(("rollout", config.rollout, allocs["rollout"].parallel.dp_size))
    for role, eng, replicas in order:
        strategy = eng.scheduling_strategy
        if strategy.type == "colocation":
            s._prepare_worker_specs = lambda role, n, tasks: [SchedulingSpec() for _ in range(n)]
            ids = s.create_workers(Job(replicas=replicas, tasks=[SchedulingSpec()], scheduling_strategy=strategy,
                                       role=role))
        else:  # separate GPUs: the scheduler starts new workers (processes); their count is what we need
            ids = [f"{role}/{i}" for i in range(replicas)]
            s._workers[role] = [_W(i) for i in ids]
        counts[role] = len(ids)
    return counts


# ------------------------------------------------------------------------------------------ RLinf

def rlinf_start(cfg: dict, nodes: list[tuple[str, int]], base: dict) -> dict:
    """RLinf's config checks and its placement of every component on `nodes` ((accelerator model,
    GPUs) per node rank, as the plan lays them out). `base` holds the keys a user's RLinf config
    has that the export leaves to them (paths, model type)."""
    from omegaconf import open_dict

    from rlinf.config import validate_fsdp_cfg, validate_reasoning_cfg
    from rlinf.scheduler.cluster.cluster import Cluster
    from rlinf.scheduler.cluster.config import ClusterConfig
    from rlinf.scheduler.cluster.node import NodeGroupInfo, NodeInfo
    from rlinf.scheduler.hardware import HardwareInfo, HardwareResource
    from rlinf.utils.placement import HybridComponentPlacement, ModelParallelComponentPlacement

    merged = OmegaConf.merge(OmegaConf.create(base), OmegaConf.create(cfg))
    cluster_cfg = ClusterConfig.from_dict_cfg(merged.cluster)
    node_infos = []
    for rank, (model, gpus) in enumerate(nodes):
        labels = cluster_cfg.get_node_labels_by_rank(rank) if cluster_cfg.node_groups else []
        infos = [HardwareInfo(type="Accelerator", model=f"NV_GPU:{model}") for _ in range(gpus)]
        node_infos.append(NodeInfo(node_labels=labels, node_rank=rank, ray_id=f"n{rank}", node_ip=f"10.0.0.{rank}",
                                   num_cpus=64, python_interpreter_path="python", default_env_vars={}, env_vars={},
                                   hardware_resources=[HardwareResource(type="Accelerator", infos=infos)]))
    groups = []
    for g in cluster_cfg.node_groups or []:
        members = [n for n in node_infos if n.node_rank in g.node_ranks]
        groups.append(NodeGroupInfo(label=g.label, nodes=members, hardware_type=g.hardware_type,
                                    env_configs=g.env_configs, ignore_hardware=g.ignore_hardware))
    groups.append(NodeGroupInfo(label=NodeGroupInfo.DEFAULT_GROUP_LABEL, nodes=node_infos))
    groups.append(NodeGroupInfo(label=NodeGroupInfo.NODE_PLACEMENT_GROUP_LABEL, nodes=node_infos,
                                ignore_hardware=True))
    cluster = object.__new__(Cluster)  # RLinf's cluster as its Ray node probe would fill it
    cluster._nodes, cluster._num_nodes, cluster._node_groups = node_infos, len(node_infos), groups
    cluster._has_initialized = True

    OmegaConf.set_struct(merged, True)
    merged = validate_reasoning_cfg(merged)
    if merged.actor.training_backend == "fsdp":  # validate_cfg's FSDP check and config
        world = HybridComponentPlacement(merged, cluster).get_world_size("actor")
        assert merged.actor.global_batch_size % (merged.actor.micro_batch_size * world) == 0, (
            "actor.global_batch_size must be divisible by micro_batch_size x actor world size")
        with open_dict(merged):
            merged.actor = validate_fsdp_cfg(merged.actor)
    logging.disable(logging.INFO)  # its placement strategies log every placement at INFO
    try:
        placement = ModelParallelComponentPlacement(merged, cluster)
        placed = {}
        for comp in placement.components:
            procs = placement.get_strategy(comp).get_placement(cluster, isolate_accelerator=True)
            placed[comp] = [(p.cluster_node_rank, tuple(p.local_hardware_ranks), str(p.accelerator_type))
                            for p in procs]
    finally:
        logging.disable(logging.NOTSET)
    return {"placement": placement, "placed": placed, "config": merged}


os.environ.setdefault("RLINF_LOG_LEVEL", "WARNING")


# ------------------------------------------------------------------ a plan against what the executor asks

# what a user's RLinf config holds that an export leaves to them (paths, model type)
RLINF_BASE = {"runner": {"task_type": "reasoning", "seq_length": 2048},
              "rollout": {"model": {"model_path": "/models/user", "model_type": "qwen2.5"}, "return_logprobs": False,
                          "sglang": {}, "vllm": {}},
              "data": {"max_prompt_length": 1024}, "actor": {"model": {"model_path": "/models/user"}}}


def _role_gpus(plan, role: str) -> int:
    return sum(getattr(p, f"{role}_gpus") for p in plan.pools)


def _train_gpus(plan) -> int:
    return _role_gpus(plan, "train") + _role_gpus(plan, "shared")


def _planned(plan) -> dict:
    """The knobs of a plan an executor must run as they are (zero3 and fsdp are one level in the model)."""
    t = plan.train
    return {"sharding": "zero3" if t.sharding == "fsdp" else t.sharding, "offload": t.optimizer_offload,
            "recompute": t.recompute, "micro": t.micro_batch, "chunks": plan.execution.pipeline_chunks,
            "route": plan.weight_sync.route, "mode": (plan.execution.mode, plan.execution.staleness_bound),
            "rollout_tps": {p.rollout_tp for p in plan.pools if p.rollout_engines},
            "kv": plan.rollout.kv_mem_frac, "seqs": plan.rollout.max_num_seqs}


def assert_runs_as_planned(plan, runs: dict) -> None:
    want = _planned(plan)
    diff = {k: (want[k], runs[k]) for k in want if want[k] != runs[k]}
    assert not diff, f"runs other than planned (plan, executor): {diff}"


def check_verl(plan, ctx, workload, model_path) -> None:
    cfg = EXPORTERS["verl"](plan, ctx)
    config, trainer = verl_start(cfg, V.config_name(plan), model_path)
    asks = verl_asks(config, trainer)
    nodes = L.nodes(plan, ctx)
    colocated = plan.execution.mode == "colocated"
    t = plan.train
    role = L.SHARED if colocated else L.TRAIN
    assert asks["train_nodes"] == L.per_node(nodes, role), "trainer pool != the plan's training GPUs per node"
    assert sum(asks["train_nodes"]) == _train_gpus(plan)
    assert asks["rollout_nodes"] == ([] if colocated else L.per_node(nodes, L.ROLLOUT))
    assert (asks["actor"]["tp"], asks["actor"]["pp"], asks["actor"]["dp"]) == (t.tp, t.pp, t.dp)
    assert asks["actor"]["cp"] == 1
    if workload.has_critic:
        assert asks["critic"] == asks["actor"], "the critic does not train with the actor's layout"
    else:
        assert asks["critic"] is None
    assert asks["engines"] == plan.rollout_engines and asks["rollout_tp"] == L.rollout_tp(plan)[0]
    assert asks["mode"] == ("sync" if colocated else "separate_async")
    assert asks["hybrid"] == colocated
    if not colocated:
        assert config.trainer.v1.sampler.max_off_policy_threshold == plan.execution.staleness_bound + 1
    assert config.data.train_batch_size * config.actor_rollout_ref.rollout.n == workload.samples_per_step
    assert config.actor_rollout_ref.actor.ppo_mini_batch_size == config.data.train_batch_size  # one step
    actor, r = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout
    if actor.strategy == "megatron":
        sharding = "zero1" if actor.megatron.use_distributed_optimizer else "none"
        offload = bool(OmegaConf.select(actor, "optim.override_optimizer_config.optimizer_cpu_offload", default=False))
        recompute = actor.megatron.override_transformer_config.recompute_granularity == "full"
    else:  # FSDP: verl's optimizer_offload / offload_policy are not the plan's CPU Adam during the step
        fs = actor.fsdp_config
        sharding = "none" if fs.fsdp_size == 1 else ("zero3" if fs.reshard_after_forward else "zero2")
        offload, recompute = False, bool(config.actor_rollout_ref.model.enable_gradient_checkpointing)
    thr = config.trainer.v1.sampler.max_off_policy_threshold
    mode = ("colocated", 0) if config.trainer.v1.trainer_mode == "sync" else ("async", thr - 1)
    assert_runs_as_planned(plan, {"sharding": sharding, "offload": offload, "recompute": recompute,
                                  "micro": actor.ppo_micro_batch_size_per_gpu, "chunks": 1, "route": "direct",
                                  "mode": mode, "rollout_tps": {r.tensor_model_parallel_size},
                                  "kv": r.gpu_memory_utilization, "seqs": r.max_num_seqs})


def check_areal(plan, ctx, workload) -> None:
    got = areal_start(EXPORTERS["areal"](plan, ctx), workload.algorithm)
    a, t = got["allocs"], plan.train
    colocated = plan.execution.mode == "colocated"
    actor = a["actor"].parallel
    assert (actor.dp_size, actor.tp_size, actor.pp_size) == (t.dp, t.tp, t.pp)
    assert actor.world_size == _train_gpus(plan)
    r = a["rollout"].parallel
    assert (r.dp_size, r.tp_size) == (plan.rollout_engines, L.rollout_tp(plan)[0])
    assert r.world_size == (_role_gpus(plan, "shared") if colocated else _role_gpus(plan, "rollout"))
    if workload.has_critic:
        c = a["critic"].parallel
        assert (c.dp_size, c.tp_size, c.pp_size) == (t.dp, t.tp, t.pp)
        assert got["workers"]["critic"] == got["workers"]["actor"]
    assert got["workers"]["actor"] == _train_gpus(plan)
    assert got["workers"]["rollout"] == plan.rollout_engines
    cfg = got["config"]
    assert cfg.cluster.n_nodes * cfg.cluster.n_gpus_per_node == plan.used_gpus
    legacy = got["legacy"]  # the launchers' one-string form says the same
    assert (legacy.gen.world_size, legacy.train.world_size) == (r.world_size, actor.world_size)
    assert legacy.gen.tp_size == r.tp_size and legacy.train.tp_size == t.tp
    assert cfg.rollout.max_head_offpolicyness == plan.execution.staleness_bound
    assert cfg.gconfig.n_samples * cfg.train_dataset.batch_size == workload.samples_per_step
    act = cfg.actor
    sharding = "zero3" if a["actor"].backend == "fsdp" else (
        "zero1" if act.megatron.ddp.use_distributed_optimizer else "none")  # AReaL's FSDP always shards fully
    share = math.ceil(workload.samples_per_step / t.dp)
    longest = cfg.train_dataset.max_length + cfg.gconfig.max_new_tokens
    cap = act.mb_spec.max_tokens_per_mb
    micro = min(share, cap // longest if cap else math.ceil(share / act.mb_spec.n_mbs))
    k = cfg.rollout.max_head_offpolicyness
    mode = ("colocated", 0) if colocated else (("async", k) if k else ("disaggregated", 0))
    assert_runs_as_planned(plan, {"sharding": sharding, "offload": False, "recompute": act.gradient_checkpointing,
                                  "micro": micro, "chunks": 1, "route": "direct", "mode": mode,
                                  "rollout_tps": {r.tp_size}, "kv": cfg.vllm.gpu_memory_utilization,
                                  "seqs": cfg.vllm.max_num_seqs})


def check_rlinf(plan, ctx, workload) -> None:
    nodes = L.nodes(plan, ctx)
    got = rlinf_start(EXPORTERS["rlinf"](plan, ctx), [(n.gpu, n.size) for n in nodes], RLINF_BASE)
    pl, t = got["placement"], plan.train
    assert pl.is_collocated
    assert pl.actor_world_size == _train_gpus(plan) and pl.rollout_world_size == _train_gpus(plan)
    assert (pl.actor_tp_size, pl.actor_pp_size, pl.actor_dp_size) == (t.tp, t.pp, t.dp)
    assert (pl.rollout_tp_size, pl.rollout_dp_size) == (L.rollout_tp(plan)[0], plan.rollout_engines)
    if workload.has_critic:
        assert (pl.critic_world_size, pl.critic_tp_size, pl.critic_pp_size) == (pl.actor_world_size, t.tp, t.pp)
    # every process on GPUs of one node, and the node of the plan's pool for those GPUs
    for comp, procs in got["placed"].items():
        for node, gpus, _ in procs:
            assert max(gpus) < nodes[node].size, (comp, node, gpus)
            assert all(nodes[node].roles[g] == L.SHARED for g in gpus), (comp, node, gpus)
    merged = got["config"]
    assert merged.actor.global_batch_size == workload.samples_per_step  # one optimizer step
    act = merged.actor
    if act.training_backend == "megatron":
        sharding = "zero1" if act.optim.use_distributed_optimizer else "none"
        offload, recompute = bool(act.optim.optimizer_cpu_offload), act.model.recompute_granularity == "full"
    else:
        sharding = {"no_shard": "none", "shard_grad_op": "zero2", "full_shard": "zero3"}[act.fsdp_config.sharding_strategy]
        offload, recompute = False, bool(act.fsdp_config.gradient_checkpointing)
    assert_runs_as_planned(plan, {"sharding": sharding, "offload": offload, "recompute": recompute,
                                  "micro": merged.algorithm.training_batch_size_per_gpu, "chunks": 1,
                                  "route": "direct", "mode": ("colocated", 0),
                                  "rollout_tps": {merged.rollout.tensor_parallel_size},
                                  "kv": merged.rollout.gpu_memory_utilization,
                                  "seqs": merged.rollout.max_running_requests})



