"""Is the default `mosearch plan` front complete at every budget, and the same for every seed?

For each (cluster, workload) of CASES (written for this check under benchmarks/clusters/budgets/
and benchmarks/workloads/budgets/, none shipped and none tuned on) the default search runs with
each seed. Budgets: BUDGETS costs spread evenly along the throughput-cost front of all seeds'
plans together (by rank on it), and FLOORS throughputs the same way. At each budget the fastest
plan of each seed's front within it is compared with a reference, the best of:
- every seed's plans together;
- the budget polish (mosearch/planner/budgets.py) run again from all seeds' plans together;
- a mutation probe: PROBE random plans, each one of the union front's plans with one to three
  random edits of the polish's move table (GPU counts, roles, engine TP, layout, mode, ...).
At each floor, the cheapest plan at or above it is compared the same way (reference cost / seed's
cost). Seed spread: at each budget, the slowest seed's answer over the fastest's.

Targets: every ratio >= 0.98 and every seed spread >= 0.98.

Usage: python -m mosearch.bench.budget_targets [--seeds 1 2 3] [--quick] [--out results/bench/budgets.md]
  --quick: each cluster with one workload (alternating) instead of both.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from mosearch.bench import provenance

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

CLUSTERS = ("uni-lab", "two-clouds", "amd-nv-mix", "l40-a30-rack", "h100-spot-a10g", "startup-mixed", "a100-v100-t4")
WORKLOADS = ("llama3.1-8b-grpo-8k", "qwen2.5-32b-ppo")
BUDGETS = 12
FLOORS = 6
PROBE = 100_000
TOLERANCE = 0.02


CLUSTER_DIR = Path("benchmarks") / "clusters" / "budgets"


def cluster_files(given: list[str] | None) -> list[Path]:
    """The cluster files to check: `given` (files, or folders of *.yaml), else the seven written for it."""
    if not given:
        return [ROOT / CLUSTER_DIR / f"{c}.yaml" for c in CLUSTERS]
    out = []
    for g in given:
        p = Path(g) if Path(g).is_absolute() else Path.cwd() / g
        out += sorted(p.glob("*.yaml")) if p.is_dir() else [p]
    return out


def cases(quick: bool, clusters: list[Path]) -> list[tuple[Path, str]]:
    if quick:
        return [(c, WORKLOADS[i % 2]) for i, c in enumerate(clusters)]
    return [(c, w) for c in clusters for w in WORKLOADS]


def tc(plans) -> np.ndarray:
    """(n, 2): throughput, cost of each plan."""
    return np.array([[p.predicted["throughput_samples_s"], p.predicted["cost_usd_h"]] for p in plans]).reshape(-1, 2)


def best_within(T: np.ndarray, budget: float) -> float:
    m = T[:, 1] <= budget * (1 + 1e-9)
    return float(T[m, 0].max()) if m.any() else 0.0


def cheapest_above(T: np.ndarray, floor: float) -> float:
    m = T[:, 0] >= floor * (1 - 1e-9)
    return float(T[m, 1].min()) if m.any() else np.inf


def probe(problem, X: np.ndarray, n: int, seed: int) -> np.ndarray:
    """n random plans, each a row of X with 1-3 random moves of the polish's move table: (n, 2)
    throughput, cost of the feasible ones."""
    from mosearch.planner.budgets import moves
    from problems.placement.problem import objectives

    mv = moves(problem.layout)
    rng = np.random.default_rng(seed)
    V = X[rng.integers(0, len(X), n)].copy()
    k = rng.integers(1, 4, n)
    for step in range(3):
        m = rng.integers(0, len(mv.cols), n)
        on = k > step
        for c in range(mv.cols.shape[1]):
            col, val, st = mv.cols[m, c], mv.vals[m, c], mv.setv[m, c]
            rows = np.flatnonzero(on & (col >= 0))
            cc = col[rows]
            V[rows, cc] = np.where(st[rows], val[rows], V[rows, cc] + val[rows])
    R = problem.layout.repair(V)
    out = []
    for a in range(0, len(R), 50_000):
        r = problem.evaluate_matrix(R[a:a + 50_000])
        F = objectives(r)
        ok = (r["feasible"] > 0) & np.isfinite(F[:, :2]).all(axis=1)
        out.append(np.column_stack([-F[ok, 0], F[ok, 1]]))
    return np.vstack(out)


def _rel(p: Path) -> str:
    """A path as the benchmark's command gives it: relative to the repository where it lies inside."""
    try:
        return str(Path(p).resolve().relative_to(ROOT))
    except ValueError:
        return str(p)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--quick", action="store_true", help="one workload per cluster")
    ap.add_argument("--cases", nargs="+", help="only these clusters (by name)")
    ap.add_argument("--clusters", nargs="+", metavar="PATH",
                    help=f"cluster files or folders of them (default: the seven in {CLUSTER_DIR})")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench" / "budgets.md"))
    args = ap.parse_args(argv)

    from mosearch.planner.budgets import budget_polish
    from mosearch.planner.run import plan_run
    from mosearch.planner.search import SearchSettings
    from mosearch.planner.structured import front_2d
    from problems.atomic import atomic_write_text
    from problems.errors import NoFeasiblePlan
    from problems.placement.problem import PlacementProblem, objectives

    load0 = os.getloadavg()
    rows, walls = [], []
    n_checks = n_ok = n_spread = n_spread_ok = 0
    worst_ratio, worst_spread = 1.0, 1.0
    files = cluster_files(args.clusters)
    todo = [c for c in cases(args.quick, files) if not args.cases or c[0].stem in args.cases]
    for cpath, wname in todo:
        cname = cpath.stem
        wpath = ROOT / "benchmarks" / "workloads" / "budgets" / f"{wname}.yaml"
        problem = PlacementProblem.from_files(cpath, wpath)
        per_seed, Xs = {}, []
        for seed in args.seeds:
            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.perf_counter()
                try:
                    out = plan_run(str(cpath), str(wpath), Path(tmp) / "run",
                                   SearchSettings(seed=seed, progress=False),
                                   report=False)
                except NoFeasiblePlan:  # a seed with no plan fails every check below
                    per_seed[seed] = np.zeros((0, 2))
                    continue
                finally:
                    walls.append(time.perf_counter() - t0)
            per_seed[seed] = tc(out.plans)
            Xs.append(out.result.X)
        if not Xs:
            rows.append(f"| {cname} | {wname} | no seed found a feasible plan (`mosearch plan` says why): no check | "
                        "| | | |")
            print(rows[-1], flush=True)
            continue
        # the reference: every seed's plans, the polish again from all of them, the mutation probe
        X = np.vstack(Xs)
        r = problem.evaluate_matrix(X)
        F = objectives(r)
        U = np.column_stack([-F[:, 0], F[:, 1]])
        fx = front_2d(F[:, 0], F[:, 1])
        t0 = time.perf_counter()
        bp = budget_polish(problem, X[fx])
        P = probe(problem, X[fx], PROBE, seed=0)
        ref_s = time.perf_counter() - t0
        REF = np.vstack([U, np.column_stack([-bp.F[:, 0], bp.F[:, 1]]) if len(bp.F) else np.zeros((0, 2)), P])
        front = U[fx][np.argsort(U[fx][:, 1])]  # the seeds' union front by cost
        pick = np.unique(np.linspace(0, len(front) - 1, BUDGETS).round().astype(int))
        budgets = front[pick, 1]
        pick = np.unique(np.linspace(0, len(front) - 1, FLOORS).round().astype(int))
        floors = front[pick, 0]
        print(f"{cname} x {wname}: union front {len(front)} plans; reference polish {bp.evaluations:,} evals, "
              f"probe {PROBE:,} ({len(P):,} feasible), {ref_s:.1f} s", flush=True)
        for kind, levels in (("budget", budgets), ("floor", floors)):
            for lv in levels:
                if kind == "budget":
                    ref = best_within(REF, lv)
                    got = [best_within(per_seed[s], lv) for s in args.seeds]
                    ratios = [g / ref if ref > 0 else 1.0 for g in got]
                    spread = min(got) / max(got) if max(got) > 0 else 1.0
                    label = f"<= {lv:.4g} $/h"
                    refv = f"{ref:.4g} samples/s"
                else:
                    ref = cheapest_above(REF, lv)
                    got = [cheapest_above(per_seed[s], lv) for s in args.seeds]
                    ratios = [ref / g if np.isfinite(g) else 0.0 for g in got]
                    spread = min(got) / max(got) if np.isfinite(max(got)) else 0.0
                    label = f">= {lv:.4g} samples/s"
                    refv = f"{ref:.4g} $/h"
                n_checks += len(ratios)
                n_ok += sum(x >= 1 - TOLERANCE for x in ratios)
                n_spread += 1
                n_spread_ok += spread >= 1 - TOLERANCE
                worst_ratio, worst_spread = min(worst_ratio, min(ratios)), min(worst_spread, spread)
                rows.append(f"| {cname} | {wname} | {kind} {label} | {refv} | {min(ratios):.3f} | "
                            f"{' / '.join(f'{x:.3f}' for x in ratios)} | {spread:.3f} |")
                print(rows[-1], flush=True)

    seeds = " ".join(str(s) for s in args.seeds)
    cmd = (f"python -m mosearch.bench.budget_targets --seeds {seeds}{' --quick' if args.quick else ''}"
           + (f" --clusters {' '.join(args.clusters)} --out {_rel(Path(args.out).resolve())}" if args.clusters else ""))
    load1 = os.getloadavg()
    lines = [
        "# Budget completeness and seed stability of the default `mosearch plan`", "", provenance.line(), "",
        f"Regenerate: `{cmd}`" + ("" if not args.quick else
                                   f" (this table: `--quick`, one workload per cluster; the full run: "
                                   f"`python -m mosearch.bench.budget_targets --seeds {seeds}`)"), "",
        f"Measured on {platform.machine()}, {os.cpu_count()} cores shared with other work; load average "
        f"{load0[0]:.1f} at the start, {load1[0]:.1f} at the end.", "",
        (f"Clusters and workloads: `{CLUSTER_DIR}/`, `benchmarks/workloads/budgets/` (written for this check, not tuned on). "
         if not args.clusters else
         f"Clusters: {', '.join(f'`{_rel(f)}`' for f in files)} (not used while the budget polish was built); "
         "workloads: `benchmarks/workloads/budgets/`. ") +
        "Each case runs the default search (`mosearch plan`'s settings, "
        f"{SearchSettings().evals:,} search evaluations plus seeding and the budget polish) with each seed. Budgets: "
        f"{BUDGETS} costs spread by rank along the throughput-cost front of all seeds' plans together; floors: "
        f"{FLOORS} throughputs the same way. Reference at each: the best of every seed's plans, the budget polish "
        f"run again from all of them, and {PROBE:,} random one- to three-edit mutations of that front's plans. "
        "Ratio: seed's fastest within the budget / reference's (floors: reference's cheapest above the floor / "
        "seed's). Seed spread: slowest seed's answer / fastest's (floors: cheapest / dearest).", "",
        f"Target: every ratio and every spread >= {1 - TOLERANCE:.2f}. Ratios: {n_ok} of {n_checks} within 2% "
        f"(worst {worst_ratio:.3f}); seed spread: {n_spread_ok} of {n_spread} within 2% (worst {worst_spread:.3f}).",
        f"Default search wall time per run (in process, no report): median {np.median(walls):.1f} s, "
        f"max {max(walls):.1f} s.", "",
        f"| cluster | workload | level | reference | worst ratio | ratio per seed ({seeds}) | seed spread |",
        "|---|---|---|---|---:|---|---:|",
        *rows, "",
    ]
    atomic_write_text(args.out, "\n".join(lines))
    print(f"ratios {n_ok}/{n_checks}, spread {n_spread_ok}/{n_spread}; written to {args.out}")
    return 0 if n_ok == n_checks and n_spread_ok == n_spread else 1


if __name__ == "__main__":
    sys.exit(main())
