"""Fit the model's published-run parameters (problems/placement/model/fitted.py) on published RL steps, and
check them leaving one source out.

    python -m mosearch.bench.rl_fit [--write]

Training set (declared): the complete rows of benchmarks/data/rl_published.csv (GPU type and count, model,
samples per step, maximum length and a step time or throughput published; `complete` = 1), except the rows
marked `held_out` (NeMo-RL's performance page: a check only) and those whose step hinges on an assumed mean
generated length; and the published vLLM generation times of benchmarks/data/vllm_published.csv (one source,
fixed lengths: the engine's bandwidth share and host time without an executor around it). Sources are the CSV's `source_key`; a source's
rows share their assumptions (lengths by rule, framework defaults), so the check leaves a whole source out,
refits on the rest and predicts it. Length convention: the mean generated length is the published one where a
source gives it or lets it be derived (EasyR1: published tokens/GPU/s x GPUs x step / samples, less the 256-token
prompt rule); else half the response limit (the CSV's rule); the maximum is the published limit.

The fit: scipy.optimize.least_squares (bounded, soft-L1 loss) on log(predicted / measured step) and, weighted
2, each same-source pair's log ratio error (both its rows in the fit: `PAIR_WEIGHT`), with a prior
residual per parameter (scales and the host time: log(value / prior) / 3, executor seconds value / 1000 s, per-sample
seconds value / 0.05 s; weak: they only hold a parameter that no remaining row speaks to at its prior).
`--write` stores the full-set values, the held-out bands and this command in problems/placement/data/fitted.yaml.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from problems.placement.model import fitted as F  # noqa: E402

GENS = ("hopper", "cdna3", "ada")
# Hopper's matmul efficiency is the anchor (per-layer fits, this project's H200 steps): the other generations'
# are fitted relative to it, and each executor family's training phases get their own factor
MFU_GENS = ("cdna3", "ada")
# executor terms: seconds per step, per sample and per training micro-batch of a rank (each executor family with
# published rows). A multiplicative training factor per family was tried and left out: it fitted the training
# set worse and held out worse (leave-one-source-out 23.8% against 19.5%); the per-micro-batch cost is the
# physical one (FSDP's per-forward gathers and hooks, offloads, the loop's Python), as `microbatch_loop_s` is
# for this project's trainer
EXEC_SCALES: tuple = ()
EXEC_PARAMS = (("verl", "step_s"), ("verl", "sample_s"), ("areal", "step_s"), ("rlinf", "step_s"),
               ("verl", "microbatch_s"), ("rlinf", "microbatch_s"))
NAMES = ([f"mfu_scale.{g}" for g in MFU_GENS] + [f"decode_eff_scale.{g}" for g in GENS] + ["decode_seq_s"]
         + [f"{f}.{k}" for f, k in EXEC_SCALES] + [f"{f}.{k}" for f, k in EXEC_PARAMS])
# log-space variables first (scales, host time), then linear seconds
N_LOG = len(MFU_GENS) + len(GENS) + 1 + len(EXEC_SCALES)
PRIOR = np.array([1.0] * (len(MFU_GENS) + len(GENS)) + [21.5e-6] + [1.0] * len(EXEC_SCALES) + [0.0] * len(EXEC_PARAMS))
LO = np.array([0.3] * (len(MFU_GENS) + len(GENS)) + [2e-6] + [0.5] * len(EXEC_SCALES) + [0.0] * len(EXEC_PARAMS))
_EX_HI = {"step_s": 900.0, "sample_s": 0.2, "microbatch_s": 5.0}
_EX_SIGMA = {"step_s": 1000.0, "sample_s": 0.05, "microbatch_s": 5.0}
HI = np.array([2.0] * (len(MFU_GENS) + len(GENS)) + [300e-6] + [4.0] * len(EXEC_SCALES)
              + [_EX_HI[k] for _, k in EXEC_PARAMS])
PRIOR_SIGMA = np.array([3.0] * (len(MFU_GENS) + len(GENS)) + [3.0] + [3.0] * len(EXEC_SCALES)
                       + [_EX_SIGMA[k] for _, k in EXEC_PARAMS])


def theta_dict(theta: np.ndarray) -> dict:
    d = {"mfu_scale": {"hopper": 1.0}, "decode_eff_scale": {}, "executors": {}}
    for n, v in zip(NAMES, theta):
        a, _, b = n.partition(".")
        if a in ("mfu_scale", "decode_eff_scale"):
            d[a][b] = float(v)
        elif n == "decode_seq_s":
            d["decode_seq_s"] = float(v)
        else:
            d["executors"].setdefault(a, {})[b] = float(v)
    return d


class RowModel:
    """One published row's problem, built once from the catalog; re-scored for any parameter vector. A vLLM
    generation row (`kind` generation) is one engine generating a fixed batch (rl_rows.predict_generation)."""

    def __init__(self, r: dict, tmp: Path):
        from mosearch.bench.rl_rows import build_problem, generation_context

        self.row = r
        with F.disabled():
            if r.get("kind") == "generation":
                self.ctx, self.tp = generation_context(r)
                self.prob = None
            else:
                self.prob, self.x = build_problem(r, tmp)
                self.ctx = self.prob.ctx
        from problems.placement.specs import gpu_catalog

        self.gpu_name = r["gpu"] if self.prob is None else self.prob.cluster.pools[0].gpu.name
        self.gen = gpu_catalog()[self.gpu_name].generation
        ctx = self.ctx
        self.base = {k: ctx.eff[k].copy() for k in ("mfu", "decode_eff", "attn_eff", "decode_seq_s")}
        self.family = "engine" if self.prob is None else ctx.steps.family

    def step(self, th: dict) -> float:
        ctx = self.ctx
        e = ctx.eff
        ms = th["mfu_scale"].get(self.gen, 1.0)
        ds = th["decode_eff_scale"].get(self.gen, 1.0)
        e["mfu"] = np.minimum(self.base["mfu"] * ms, 1.0)
        e["attn_eff"] = np.minimum(self.base["attn_eff"] * ms, e["mfu"])
        e["decode_eff"] = np.minimum(self.base["decode_eff"] * ds, 1.0)
        if self.gen in GENS:
            e["decode_seq_s"] = np.full_like(self.base["decode_seq_s"], th["decode_seq_s"])
        ctx.__dict__.pop("_unit_costs", None)
        ctx.fitted_steps = dict(th["executors"].get(self.family, {}))
        if self.prob is None:
            from problems.placement.model.rollout import fixed_batch_s

            r = self.row
            return fixed_batch_s(ctx, self.tp, int(r["batch"]), int(r["prompt_len"]), int(r["output_len"])) \
                * float(r["waves"])
        return float(self.prob.evaluate_matrix(self.x[None, :])["step_s"][0])


def _to_theta(z):
    return np.concatenate([np.exp(z[:N_LOG]), z[N_LOG:]])


def _to_z(theta):
    return np.concatenate([np.log(theta[:N_LOG]), theta[N_LOG:]])


# weight of a pair's ratio residual beside its two rows' own: the choices a front offers are ratios (this GPU
# or that one, colocated or not), and a source's rows share errors that cancel in them. Chosen among 0, 1, 2
# and 4 by the leave-one-source-out median of the complete rows (19.6%, 19.1%, 18.5%, 22.2%). With EasyR1
# v0.3.2's micro-batches cut by tokens as its code does, the four give 20.5%, 20.0%, 20.4%, 20.5%: no weight
# stands out there, and 2 is kept, which holds the training set's pairs closer (worst 27.9%, 18.6%, 14.7%, 13.0%).
# With EasyR1's versions keyed apart (v0.3.2 scores the reward during the log-prob passes): 15.2%, 15.1%, 15.4%,
# 17.3%, worst in-sample pair 26.0%, 18.0%, 14.5%, 13.0%; 2 is kept by the same reading
PAIR_WEIGHT = 2.0


def _pairs_within(models: list[RowModel]) -> list[tuple[int, int]]:
    """(a, b) indices of the pairs (rl_rows.pairs_by_name) whose two rows are both among `models`."""
    from mosearch.bench.rl_rows import pairs_by_name

    at = {m.row["id"]: i for i, m in enumerate(models)}
    return [(at[a["id"]], at[b["id"]]) for a, b in pairs_by_name([m.row for m in models]).values()]


def fit(models: list[RowModel]) -> np.ndarray:
    """Bounded least squares (soft-L1) on the rows' log(predicted / measured), PAIR_WEIGHT x each pair's log
    ratio error, and the weak priors."""
    from scipy.optimize import least_squares

    meas = np.array([float(m.row["step_s"]) for m in models])
    pairs = np.array(_pairs_within(models), dtype=int).reshape(-1, 2)

    def resid(z):
        th = _to_theta(z)
        d = theta_dict(th)
        pred = np.array([m.step(d) for m in models])
        prior = np.concatenate([np.log(th[:N_LOG] / PRIOR[:N_LOG]) / PRIOR_SIGMA[:N_LOG],
                                (th[N_LOG:] - PRIOR[N_LOG:]) / PRIOR_SIGMA[N_LOG:]])
        e = np.log(pred / meas)
        return np.concatenate([e, PAIR_WEIGHT * (e[pairs[:, 1]] - e[pairs[:, 0]]), prior])

    z0 = _to_z(PRIOR + np.array([0.0] * N_LOG + [_EX_HI[k] * 1e-3 for _, k in EXEC_PARAMS]))
    lo, hi = _to_z(LO), _to_z(HI)
    z0 = np.clip(z0, lo + 1e-9, hi - 1e-9)
    res = least_squares(resid, z0, bounds=(lo, hi), loss="soft_l1", f_scale=0.2, max_nfev=80, diff_step=1e-3)
    return _to_theta(res.x)


def length_assumed(r: dict) -> bool:
    """A step whose prediction hinges on an assumed mean generated length: a step time (not a throughput in
    tokens, which grows with the assumed length as the step does) with the mean not published or derived."""
    return "resp_mean" in r["assumed"] and not r.get("tokens_gpu_s")


def training_rows(rows: list[dict]) -> list[dict]:
    """The declared training set: complete rows, not held out, whose measure does not hinge on an assumed mean
    generated length (those would fit the assumption; they are predicted held out like every source)."""
    return [r for r in rows if r.get("complete") == "1" and r.get("held_out") != "1" and not length_assumed(r)]


def validation_rows(rows: list[dict]) -> list[dict]:
    """Every complete row not held out: the leave-one-source-out check's rows."""
    return [r for r in rows if r.get("complete") == "1" and r.get("held_out") != "1"]


