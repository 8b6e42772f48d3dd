"""Parameters fitted on published RL steps, and the error bands their held-out residuals give.

`problems/placement/data/fitted.yaml` holds them with the command that wrote them
(`python -m mosearch.bench.rl_fit --write`) and its declared training set. A small set of physically
meaningful parameters, fitted by bounded least squares on log step-time ratios (mosearch/bench/rl_fit.py):

- `mfu_scale[generation]`: the training matmul efficiency of a GPU generation relative to the catalog's
  (per-layer fits for Hopper, the generation prior elsewhere), as RL executors' training phases reach it;
- `decode_eff_scale[generation]`: the rollout engine's achieved share of memory bandwidth relative to
  the catalog's (vidur operator fits for Hopper, the prior elsewhere);
- `decode_seq_s`: the engine's host time per running sequence and decode step (params.DEFAULTS);
- `executors[family]`: fixed seconds per step (`step_s`: the engine's sleep / wake and KV-cache rebuild,
  the driver's round trips), per sample (`sample_s`: reward scoring, the driver's data handling) and per
  training micro-batch of a rank (`microbatch_s`: the training loop's per-pass work beyond the model's
  compute: FSDP's gathers and hooks, offloads, Python) of each executor family with published steps
  (model/executor_costs.py).

A generation with no published row keeps its prior (scale 1) and says so (`efficiency_note`). Bands:
per executor family and GPU generation, the 10th and 90th percentiles of the leave-one-source-out log
residuals of the training set's rows log(predicted step / measured step); a plan's throughput lies in [thr * exp(lo), thr * exp(hi)]
as far as those residuals go. A family / generation with fewer than 3 held-out rows takes all rows' band.

Ties (`tied`, read by `mosearch pick`): two plans share part of their error, so their throughput ratio is
judged by the held-out error of the training set's published pairs (10th and 90th percentiles of
log(predicted ratio / published ratio), each pair predicted with its source left out): `bands.same_hardware`
(pairs on one GPU type) for two plans of one executor family on the same GPU generations,
`bands.other_hardware` (pairs on two GPU types) otherwise; without 3 pairs, whether their bands overlap.

Layer: calibration (a profile, per-cluster corrections) applies on top of these values; these apply on top
of the catalog. `disabled()` builds contexts without them (the fit itself starts from the catalog).
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

import numpy as np
import yaml

DATA = Path(__file__).resolve().parents[1] / "data" / "fitted.yaml"
_STATE = {"enabled": True}


@functools.lru_cache(maxsize=1)
def load() -> dict:
    if not DATA.exists():
        return {}
    return yaml.safe_load(DATA.read_text()) or {}


@contextlib.contextmanager
def disabled():
    """Contexts built inside take the catalog's figures alone (what the fit starts from)."""
    old = _STATE["enabled"]
    _STATE["enabled"] = False
    try:
        yield
    finally:
        _STATE["enabled"] = old


def _params() -> dict:
    return load().get("params", {}) if _STATE["enabled"] else {}


def apply_type(row: dict, gpu) -> None:
    """Scale a GPU type's catalog efficiencies (`row`, in place) by its generation's fitted factors."""
    p = _params()
    if not p:
        return
    gen = getattr(gpu, "generation", None)
    ms = p.get("mfu_scale", {}).get(gen)
    if ms is not None:  # attention kernels move with the matmuls' efficiency (capped at mfu by build_context)
        row["attn_eff"] = min(float(row.get("attn_eff") or getattr(gpu, "attn_eff", None) or row["mfu"]) * ms, 1.0)
        row["mfu"] = min(float(row["mfu"]) * ms, 1.0)
    ds = p.get("decode_eff_scale", {}).get(gen)
    if ds is not None:
        row["decode_eff"] = min(float(row["decode_eff"]) * ds, 1.0)
    if "decode_seq_s" in p and gen is not None:
        row["decode_seq_s"] = float(p["decode_seq_s"])


def step_terms(family: str) -> dict:
    return dict(_params().get("executors", {}).get(family, {}))


def efficiency_note(gpu) -> str | None:
    """One line saying where a GPU type's efficiencies come from beyond the catalog: the published rows
    they were fitted on, or that none exist and the prior is used as it stands."""
    d = load()
    if not d:
        return None
    gen = getattr(gpu, "generation", None)
    src = d.get("gpu_sources", {})
    if gpu.name in src:
        return f"{gpu.name}: efficiencies fitted on published runs ({src[gpu.name]}), generation {gen}"
    fitted_gens = set(d.get("params", {}).get("mfu_scale", {}))
    if gen in fitted_gens:
        return (f"{gpu.name}: no published run of its own in the training set: efficiencies of generation {gen} as fitted on "
                f"{', '.join(sorted(d.get('generation_sources', {}).get(gen, [])))}")
    return (f"{gpu.name}: no published run of this type or generation in the training set ({gen}): its catalog / prior "
            f"efficiencies as they stand (mfu {gpu.mfu:.2f}, decode_eff {gpu.decode_eff:.2f}, "
            f"prefill_eff {gpu.prefill_eff:.2f}); only the engine's host time per sequence and step is the fitted one")


def band(family: str, generations) -> tuple[float, float]:
    """(lo, hi) log residuals (predicted / measured step) of the executor family on the plan's GPU
    generations: the widest over the generations a plan uses."""
    b = load().get("bands", {})
    if not b:
        return 0.0, 0.0
    lo, hi = [], []
    for g in generations:
        v = b.get(f"{family}/{g}") or b.get(f"all/{g}") or b.get("all")
        lo.append(v[0])
        hi.append(v[1])
    return (min(lo), max(hi)) if lo else tuple(b["all"][:2])


