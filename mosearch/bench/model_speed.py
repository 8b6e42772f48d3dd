"""Plans evaluated per second by the placement model, per shipped cluster, on one core.

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python -m mosearch.bench.model_speed [--out results/bench/model_speed.md]

Times `problem._evaluate` (what pymoo calls: repair check + model + constraints) on repaired random
populations of 10,000 plans, best of 5 repeats; also the repair alone.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(var, "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from problems.placement import PlacementProblem  # noqa: E402

CASES = [("local", "tiny-grpo"), ("mixed-8", "qwen2.5-7b-grpo"), ("mixed-64", "qwen2.5-7b-grpo"),
         ("mixed-64", "qwen3-30b-a3b-grpo"), ("h100-64", "qwen2.5-32b-grpo"), ("hetero-1024", "llama3.1-70b-ppo")]


def best_of(fn, repeats=5):
    best = np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main(n: int = 10_000, out_path: str | None = None) -> None:
    rows = []
    print(f"{'cluster':<12} {'workload':<18} {'pools':>5} {'vars':>4} {'evaluate plans/s':>17} {'repair plans/s':>15}")
    for cluster, workload in CASES:
        p = PlacementProblem.from_files(ROOT / "problems/clusters" / f"{cluster}.yaml",
                                        ROOT / "problems/workloads" / f"{workload}.yaml")
        rng = np.random.default_rng(0)
        raw = p.xl + rng.random((n, p.n_var)) * (p.xu - p.xl)
        X = p.layout.repair(raw)
        out: dict = {}
        t_eval = best_of(lambda: p._evaluate(X, out))
        t_rep = best_of(lambda: p.layout.repair(raw))
        print(f"{cluster:<12} {workload:<18} {p.layout.n_pools:>5} {p.n_var:>4} {n / t_eval:>17,.0f} {n / t_rep:>15,.0f}")
        rows.append(f"| {cluster} | {workload} | {p.layout.n_pools} | {p.n_var} | {n / t_eval:,.0f} | {n / t_rep:,.0f} |")
    if out_path:
        from mosearch.bench import provenance
        from problems.atomic import atomic_write_text

        load = "/".join(f"{x:.1f}" for x in os.getloadavg())
        atomic_write_text(out_path, "\n".join([
            "# Placement model speed", "",
            provenance.line("python -m mosearch.bench.model_speed --out results/bench/model_speed.md"), "",
            "Made by `python -m mosearch.bench.model_speed --out results/bench/model_speed.md`: plans per second of "
            f"`PlacementProblem._evaluate` (repair check + model + constraints) on repaired random populations of "
            f"{n:,} plans, best of 5 repeats, one thread (load average {load} at the end).",
            "", "| cluster | workload | pools | variables | evaluate plans/s | repair plans/s |", "|---|---|---|---|---:|---:|",
            *rows, ""]))


if __name__ == "__main__":
    out = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else None
    main(out_path=out)