def run(rows: list[dict], tmp: Path, verbose=False) -> dict:
    """Full-set fit, and per source the leave-that-source-out fit with its rows' held-out predictions."""
    train = training_rows(rows)
    models = {r["id"]: RowModel(r, tmp) for r in rows if r.get("complete") == "1"}
    full = fit([models[r["id"]] for r in train])
    held = {}
    sources = sorted({r["source_key"] for r in train})
    # a source none of whose rows is in the training set is held out of every fit: the full fit predicts it
    for s in sources:
        th = fit([models[r["id"]] for r in train if r["source_key"] != s])
        d = theta_dict(th)
        for r in rows:
            if r["source_key"] == s and r["id"] in models:
                held[r["id"]] = models[r["id"]].step(d)
        if verbose:
            print(f"left out {s}: " + ", ".join(f"{n}={v:.4g}" for n, v in zip(NAMES, th)), flush=True)
    dfull = theta_dict(full)
    insample = {rid: m.step(dfull) for rid, m in models.items()}
    # held-out rows never fitted (held_out = 1) are predicted by the full-set fit: none of their rows is in it
    for r in rows:
        if r["id"] in models and r["id"] not in held:
            held[r["id"]] = insample[r["id"]]
    return {"theta": full, "held": held, "insample": insample, "sources": sources, "models": models}


