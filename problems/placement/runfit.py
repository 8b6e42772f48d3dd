"""Every run refits: a measured `mosearch train` run refits the run-fitted terms of this machine's profile.

The device micro-benchmarks of a profile (matmul, bandwidth, vLLM prefill/decode, collectives) leave
out what only a whole run shows: the orchestration around each rollout call and sample, the training
loop's cost per step and per micro-batch, the rest of a weight sync beyond its broadcast. Those terms
(`RUN_FITTED` and the sync's) are refitted from every run on this machine, by phase:

- rollout phase: `rollout_call_s`, `rollout_sample_s`
- training phase: `train_call_s`, `microbatch_loop_s`, `dp_microbatch_s`, and `train_compute`, a factor
  on the time the profile's training grid gave (the model trains at mfu / it, kept <= 1, with
  `train_overhead_s` x it per micro-batch): what the runs achieved beside a micro-benchmark taken on
  a busy machine
- weight sync: `sync_overhead_s`, and `sync_gbs` (a rate: scaled by the inverse)

Each run is predicted with its own settings (`predict.predict_run`) with every term at 0 (`base`) and
with each term alone at its prior (the profile's figure before any run refitted it): its share of its
phase. Per phase the measured time is modelled as `base + sum_k s_k share_k`, one scale per term,
relative least squares over the profile's runs (the last MAX_RUNS), each scale bounded to
[1/BOUND, BOUND] and pulled toward 1: a refitted term stays within BOUND x its prior, so one disturbed
run cannot move the model far; terms no run tells apart move together; the device figures the
profile measured are never touched. The colocated switch has no run-fitted term (the model's switch of a
host-memory device is the engines' sleep and wake-up, measured by the profile): it is reported only.
"""

from __future__ import annotations

import datetime as _dt
import math
from pathlib import Path

import numpy as np

BOUND = 3.0
MAX_RUNS = 20
GROUPS = {
    "rollout": ("rollout_s", ("rollout_call_s", "rollout_sample_s"), ()),
    "training": ("train_s", ("train_call_s", "microbatch_loop_s", "dp_microbatch_s", "train_compute"), ()),
    "sync": ("sync_s", ("sync_overhead_s",), ("sync_gbs",)),
}
TERMS = tuple(k for _, secs, rates in GROUPS.values() for k in (*secs, *rates))
# profile figure -> the model's efficiency key where they differ (specs._apply_profiles)
EFF_KEY = {"sync_gbs": "sync_load_gbs"}
ZERO_RATE = 1e12  # GB/s: a rate this high takes no time (the "0" of a rate term)
# a factor on the training compute time (the model trains at mfu / it): it has no "0"; its share of the
# training phase is K / mfu, from the phase at the prior's mfu and at half of it
COMPUTE = "train_compute"


def with_terms(gpu: str, terms: dict, grid: dict | None = None):
    """Cluster -> Cluster with these run-fitted terms for `gpu` (for predict_run's `adjust`); `grid`: the
    profile's training-grid figures {mfu, train_overhead_s}, which `train_compute` divides and multiplies."""
    import dataclasses

    def adjust(cluster):
        eff = {g: dict(v) for g, v in cluster.efficiencies.items()}
        row = eff.setdefault(gpu, {})
        row.update({EFF_KEY.get(k, k): v for k, v in terms.items() if k != COMPUTE})
        if COMPUTE in terms and grid:
            row["mfu"] = min(1.0, grid["mfu"] / terms[COMPUTE])
            row["microbatch_s"] = grid["train_overhead_s"] * terms[COMPUTE]
        return dataclasses.replace(cluster, efficiencies=eff)
    return adjust


def zero_terms() -> dict:
    return {k: (ZERO_RATE if k in EFF_KEY else 0.0) for k in TERMS if k != COMPUTE}


def prior_terms(profile) -> dict:
    return {k: getattr(profile.fitted, k) for k in TERMS} | dict(profile.run_fit.get("prior") or {})


def measured_phases(summary: dict) -> dict:
    """The run's phases as the model's (async: the engines' generation, not the driver's wait)."""
    meas = summary.get("measured", {})
    out = {phase: meas.get(phase) for phase, _, _ in GROUPS.values()}
    if summary.get("mode") == "async":
        out["rollout_s"] = meas.get("rollout_gen_s")
        parts = [meas.get(f"sync_{k}_s") for k in ("gather", "transfer", "load")]
        out["sync_s"] = sum(parts) if None not in parts else None
    out["switch_s"] = meas.get("switch_s")
    return {k: float(v) for k, v in out.items() if v is not None and math.isfinite(v)}


