"""The inverse of the exporters: a verl or AReaL config a user already runs, read back as a plan.

A config says how many GPUs each role gets and how they are split (TP, PP, DP, sharding), not which
GPU type they are: `place` puts the roles on the cluster's pools, in the order the user names
(`--rollout-on`, `--train-on`) or else in the cluster file's order, rollout first. Keys a config
leaves out take the target's own default (verl 0.9.1's `_generated_ppo_trainer.yaml`, AReaL
1.0.4's `areal/api/cli_args.py`), written next to each read below.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import yaml
from pydantic import ValidationError

from problems.errors import InputError
from problems.placement.plan import Plan, SpecRef
from problems.specio import validation_error
from problems.placement.names import COLOCATED
from mosearch.export import kernels as K


@dataclass(frozen=True)
class Setting:
    """A config value the workload also fixes, as the target runs it: the key as the user writes it,
    its value (the target's default when the config leaves it out) and what it is in the workload's
    terms (`means`, compared with the workload's value of `workload_key`)."""

    key: str
    value: object
    workload_key: str  # the workload file's: prompts_per_step, samples_per_prompt, prompt_len, response_len.max,
    #                    algorithm, kl_reference, max_staleness
    means: object
    default: bool = False  # the config leaves it out
    what: str | None = None  # what the value means, where the key does not say (a critic, a reference model)


def _setting(cfg: dict, key: str, default, workload_key: str, means=lambda v: v, what=None) -> Setting:
    v = _get(cfg, key)
    value = default if v is None else v
    return Setting(key, value, workload_key, means(value), v is None, what(value) if what else None)


@dataclass(frozen=True)
class Shape:
    """What a config fixes, before GPUs are given a pool."""

    mode: str  # colocated | disaggregated | async
    staleness: int
    rollout_gpus: int  # colocated: the shared GPUs
    rollout_tp: int
    dp: int
    tp: int
    pp: int
    sharding: str
    micro_batch: int
    recompute: bool
    optimizer_offload: bool
    kv_mem_frac: float
    max_num_seqs: int
    warnings: tuple[str, ...] = ()
    elementwise_kernels: str | None = None  # what the config's training runs; None: it does not say
    node_gpus: tuple[str, int] | None = None  # (the key, GPUs per node) the config asks nodes for; None: unsaid
    settings: tuple[Setting, ...] = ()  # what the config says of the workload (batch, lengths, algorithm...)
    updates: int = 1  # optimizer steps per step
    keys: dict[str, str] = field(default_factory=dict)  # the config key of a plan field: rollout_tp, tp
    ep: int = 1  # a mixture of experts' expert-parallel size (Megatron's expert_model_parallel_size)

    @property
    def train_gpus(self) -> int:
        return self.dp * self.tp * self.pp


# ------------------------------------------------------------------------------ config + overrides

def apply_overrides(cfg: dict, overrides: list[str], file: str) -> dict:
    """Hydra-style `a.b.c=value` (also `+a.b=v`, `++a.b=v`) on a nested dict; values parse as YAML."""
    for item in overrides:
        key, sep, raw = item.lstrip("+").partition("=")
        if not sep or not key:
            raise InputError(file, item, "not a hydra override", "key.path=value")
        try:
            value = yaml.safe_load(raw) if raw != "" else None
        except yaml.YAMLError:
            value = raw
        node = cfg
        parts = key.split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = value
    return cfg


def _get(cfg: dict, key: str, default=None):
    node = cfg
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return default if node is None else node


def _int(cfg: dict, key: str, default, file: str, at_least: int = 1) -> int:
    v = _get(cfg, key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < at_least:
        raise InputError(file, key, f"got {v!r}", f"an integer >= {at_least}")
    return v


def _frac(cfg: dict, key: str, default: float, file: str) -> float:
    """A memory share as a plan holds it (RolloutLayout.kv_mem_frac), checked under the config's key."""
    v = _get(cfg, key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 0.98:
        raise InputError(file, key, f"got {v!r}", "a share of GPU memory above 0 and at most 0.98")
    return float(v)


def _interp(cfg: dict, value):
    """`${a.b}` (the only interpolation the exports use) resolved against the config."""
    if isinstance(value, str) and value.startswith("${") and value.endswith("}"):
        return _get(cfg, value[2:-1], None)
    return value


# --------------------------------------------------------------------------------------------- verl

def _refuse(file: str, key: str, what: str) -> InputError:
    return InputError(file, key, what, "a full-parameter GRPO/PPO on GPUs: the plans' space")


def read_verl(cfg: dict, file: str) -> Shape:
    """`cfg` holds the config the user's YAML gives plus their overrides, and the hydra choices under
    `_hydra` (`config_name`, `model_engine`) from --config-name and group overrides."""
    arr = _get(cfg, "actor_rollout_ref", {})
    warn: list[str] = []
    hydra = cfg.get("_hydra") or {}
    # what verl cannot be planned as: LoRA adapters, Ascend NPUs (experts are: expert_model_parallel_size)
    lora = _get(cfg, "actor_rollout_ref.model.lora_rank", 0) or _get(cfg, "actor_rollout_ref.model.lora.rank", 0)
    if isinstance(lora, int) and lora > 0:
        raise _refuse(file, "actor_rollout_ref.model.lora_rank", f"LoRA (rank {lora}) trains adapters, not the model")
    if str(_get(cfg, "trainer.device", "cuda")).lower() == "npu":
        raise _refuse(file, "trainer.device", "runs on Ascend NPUs")
    if _get(cfg, "reward.reward_model.enable", False):
        warn.append("reward.reward_model.enable: the reward model's GPUs and time are not in the plan (rule-based "
                    "rewards are); scored without it.")
    # defaults: verl 0.9.1 _generated_ppo_trainer.yaml
    v1 = _get(cfg, "trainer.use_v1", True)
    mode_key = _get(cfg, "trainer.v1.trainer_mode", "sync") if v1 else "sync"
    hybrid = _get(cfg, "actor_rollout_ref.hybrid_engine", True)
    t_nodes = _int(cfg, "trainer.nnodes", 1, file)
    t_gpn = _int(cfg, "trainer.n_gpus_per_node", 8, file)
    train = t_nodes * t_gpn
    if mode_key == "separate_async":
        r_nodes = _int(cfg, "actor_rollout_ref.rollout.nnodes", 0, file)
        r_gpn = _int(cfg, "actor_rollout_ref.rollout.n_gpus_per_node", t_gpn, file)
        thr = _get(cfg, "trainer.v1.sampler.max_off_policy_threshold", 8)
        if isinstance(thr, bool) or not isinstance(thr, int) or thr < 1:
            raise InputError(file, "trainer.v1.sampler.max_off_policy_threshold", f"got {thr!r}",
                             "a positive integer (null, no bound, has no plan)")
        k = thr - 1  # a trajectory spanning thr versions lags thr - 1 (see export.verl.off_policy_threshold)
        mode, rollout = ("async" if k else "disaggregated"), r_nodes * r_gpn
        if hybrid:
            warn.append("hybrid_engine true: verl also generates on the training GPUs between steps; the plan "
                        "counts only the standalone rollout GPUs for generation.")
    elif mode_key in ("sync", "colocate_async"):
        if mode_key == "colocate_async":
            warn.append("colocate_async has no plan mode: read as colocated (synchronous), staleness 0.")
        mode, k, rollout = "colocated", 0, train
    else:
        raise InputError(file, "trainer.v1.trainer_mode", f"got {mode_key!r}", "sync, colocate_async or separate_async")
    actor = _get(arr, "actor", {})
    # the strategy: --config-name ppo_megatron_trainer or model_engine=megatron select Megatron's actor
    # config (trainer/config/model_engine/megatron.yaml); actor.strategy can say so too
    name = str(hydra.get("config_name") or "ppo_trainer").removesuffix(".yaml")
    engine = hydra.get("model_engine") or ("megatron" if name == "ppo_megatron_trainer" else "dp")
    strategy = _get(actor, "strategy", "megatron" if engine == "megatron" else "fsdp")
    if strategy != "megatron" and isinstance(actor.get("megatron"), dict) and actor["megatron"]:
        warn.append("actor_rollout_ref.actor.megatron.* given without model_engine=megatron or --config-name "
                    "ppo_megatron_trainer (verl's FSDP actor has no such keys and would refuse them): read as Megatron.")
        strategy = "megatron"
    if strategy == "megatron":
        tp = _int(cfg, "actor_rollout_ref.actor.megatron.tensor_model_parallel_size", 1, file)
        pp = _int(cfg, "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size", 1, file)
        cp = _int(cfg, "actor_rollout_ref.actor.megatron.context_parallel_size", 1, file)
        if cp > 1:
            raise InputError(file, "actor_rollout_ref.actor.megatron.context_parallel_size", f"context parallel {cp}",
                             "1: a plan splits data, tensors and pipeline stages, not sequences")
        ep = _int(cfg, "actor_rollout_ref.actor.megatron.expert_model_parallel_size", 1, file)
        sharding = "zero1" if _get(actor, "megatron.use_distributed_optimizer", True) else "none"
        recompute = _get(actor, "megatron.override_transformer_config.recompute_granularity") == "full"
        offload = bool(_get(actor, "optim.override_optimizer_config.optimizer_cpu_offload", False))
        # Megatron-core's TransformerConfig leaves both fusions off
        kernels, odd = K.from_megatron(bool(_get(actor, "megatron.override_transformer_config.apply_rope_fusion", False)),
                                       bool(_get(actor, "megatron.override_transformer_config.bias_activation_fusion",
                                                 False)))
        warn += [odd] if odd else []
    elif strategy in ("fsdp", "fsdp2"):
        tp = pp = ep = 1
        fsdp = _get(actor, "fsdp_config", {})
        if _get(fsdp, "fsdp_size", -1) == 1:
            sharding = "none"
        else:  # verl's default reshards after forward (ZeRO-3 / FSDP; written zero3, the simpler name)
            sharding = "zero3" if _get(fsdp, "reshard_after_forward", True) else "zero2"
        recompute = bool(_get(cfg, "actor_rollout_ref.model.enable_gradient_checkpointing", True))
        offload = bool(_get(fsdp, "offload_policy", False))
        # Hugging Face's eager modules unless Liger patches them (verl's default: use_liger false)
        kernels = "fused" if _get(cfg, "actor_rollout_ref.model.use_liger", False) is True else "eager"
        if _get(fsdp, "optimizer_offload", False):
            warn.append("fsdp_config.optimizer_offload moves the optimizer state out between phases only; the plan's "
                        "optimizer offload (during the step) is not it: read as no offload.")
    else:
        raise InputError(file, "actor_rollout_ref.actor.strategy", f"got {strategy!r}", "fsdp, fsdp2 or megatron")
    if train % (tp * pp):
        raise InputError(file, "trainer.n_gpus_per_node", f"{train} trainer GPUs are not a multiple of TP x PP "
                         f"= {tp * pp}", "nnodes x n_gpus_per_node divisible by TP x PP")
    if (train // pp) % ep:  # Megatron-core's expert groups tile one stage's ranks
        raise InputError(file, "actor_rollout_ref.actor.megatron.expert_model_parallel_size", f"EP {ep} does not "
                         f"divide the {train // pp} ranks of a pipeline stage", "a divisor of DP x TP")
    if _get(actor, "use_dynamic_bsz", False):
        # dynamic batch size packs sequences up to ppo_max_token_len_per_gpu tokens per micro-batch
        longest = _int(cfg, "data.max_prompt_length", 512, file) + _int(cfg, "data.max_response_length", 512, file)
        cap = _int(cfg, "actor_rollout_ref.actor.ppo_max_token_len_per_gpu", 16384, file)
        micro = max(1, cap // longest)
        warn.append(f"use_dynamic_bsz: micro-batches of up to {cap} tokens, read as {micro} longest samples "
                    f"({longest} tokens) per micro-batch.")
    else:
        micro = _get(actor, "ppo_micro_batch_size_per_gpu")
        if micro is None:
            raise InputError(file, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "missing",
                             "the micro-batch per GPU (verl requires it without use_dynamic_bsz)")
        micro = _int(cfg, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", 1, file)
    rtp = _int(cfg, "actor_rollout_ref.rollout.tensor_model_parallel_size", 2, file)
    # one optimizer step per mini-batch of prompts, per epoch; verl's validate_config (ActorConfig.validate)
    # refuses a mini-batch larger than the step's batch unless use_dynamic_bsz
    batch = _int(cfg, "data.train_batch_size", 1024, file)
    mini = _int(cfg, "actor_rollout_ref.actor.ppo_mini_batch_size", 256, file)
    if mini > batch and not _get(actor, "use_dynamic_bsz", False):
        said = "" if _get(cfg, "data.train_batch_size") is not None else " (verl's default)"
        raise InputError(file, "actor_rollout_ref.actor.ppo_mini_batch_size", f"{mini} prompts, more than "
                         f"data.train_batch_size {batch}{said}: verl refuses it", "at most data.train_batch_size")
    updates = -(-batch // mini) * _int(cfg, "actor_rollout_ref.actor.ppo_epochs", 1, file)
    kl = [key for key in ("actor_rollout_ref.actor.use_kl_loss", "algorithm.use_kl_in_reward") if _get(cfg, key)]
    settings = [
        _setting(cfg, "data.train_batch_size", 1024, "prompts_per_step"),
        _setting(cfg, "actor_rollout_ref.rollout.n", 1, "samples_per_prompt"),
        _setting(cfg, "data.max_prompt_length", 512, "prompt_len"),
        _setting(cfg, "data.max_response_length", 512, "response_len.max"),
        # gae trains a critic (PPO); the other estimators (grpo, rloo, reinforce_plus_plus...) have none
        _setting(cfg, "algorithm.adv_estimator", "gae", "algorithm", lambda v: "ppo" if v == "gae" else "grpo",
                 lambda v: "PPO with a critic" if v == "gae" else "no critic"),
        # a reference model runs for a KL term in the loss (verl's GRPO) or in the reward (PPO)
        _setting(cfg, (kl or ["actor_rollout_ref.actor.use_kl_loss"])[0], False, "kl_reference", lambda v: bool(kl),
                 lambda v: "a reference model" if kl else "no reference model: use_kl_in_reward is off too"),
    ]
    if mode != "colocated":
        settings.append(_setting(cfg, "trainer.v1.sampler.max_off_policy_threshold", 8, "max_staleness",
                                 lambda v: k, lambda v: f"staleness {k}"))
    # SGLang and vLLM alike take verl's gpu_memory_utilization (SGLang as mem_fraction_static)
    return Shape(mode=mode, staleness=k, rollout_gpus=rollout, rollout_tp=rtp, dp=train // (tp * pp), tp=tp, pp=pp,
                 sharding=sharding, micro_batch=micro, recompute=recompute, optimizer_offload=offload,
                 kv_mem_frac=_frac(cfg, "actor_rollout_ref.rollout.gpu_memory_utilization", 0.5, file),
                 max_num_seqs=_int(cfg, "actor_rollout_ref.rollout.max_num_seqs", 256, file),
                 warnings=tuple(warn), elementwise_kernels=kernels, settings=tuple(settings), updates=updates, ep=ep,
                 keys={"rollout_tp": "actor_rollout_ref.rollout.tensor_model_parallel_size",
                       "tp": "actor_rollout_ref.actor.megatron.tensor_model_parallel_size"},
                 node_gpus=("trainer.n_gpus_per_node", t_gpn) if _get(cfg, "trainer.n_gpus_per_node") is not None
                 else None)


# -------------------------------------------------------------------------------------------- AReaL

_ALLOC = re.compile(r"^(?P<backend>[a-z]+)(\[(?P<name>[A-Za-z_][A-Za-z0-9_]*)\])?:(?P<dims>(?:[dptce]\d+)+)$")


def parse_alloc(spec: str, file: str, key: str) -> tuple[str, dict[str, int]]:
    """One AReaL backend string, `backend[name]:` then d/p/t/c/e sizes (docs/en/reference/alloc_mode.md)."""
    text = str(spec).strip()
    if "(" in text or "attn:" in text or "ffn:" in text:
        raise _refuse(file, key, f"{spec!r} is a mixture-of-experts layout")
    m = _ALLOC.match(text)
    if not m:
        raise InputError(file, key, f"cannot read {spec!r}", "an AReaL backend string such as vllm:d2t4 or fsdp:d4t1")
    dims = {k: int(v) for k, v in re.findall(r"([dptce])(\d+)", m["dims"])}
    if dims.get("e", 1) != 1:
        raise _refuse(file, key, f"{spec!r} uses expert parallelism (a mixture-of-experts model)")
    if dims.get("c", 1) != 1:
        raise InputError(file, key, f"{spec!r} uses context parallelism", "d, p and t only (plans have no c)")
    return m["backend"], dims


def _areal_refusals(cfg: dict, file: str) -> None:
    for key in ("actor.use_lora", "rollout.use_lora"):
        if _get(cfg, key, False) is True:
            raise _refuse(file, key, "LoRA trains adapters, not the model")
    if _get(cfg, "cluster.n_gpus_per_node", 8) == 0:
        raise _refuse(file, "cluster.n_gpus_per_node", "0: a CPU-only template")
    for spec in _get(cfg, "actor.scheduling_spec", []) or []:
        env = (spec or {}).get("env_vars") or {}
        npu = [k for k in env if k.startswith(("HCCL_", "ASCEND", "ACL_")) or k == "PYTORCH_NPU_ALLOC_CONF"]
        if npu:
            raise _refuse(file, "actor.scheduling_spec.env_vars", f"runs on Ascend NPUs ({npu[0]})")
        if (spec or {}).get("gpu", 1) == 0:
            raise _refuse(file, "actor.scheduling_spec.gpu", "0: a CPU-only template")


def read_areal(cfg: dict, file: str) -> Shape:
    warn: list[str] = []
    _areal_refusals(cfg, file)
    roll_spec = _interp(cfg, _get(cfg, "rollout.backend"))
    actor_spec = _interp(cfg, _get(cfg, "actor.backend"))
    colocated = _get(cfg, "rollout.scheduling_strategy.type") == "colocation"
    legacy = _get(cfg, "allocation_mode")
    if (roll_spec is None or actor_spec is None) and legacy:
        sep = "|" if "|" in legacy else "+"
        parts = [s for s in str(legacy).split(sep) if s]
        if len(parts) != 2:
            raise InputError(file, "allocation_mode", f"cannot read {legacy!r}", "<rollout>+<actor> or <rollout>|<actor>")
        roll_spec, actor_spec = roll_spec or parts[0], actor_spec or parts[1]
        colocated = colocated or sep == "|"
    keys = {"rollout_tp": "rollout.backend" if _get(cfg, "rollout.backend") else "allocation_mode",
            "tp": "actor.backend" if _get(cfg, "actor.backend") else "allocation_mode"}
    if roll_spec is None or actor_spec is None:
        raise InputError(file, "rollout.backend" if roll_spec is None else "actor.backend", "missing",
                         "per-engine backend strings (or the legacy allocation_mode)")
    rb, rd = parse_alloc(roll_spec, file, "rollout.backend")
    ab, ad = parse_alloc(actor_spec, file, "actor.backend")
    if rb not in ("vllm", "sglang"):
        raise InputError(file, "rollout.backend", f"backend {rb!r}", "vllm or sglang")
    if rb == "sglang":
        warn.append("SGLang engines are scored as vLLM engines of the same TP and memory fraction "
                    "(sglang.mem_fraction_static; the model has one engine).")
    if ab not in ("fsdp", "megatron"):
        raise InputError(file, "actor.backend", f"backend {ab!r}", "fsdp or megatron")
    rtp, rgpus = rd.get("t", 1), rd.get("d", 1) * rd.get("t", 1) * rd.get("p", 1)
    dp, tp, pp = ad.get("d", 1), ad.get("t", 1), ad.get("p", 1)
    k = _int(cfg, "rollout.max_head_offpolicyness", 0, file, at_least=0)  # cli_args default 0
    if colocated:
        if k:
            warn.append(f"max_head_offpolicyness {k} on colocated engines has no plan mode: read as staleness 0.")
        mode, k, rgpus = "colocated", 0, dp * tp * pp
    else:
        mode = "async" if k else "disaggregated"
    # AReaL splits each rank's share of the batch into n_mbs micro-batches (cli_args MicroBatchSpec,
    # default 1), or more when max_tokens_per_mb caps a micro-batch's tokens
    n_mbs = _int(cfg, "actor.mb_spec.n_mbs", 1, file)
    prompts = _int(cfg, "train_dataset.batch_size", 1, file)
    samples = prompts * _int(cfg, "gconfig.n_samples", 1, file)
    micro = max(1, math.ceil(samples / dp / n_mbs))
    cap = _get(cfg, "actor.mb_spec.max_tokens_per_mb")
    if isinstance(cap, int) and cap > 0:
        # a sample is at most the prompt cap (train_dataset.max_length) plus gconfig.max_new_tokens
        longest = (_get(cfg, "train_dataset.max_length", 0) or 0) + _int(cfg, "gconfig.max_new_tokens", 16384, file)
        micro = max(1, min(micro, cap // longest))
    # the engine's memory share: SGLang's mem_fraction_static or vLLM's gpu_memory_utilization (both 0.9 by default)
    kv_key = "sglang.mem_fraction_static" if rb == "sglang" else "vllm.gpu_memory_utilization"
    # a reference model runs when both its engine is configured and the KL coefficient is above 0
    # (rl_trainer: `config.actor.kl_ctl > 0 and config.ref is not None`; kl_ctl defaults to 0.1)
    critic = cfg.get("critic") if isinstance(cfg.get("critic"), dict) else None  # PPOConfig.critic: None unless set
    kl_ctl = _get(cfg, "actor.kl_ctl", 0.1)
    ref = isinstance(cfg.get("ref"), dict) and bool(kl_ctl)
    settings = [
        _setting(cfg, "train_dataset.batch_size", 1, "prompts_per_step"),
        _setting(cfg, "gconfig.n_samples", 1, "samples_per_prompt"),
        _setting(cfg, "gconfig.max_new_tokens", 16384, "response_len.max"),
        Setting("critic.backend" if critic else "critic", _interp(cfg, critic.get("backend")) if critic else None,
                "algorithm", "ppo" if critic else "grpo", what="PPO with a critic" if critic else "no critic"),
        _setting(cfg, "actor.kl_ctl", 0.1, "kl_reference", lambda v: ref,
                 lambda v: "a reference model" if ref else
                 "no reference model: " + ("kl_ctl 0" if not v else "no ref engine configured"))
    ]
    if _get(cfg, "train_dataset.max_length") is not None:  # no default: prompts of any length
        settings.append(_setting(cfg, "train_dataset.max_length", None, "prompt_len"))
    if mode != "colocated":
        settings.append(_setting(cfg, "rollout.max_head_offpolicyness", 0, "max_staleness"))
    return Shape(mode=mode, staleness=k, rollout_gpus=rgpus, rollout_tp=rtp, dp=dp, tp=tp, pp=pp,
                 sharding="zero3" if ab == "fsdp" else "zero1", micro_batch=micro,
                 recompute=bool(_get(cfg, "actor.gradient_checkpointing", False)),
                 optimizer_offload=False,  # actor.offload: between phases only (rl_trainer's engine.offload)
                 kv_mem_frac=_frac(cfg, kv_key, 0.9, file),
                 max_num_seqs=_int(cfg, "vllm.max_num_seqs", 256, file),  # vLLMConfig default 256
                 warnings=tuple(warn), settings=tuple(settings), keys=keys,
                 updates=_int(cfg, "actor.ppo_n_minibatches", 4, file),  # PPOActorConfig default 4
                 node_gpus=("cluster.n_gpus_per_node", _int(cfg, "cluster.n_gpus_per_node", 8, file))
                 if _get(cfg, "cluster.n_gpus_per_node") is not None else None,
                 # the FSDP engine runs Hugging Face's eager modules (no switch); the Megatron engine's
                 # fusions are set by its model bridge, not the config
                 elementwise_kernels="eager" if ab == "fsdp" else None)


# ------------------------------------------------------------------------------------- export header

_NODE = re.compile(r"^#\s+node (\d+): (\S+), GPUs? \d+(?:-\d+)?: (.*)$")


def layout_from_header(text: str) -> dict[str, dict[str, int]] | None:
    """Per pool, the GPUs of each role an export's header lays out (`mosearch export` writes it), so an
    exported config comes back on the pools it was made for; None for a config without it."""
    out: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        m = _NODE.match(line)
        if not m:
            continue
        roles = out.setdefault(m[2], {"rollout_gpus": 0, "train_gpus": 0, "shared_gpus": 0})
        for part in m[3].split(","):
            name, _, count = part.strip().partition(" ")
            if name in ("rollout", "train", "shared"):
                roles[f"{name}_gpus"] += int(count)
    return out or None


READERS = {"verl": read_verl, "areal": read_areal}


# ------------------------------------------------------------------------------------------ placing

def place(shape: Shape, cluster, cluster_ref: SpecRef, workload_ref: SpecRef, plan_id: str,
          rollout_on: list[str] | None = None, train_on: list[str] | None = None, file: str | None = None,
          fixed: dict[str, dict[str, int]] | None = None) -> Plan:
    """Give the shape's GPUs pools of `cluster`: rollout first, in `rollout_on` order (default: the
    cluster's), then training in `train_on` order, each pool filled up to what is left of it."""
    pools = {p.id: p for p in cluster.pools}
    order = [p.id for p in cluster.pools]
    for arg, ids in (("--rollout-on", rollout_on), ("--train-on", train_on)):
        for pid in ids or []:
            if pid not in pools:
                raise InputError(file, arg, f"pool {pid!r} is not in cluster {cluster.name}", f"one of {', '.join(order)}")
    free = {pid: p.count for pid, p in pools.items()}
    roles = {pid: {"rollout_gpus": 0, "train_gpus": 0, "shared_gpus": 0} for pid in order}

    def take(n: int, where: list[str], role: str, what: str) -> None:
        for pid in where:
            if n == 0:
                break
            got = min(n, free[pid])
            if role == "rollout_gpus":  # whole engines only
                got -= got % shape.rollout_tp
            free[pid] -= got
            roles[pid][role] += got
            n -= got
        if n:
            raise InputError(file, what, f"{n} more GPUs than cluster {cluster.name} has free for it",
                             "a config that fits the cluster, or name pools with --rollout-on/--train-on")

    if fixed is not None:  # the pools an export's header names
        for pid, r in fixed.items():
            if pid not in pools:
                raise InputError(file, "layout", f"pool {pid!r} is not in cluster {cluster.name}",
                                 "the cluster the config was exported for")
            roles[pid] = dict(r)
    elif shape.mode == COLOCATED:
        take(shape.train_gpus, rollout_on or train_on or order, "shared_gpus", "trainer.nnodes")
    else:
        take(shape.rollout_gpus, rollout_on or order, "rollout_gpus", "rollout GPUs")
        take(shape.train_gpus, train_on or order, "train_gpus", "trainer GPUs")
    out = []
    for pid in order:
        r = roles[pid]
        p = pools[pid]
        engines = r["rollout_gpus"] + r["shared_gpus"]
        out.append({"pool": pid, "gpu": p.gpu.name, "region": p.region, **r,
                    "rollout_tp": shape.rollout_tp if engines else 1})
    data = {
        "plan_id": plan_id, "cluster": cluster_ref.model_dump(), "workload": workload_ref.model_dump(), "pools": out,
        "rollout": {"kv_mem_frac": shape.kv_mem_frac, "max_num_seqs": shape.max_num_seqs},
        "train": {"dp": shape.dp, "tp": shape.tp, "pp": shape.pp, "sharding": shape.sharding,
                  "micro_batch": shape.micro_batch, "recompute": shape.recompute,
                  "optimizer_offload": shape.optimizer_offload, "ep": shape.ep},
        "execution": {"mode": shape.mode, "staleness_bound": shape.staleness, "pipeline_chunks": 1},
        "weight_sync": {"route": "direct"},
    }
    try:
        return Plan.model_validate(data)
    except ValidationError as err:
        raise validation_error(file or "config", err) from None