def bands(rows: list[dict], held: dict, models: dict) -> dict:
    out = {}
    # the training set's rows, each predicted with its source left out: the model's own error; rows whose step
    # hinges on an assumed mean length measure that assumption (up to 30x here), not a plan's spread
    res = {r["id"]: np.log(held[r["id"]] / float(r["step_s"])) for r in training_rows(rows)
           if r.get("kind") != "generation"}  # a plan's band is of RL steps
    allv = np.array(list(res.values()))
    out["all"] = [float(np.percentile(allv, 10)), float(np.percentile(allv, 90)), len(allv)]
    groups: dict[str, list[float]] = {}
    for rid, v in res.items():
        m = models[rid]
        groups.setdefault(f"{m.family}/{m.gen}", []).append(v)
        groups.setdefault(f"all/{m.gen}", []).append(v)
    for k, v in groups.items():
        if len(v) >= 3:
            out[k] = [float(np.percentile(v, 10)), float(np.percentile(v, 90)), len(v)]
    out["same_hardware"] = pair_band(rows, held, models, same_gpu=True)
    out["other_hardware"] = pair_band(rows, held, models, same_gpu=False)
    # no RL step above is of a mixture of experts: a MoE plan's band adds the model's error on the published MoE
    # training iterations (a check, never fitted: model/fitted.py moe_step_residuals)
    from mosearch.bench.moe_validation import log_residuals

    moe = log_residuals()
    out["moe_training"] = [float(np.percentile(moe, 10)), float(np.percentile(moe, 90)), len(moe)]
    return out