def observe(plan_file, summary: dict, gpu: str, prior: dict, inputs=None, run_dir=None, measured=None,
            grid: dict | None = None) -> dict:
    """One run's observation: its measured phases, the model's with every run-fitted term at 0 (`base`)
    and each term's own share of its phase at its prior (`contrib`: group -> one figure per term; the
    j-th terms of all groups are predicted together, the phases being apart). The training compute's
    share: what the training phase gains at twice the prior's factor (half the mfu, twice the grid's
    fixed cost per micro-batch)."""
    from problems.placement.predict import predict_run

    compute = {COMPUTE: prior.get(COMPUTE, 1.0)}

    def terms_at(j: int | None) -> dict:
        out = zero_terms() | compute
        for _, secs, rates in GROUPS.values():
            names = [n for n in (*secs, *rates) if n != COMPUTE]
            if j is not None and j < len(names):
                out[names[j]] = prior[names[j]]
        return out

    def at(terms):
        return predict_run(plan_file, summary, inputs=inputs, adjust=with_terms(gpu, terms, grid))[0]
    base = at(terms_at(None))
    width = max(len([n for n in (*secs, *rates) if n != COMPUTE]) for _, secs, rates in GROUPS.values())
    each = [at(terms_at(j)) for j in range(width)]
    contrib = {group: [float(each[j][phase] - base[phase]) for j in range(len([n for n in (*secs, *rates) if n != COMPUTE]))]
               for group, (phase, secs, rates) in GROUPS.items()}
    m = min(1.0, grid["mfu"] / compute[COMPUTE]) if grid else 1.0
    share = 0.0
    if grid:  # at twice the factor (half the mfu, twice the fixed cost) the grid's time doubles: its share
        slow = at(terms_at(None) | {COMPUTE: 2 * grid["mfu"] / m})
        share = max(0.0, float(slow["train_s"] - base["train_s"]))
    contrib["training"].append(share)
    phases = [p for p, _, _ in GROUPS.values()] + ["switch_s"]
    base_out = {p: float(base[p]) for p in phases if p in base}
    base_out["train_s"] -= share
    return {"run": str(run_dir or ""), "plan": str(plan_file), "mode": summary.get("mode"),
            "steps": summary.get("steps"), "when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "measured": measured or measured_phases(summary), "base": base_out, "contrib": contrib,
            "mfu_at_prior": m}


RIDGE = 0.1  # pull of each term's scale toward 1 (its prior), relative to its share of the phase


def fit(runs: list[dict], prior: dict) -> dict:
    """{scales: {term: s}, terms, residual: {phase: (before, after)}} over `runs` (relative RMS errors).
    Per group: measured - base = sum_k s_k contrib_k, relative least squares (each run weighed by its own
    time), each s_k within [1/BOUND, BOUND] and pulled toward 1 by RIDGE, so terms a run cannot tell
    apart (the same calls and samples in every run) move together from their priors."""
    from scipy.optimize import lsq_linear

    scales, residual = {}, {}
    for group, (phase, secs, rates) in GROUPS.items():
        names = (*secs, *rates)
        rows = [r for r in runs if phase in r["measured"] and phase in r["base"] and r["measured"][phase] > 0
                and len(r.get("contrib", {}).get(group, [])) == len(names)]  # runs observed with every term
        if not rows:
            continue
        m = np.array([r["measured"][phase] for r in rows])
        b = np.array([r["base"][phase] for r in rows])
        C = np.array([(r["contrib"][group] + [0.0] * len(names))[:len(names)] for r in rows]) / m[:, None]
        y = (m - b) / m
        # the pull is in the units of the fit: each term's share of the phase (a term that adds little to
        # any run is pulled as weakly as its misfit pushes it)
        pull = RIDGE * np.maximum(np.sqrt(np.mean(C ** 2, axis=0)), 1e-12)
        A = np.vstack([C, np.diag(pull)])
        rhs = np.concatenate([y, pull])
        lo = np.full(len(names), 1 / BOUND)
        if COMPUTE in names:  # faster compute than mfu 1 is not a share of peak
            lo[names.index(COMPUTE)] = max(1 / BOUND, max((r["mfu_at_prior"] for r in rows if "mfu_at_prior" in r),
                                                           default=0.0))
        hi = np.maximum(np.full(len(names), BOUND), lo)
        sol = lsq_linear(A, rhs, bounds=(lo, hi)).x
        scales.update({k: float(v) for k, v in zip(names, sol)})
        rms = lambda pred: float(np.sqrt(np.mean((pred / m - 1) ** 2)))  # noqa: E731
        residual[phase] = (rms(b + C.sum(1) * m), rms(b + (C @ sol) * m))
    terms = {}
    for _, secs, rates in GROUPS.values():
        terms.update({k: prior[k] * scales.get(k, 1.0) for k in secs})
        terms.update({k: prior[k] / scales.get(k, 1.0) for k in rates})
    return {"scales": scales, "terms": terms, "residual": residual}


