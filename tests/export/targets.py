"""Exports started as printed: each is written as `mosearch export --out FILE` writes it, its configuration
composed exactly as the command in its header composes it, then run through the executor's own start-up
code as far as it goes without GPUs, with the part that needs them named:

- verl 0.9.1: hydra compose of the file (defaults list on verl's `ppo_trainer` / `ppo_megatron_trainer`)
  with the command's overrides; `verl.trainer.main_ppo.main` itself for `verl_main` (its own
  `validate_config`: the Megatron or FSDP actor dataclass's `validate`, the critic's); the v1 trainer
  class of `trainer_mode` (its `__init__`) and `_init_resource_pool_mgr`. Not run: `create_resource_pool`
  and on (Ray placement groups of GPUs).
- AReaL 1.0.4: `load_expr_config` on `ENTRY --config FILE` (its entry's loader: hydra compose of the file
  and the user's base config, its dataclasses), then `PPOTrainer.__init__` itself with AReaL's own
  LocalScheduler: tokenizer, scheduler, allocations, `_validate_cfg`, engine controllers, data loader, up to
  the point where a worker process would load the model on its GPUs; then every other role (critic, ref,
  rollout) through its own controller's `initialize` and the scheduler's `create_workers` (GPU allocation,
  colocation). Not run: the worker processes (`areal.infra.rpc.rpc_server` loading the model on GPUs).
  The Ray scheduler (multi-node plans) needs a Ray cluster with the GPUs; the local scheduler, given the
  plan's GPUs as one machine's, allocates them by the same Job specs in its place.
- RLinf 0.3.0: hydra compose (version_base 1.1, as its entry) of the file and the user's base config;
  `rlinf.config.validate_cfg` whole (Megatron: `validate_megatron_cfg`, the model's HF config, the
  vocabulary-per-TP check; FSDP: its batch and FSDP checks; the PPO critic's); `ModelParallelComponentPlacement`
  and every component's `get_placement` on the plan's nodes described with RLinf's own NodeInfo /
  NodeGroupInfo (what its Ray node probe collects). Not run: Ray and the Megatron model build
  (`megatron` is a GPU package not installed here: `validate_megatron_cfg` imports one flag from
  RLinf's Megatron model manager, `HAVE_FUSCO`, which is given as RLinf computes it: whether `fusco` is
  importable). RLinf 0.3.0 pins transformers 4.x (its extras), whose configs carry `rope_theta`; under
  transformers 5 its HF-config reader gets the attribute from `rope_parameters`, as 4.x would give it.

Each check returns what the executor would ask for (GPUs, DP, TP/PP, critic layout, engines) and the
tests compare it with the plan. A refusal raises; a missing executor package raises ImportError (an error
of the environment, never a refusal).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import logging
import math
import os
import shlex
import sys
import tempfile
import types
from functools import lru_cache
from pathlib import Path

import yaml
from omegaconf import OmegaConf

from mosearch.export import render
from mosearch.export import launch as X
from mosearch.export import layout as L
from mosearch.export import verl as V


class NeedsGPU(Exception):
    """The start-up reached the part that needs GPUs (named in the message): everything before it ran."""


# ---------------------------------------------------------------------------------------- writing

def write_export(target: str, plan, ctx, folder: Path) -> Path:
    """The export as `mosearch export PLAN --to TARGET --out FILE` writes it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{target}-{plan.plan_id}.yaml"
    path.write_text(render(target, plan, ctx, path))
    return path


def printed_command(path: Path) -> list[list[str]]:
    """The command lines of the export's header (its `start it with` block), as shell words."""
    lines, on = [], False
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line[1:].strip()
        if text.startswith("start it with"):
            on = True
        elif on and (text == "notes:" or text.startswith("(")):
            break
        elif on:
            lines.append(text.split(": ", 1)[1] if text.startswith("node ") else text)
    return [shlex.split(c.replace('"$PWD"', str(path.parent))) for c in lines]


def _flag(words: list[str], name: str) -> str:
    return words[words.index(name) + 1]


