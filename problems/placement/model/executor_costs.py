"""Per-step work of the executor that runs a plan, as its code and defaults do it.

A plan knows its executor (`plan.executor`, default this project's trainer). What differs between
executors, read off their code and configuration defaults at the version named (the version is part of
the key where it changes a default):

- `cuda_graphs`: whether the rollout engine decodes with CUDA graphs; without them every layer's kernels
  are launched from Python each decode step (`params.EAGER_DECODE_LAYER_S`). verl's rollout config set
  `enforce_eager: True` up to its 0.5 releases (verl v0.3.0 `trainer/config/ppo_trainer.yaml`; the
  fully_async / one_step_off documents of July 2025 still run eager) and `False` from 0.6 on
  (verl 0.9.1 `trainer/config/rollout/rollout.yaml`: enforce_eager False); AReaL 1.0.4
  (`areal/api/cli_args.py`: vLLM enforce_eager False, SGLang disable_cuda_graph False); EasyR1 v0.3
  (examples/config.yaml enforce_eager false); RLinf's math examples run SGLang with CUDA graphs.
- `old_logprob_pass`: a forward of the actor over the batch to recompute the behaviour log-probs. verl
  recomputes them every step (`compute_log_prob` in its trainer loop, the "old_log_prob" timer); RLinf
  too ("prev logprob" in its timing table); AReaL 1.0.4 does not by default (`recompute_logprob` False,
  `use_decoupled_loss` False: the engine's log-probs are used); this project's trainer computes them.
  A reference pass is the workload's (`kl_reference`, PPO), whatever the executor.
- `states_offloaded`: colocated training states leave the GPU for the engine's turn and come back. This
  project's trainer offloads them; verl 0.9.1's FSDP and Megatron engines keep them
  (`engine/fsdp.yaml`, `engine/megatron.yaml`: param_offload / optimizer_offload False), AReaL 1.0.4
  too (`offload` False); EasyR1 v0.3 offloads parameters and optimizer (its defaults) and reloads the
  parameters for each training-side phase (`param_phases`).
- `reward_overlaps_experience`: where the reward is scored. verl's trainer scores it on the driver between
  generation and the log-prob passes (`reward.launch_reward_fn_async` False by default), as EasyR1 v0.3.0 did;
  EasyR1 from v0.3.1 sends it to a Ray actor and collects it after the old log-prob and reference passes, so
  the per-sample cost `sample_s` is paid only beyond those passes (`experience_s` of model/training.py).
- the engine's sleep and wake of a colocated step (vLLM sleep level 1: weights to the host, KV cache
  freed; wake_up rebuilds the KV cache: verl `free_cache_engine: True`, `vllm_async_server.py` sleep /
  wake_up) and the weights' resharding into the engine: the weight copy is in `flow.switch_s` and
  `sync.sync_s`; what is not a copy (allocating the KV cache again, CUDA-graph state, the trainer's
  resharding calls, the driver's round trips) is the executor's fixed per-step cost `step_s`, and the
  reward scoring and the driver's per-sample data handling its per-sample cost `sample_s`, and the training
  loop's work per micro-batch beyond the model's compute its `microbatch_s` (model/__init__.py). All are
  fitted per executor family on published steps (`model/fitted.py`, data/fitted.yaml); 0 where no
  published step of that executor exists (then said as an assumption).
- prefill with chunking and preemption when the KV cache runs out, and the host's work per running
  sequence and decode step, are the engine's, in `model/rollout.py` (every executor runs vLLM or SGLang).
"""

from __future__ import annotations

from dataclasses import dataclass

# executor family -> the fitted per-step terms' family (EasyR1 is a verl fork with verl's trainer loop)
FAMILY = {"mosearch": "mosearch", "verl": "verl", "easyr1": "verl", "areal": "areal", "rlinf": "rlinf",
          "nemo-rl": "nemo-rl", "realhf": "areal"}


@dataclass(frozen=True)
class StepCosts:
    executor: str
    version: str
    cuda_graphs: bool = True
    old_logprob_pass: bool = True
    states_offloaded: bool = True
    param_phases: int = 0  # training-side phases that reload offloaded parameters (old log-probs, ref, update)
    source: str = ""
    # the reward is scored off the driver's thread while the old log-prob and reference passes run, and collected
    # after them (EasyR1 from v0.3.1: `reward_ref = self.reward_fn.compute_reward.remote(batch)` before the "old"
    # and "ref" timers, `ray.get(reward_ref)` under "adv", ray_trainer.py; #252): the per-sample cost hides
    # behind those passes; elsewhere (verl's `launch_reward_fn_async` False, EasyR1 v0.3.0) it runs before them
    reward_overlaps_experience: bool = False
    # the frozen reference's weights live on the host (verl's ref `param_offload`, EasyR1's ref FSDP CPU offload):
    # they take no GPU memory between its passes (a run's setting; the versions' defaults keep it on the GPU)
    reference_on_host: bool = False

    @property
    def family(self) -> str:
        return FAMILY.get(self.executor, self.executor)

    @property
    def key(self) -> str:
        return f"{self.executor} {self.version}".strip()