def throughput_band(thr, family: str, generations) -> tuple[np.ndarray, np.ndarray]:
    """The throughput range the held-out residuals give: a step predicted too fast (residual < 0) means
    a lower measured throughput: thr * exp(residual)."""
    lo, hi = band(family, generations)
    thr = np.asarray(thr, dtype=float)
    return thr * np.exp(lo), thr * np.exp(hi)


def plan_band(executor: str | None, gpu_names, moe_train_share: float | None = None) -> tuple[float, float]:
    """(lo, hi) log residuals for a plan of `executor` on GPU types `gpu_names` (catalog names or a cluster's
    own types: an unknown type takes the band of all rows). A mixture of experts' plan (`moe_train_share`: its
    training time over its step) widens it by `moe_step_residuals`."""
    family, gens = _family_and_generations(executor, gpu_names)
    lo, hi = band(family, gens or [None])
    if moe_train_share is not None:
        mlo, mhi = moe_step_residuals(moe_train_share)
        lo, hi = lo + min(mlo, 0.0), hi + max(mhi, 0.0)
    return lo, hi


def moe_training_band() -> tuple[float, float, int] | None:
    """[q10, q90, n] of the log residuals (predicted / measured iteration) of the published MoE training
    iterations (mosearch/bench/moe_validation.py, never fitted), or None before a refit has stored them."""
    b = load().get("bands", {}).get("moe_training")
    return (float(b[0]), float(b[1]), int(b[2])) if b else None


def moe_step_residuals(train_share: float) -> tuple[float, float]:
    """(lo, hi) log residuals of a MoE plan's step if its training part erred as the published MoE training
    iterations do (`moe_training_band`): the dense RL steps' band holds no MoE row, and no MoE RL step was found
    published outside the held-out sources. A training residual r (predicted / measured) makes the measured
    training time train x exp(-r), the step step + train (exp(-r) - 1) if training adds to it (colocated; an
    asynchronous step hides part of it, so this is the wider case): the step's residual is
    -log(1 + share (exp(-r) - 1)), share = train / step."""
    b = moe_training_band()
    if b is None:
        return 0.0, 0.0
    share = float(np.clip(train_share, 0.0, 1.0))
    return tuple(float(-np.log1p(share * np.expm1(-r))) for r in b[:2])


def _family_and_generations(executor: str | None, gpu_names) -> tuple[str, list]:
    """The executor's family ("all" for one without step terms) and each GPU type's generation (None for a
    type the catalog does not know)."""
    from problems.placement.model.executor_costs import step_costs
    from problems.placement.specs import gpu_catalog

    cat = gpu_catalog()
    try:
        family = step_costs(executor).family
    except KeyError:
        family = "all"
    return family, [getattr(cat.get(g), "generation", None) for g in gpu_names]


def _same_hardware(executor_a, gpus_a, executor_b, gpus_b) -> bool:
    """One executor family on the same GPU generations (an unknown type counts by its name)."""
    (fa, ga), (fb, gb) = _family_and_generations(executor_a, gpus_a), _family_and_generations(executor_b, gpus_b)
    return fa == fb and {g or n for g, n in zip(ga, gpus_a)} == {g or n for g, n in zip(gb, gpus_b)}


def tied(thr_a: float, executor_a: str | None, gpus_a, thr_b: float, executor_b: str | None, gpus_b) -> tuple[bool, str]:
    """(whether the model cannot tell which of two plans is faster, by which test). Two plans share part of
    their error (the fitted parameters, the executor's terms, the workload's lengths), so the ratio of their
    throughputs is judged by the held-out error of published pairs of runs: pairs on one GPU type for two
    plans of one executor family on the same GPU generations, pairs on two GPU types otherwise. They tie
    when their predicted ratio lies within that error. Without enough pairs, their own bands' overlap."""
    same = _same_hardware(executor_a, list(gpus_a), executor_b, list(gpus_b))
    key = "same_hardware" if same else "other_hardware"
    pb = load().get("bands", {}).get(key)
    if pb and pb[2] >= 3:
        width = max(abs(pb[0]), abs(pb[1]))
        r = float(np.log(thr_a / thr_b))
        what = ("same executor and GPU generations" if same else "other GPU types or executor")
        return abs(r) <= width, (f"{what}: a ratio within the published {key.replace('_', '-')} pairs' held-out "
                                 f"error, +-{np.expm1(width):.0%} over {pb[2]} pairs")
    la, ha = plan_band(executor_a, gpus_a)
    lb, hb = plan_band(executor_b, gpus_b)
    overlap = thr_a * np.exp(la) <= thr_b * np.exp(hb) and thr_b * np.exp(lb) <= thr_a * np.exp(ha)
    return bool(overlap), "their samples/s bands overlap"


def apply_executor(ctx, executor: str | None, version: str | None = None) -> None:
    """Score `ctx`'s plans with the step work of `executor` at `version` and its family's fitted terms (what
    `build_context(executor=...)` does; for a problem built without the executor's search rules)."""
    from problems.placement.model.executor_costs import step_costs

    ctx.steps = step_costs(executor, version)
    ctx.fitted_steps = step_terms(ctx.steps.family)