def _overrides(words: list[str], model_path: str) -> list[str]:
    """The key=value words after the flags, the model placeholder set to the stand-in model."""
    out, skip = [], False
    for w in words:
        if skip:
            skip = False
        elif w.startswith("--"):
            skip = True
        elif "=" in w:
            out.append(w.replace(X.MODEL_PLACEHOLDER, model_path))
    return out


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
    """A nested dict as `key=value` command-line overrides; keys inside the open `override_*_config`
    dicts are added with `++` (a key verl's YAML does not list, such as apply_rope_fusion, needs it)."""
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
    import verl
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer/config"), version_base=None)


def verl_compose(config_name: str, overrides: list[str]):
    """hydra compose of verl's own `config_name` with command-line overrides (as main_ppo gets them)."""
    from hydra import compose

    _verl_hydra()
    return compose(config_name=config_name, overrides=list(overrides))


_COMPOSE_DIR: list = [None]  # the config directory hydra is initialised on (compose caches verl's files)


def verl_compose_file(path: Path, overrides: list[str]):
    """hydra compose exactly as `python -m verl.trainer.main_ppo --config-path DIR --config-name NAME
    OVERRIDES` composes (main_ppo's hydra.main: version_base None); the directory is initialised once."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    folder = str(path.resolve().parent)
    if _COMPOSE_DIR[0] != folder or not GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
        initialize_config_dir(config_dir=folder, version_base=None)
        _COMPOSE_DIR[0] = folder
    _verl_hydra.cache_clear()  # verl_compose re-initialises on its own directory when next used
    return compose(config_name=path.stem, overrides=list(overrides))


def verl_main(path: Path, model_path: str, chdir: Path):
    """Runs the header's command itself: `verl.trainer.main_ppo.main` (or mosearch.export.launch_verl's
    main around it) under hydra with the printed arguments, up to `run_ppo` (which starts Ray and the
    GPU workers; replaced by a capture). Returns the config main validated and passed on."""
    from verl.trainer import main_ppo

    from mosearch.export import launch_verl

    (words,) = [w for w in printed_command(path) if "ray" != w[0]]
    got: dict = {}

    def capture(config, task_runner_class):
        got["config"], got["runner"] = config, task_runner_class

    args = words[3:]
    args = [a.replace(X.MODEL_PLACEHOLDER, model_path) for a in args]
    old_run, old_argv, old_cwd = main_ppo.run_ppo, sys.argv, os.getcwd()
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    _COMPOSE_DIR[0] = None
    _verl_hydra.cache_clear()
    main_ppo.run_ppo = capture
    os.chdir(chdir)  # hydra.main writes its outputs/ folder under the working directory
    try:
        if words[2] == "mosearch.export.launch_verl":
            launch_verl.main(args)
        else:
            sys.argv = [main_ppo.__file__, *args]
            main_ppo.main()
    finally:
        main_ppo.run_ppo, sys.argv = old_run, old_argv
        os.chdir(old_cwd)
        GlobalHydra.instance().clear()
    assert got["runner"] is main_ppo.TaskRunnerV1, "the export does not run verl's v1 trainer"
    return got["config"]


def verl_start(config):
    """After main's validate_config: the v1 trainer of the config's mode (its __init__) and its pools.
    Returns (config, trainer, actor dataclass) for the checks."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)  # what validate_config validated
    omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    if need_critic(config):
        omega_conf_to_dataclass(config.critic)
    OmegaConf.resolve(config)
    trainer = get_trainer_cls(config.trainer.v1.trainer_mode)(config=config)
    trainer._init_resource_pool_mgr()
    return config, trainer, actor


def verl_asks(config, trainer) -> dict:
    """What verl would start: GPUs per node of each pool, Megatron/FSDP layout of actor and critic,
    rollout engines (llm_server.py: world size // (TP x DP x PP) replicas, hybrid or standalone)."""
    from verl.trainer.ppo.utils import need_critic

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

