"""Checks of an export by the target's own config code (verl 0.9.1, areal 1.0.4, installed by
setup.sh) and, for RLinf (no package on the registry), by its documented placement rules."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mosearch.export import verl as V


# ------------------------------------------------------------------------------------------- verl

@lru_cache(maxsize=None)
def _verl_base(name: str) -> DictConfig:
    import verl

    return OmegaConf.load(Path(verl.__file__).parent / "trainer/config" / f"_generated_{name}.yaml")


def _leaves(d: dict, prefix: str = ""):
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            yield from _leaves(v, key)
        else:
            yield key, v


def _type_ok(default, value) -> bool:
    """A value may replace verl's default when it has the default's type (int for float is fine);
    a null default or an interpolation takes any scalar."""
    if default is None or isinstance(default, str) and default.startswith("${"):
        return value is None or isinstance(value, (bool, int, float, str))
    if value is None:
        return True
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, type(default))


def verl_config(cfg: dict, config_name: str, model_path: str) -> DictConfig:
    """Merge an export into verl's generated config in struct mode (an unknown key raises), check
    every value against the default's type, resolve interpolations, run verl's validate_config."""
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    base = _verl_base(config_name).copy()
    OmegaConf.set_struct(base, True)
    merged = OmegaConf.merge(base, OmegaConf.create(cfg))
    for key, value in _leaves(cfg):
        default = OmegaConf.select(base, key, throw_on_missing=False)
        raw = OmegaConf.to_container(base, resolve=False)
        for part in key.split("."):
            raw = raw[part]
        assert _type_ok(raw, value), f"verl {key}: {value!r} where verl has {raw!r} ({default!r})"
    # the user's model (verl loads its HF config for the critic): a local model, no hub here
    merged.actor_rollout_ref.model.path = model_path
    merged.critic.model.path = model_path
    OmegaConf.to_container(merged, resolve=True)  # every interpolation resolves
    algorithm = merged.algorithm
    use_ref = bool(algorithm.use_kl_in_reward or merged.actor_rollout_ref.actor.use_kl_loss)
    validate_config(merged, use_reference_policy=use_ref, use_critic=algorithm.adv_estimator == "gae")
    omega_conf_to_dataclass(merged.actor_rollout_ref.rollout)  # RolloutConfig's own checks
    return merged


def verl_separate_async_ok(m: DictConfig) -> None:
    """What verl/trainer/ppo/v1/trainer_separate_async.py asserts before it starts."""
    arr = m.actor_rollout_ref
    assert m.data.train_batch_size == m.trainer.v1.separate_async.parameter_sync_step * arr.actor.ppo_mini_batch_size
    assert arr.rollout.nnodes > 0 and arr.rollout.n_gpus_per_node > 0
    assert arr.rollout.checkpoint_engine.backend != "naive"
    # v1/replay_buffer.py: the threshold is null or a positive int
    t = m.trainer.v1.sampler.max_off_policy_threshold
    assert t is None or (isinstance(t, int) and t > 0)


# ------------------------------------------------------------------------------------------ AReaL

def areal_config(cfg: dict, algorithm: str):
    """Build AReaL's experiment dataclass from the export the way its launcher does
    (cli_args.to_structured_cfg, then OmegaConf.to_object runs the dataclasses' checks) and parse
    every backend string with alloc_mode.ModelAllocation."""
    from areal.api.alloc_mode import ModelAllocation
    from areal.api.cli_args import GRPOConfig, PPOConfig, to_structured_cfg

    given = OmegaConf.create({"experiment_name": "export", "trial_name": "t0", **cfg})
    structured = to_structured_cfg(given, GRPOConfig if algorithm == "grpo" else PPOConfig)
    # what stays missing is the user's own (names, paths, dataset): never a key the export sets
    for key in OmegaConf.missing_keys(structured):
        assert key not in ("actor.backend", "rollout.backend"), key
        OmegaConf.update(structured, key, "user-given")
    obj = OmegaConf.to_object(structured)
    allocs = {"rollout": ModelAllocation.from_str(obj.rollout.backend),
              "actor": ModelAllocation.from_str(obj.actor.backend)}
    return obj, allocs


# ------------------------------------------------------------------------------------------ RLinf

def _expand(ranges: str) -> list[int]:
    out: list[int] = []
    for part in str(ranges).split(","):
        a, _, b = part.partition("-")
        out += range(int(a), int(b or a) + 1)
    return out


def rlinf_placement_ok(cfg: dict) -> None:
    """RLinf's documented placement rules (docs concepts/placement.rst, guides/hetero.rst): GPU ranges
    inside the cluster, each component's GPUs one contiguous range (process ranks 0..n-1 map onto
    them in order, one GPU each: an integer multiple), no GPU given to two components, node groups
    covering every node once, and no process spanning two hardware types (one GPU per process)."""
    cl = cfg["cluster"]
    n_nodes = cl["num_nodes"]
    ranks = sorted(r for g in cl["node_groups"] for r in _expand(g["node_ranks"]))
    assert ranks == list(range(n_nodes)), "node groups must cover every node once"
    seen: set[int] = set()
    for comps, where in cl["component_placement"].items():
        if where == "all":
            continue
        gpus = _expand(where)
        assert gpus == list(range(gpus[0], gpus[-1] + 1)), f"{comps}: GPUs {where} are not one contiguous range"
        assert not seen & set(gpus), f"{comps}: GPUs given twice"
        seen |= set(gpus)