def pair_band(rows: list[dict], held: dict, models: dict, same_gpu: bool) -> list:
    """[q10, q90, n] of the log ratio errors of the training set's pairs (two runs of one source) on one GPU type
    (`same_gpu`) or on two, each predicted with its source left out: log((pred b / pred a) / (measured b / a)).
    Two plans share part of their error (the executor's terms, the lengths), so their ratio is known to this
    band, not to the sum of their own bands (mosearch pick's tie test, model/fitted.py `tied`)."""
    from mosearch.bench.rl_rows import pairs_by_name

    train = [r for r in training_rows(rows) if r.get("kind") != "generation"]
    errs = []
    for a, b in pairs_by_name(train).values():
        if (models[a["id"]].gpu_name == models[b["id"]].gpu_name) != same_gpu:
            continue
        pred = held[b["id"]] / held[a["id"]]
        meas = float(b["step_s"]) / float(a["step_s"])
        errs.append(float(np.log(pred / meas)))
    if not errs:
        return [0.0, 0.0, 0]
    return [float(np.percentile(errs, 10)), float(np.percentile(errs, 90)), len(errs)]


def main(argv=None) -> int:
    from mosearch.bench.rl_rows import load_generation, load_steps

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="store the values in problems/placement/data/fitted.yaml")
    args = ap.parse_args(argv)
    rows = load_steps() + load_generation()
    with tempfile.TemporaryDirectory() as tmp:
        out = run(rows, Path(tmp), verbose=True)
    th = out["theta"]
    print("full set: " + ", ".join(f"{n}={v:.4g}" for n, v in zip(NAMES, th)))
    train = training_rows(rows)
    errs = {r["id"]: out["held"][r["id"]] / float(r["step_s"]) - 1 for r in validation_rows(rows)}
    print(f"leave-one-source-out median abs. error: {np.median(np.abs(list(errs.values()))) * 100:.1f}% "
          f"over {len(errs)} rows")
    if args.write:
        d = theta_dict(th)
        gens_rows: dict[str, set] = {}
        gpu_rows: dict[str, set] = {}
        for r in train:
            m = out["models"][r["id"]]
            if m.gen in GENS:  # a generation with fitted factors (others keep their catalog figures)
                gens_rows.setdefault(m.gen, set()).add(r["source_key"])
                gpu_rows.setdefault(m.gpu_name, set()).add(r["source_key"])
        doc = {
            "command": "python -m mosearch.bench.rl_fit --write",
            "training_set": "benchmarks/data/rl_published.csv rows with complete = 1 and held_out = 0: "
                            + ", ".join(f"{s} ({sum(r['source_key'] == s for r in train)})" for s in out["sources"]),
            "length_convention": "mean generated length published or derived from published tokens and time "
                                 "(EasyR1), else half the response limit; maximum = the published limit",
            "params": {"mfu_scale": {g: round(v, 4) for g, v in d["mfu_scale"].items() if g in gens_rows},
                       "decode_eff_scale": {g: round(v, 4) for g, v in d["decode_eff_scale"].items() if g in gens_rows},
                       "decode_seq_s": float(f"{d['decode_seq_s']:.4g}"),
                       # families with rows in the training set (others have no published step terms)
                       "executors": {f: {k: round(v, 4) for k, v in kv.items()} for f, kv in d["executors"].items()
                                     if any(out["models"][r["id"]].family == f for r in train)}},
            "generation_sources": {g: sorted(s) for g, s in gens_rows.items()},
            "gpu_sources": {g: ", ".join(sorted(s)) for g, s in gpu_rows.items()},
            "bands": bands(rows, out["held"], out["models"]),
        }
        head = ("# Written by `python -m mosearch.bench.rl_fit --write` (mosearch/bench/rl_fit.py); read by\n"
                "# problems/placement/model/fitted.py. Do not edit by hand: refit.\n")
        F.DATA.write_text(head + yaml.safe_dump(doc, sort_keys=False, width=110))
        F.load.cache_clear()
        print(f"wrote {F.DATA.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