def areal_base(folder: Path, model_path: str, algorithm: str) -> dict:
    """What the user's `areal_base.yaml` holds that the export leaves to them, as AReaL's
    examples/math/gsm8k_{grpo,ppo}.yaml hold it: names, shared paths, dataset, model, the reference (and
    PPO's critic) on the actor's backend."""
    root = str(folder / "areal-root")
    named = {"experiment_name": "${experiment_name}", "trial_name": "${trial_name}"}
    spec = {"scheduling_spec": "${actor.scheduling_spec}"}
    base = {
        "cluster": {"fileroot": root, "name_resolve": {"type": "nfs", "nfs_record_root": f"{root}/name_resolve"}},
        "tokenizer_path": "${actor.path}",
        "actor": {**named, "path": model_path, "scheduling_spec": [
            {"task_type": "worker", "port_count": 2, "gpu": 1, "mem": 32, "cmd": "python3 -m areal.infra.rpc.rpc_server"}]},
        "ref": {**named, **spec, "backend": "${actor.backend}", "path": "${actor.path}"},
        "rollout": {**named, **spec},
        "train_dataset": {"path": "openai/gsm8k", "type": "rl"},
        **{k: {**named, "fileroot": "${cluster.fileroot}"} for k in ("saver", "recover", "evaluator", "stats_logger")},
    }
    if algorithm == "ppo":
        base["critic"] = {**named, **spec, "backend": "${actor.backend}", "is_critic": True, "path": "${actor.path}"}
    return base


def areal_load(path: Path, algorithm: str):
    """`load_expr_config` on the header's command (`ENTRY --config FILE`): AReaL's entry's own loader."""
    from areal.api.cli_args import GRPOConfig, PPOConfig, load_expr_config

    (words,) = printed_command(path)
    assert words[:2] == ["python3", X.AREAL_ENTRY] and words[2] == "--config", words
    argv = [words[1], *words[2:]]
    config, _ = load_expr_config(argv, GRPOConfig if algorithm == "grpo" else PPOConfig)
    return config


def areal_spmd(config):
    """What AReaL's SPMD launchers (`python3 -m areal.infra.launcher.local|ray ENTRY --config FILE`) check
    of the same file: the legacy allocation string and the cluster size."""
    from areal.api.alloc_mode import _AllocationMode
    from areal.infra.utils.launcher import validate_config_for_distributed_launcher

    validate_config_for_distributed_launcher(config)
    return _AllocationMode.from_str(config.allocation_mode)


class _Process:
    """A worker process the local scheduler would have started (it is not: its model needs GPUs)."""

    pid, returncode = None, None

    def poll(self):
        return None


@contextlib.contextmanager
def _gpuless_scheduler(n_gpus: int, record: dict):
    """AReaL's LocalScheduler with the plan's GPUs, stopped where a worker process would start: its
    GPU allocation, colocation and Job handling run; spawning the RPC server is recorded (no process);
    `get_workers`, the first call that needs the started workers, raises NeedsGPU."""
    from areal.infra.scheduler import local
    from areal.trainer import rl_trainer

    class GPUlessScheduler(local.LocalScheduler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, gpu_devices=list(range(n_gpus)), **kwargs)

        def _configure_worker(self, worker_info, worker_rank):  # an HTTP call to the started worker
            record.setdefault("configured", []).append(worker_info.worker.id)

        def get_workers(self, role, timeout=None):
            record.setdefault("gpus", {})[role] = [w.gpu_devices for w in self._workers.get(
                self._colocated_roles.get(role, role), [])]
            raise NeedsGPU(f"AReaL: the {role} workers (areal.infra.rpc.rpc_server) load the model on their GPUs")

        def fork_workers(self, role, target_role, command=None):  # colocated, fork mode: via the target's
            # running workers (an HTTP call to each); the replica rule was checked before
            record.setdefault("gpus", {})[role] = [w.gpu_devices for w in self._workers[target_role]]
            raise NeedsGPU(f"AReaL: the {role} workers are forked by the running {target_role} workers")

        def _cleanup_workers(self, workers):  # nothing was started
            pass

        def delete_workers(self, role=None, reverse_order=False):
            pass

    def spawn(cmd, *args, **kwargs):
        record.setdefault("spawned", []).append(cmd)
        return _Process()

    def tms_env():  # colocated roles: the LD_PRELOAD hook of torch_memory_saver, a CUDA library
        record["tms"] = True
        return real_tms() if importlib.util.find_spec("torch_memory_saver") else {}

    real_tms = local.get_tms_env_vars
    saved = (local.run_with_streaming_logs, local.time, rl_trainer.LocalScheduler, rl_trainer.RayScheduler)
    local.get_tms_env_vars = tms_env
    local.run_with_streaming_logs = spawn
    # it sleeps 0.1 s after each spawn to see whether the process died at once: there is no process
    local.time = types.SimpleNamespace(**{**{k: getattr(local.time, k) for k in ("time", "monotonic")},
                                          "sleep": lambda s: None})
    rl_trainer.LocalScheduler = rl_trainer.RayScheduler = GPUlessScheduler
    try:
        yield
    finally:
        local.run_with_streaming_logs, local.time, rl_trainer.LocalScheduler, rl_trainer.RayScheduler = saved
        local.get_tms_env_vars = real_tms


