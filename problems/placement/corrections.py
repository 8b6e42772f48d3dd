"""A cluster's calibration: per-GPU-type corrections to the model's parameters, fitted on the team's runs.

Applied on top of whatever the model's parameters are (catalog, generation priors, profiles, a job's
efficiencies), so the parameters themselves can change underneath without this layer changing. A
small, physically meaningful set, each bounded:

- `decode_eff`: factor on the engines' achieved share of memory bandwidth in decode (the result kept <= 1)
- `mfu`: factor on the training matmuls' achieved rate (and flash attention's). Not capped at 1: a
  profiled device's peak is its matmul grid's best, and its training steps can beat that rate (its
  profile's mfu then sits at 1 already), so a cap would leave a training phase predicted too slow as it is
- `sync`: factor on the time of a weight sync beyond the route's links (packing, the engines' reload,
  their fixed cost: the profile's sync figures; a type without them has none to scale)
- `rollout_host`: factor on the rollout's host work: the orchestration per rollout call and per sample
  (`rollout_call_s`, `rollout_sample_s`), the engine's per decode step and per running sequence
  (`decode_step_s`, `decode_seq_s`): what a faster or slower host, or another executor, changes
- `train_call_s`: seconds added per training step (its fixed cost: batch handling, logging, barriers)
- `switch_call_s`: seconds added to a colocated step's context switch (the engines' sleep and wake calls)
- `step_call_s`: seconds added per step outside the logged phases (the driver's rewards, advantages and
  metrics: what a run's step time holds beyond its rollout, training and sync)

Factors within [1/FACTOR_BOUND, FACTOR_BOUND]; added seconds within +-(the phase's mean measured time),
negative where the model's own fixed cost is too high (the sum is kept >= 0).
The cluster file names the file: `calibration: local.calibration.yaml` (relative to the cluster file).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from problems.specio import load_model

FACTOR_BOUND = 4.0
FACTORS = ("decode_eff", "mfu", "sync", "rollout_host")
ADDED = ("train_call_s", "dp_microbatch_s", "switch_call_s", "step_call_s")
HOST_TERMS = ("rollout_call_s", "rollout_sample_s", "decode_step_s", "decode_seq_s")
# the phase each correction acts on (what the fit and the report set it against)
PHASE_OF = {"decode_eff": "rollout_s", "rollout_host": "rollout_s", "mfu": "train_s", "train_call_s": "train_s",
            "sync": "sync_s", "switch_call_s": "switch_s", "step_call_s": "step_s",
            "dp_microbatch_s": "train_s"}


class Correction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    decode_eff: float = Field(default=1.0, ge=1 / FACTOR_BOUND, le=FACTOR_BOUND)
    mfu: float = Field(default=1.0, ge=1 / FACTOR_BOUND, le=FACTOR_BOUND)
    sync: float = Field(default=1.0, ge=1 / FACTOR_BOUND, le=FACTOR_BOUND)
    rollout_host: float = Field(default=1.0, ge=1 / FACTOR_BOUND, le=FACTOR_BOUND)
    train_call_s: float = 0.0
    dp_microbatch_s: float = 0.0
    switch_call_s: float = 0.0
    step_call_s: float = 0.0


class Calibration(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: int = 1
    cluster: str = Field(description="the cluster's name it was fitted on")
    gpu_types: dict[str, Correction]
    runs: list[dict] = Field(default_factory=list, description="the runs it was fitted on (what `mosearch calibrate` read)")
    report: dict = Field(default_factory=dict, description="predicted vs measured per run and phase, before and after")


def load_calibration(path: str | Path) -> Calibration:
    return load_model(path, Calibration, "a calibration written by `mosearch calibrate`")


def apply(row: dict, corr: dict | None) -> dict:
    """A pool's model parameters with its GPU type's corrections (build_context's row)."""
    if not corr:
        return row
    out = dict(row)
    out["decode_eff"] = min(1.0, out["decode_eff"] * corr.get("decode_eff", 1.0))
    f = corr.get("mfu", 1.0)  # a rate factor, uncapped (module doc)
    out["mfu"] = out["mfu"] * f
    if out.get("attn_eff"):
        out["attn_eff"] = out["attn_eff"] * f
    g = corr.get("sync", 1.0)  # time x g: rates / g, fixed cost x g
    out["sync_load_gbs"] = out.get("sync_load_gbs", 0.0) / g
    out["sync_send_gbs"] = out.get("sync_send_gbs", 0.0) / g
    out["sync_overhead_s"] = out.get("sync_overhead_s", 0.0) * g
    h = corr.get("rollout_host", 1.0)
    for k in HOST_TERMS:
        out[k] = out.get(k, 0.0) * h
    for k in ADDED:
        out[k] = max(0.0, out.get(k, 0.0) + corr.get(k, 0.0))
    return out


def layout_features(plan) -> dict:
    """What a calibration's runs are compared on: mode, GPU types, engines, training layout."""
    t = plan.train
    return {"mode": plan.execution.mode, "gpus": sorted({p.gpu for p in plan.pools if p.used_gpus}),
            "engines": plan.rollout_engines, "ranks": t.dp * t.tp * t.pp, "tp": t.tp, "pp": t.pp,
            "sharding": t.sharding}


def calibrated_layouts(cluster) -> list[dict]:
    """The layout_features of the runs a cluster's calibration was fitted on ([] when it has none, or its file
    cannot be read: nothing to compare against). `cluster`: a loaded Cluster, or None."""
    from problems.errors import InputError

    if cluster is None or not cluster.calibration:
        return []
    try:
        return [r["layout"] for r in load_calibration(cluster.calibration).runs if r.get("layout")]
    except (InputError, OSError):
        return []


def extrapolation(plan, measured: list[dict]) -> str | None:
    """A line when `plan` is far from every run a calibration was fitted on (`measured`: their
    layout_features): another mode, GPU type, TP/PP or sharding, or engines / training ranks beyond
    twice the measured ones. None when a measured run is near it (or nothing is measured)."""
    if not measured:
        return None
    f = layout_features(plan)

    def near(m: dict) -> list[str]:
        why = [f"{k} {f[k]} (measured {m[k]})" for k in ("mode", "tp", "pp", "sharding") if f[k] != m[k]]
        if not set(f["gpus"]) <= set(m["gpus"]):
            why.append(f"GPU types {', '.join(f['gpus'])} (measured {', '.join(m['gpus'])})")
        for k in ("engines", "ranks"):
            if not m[k] / 2 <= f[k] <= m[k] * 2:
                why.append(f"{f[k]} {k} (measured {m[k]})")
        return why
    reasons = [near(m) for m in measured]
    if any(not r for r in reasons):
        return None
    best = min(reasons, key=len)
    return (f"extrapolated: far from the {len(measured)} calibrated run(s) of this cluster (nearest differs in "
            + "; ".join(best) + "): its calibrated figures are less certain")
