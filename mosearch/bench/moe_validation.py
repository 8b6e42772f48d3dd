"""Validation of the mixture-of-experts model: published MoE training iterations against `predict_training`.

    python -m mosearch.bench.moe_validation [--out results/bench/moe_validation.md]

Rows: benchmarks/data/moe_published.csv (each with its source and URL; values ending in * are not published
with the row). Each row is predicted with the catalog as shipped (nothing is fitted to these rows) through
`problems.placement.predict.predict_training`, the code path the planner scores plans with, at the row's layout
(dp x tp x pp with expert parallelism ep, virtual stages, precision); a row whose source force-balances the
routing is predicted with a router imbalance of 1, the others with model/moe.py's MOE_IMBALANCE. The error is
predicted / measured iteration time - 1, reported as it is.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from problems.placement.predict import TrainingJob, predict_training  # noqa: E402
from mosearch.bench import provenance  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "moe_published.csv"
OUT = ROOT / "results" / "bench" / "moe_validation.md"


def load_rows(path: Path = DATA) -> list[dict]:
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    rows = []
    for r in csv.DictReader(lines):
        assumed = [k for k, v in r.items() if v.endswith("*")]
        rows.append({k: v.rstrip("*") for k, v in r.items()} | {"assumed": assumed})
    return rows


def measured_step_s(r: dict) -> float:
    if r["metric"] == "tokens_s_per_gpu":
        return int(r["global_batch"]) * int(r["seq_len"]) / (int(r["gpus"]) * float(r["value"]))
    if r["metric"] == "step_s":
        return float(r["value"])
    raise ValueError(f"unknown metric {r['metric']!r}")


def job_of(r: dict) -> TrainingJob:
    tp, pp, gpus = int(r["tp"]), int(r["pp"]), int(r["gpus"])
    return TrainingJob(name=r["id"], model=r["model"], precision=r["precision"], seq_len=int(r["seq_len"]),
                       global_batch=int(r["global_batch"]), micro_batch=int(r["micro_batch"]), dp=gpus // (tp * pp),
                       tp=tp, pp=pp, ep=int(r["ep"]), interleave=int(r["interleave"]), gpu=r["gpu"],
                       gpus_per_node=int(r["gpus_per_node"]), recompute=r["recompute"] == "1",
                       sequence_parallel=tp > 1, sharding=r["sharding"],
                       moe_imbalance=1.0 if r["balanced"] == "1" else None)


def evaluate(rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        meas = measured_step_s(r)
        p = predict_training(job_of(r))
        out.append({"row": r, "measured_s": meas, "pred": p, "err": p["step_s"] / meas - 1})
    return out


def log_residuals(res: list[dict] | None = None) -> list[float]:
    """log(predicted / measured iteration) of every row: what a MoE plan's band adds to the dense RL steps'
    (mosearch/bench/rl_fit.py writes their 10th and 90th percentiles; model/fitted.py moe_step_residuals)."""
    res = evaluate(load_rows()) if res is None else res
    return [float(np.log1p(x["err"])) for x in res]


def report(res: list[dict]) -> str:
    errs = np.array([abs(x["err"]) for x in res])
    lines = [
        "# Mixtures of experts: published training iterations against the model",
        "", provenance.line(), "",
        "Made by `python -m mosearch.bench.moe_validation` from benchmarks/data/moe_published.csv (sources and URLs "
        "there). Predictions: `predict_training` with the catalog as shipped, nothing fitted to these rows; "
        "force-balanced rows with a router imbalance of 1. Error = predicted / measured iteration - 1.",
        "",
        f"{len(res)} rows; median |error| {np.median(errs):.1%}, mean {np.mean(errs):.1%}, largest {np.max(errs):.1%}.",
        "",
        "| row | model | GPUs | layout | measured s | predicted s | error | EP all-to-all s | fits | assumed |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for x in res:
        r, p = x["row"], x["pred"]
        lay = (f"dp {int(r['gpus']) // (int(r['tp']) * int(r['pp']))} tp {r['tp']} pp {r['pp']} ep {r['ep']}"
               + (f" vp {r['interleave']}" if r["interleave"] != "1" else "") + f", {r['precision']}")
        lines.append(f"| {r['id']} | {r['model']} | {r['gpus']} {r['gpu']} | {lay} | {x['measured_s']:.3g} | "
                     f"{p['step_s']:.3g} | {x['err']:+.0%} | {p['breakdown'].get('ep_comm_s', 0.0):.3g} | "
                     f"{'yes' if p['fits'] else 'no'} | {', '.join(r['assumed']) or '-'} |")
    lines += [
        "",
        "No published MoE RL step time with its full layout (engines, trainer layout, batch and lengths) was found "
        "outside the held-out sources, nor a published vLLM MoE generation time at a stated batch and lengths; the "
        "table holds training iterations only.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    text = report(evaluate(load_rows()))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