GPU_PACKAGES = ("mbridge", "megatron", "transformer_engine", "torch_memory_saver")  # AReaL's, CUDA-only


def areal_start(config, n_gpus: int) -> dict:
    """PPOTrainer.__init__ as the entry calls it, then the other roles' scheduling, as far as CPU allows.
    `stops` names each point where a GPU (or a CUDA-only package) was needed, in order."""
    from areal.api.alloc_mode import ModelAllocation
    from areal.trainer.ppo.actor import PPOActorController
    from areal.trainer.ppo.critic import PPOCriticController
    from areal.trainer.rl_trainer import PPOTrainer

    record: dict = {"stops": []}
    dataset = [{"messages": [{"role": "user", "content": "1+1?"}], "answer": "2"}] * max(
        4 * config.train_dataset.batch_size, 8)
    trainer = PPOTrainer.__new__(PPOTrainer)

    def until_gpu(call, *args, **kwargs) -> bool:
        """Runs `call` up to the GPU part; True when it stopped there (the stop is recorded)."""
        try:
            call(*args, **kwargs)
        except NeedsGPU as err:
            record["stops"].append(str(err))
            return True
        except ModuleNotFoundError as err:
            if err.name not in GPU_PACKAGES:
                raise  # a package this environment should have: an error, not a stop
            record["stops"].append(f"AReaL imports {err.name} (a CUDA-only package, not installed here)")
            return True
        return False

    with _gpuless_scheduler(n_gpus, record):
        # the trainer as the entry builds it: __init__ runs until the actor's workers would load the model
        # (FSDP) or until AReaL's Megatron engine module is imported (megatron / mbridge)
        assert until_gpu(PPOTrainer.__init__, trainer, config, train_dataset=dataset), \
            "PPOTrainer.__init__ started without GPUs"
        if getattr(trainer, "actor", None) is None:  # stopped at the Megatron engine's import: its controllers
            # are AReaL's generic ones (as_controller); the engine class is only sent to the workers
            trainer.actor = PPOActorController(train_engine=None, config=config.actor, scheduler=trainer.scheduler)
            trainer.actor.create_process_group(parallel_strategy=trainer.actor_alloc.parallel)
            assert until_gpu(trainer.actor.initialize, addr=None, ft_spec=None, role="actor")
            trainer.critic = trainer.ref = None
            if config.critic is not None:
                trainer.critic = PPOCriticController(train_engine=None, config=config.critic, scheduler=trainer.scheduler)
                trainer.critic.create_process_group(
                    parallel_strategy=ModelAllocation.from_str(config.critic.backend, name="critic").parallel)
            if config.actor.kl_ctl > 0 and config.ref is not None:
                trainer.ref = PPOActorController(train_engine=None, config=config.ref, scheduler=trainer.scheduler)
                trainer.ref.create_process_group(
                    parallel_strategy=ModelAllocation.from_str(config.ref.backend, name="ref").parallel)
        # the roles __init__ schedules after the actor, each by its own controller (ft_spec is read past
        # get_workers, where each stops)
        for role in ("critic", "ref"):
            engine = getattr(trainer, role, None)
            if engine is not None:
                assert until_gpu(engine.initialize, addr=None, ft_spec=None, role=role)
        assert until_gpu(trainer._init_rollout, config.rollout, is_eval=False, lora_path=None)
    allocs = {"actor": trainer.actor_alloc, "rollout": trainer.rollout_alloc}
    if config.critic is not None:
        allocs["critic"] = ModelAllocation.from_str(config.critic.backend, name="critic")
    if trainer.ref is not None:
        allocs["ref"] = ModelAllocation.from_str(config.ref.backend, name="ref")
    return {"allocs": allocs, "gpus": record["gpus"], "stops": record["stops"], "config": config,
            "trainer": trainer, "tms": record.get("tms", False)}