_T = StepCosts
# (executor, version) -> its step work; the first entry of an executor is the version a front is for
STEP_COSTS: dict[tuple[str, str], StepCosts] = {
    ("mosearch", ""): _T("mosearch", "", True, True, True, 0, "trainer/ (offloads states around the engine's turn)"),
    ("verl", "0.9.1"): _T("verl", "0.9.1", True, True, False, 0,
                          "rollout.yaml enforce_eager False; engine/fsdp.yaml, megatron.yaml offload False"),
    ("verl", "0.5"): _T("verl", "0.5", False, True, False, 0, "enforce_eager True until 2025-08 (one_step_off.md)"),
    ("verl", "0.3"): _T("verl", "0.3", False, True, False, 0, "v0.3.0 ppo_trainer.yaml enforce_eager True"),
    ("verl", "0.6"): _T("verl", "0.6", True, True, False, 0, "fully_async.md (Oct 2025): CUDA graphs"),
    ("verl", "0.6-fully-async"): _T("verl", "0.6-fully-async", True, False, False, 0,
                                    "recipe/fully_async_policy (fully_async.md): old_log_prob from the rollout "
                                    "(use_rollout_log_probs), no trainer pass"),
    ("verl", "f252da3"): _T("verl", "f252da3", True, True, True, 3,
                            "the GRPO benchmark script: SGLang with CUDA graphs, FSDP param + optimizer offload"),
    ("easyr1", "0.3.2"): _T("easyr1", "0.3.2", True, True, True, 3,
                            "EasyR1 v0.3.2 examples/config.yaml: enforce_eager false, offload_params/optimizer true; "
                            "reward scored in a Ray actor during the log-prob passes (ray_trainer.py)",
                            reward_overlaps_experience=True),
    ("easyr1", "0.3.0"): _T("easyr1", "0.3.0", True, True, True, 3,
                            "EasyR1 v0.3.0 examples/config.yaml: enforce_eager false, offload_params/optimizer true; "
                            "reward scored on the driver before the log-prob passes (ray_trainer.py)"),
    ("areal", "1.0.4"): _T("areal", "1.0.4", True, False, False, 0,
                           "cli_args.py: enforce_eager False, recompute_logprob False, offload False"),
    ("areal", "0.3"): _T("areal", "0.3", True, True, False, 0,
                         "AReaL v0.3 (boba2): SGLang with CUDA graphs; decoupled PPO recomputes the proximal log-probs"),
    ("realhf", "0.1"): _T("realhf", "0.1", True, True, False, 0,
                          "AReaL v0.1 scripts: enforce_eager False; its PPO recomputes the actor's log-probs"),
    ("rlinf", "0.3.0"): _T("rlinf", "0.3.0", True, True, False, 0, "SGLang with CUDA graphs; prev logprob pass"),
    ("nemo-rl", "0.4"): _T("nemo-rl", "0.4", True, True, False, 0, "vLLM with CUDA graphs; prev log-probs"),
}


def step_costs(executor: str | None, version: str | None = None) -> StepCosts:
    """The step work of `executor` at `version` (None: the version a front is searched for)."""
    name = executor or "mosearch"
    if version is not None and (name, version) in STEP_COSTS:
        return STEP_COSTS[(name, version)]
    for (n, _), sc in STEP_COSTS.items():
        if n == name:
            return sc
    raise KeyError(f"no step costs for executor {name!r}")


def executor_terms(ctx, colocated, samples):
    """(seconds a step's training stage adds, seconds its rollout stage adds) for the plan's executor: the fixed
    per-step cost (a colocated step's sleep / wake and KV-cache rebuild, the driver's round trips; one figure
    per family: the published rows do not separate the colocated part), and the per-sample reward scoring and
    data handling (fitted per executor family, `model/fitted.py`). `colocated` (N,) shapes the result."""
    fx = ctx.fitted_steps
    step = fx.get("step_s", 0.0) + 0.0 * colocated
    return step, samples * fx.get("sample_s", 0.0)
