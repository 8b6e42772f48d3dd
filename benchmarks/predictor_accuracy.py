"""Predicted vs measured on this machine: profile, plan, train, compare.

    python benchmarks/predictor_accuracy.py [--profile profiles/local.yaml] [--steps 8]

1. Profiles the local device with `mosearch profile` (unless --profile names an existing file).
2. Builds the local cluster with that profile and scores a set of distinct plans (colocated,
   disaggregated, elastic pipelining, asynchronous k = 1 and 2, different micro-batches and
   data-parallel sizes) with the calibrated model.
3. Runs `mosearch train` on each plan and reads the measured steady-state figures from the run's
   summary.json.
4. Writes results/bench/predictor_accuracy.md: per plan predicted vs measured step time,
   samples/s and staleness; MAPE; whether the ranking by throughput agrees (Kendall tau).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from problems.atomic import atomic_write_text  # noqa: E402
from problems.placement import PlacementProblem  # noqa: E402
from problems.placement.encoding import MODES, SHARDINGS  # noqa: E402

WORKLOAD = REPO / "problems" / "workloads" / "tiny-grpo.yaml"

# name -> (mode, rollout devices, train devices, log2 micro-batch, staleness k, log2 chunks)
PLANS = {
    "colocated-dp2-mb4": ("colocated", 2, 0, 2, 0, 0),
    "colocated-dp1-mb16": ("colocated", 1, 0, 4, 0, 0),
    "disagg-mb8": ("disaggregated", 1, 1, 3, 0, 0),
    "disagg-pipelined4-mb2": ("disaggregated", 1, 1, 1, 0, 2),
    "async-k1-mb8": ("async", 1, 1, 3, 1, 0),
    "async-k2-mb8": ("async", 1, 1, 3, 2, 0),
    "colocated-dp2-mb1": ("colocated", 2, 0, 0, 0, 0),
}


def plan_vector(problem: PlacementProblem, mode, rollout, train, log2_mb, k, log2_chunks) -> np.ndarray:
    lay = problem.layout
    x = np.zeros(problem.n_var)
    x[0], x[1], x[2] = rollout, train, 0  # one pool: rollout devices, training devices, TP index 0 (TP 1)
    x[lay.g("kv_mem_frac")] = 0.5
    x[lay.g("log2_max_num_seqs")] = 8
    x[lay.g("sharding")] = SHARDINGS.index("none")
    x[lay.g("log2_micro_batch")] = log2_mb
    x[lay.g("mode")] = MODES.index(mode)
    x[lay.g("staleness_bound")] = k
    x[lay.g("log2_pipeline_chunks")] = log2_chunks
    return x


def calibrated_cluster(profile: Path, workdir: Path) -> Path:
    text = (REPO / "problems" / "clusters" / "local.yaml").read_text()
    text = text.replace("node_groups:", f"profiles: {{cpu-local: {profile.resolve()}}}\nnode_groups:")
    path = workdir / "local-calibrated.yaml"
    path.write_text(text)
    return path


def mosearch(*argv: str, log: Path) -> None:
    with log.open("a") as f:
        subprocess.run([sys.executable, "-m", "mosearch.cli", *argv], check=True, cwd=REPO, stdout=f, stderr=f)


def kendall_tau(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    i, j = np.triu_indices(len(a), 1)
    s = np.sign(a[i] - a[j]) * np.sign(b[i] - b[j])
    return float(s.sum() / len(s))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default=str(REPO / "profiles" / "local.yaml"))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--plans", nargs="*", default=list(PLANS))
    ap.add_argument("--runs", default=str(REPO / "runs" / "predictor-accuracy"))
    ap.add_argument("--out", default=str(REPO / "results" / "bench" / "predictor_accuracy.md"))
    args = ap.parse_args()

    runs = Path(args.runs)
    runs.mkdir(parents=True, exist_ok=True)
    log = runs / "log.txt"
    profile = Path(args.profile)
    started = time.time()
    if not profile.is_file():
        print(f"profiling the local device -> {profile}", flush=True)
        mosearch("profile", "--out", str(profile), log=log)

    work = Path(tempfile.mkdtemp(prefix="mosearch-acc-"))
    problem = PlacementProblem.from_files(calibrated_cluster(profile, work), WORKLOAD)
    rows = []
    for name in args.plans:
        plan = problem.decode(plan_vector(problem, *PLANS[name]), plan_id=name)
        path = work / f"{name}.yaml"
        path.write_text(plan.to_yaml())
        out = runs / name
        print(f"training {name} ({args.steps} steps)", flush=True)
        mosearch("train", "--plan", str(path), "--steps", str(args.steps), "--out", str(out), "--eval-every", "0",
                 "--checkpoint-every", "0", "--no-progress", log=log)
        measured = json.loads((out / "summary.json").read_text())["measured"]
        p = plan.predicted
        rows.append({"plan": name, "mode": plan.execution.mode, "k": plan.execution.staleness_bound,
                     "dp": plan.train.dp, "micro_batch": plan.train.micro_batch, "chunks": plan.execution.pipeline_chunks,
                     "pred_step_s": p["step_s"], "meas_step_s": measured["step_s"],
                     "pred_sps": p["throughput_samples_s"], "meas_sps": measured["throughput_samples_s"],
                     "pred_stale": p["staleness"], "meas_stale": measured["staleness"],
                     "pred_rollout_s": p["rollout_s"], "meas_rollout_s": measured["rollout_s"],
                     "pred_train_s": p["train_s"], "meas_train_s": measured["train_s"]})
        print(json.dumps(rows[-1]), flush=True)

    def ape(pred, meas):
        return abs(pred - meas) / meas * 100

    step_err = [ape(r["pred_step_s"], r["meas_step_s"]) for r in rows]
    sps_err = [ape(r["pred_sps"], r["meas_sps"]) for r in rows]
    tau = kendall_tau([r["pred_sps"] for r in rows], [r["meas_sps"] for r in rows]) if len(rows) > 1 else float("nan")
    order_pred = [r["plan"] for r in sorted(rows, key=lambda r: -r["pred_sps"])]
    order_meas = [r["plan"] for r in sorted(rows, key=lambda r: -r["meas_sps"])]
    worst = sorted(rows, key=lambda r: -ape(r["pred_step_s"], r["meas_step_s"]))[:2]

    lines = [
        "# Predictor accuracy: calibrated model vs measured training runs (this machine)",
        "",
        f"Regenerate: `python benchmarks/predictor_accuracy.py --steps {args.steps}` "
        f"(profile: `mosearch profile --out {os.path.relpath(profile, REPO)}`). "
        f"Cluster `local` ({problem.cluster.pools[0].count} cpu-local devices) with its profile, workload "
        f"`tiny-grpo`; each plan trained {args.steps} steps with vLLM (CPU build) rollouts and PyTorch/gloo "
        "training on Ray; measured = steady-state mean over steps 2..N from the run's summary.json. "
        f"Total wall time {time.time() - started:.0f} s.",
        "",
        "| plan | mode | k | dp | micro-batch | chunks | step s pred | step s meas | err % | samples/s pred | samples/s meas | err % | staleness pred | staleness meas |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r, e1, e2 in zip(rows, step_err, sps_err):
        lines.append(f"| {r['plan']} | {r['mode']} | {r['k']} | {r['dp']} | {r['micro_batch']} | {r['chunks']} | "
                     f"{r['pred_step_s']:.3f} | {r['meas_step_s']:.3f} | {e1:.1f} | {r['pred_sps']:.1f} | "
                     f"{r['meas_sps']:.1f} | {e2:.1f} | {r['pred_stale']:.2f} | {r['meas_stale']:.2f} |")
    lines += [
        "",
        f"- **MAPE, step time: {np.mean(step_err):.1f}%**; **MAPE, samples/s: {np.mean(sps_err):.1f}%** "
        "(target <= 15%, aim 8%).",
        f"- Staleness, mean absolute error: {np.mean([abs(r['pred_stale'] - r['meas_stale']) for r in rows]):.2f} versions.",
        f"- Ranking by throughput: Kendall tau {tau:.2f} "
        f"({'the same order' if order_pred == order_meas else 'orders differ'}). "
        f"Predicted: {', '.join(order_pred)}. Measured: {', '.join(order_meas)}.",
        "",
        "## Phase breakdown (seconds per step)",
        "",
        "| plan | rollout pred | rollout meas | train pred | train meas |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['plan']} | {r['pred_rollout_s']:.3f} | {r['meas_rollout_s']:.3f} | "
                     f"{r['pred_train_s']:.3f} | {r['meas_train_s']:.3f} |")
    lines += ["", "## Worst plans", ""]
    for r in worst:
        lines.append(f"- {r['plan']}: step {r['pred_step_s']:.3f} s predicted vs {r['meas_step_s']:.3f} s measured "
                     f"(rollout {r['pred_rollout_s']:.3f} vs {r['meas_rollout_s']:.3f}, train {r['pred_train_s']:.3f} "
                     f"vs {r['meas_train_s']:.3f}).")
    atomic_write_text(args.out, "\n".join(lines) + "\n")
    (runs / "rows.json").write_text(json.dumps(rows, indent=1))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