# ------------------------------------------------------------------------------------------ RLinf

def hf_config_dir(arch, folder: Path) -> str:
    """A Hugging Face config.json of the workload's architecture (what RLinf reads of the model)."""
    folder.mkdir(parents=True, exist_ok=True)
    qwen = arch.qkv_bias
    cfg = {"architectures": ["Qwen2ForCausalLM" if qwen else "LlamaForCausalLM"], "model_type": "qwen2" if qwen else "llama",
           "vocab_size": arch.vocab, "hidden_size": arch.hidden, "intermediate_size": arch.ffn,
           "num_hidden_layers": arch.layers, "num_attention_heads": arch.heads, "num_key_value_heads": arch.kv_heads,
           "max_position_embeddings": arch.max_context or 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
           "tie_word_embeddings": arch.tied_embeddings, "attention_dropout": 0.0,
           **({"head_dim": arch.head_dim} if arch.head_dim else {})}
    (folder / "config.json").write_text(json.dumps(cfg))
    return str(folder)


def rlinf_base(model_path: str) -> dict:
    """What the user's `rlinf_base.yaml` holds that the export leaves to them (as RLinf's
    examples/reasoning/config/math/*.yaml: runner, model paths and type, precision, optimizer)."""
    trained = {"model": {"precision": "bf16", "activation": "swiglu", "normalization": "rmsnorm",
                         "model_path": model_path},
               "optim": {"optimizer": "adam", "lr": 1e-6}, "lr_sched": {"lr_decay_style": "constant"},
               "megatron": {"use_hf_ckpt": True}, "group_name": "ActorGroup"}
    return {"runner": {"task_type": "reasoning", "seq_length": 2048, "logger": {"log_path": "logs"}},
            "algorithm": {"group_size": 8, "adv_type": "grpo"},
            "rollout": {"model": {"model_path": model_path, "model_type": "qwen2.5"}, "return_logprobs": False,
                        "sglang": {}, "vllm": {}, "group_name": "RolloutGroup"},
            "data": {"max_prompt_length": 1024, "rollout_batch_size": 8},
            "actor": trained,
            "critic": {**trained, "use_critic_model": False, "group_name": "CriticGroup"},
            "reward": {"group_name": "RewardGroup"}}


# kept for tests that merge an export onto a base without a file (tests/export/test_kernels.py)
RLINF_BASE = rlinf_base("/models/user")


