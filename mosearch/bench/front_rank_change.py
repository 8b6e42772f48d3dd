"""Which plans of a shipped front change rank when the performance model changes.

    python -m mosearch.bench.front_rank_change [--before REV] [--out results/bench/front_rank_change.md]

For each (cluster, workload) below: the planner of revision `--before` (its `mosearch`, `problems` and
`trainer` packages, taken with `git archive` into a temporary directory) searches the front with its
defaults (MaOEA-CS, 60,000 evaluations, seed 1); every plan of the front it shows is then scored by that
revision's model and by this checkout's (`predict_plan`, the planner's evaluation of one plan), and the
plans are ranked by throughput and by cost per 1,000 samples under each. The table lists the plans whose
rank moves, with both models' figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CASES = (("problems/clusters/mixed-64.yaml", "problems/workloads/qwen2.5-7b-grpo.yaml"),
         ("problems/clusters/h100-64.yaml", "problems/workloads/llama3.1-70b-ppo.yaml"))
KEYS = ("throughput_samples_s", "usd_per_1k_samples", "rollout_s", "train_s", "step_s", "peak_mem_frac")


def score(plan_dir: str, ids: list[str]) -> dict:
    """The model of the importing tree on each plan file (run in a subprocess with PYTHONPATH set)."""
    from problems.placement.predict import predict_plan

    out = {}
    for pid in ids:
        p = predict_plan(Path(plan_dir) / f"{pid}.yaml")
        out[pid] = {k: p[k] for k in KEYS}
    return out


def _run(tree: Path, args: list[str]) -> str:
    """Python with `tree`'s packages first (run from inside it: `-c` puts the working directory first)."""
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, *args], cwd=tree, env=env, check=True, capture_output=True,
                          text=True).stdout


def _ranks(scores: dict, key: str, reverse: bool) -> dict:
    order = sorted(scores, key=lambda pid: scores[pid][key], reverse=reverse)
    return {pid: i + 1 for i, pid in enumerate(order)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default=None, help="git revision of the model before the change (default: where this "
                                                    "branch left main, `git merge-base HEAD main`)")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench" / "front_rank_change.md"))
    ap.add_argument("--keep", default=None, help="directory to keep the fronts' runs in (plan files), for inspection")
    args = ap.parse_args(argv)
    if args.before is None:
        args.before = subprocess.run(["git", "merge-base", "HEAD", "main"], cwd=ROOT, check=True, capture_output=True,
                                     text=True).stdout.strip()
    rev = subprocess.run(["git", "rev-parse", "--short", args.before], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout.strip()
    from mosearch.bench import provenance

    here = provenance.commit()  # HEAD, with +changes when the tree differs from it
    lines = ["# Plans of shipped fronts whose rank changes with the model", "",
             f"Made by `python -m mosearch.bench.front_rank_change --before {rev}`: the front the planner of "
             f"{rev} finds with its defaults, each plan scored by that revision's model (before) and "
             f"by this checkout's (after, {here}). Ranks: 1 = highest throughput / "
             "lowest $ per 1,000 samples among the front's plans.", ""]
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "before"
        base.mkdir()
        archive = subprocess.run(["git", "archive", args.before, "mosearch", "problems", "trainer"], cwd=ROOT,
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        for cluster, workload in CASES:
            run = Path(args.keep or tmp) / f"{Path(cluster).stem}__{Path(workload).stem}"
            _run(base, ["-c", "import sys; from mosearch.cli import main; sys.exit(main(sys.argv[1:]))", "plan",
                        "--cluster", str(ROOT / cluster), "--workload", str(ROOT / workload), "--out", str(run),
                        "--quiet", "--no-report", "--jobs", "1"])
            ids = [p["plan_id"] for p in json.loads((run / "front.json").read_text())["plans"]]
            code = (f"import json, sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); import front_rank_change as f; "
                    f"import problems; assert problems.__file__.startswith(sys.argv[1]); print(json.dumps(f.score({str(run / 'plans')!r}, {ids!r})))")
            before = json.loads(_run(base, ["-c", code, str(base)]))
            after = json.loads(_run(ROOT, ["-c", code, str(ROOT)]))
            rb_t, ra_t = _ranks(before, "throughput_samples_s", True), _ranks(after, "throughput_samples_s", True)
            rb_c, ra_c = _ranks(before, "usd_per_1k_samples", False), _ranks(after, "usd_per_1k_samples", False)
            moved = [pid for pid in ids if rb_t[pid] != ra_t[pid] or rb_c[pid] != ra_c[pid]]
            lines += [f"## {Path(cluster).stem} x {Path(workload).stem}", "",
                      f"{len(ids)} plans on the front shown; {len(moved)} change rank by throughput or by cost.", "",
                      "| plan | mode | layout | throughput rank before -> after | $/1k rank before -> after | "
                      "samples/s before -> after | $/1k before -> after | rollout s before -> after | "
                      "train s before -> after |", "|---|---|---|---|---|---|---|---|---|"]
            for pid in sorted(ids, key=lambda p: ra_t[p]):
                plan = json.loads(json.dumps(__import__("yaml").safe_load((run / "plans" / f"{pid}.yaml").read_text())))
                pools = ", ".join(f"{p['pool'].split('@')[0]} r{p['rollout_gpus']}/t{p['train_gpus']}/s{p['shared_gpus']}"
                                  for p in plan["pools"] if p["rollout_gpus"] or p["train_gpus"] or p["shared_gpus"])
                b, a = before[pid], after[pid]
                mark = "" if pid in moved else " (same)"
                lines.append(f"| {pid}{mark} | {plan['execution']['mode']} k={plan['execution']['staleness_bound']} | "
                             f"{pools}; tp {plan['train']['tp']} pp {plan['train']['pp']} {plan['train']['sharding']} | "
                             f"{rb_t[pid]} -> {ra_t[pid]} | {rb_c[pid]} -> {ra_c[pid]} | "
                             f"{b['throughput_samples_s']:.3g} -> {a['throughput_samples_s']:.3g} | "
                             f"{b['usd_per_1k_samples']:.3g} -> {a['usd_per_1k_samples']:.3g} | "
                             f"{b['rollout_s']:.3g} -> {a['rollout_s']:.3g} | {b['train_s']:.3g} -> {a['train_s']:.3g} |")
            lines.append("")
    text = "\n".join(lines)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    from problems.atomic import atomic_write_text

    atomic_write_text(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