def refit(profile, observation: dict):
    """The profile with this run added and its run-fitted terms refitted; (profile, fit)."""
    prior = prior_terms(profile)
    runs = [*profile.runs, observation][-MAX_RUNS:]
    result = fit(runs, prior)
    fitted = profile.fitted.model_copy(update=result["terms"])
    run_fit = {"prior": prior, "bound": BOUND, "scales": result["scales"],
               "residual": {k: list(v) for k, v in result["residual"].items()}, "runs": len(runs),
               "updated": observation["when"]}
    return profile.model_copy(update={"fitted": fitted, "runs": runs, "run_fit": run_fit}), result


def summary_line(path, result: dict, n: int) -> str:
    parts = []
    for group, (phase, secs, rates) in GROUPS.items():
        if phase in result["residual"]:
            before, after = result["residual"][phase]
            each = ", ".join(f"{k} x{result['scales'][k]:.2f}" for k in (*secs, *rates))
            parts.append(f"{group}: {each} (residual {before * 100:.0f}% -> {after * 100:.0f}%)")
    return (f"refitted the run-fitted terms of {path} from {n} run(s) (each within {BOUND:g}x its prior): "
            + ("; ".join(parts) or "no phase measured") + "; `mosearch profile --show` lists them")


def describe_fit(profile) -> list[str]:
    """Lines for `mosearch profile --show`: what was fitted from which runs."""
    if not profile.runs:
        return ["run-fitted terms: as measured or shipped (no run of this machine refitted them yet)"]
    rf = profile.run_fit
    out = [f"run-fitted terms refitted from {len(profile.runs)} run(s), each term within {rf.get('bound', BOUND):g}x "
           f"its prior (last {rf.get('updated')}):"]
    for k in TERMS:
        out.append(f"  {k}: {rf['prior'].get(k, 0):.4g} -> {getattr(profile.fitted, k):.4g}")
    for phase, (before, after) in rf.get("residual", {}).items():
        out.append(f"  {phase}: relative RMS error over the runs {before * 100:.1f}% with the priors, "
                   f"{after * 100:.1f}% refitted")
    for r in profile.runs:
        meas = ", ".join(f"{k} {v:.3g}" for k, v in r["measured"].items())
        out.append(f"  run {r['run'] or '?'} ({r.get('mode')}, {r.get('steps')} steps, {r['when']}): {meas}")
    return out


def refit_after_run(plan_file, summary: dict, predicted: dict, inputs=None, run_dir=None,
                    measured: dict | None = None) -> str | None:
    """After `mosearch train`: refit this machine's profile of the device the run was predicted on;
    the line to print (None: nothing to refit). `measured`: the run's phases (default: the summary's
    means, as `measured_phases`; `mosearch train` gives the per-step medians of its metrics.jsonl)."""
    from problems.atomic import atomic_write_text
    from problems.placement import machine
    from problems.placement.profile import load_profile

    import yaml

    used = predicted.get("profiles") or {}
    if len(used) != 1:
        return None if not used else "run not refitted: its layout used profiles of several device types"
    (gpu, path), = used.items()
    profile = load_profile(path)
    if not machine.is_local(profile.device_type, lambda n: n if n == profile.device_type else None):
        return None
    here = machine.detect()
    if profile.machine and not machine.same_machine(profile.machine, here):
        return (f"run not refitted into {Path(path).name}: it was measured on {machine.describe(profile.machine)}, "
                f"this is {machine.describe(here)}")
    if not measured_phases(summary):
        return "run not refitted: it measured no phase"
    out = machine.cached_profile(profile.device_type)
    if out.is_file() and out.resolve() != Path(path).resolve():
        # a pinned profile (--profile) beside this machine's own: the runs of the pinned one stay out of it
        return (f"run not refitted: it was predicted with {path}, not this machine's profile {out} "
                "(runs refit the profile they are predicted with when it is this machine's own)")
    grid = {"mfu": profile.fitted.mfu, "train_overhead_s": profile.fitted.train_overhead_s}
    obs = observe(plan_file, summary, gpu, prior_terms(profile), inputs, run_dir, measured, grid)
    new, result = refit(profile, obs)
    # this machine's profile lives in the user's cache, never in a repository: a profile of this machine
    # used from elsewhere (the cluster's own) starts it, with the refit, and is read from there next
    out.parent.mkdir(parents=True, exist_ok=True)
    if not new.machine:
        new = new.model_copy(update={"machine": here})
    atomic_write_text(out, yaml.safe_dump(new.model_dump(mode="json"), sort_keys=False))
    return summary_line(out, result, len(new.runs))
