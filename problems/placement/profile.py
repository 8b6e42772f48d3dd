"""The profile file `mosearch profile` writes: its schema and loader.

Kept apart from the fit (calibration.py), which uses the performance model, so that reading a
cluster's profiles (specs.py) does not import the model.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from problems.specio import load_model

PROFILE_VERSION = 1


class Fitted(BaseModel):
    """What the model takes from a profile (per device type); see `fit`."""

    model_config = ConfigDict(extra="forbid")
    tflops: float = Field(gt=0, description="peak dense matmul TFLOP/s measured")
    bandwidth_tbs: float = Field(gt=0, description="memory bandwidth, TB/s (copy, read + write)")
    mfu: float = Field(gt=0, le=1, description="training FLOPs / (step time - overhead) / tflops")
    train_overhead_s: float = Field(ge=0, description="fixed seconds per training micro-batch step")
    prefill_eff: float = Field(gt=0, le=1)
    prefill_overhead_s: float = Field(ge=0, description="fixed seconds per generate call")
    decode_eff: float = Field(gt=0, le=1)
    decode_step_overhead_s: float = Field(ge=0, description="fixed seconds per decode step (all sequences)")
    intra_gbs: float | None = Field(default=None, gt=0, description="all-reduce bus bandwidth between workers")
    # alpha of the alpha-beta model and the parallel wrappers' per-collective cost (the profile's
    # collective grid; None = not measured: the model keeps its defaults)
    collective_latency_s: float | None = Field(default=None, ge=0, description="latency per ring step of a collective")
    p2p_latency_s: float | None = Field(default=None, ge=0, description="latency of one point-to-point send")
    tp_op_s: float | None = Field(default=None, ge=0, description="DTensor cost per TP collective beyond it")
    bcast_gbs: float | None = Field(default=None, gt=0, description="broadcast rate of one copy (largest message)")
    fsdp_op_s: float | None = Field(default=None, ge=0, description="FSDP cost per all-gather / reduce-scatter beyond it")
    sync_gbs: float = Field(gt=0, description="weight-sync rate beyond the broadcast: packing and the engines' reload")
    sync_overhead_s: float = Field(ge=0)
    switch_s: float = Field(ge=0, description="colocated context switch, both directions")
    # fitted from measured trainer runs (mosearch/bench/predictor_accuracy.py), not micro-benchmarks (RUN_FITTED)
    rollout_call_s: float = Field(default=0.0, ge=0, description="orchestration seconds per rollout call")
    rollout_sample_s: float = Field(default=0.0, ge=0, description="orchestration seconds per sample of an engine's share")
    train_call_s: float = Field(default=0.0, ge=0, description="orchestration seconds per training step")
    dp_microbatch_s: float = Field(default=0.0, ge=0, description="extra seconds per micro-batch of a rank when dp > 1")
    microbatch_loop_s: float = Field(default=0.0, ge=0, description="seconds per micro-batch of any rank's training "
                                     "loop beyond its forward and backward")
    # fitted from this machine's runs (problems/placement/runfit.py), not kept when the device is measured again:
    # the training time the runs took over what the training grid gave (the model trains at mfu /
    # train_compute, kept <= 1, with train_overhead_s x train_compute per micro-batch); 1 = as measured
    train_compute: float = Field(default=1.0, gt=0, description="factor on the training compute time the grid measured")


# the Fitted figures that come from measured trainer runs: re-profiling the device keeps them
RUN_FITTED = ("rollout_call_s", "rollout_sample_s", "train_call_s", "microbatch_loop_s", "dp_microbatch_s")


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: int = PROFILE_VERSION
    device_type: str
    host: dict = Field(default_factory=dict)
    # what it was measured on (problems/placement/machine.py): a cluster uses this machine's own profile
    # of a local device when the one it names was measured on another
    machine: dict = Field(default_factory=dict)
    model: dict = Field(default_factory=dict, description="the model the step and rollout grids ran")
    measurements: dict
    fitted: Fitted
    # measured trainer runs on this machine and the refit of the run-fitted terms they gave
    # (problems/placement/runfit.py): what `mosearch profile --show` prints
    runs: list[dict] = Field(default_factory=list)
    run_fit: dict = Field(default_factory=dict)



def load_profile(path: str | Path) -> Profile:
    return load_model(path, Profile, "a profile written by `mosearch profile`")
