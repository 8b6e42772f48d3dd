"""Search quality on clusters the planner bench does not contain: the planner against its ablation
without the adaptive local search and against the strongest baseline search methods.

Same protocol as `mosearch bench planners` (mosearch/bench/scenarios.py): an equal budget of
evaluations per run, the corner grid counted inside the planner's budget, hypervolume with the
scenario's fixed normalisation computed from the corner grid (seed 0) before any method runs,
median over seeds 1..S. Scenarios: the clusters and workloads under benchmarks/ that
mosearch/bench/structured_targets.py checks (written for that check; none is in the planner bench).

Methods:
- planner: what `mosearch plan` searches (SearchSettings defaults: the local search hands the
  budget back to MaOEA-CS once unproductive);
- planner, fixed local search: the same with `adaptive=False` (MaOEA-CS on 75% of the budget after
  the grid, its schedule on that part, then Pareto local search on the last 25%);
- AGE-MOEA-II (pymoo), NSGA-III (DEAP), NSGA-III (pymoo): the bench's strongest rivals there.

Usage: python -m mosearch.bench.unseen_planners [--seeds 5] [--evals 3000] [--out results/bench/unseen_planners.md]
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np

from mosearch.bench.structured_targets import CASES
from mosearch.bench import publish
from mosearch.bench import provenance

INPUTS = Path(__file__).resolve().parents[2] / "benchmarks"  # clusters and workloads written for the benchmarks

METHODS = {
    "planner": "planner (ours, adaptive local search)",
    "planner-fixed": "planner, fixed local search (ours, before)",
    "agemoea2": "AGE-MOEA-II (pymoo)",
    "deap-nsga3": "NSGA-III (DEAP)",
    "nsga3": "NSGA-III (pymoo)",
}
OURS = ("planner", "planner-fixed")


def run_one(problem, method: str, evals: int, seed: int, scale) -> float:
    from mosearch.bench import scenarios as sc

    if method == "planner-fixed":
        bp = sc.BudgetProblem(problem, evals, scale)
        try:
            sc._run_planner(bp, evals, seed, adaptive=False)
        except sc.BudgetReached:
            pass
        return scale.hv(bp.archive.F)
    return sc.run_method(problem, method, evals, seed, scale)["hv"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--evals", type=int, default=3000)
    ap.add_argument("--out", default="results/bench/unseen_planners.md")
    args = ap.parse_args(argv)

    from mosearch.bench import scenarios as sc
    from problems.placement.problem import PlacementProblem

    t0 = time.perf_counter()
    rows, wins, wins_fixed, ratio = [], 0, 0, []
    for cname, wname in CASES:
        problem = PlacementProblem.from_files(INPUTS / "clusters" / f"{cname}.yaml", INPUTS / "workloads" / f"{wname}.yaml")
        ref = sc.reference(problem)
        if not ref.feasible:
            print(f"{cname} x {wname}: no feasible corner-grid plan; skipped", flush=True)
            continue
        med = {}
        for m in METHODS:
            hv = [run_one(problem, m, args.evals, s, ref.scale) for s in range(1, args.seeds + 1)]
            med[m] = float(np.median(hv))
            print(f"{cname} x {wname} {m}: median HV {med[m]:.4f}", flush=True)
        rival = max((m for m in METHODS if m not in OURS), key=lambda m: med[m])
        wins += med["planner"] >= med[rival]
        wins_fixed += med["planner-fixed"] >= med[rival]
        ratio.append(med["planner"] / med["planner-fixed"])
        rows.append(f"| {cname} x {wname} | " + " | ".join(
            f"**{med[m]:.4f}**" if med[m] == max(med.values()) else f"{med[m]:.4f}" for m in METHODS)
            + f" | {METHODS[rival]} | {med['planner'] / med[rival]:.3f} |")
    n = len(rows)
    lines = [
        "# Planner search quality on clusters outside the planner bench",
        "", provenance.line(), "",
        f"Regenerate with `python -m mosearch.bench.unseen_planners --seeds {args.seeds} --evals {args.evals} "
        f"--out {args.out}` ({time.perf_counter() - t0:.0f} s; one process, `OMP_NUM_THREADS=1`, "
        f"{platform.machine()}, Python {platform.python_version()}).",
        "",
        f"- Budget: {args.evals:,} evaluations per run, seeds 1..{args.seeds}; the protocol of "
        "`mosearch bench planners` (corner grid counted in the planner's budget; fixed per-scenario "
        "hypervolume normalisation from the corner grid, seed 0; exact 4-D HV, reference point 1.1).",
        "- Scenarios: the clusters and workloads of `mosearch/bench/structured_targets.py` (under `benchmarks/`).",
        f"- The planner's median HV is at least the best rival's on **{wins}/{n}**; with the fixed local "
        f"search on {wins_fixed}/{n}. Planner / fixed local search: geometric mean "
        f"{float(np.exp(np.mean(np.log(ratio)))) if ratio else float('nan'):.3f} "
        f"(range {min(ratio, default=float('nan')):.3f}-{max(ratio, default=float('nan')):.3f}).",
        "- All figures are predictions of the performance model.",
        "",
        "Median hypervolume over seeds; **bold**: the highest.",
        "",
        "| scenario | " + " | ".join(METHODS.values()) + " | best rival | planner / best rival |",
        "|---" * (len(METHODS) + 3) + "|",
        *rows,
        "",
    ]
    publish(args.out, "\n".join(lines), echo=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
