"""How many plans the front people read holds, on the shipped clusters and three of our own.

Runs `mosearch plan` with its defaults (60,000 evaluations, seed 1) on each scenario and writes
results/bench/front_size.md: plans found (front_all.csv), plans on the default front
(front.csv), on a finer front (2% throughput and cost, 0.05 memory, 0.25 staleness) for
comparison, the size of report.html, and the wall time of the run.

    python -m mosearch.bench.front_size [--out results/bench/front_size.md] [--evals N]

About 8 minutes on a 2-core machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from mosearch import decide  # noqa: E402
from mosearch.cli import main  # noqa: E402
from mosearch.results import load_run, objective_matrix  # noqa: E402

SHIPPED, OURS = ROOT / "problems", ROOT / "benchmarks"
SCENARIOS = [
    ("shipped", SHIPPED / "clusters/mixed-8.yaml", SHIPPED / "workloads/qwen2.5-7b-grpo.yaml"),
    ("shipped", SHIPPED / "clusters/mixed-64.yaml", SHIPPED / "workloads/qwen2.5-7b-grpo.yaml"),
    ("shipped", SHIPPED / "clusters/mixed-64.yaml", SHIPPED / "workloads/qwen2.5-32b-grpo.yaml"),
    ("shipped", SHIPPED / "clusters/h100-64.yaml", SHIPPED / "workloads/qwen2.5-7b-grpo.yaml"),
    ("shipped", SHIPPED / "clusters/hetero-1024.yaml", SHIPPED / "workloads/qwen2.5-7b-grpo.yaml"),
    ("shipped", SHIPPED / "clusters/hetero-1024.yaml", SHIPPED / "workloads/llama3.1-70b-ppo.yaml"),
    ("ours", OURS / "clusters/tri-region-80.yaml", OURS / "workloads/qwen2.5-14b-grpo.yaml"),
    ("ours", OURS / "clusters/lab-24.yaml", OURS / "workloads/qwen2.5-14b-grpo.yaml"),
    ("ours", OURS / "clusters/fleet-2048.yaml", OURS / "workloads/qwen2.5-14b-grpo.yaml"),
]
FINER = np.array([0.02, 0.02, 0.05, 0.25])


def measure(cluster: Path, workload: Path, evals: int | None, tmp: Path) -> dict:
    out = tmp / f"{cluster.stem}__{workload.stem}"
    argv = ["plan", "--cluster", str(cluster), "--workload", str(workload), "--out", str(out), "--quiet"]
    if evals:
        argv += ["--evals", str(evals)]
    t = time.perf_counter()
    code = main(argv)
    wall = time.perf_counter() - t
    if code != 0:
        raise SystemExit(f"mosearch plan failed ({code}) on {cluster.name} x {workload.name}")
    run = load_run(out)
    F = objective_matrix(run.all_plans)
    return {"found": len(run.all_plans), "front": len(run.plans), "finer": len(decide.epsilon_front(F, FINER)),
            "report_kb": (out / "report.html").stat().st_size / 1024, "wall_s": wall,
            "evaluations": run.info["evaluations"]}


def main_(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "results" / "bench" / "front_size.md"))
    ap.add_argument("--evals", type=int, default=None, help="evaluation budget (default: the plan command's)")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind, cluster, workload in SCENARIOS:
            r = measure(cluster, workload, args.evals, Path(tmp))
            rows.append((kind, cluster.stem, workload.stem, r))
            print(f"{cluster.stem} x {workload.stem}: {r}", file=sys.stderr, flush=True)
    res = decide.describe_resolution(decide.RESOLUTION)
    lines = [
        "# Front size: plans a person reads",
        "",
        f"Regenerate: `python -m mosearch.bench.front_size{' --evals ' + str(args.evals) if args.evals else ''}` "
        "(about 8 minutes on 2 cores).",
        "",
        f"`mosearch plan` with its defaults (seed 1). *found*: every non-dominated plan of the search "
        f"(front_all.csv). *front*: the epsilon front at the default resolution ({res}), what front.csv, "
        "the report and `mosearch show` list, the knee included. *finer*: the epsilon front at 2% "
        "throughput and cost, 0.05 memory, 0.25 staleness, on the same plans. Clusters marked *ours* are in "
        "benchmarks/clusters/ (not shipped); the 14B workload is benchmarks/workloads/qwen2.5-14b-grpo.yaml. "
        "Wall times on a shared 2-core machine (indicative).",
        "",
        "| cluster | workload | set | evaluations | found | front | finer | report.html (KB) | wall (s) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, c, w, r in rows:
        lines.append(f"| {c} | {w} | {kind} | {r['evaluations']:,} | {r['found']:,} | {r['front']} | {r['finer']} | "
                     f"{r['report_kb']:.0f} | {r['wall_s']:.0f} |")
    fronts = [r["front"] for *_, r in rows]
    lines += ["", f"Default front: {min(fronts)}-{max(fronts)} plans over {len(rows)} scenarios "
                  f"(largest report.html {max(r['report_kb'] for *_, r in rows):.0f} KB).", ""]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main_())