def rlinf_compose(path: Path):
    """hydra compose as `python examples/reasoning/main_grpo.py --config-path DIR --config-name NAME`
    composes (its hydra.main: version_base 1.1)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    (words,) = printed_command(path)
    assert words[:2] == ["python", X.RLINF_ENTRY], words
    GlobalHydra.instance().clear()
    _COMPOSE_DIR[0] = None
    _verl_hydra.cache_clear()
    try:
        with initialize_config_dir(config_dir=_flag(words, "--config-path"), version_base="1.1"):
            return compose(config_name=_flag(words, "--config-name"), overrides=_overrides(words, ""))
    finally:
        GlobalHydra.instance().clear()


def _rlinf_cluster(cluster_cfg, nodes: list[tuple[str, int]]):
    """RLinf's Cluster as its Ray node probe fills it, for the plan's nodes ((GPU model, GPUs) by rank)."""
    from rlinf.scheduler.cluster.cluster import Cluster
    from rlinf.scheduler.cluster.node import NodeGroupInfo, NodeInfo
    from rlinf.scheduler.hardware import HardwareInfo, HardwareResource

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
    cluster = object.__new__(Cluster)
    cluster._nodes, cluster._num_nodes, cluster._node_groups = node_infos, len(node_infos), groups
    cluster._has_initialized = True
    return cluster


@contextlib.contextmanager
def _rlinf_without_gpus(cluster):
    """RLinf's singleton Cluster set to the probed one (validate_cfg calls `Cluster(cluster_cfg=...)`, which
    returns it without starting Ray); Megatron's model manager module, which needs the `megatron` GPU
    package, given as the one flag validate_megatron_cfg reads from it; transformers 5 configs given
    `rope_theta` as transformers 4.x (RLinf 0.3.0's pin) exposes it."""
    import importlib.util

    import transformers
    from rlinf.scheduler.cluster.cluster import Cluster

    name = "rlinf.hybrid_engines.megatron.megatron_model_manager"
    shim = None
    if importlib.util.find_spec("megatron") is None and name not in sys.modules:
        shim = types.ModuleType(name)
        shim.HAVE_FUSCO = importlib.util.find_spec("fusco") is not None  # as the module computes it
        sys.modules[name] = shim
    real_from_pretrained = transformers.AutoConfig.from_pretrained

    def from_pretrained(*args, **kwargs):
        cfg = real_from_pretrained(*args, **kwargs)
        rope = getattr(cfg, "rope_parameters", None) or {}
        if not hasattr(cfg, "rope_theta") and "rope_theta" in rope:
            cfg.rope_theta = rope["rope_theta"]
        return cfg

    had = "_instance" in Cluster.__dict__
    saved = Cluster.__dict__.get("_instance")
    Cluster._instance = cluster
    transformers.AutoConfig.from_pretrained = from_pretrained
    try:
        yield
    finally:
        transformers.AutoConfig.from_pretrained = real_from_pretrained
        if had:
            Cluster._instance = saved
        else:
            del Cluster._instance
        if shim is not None:
            del sys.modules[name]


def rlinf_start_config(merged, nodes: list[tuple[str, int]]) -> dict:
    """RLinf's validate_cfg (whole) and its placement of every component on `nodes`."""
    from rlinf.config import validate_cfg
    from rlinf.scheduler.cluster.config import ClusterConfig
    from rlinf.utils.placement import ModelParallelComponentPlacement

    cluster = _rlinf_cluster(ClusterConfig.from_dict_cfg(merged.cluster), nodes)
    logging.disable(logging.INFO)  # RLinf logs every placement and config step at INFO
    try:
        with _rlinf_without_gpus(cluster):
            merged = validate_cfg(merged)
            placement = ModelParallelComponentPlacement(merged, cluster)
            placed = {}
            for comp in placement.components:
                procs = placement.get_strategy(comp).get_placement(cluster, isolate_accelerator=True)
                placed[comp] = [(p.cluster_node_rank, tuple(p.local_hardware_ranks), str(p.accelerator_type))
                                for p in procs]
    finally:
        logging.disable(logging.NOTSET)
    return {"placement": placement, "placed": placed, "config": merged}


def rlinf_start(cfg: dict, nodes: list[tuple[str, int]], base: dict) -> dict:
    """An export dict merged onto `base` (no file), then RLinf's checks and placement."""
    merged = OmegaConf.merge(OmegaConf.create(base), OmegaConf.create(cfg))
    return rlinf_start_config(merged, nodes)


os.environ.setdefault("RLINF_LOG_LEVEL", "WARNING")


# ------------------------------------------------------------------ a plan against what the executor asks

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


@dataclasses.dataclass
class Workdir:
    """Where a session writes exports (one folder per executor, with the user's base config beside them)."""

    root: Path
    model_path: str  # a local Hugging Face model (config + tokenizer) standing in for the user's weights

    def folder(self, target: str, workload=None) -> Path:
        """verl: one folder; AReaL and RLinf: one per workload, its base config (the user's) beside the exports."""
        f = self.root / target / (workload.name if workload is not None and target != "verl" else "")
        if f.is_dir():
            return f
        f.mkdir(parents=True)
        if target == "areal":
            (f / "areal_base.yaml").write_text(yaml.safe_dump(areal_base(f, self.model_path, workload.algorithm)))
        if target == "rlinf":  # RLinf reads the model's HF config (Megatron): the workload's architecture
            (f / "rlinf_base.yaml").write_text(yaml.safe_dump(rlinf_base(hf_config_dir(workload.model, f / "model"))))
        return f


def check_verl(plan, ctx, workload, work: Workdir, via_main: bool = False) -> dict:
    path = write_export("verl", plan, ctx, work.folder("verl"))
    (words,) = [w for w in printed_command(path) if w[0] != "ray"]
    if via_main:
        config = verl_main(path, work.model_path, work.folder("verl"))
    else:
        assert words[:3] == ["python", "-m", "mosearch.export.launch_verl" if X.needs_role_pinning(plan, ctx)
                             else "verl.trainer.main_ppo"], words
        config = verl_compose_file(Path(_flag(words, "--config-path")) / f"{_flag(words, '--config-name')}.yaml",
                                   _overrides(words, work.model_path))
    config, trainer, actor_cfg = verl_start(config)
    megatron = V.megatron(plan)
    assert type(actor_cfg).__name__ == ("McoreActorConfig" if megatron else "FSDPActorConfig"), type(actor_cfg)
    asks = verl_asks(config, trainer)
    nodes = L.nodes(plan, ctx)
    colocated = plan.execution.mode == "colocated"
    t = plan.train
    role = L.SHARED if colocated else L.TRAIN
    assert asks["train_nodes"] == L.per_node(nodes, role), "trainer pool != the plan's training GPUs per node"
    assert sum(asks["train_nodes"]) == _train_gpus(plan)
    assert asks["rollout_nodes"] == ([] if colocated else L.per_node(nodes, L.ROLLOUT))
    assert (asks["actor"]["tp"], asks["actor"]["pp"], asks["actor"]["dp"]) == (t.tp, t.pp, t.dp)
    assert asks["actor"]["strategy"] == ("megatron" if megatron else "fsdp2")
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
    return {"config": config, "path": path}


def check_areal(plan, ctx, workload, work: Workdir) -> dict:
    path = write_export("areal", plan, ctx, work.folder("areal", workload))
    config = areal_load(path, workload.algorithm)
    got = areal_start(config, plan.used_gpus)
    a, t = got["allocs"], plan.train
    stops = got["stops"]  # __init__ ran to the actor's workers, or to the Megatron engine's import
    assert stops[0] == "AReaL: the actor workers (areal.infra.rpc.rpc_server) load the model on their GPUs" or (
        t.pp > 1 and stops[0] in ("AReaL imports mbridge (a CUDA-only package, not installed here)",
                                  "AReaL imports megatron (a CUDA-only package, not installed here)")), stops
    assert got["tms"] == (plan.execution.mode == "colocated")  # colocated workers get the offload hook
    colocated = plan.execution.mode == "colocated"
    actor = a["actor"].parallel
    assert (actor.dp_size, actor.tp_size, actor.pp_size) == (t.dp, t.tp, t.pp)
    assert actor.world_size == _train_gpus(plan)
    r = a["rollout"].parallel
    assert (r.dp_size, r.tp_size) == (plan.rollout_engines, L.rollout_tp(plan)[0])
    assert r.world_size == (_role_gpus(plan, "shared") if colocated else _role_gpus(plan, "rollout"))
    # the scheduler's allocation: one GPU per actor worker; rollout engines beside them (colocated) or on
    # TP GPUs each of their own; every role on distinct GPUs from the roles it is not colocated with
    gpus = got["gpus"]
    assert [len(g) for g in gpus["actor"]] == [1] * _train_gpus(plan)
    if workload.has_critic:
        c = a["critic"].parallel
        assert (c.dp_size, c.tp_size, c.pp_size) == (t.dp, t.tp, t.pp)
        assert gpus["critic"] == gpus["actor"]
    if "ref" in a:
        assert gpus["ref"] == gpus["actor"]
    if colocated:
        assert gpus["rollout"] == gpus["actor"] and len(gpus["rollout"]) == plan.rollout_engines
    else:
        assert [len(g) for g in gpus["rollout"]] == [r.tp_size] * plan.rollout_engines
        used = [i for g in gpus["actor"] + gpus["rollout"] for i in g]
        assert len(set(used)) == len(used) == plan.used_gpus, "roles share GPUs the plan keeps apart"
    cfg = got["config"]
    assert cfg.cluster.n_nodes * cfg.cluster.n_gpus_per_node == plan.used_gpus
    legacy = areal_spmd(cfg)  # the file also serves AReaL's SPMD launchers (areal.infra.launcher.*)
    assert (legacy.gen.world_size, legacy.train.world_size) == (r.world_size, actor.world_size)
    assert legacy.gen.tp_size == r.tp_size and legacy.train.tp_size == t.tp
    assert cfg.scheduler.type == ("ray" if len(L.nodes(plan, ctx)) > 1 else "local")
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
    return {"config": cfg, "path": path, "gpus": gpus}


def check_rlinf(plan, ctx, workload, work: Workdir) -> dict:
    path = write_export("rlinf", plan, ctx, work.folder("rlinf", workload))
    merged = rlinf_compose(path)
    nodes = L.nodes(plan, ctx)
    got = rlinf_start_config(merged, [(n.gpu, n.size) for n in nodes])
    pl, t = got["placement"], plan.train
    merged = got["config"]
    megatron = t.tp > 1 or t.pp > 1 or workload.algorithm == "ppo"
    assert merged.actor.training_backend == ("megatron" if megatron else "fsdp")
    if megatron:  # validate_megatron_cfg and the HF config ran: the vocabulary the TP check divided
        assert merged.actor.model.padded_vocab_size == workload.model.vocab
        assert merged.actor.megatron.make_vocab_size_divisible_by == 1
    assert pl.is_collocated
    assert pl.actor_world_size == _train_gpus(plan) and pl.rollout_world_size == _train_gpus(plan)
    assert (pl.actor_tp_size, pl.actor_pp_size, pl.actor_dp_size) == (t.tp, t.pp, t.dp)
    assert (pl.rollout_tp_size, pl.rollout_dp_size) == (L.rollout_tp(plan)[0], plan.rollout_engines)
    if workload.has_critic:
        assert (pl.critic_world_size, pl.critic_tp_size, pl.critic_pp_size) == (pl.actor_world_size, t.tp, t.pp)
        assert merged.critic.model.padded_vocab_size == workload.model.vocab  # its validate_megatron_cfg ran
    # every process on GPUs of one node, and the node of the plan's pool for those GPUs
    for comp, procs in got["placed"].items():
        for node, gpus, _ in procs:
            assert max(gpus) < nodes[node].size, (comp, node, gpus)
            assert all(nodes[node].roles[g] == L.SHARED for g in gpus), (comp, node, gpus)
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
    return {"config": merged, "path": path}


CHECKS = {"verl": check_verl, "areal": check_areal, "rlinf": check_rlinf}


def new_workdir(model_path: str | None = None) -> Workdir:
    """A fresh folder for exports, with the local tiny model as the user's weights."""
    from trainer.models.tiny import build_tiny

    root = Path(tempfile.mkdtemp(prefix="mosearch-exports-"))
    return Workdir(root, model_path or str(build_tiny(root / "model")))
