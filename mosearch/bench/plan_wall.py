"""Wall time of a default `mosearch plan`, as a user runs it, on a shipped and on a generated large cluster.

    python -m mosearch.bench.plan_wall [--repeats 3] [--out results/bench/plan_wall.md]

Each run is the whole command in a fresh process (imports, search, structured stage, baselines, the
report), timed from outside; the 4,096-GPU, 32-pool cluster is the one `python -m mosearch.bench.gen_clusters`
writes. Targets (docs/search.md#budget-polish): <= 20 s on mixed-64 x qwen2.5-7b, <= 60 s at 4,096 GPUs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mosearch.bench import provenance
from mosearch.bench.scale import write_clusters
from problems.atomic import atomic_write_text

ROOT = Path(__file__).resolve().parents[2]
COMMAND = "python -m mosearch.bench.plan_wall --out results/bench/plan_wall.md"
TARGETS = {"mixed-64": 20.0, "gen-4096-p32": 60.0}


def _time_plan(cluster: Path, workload: Path, out: Path) -> float:
    cmd = [sys.executable, "-m", "mosearch", "plan", "--cluster", str(cluster), "--workload", str(workload),
           "--out", str(out)]
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    workload = ROOT / "problems/workloads/qwen2.5-7b-grpo.yaml"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        generated = write_clusters(Path(tmp) / "clusters")
        cases = [("mixed-64", ROOT / "problems/clusters/mixed-64.yaml"), ("gen-4096-p32", generated["gen-4096-p32"])]
        for name, cluster in cases:
            times, loads = [], []
            for i in range(args.repeats):
                times.append(_time_plan(cluster, workload, Path(tmp) / f"{name}-{i}"))
                loads.append(os.getloadavg()[0])
                print(f"{name} run {i + 1}: {times[-1]:.1f} s (load {loads[-1]:.1f})", flush=True)
            rows.append((name, times, loads))
    lines = ["# Wall time of a default `mosearch plan`", "", provenance.line(COMMAND), "",
             "The whole command in a fresh process, timed from outside, "
             f"{args.repeats} runs per cluster, workload qwen2.5-7b-grpo (the 4,096-GPU cluster: "
             "`python -m mosearch.bench.gen_clusters DIR`, gen-4096-p32).", "",
             "| cluster | runs (s) | median (s) | target (s) | met | 1-min load average after each run |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, times, loads in rows:
        med = sorted(times)[len(times) // 2]
        lines.append(f"| {name} | {', '.join(f'{t:.1f}' for t in times)} | {med:.1f} | <= {TARGETS[name]:.0f} | "
                     f"{'yes' if med <= TARGETS[name] else 'no'} | {', '.join(f'{x:.1f}' for x in loads)} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        atomic_write_text(args.out, text)


if __name__ == "__main__":
    main()
