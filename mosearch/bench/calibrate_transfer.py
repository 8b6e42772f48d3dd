"""Does `mosearch calibrate` on one plan's run predict another plan's run on the same cluster better?

    python -m mosearch.bench.calibrate_transfer --profile PROFILE [--steps 12] [--analyse-only]

1. Builds three plans of the `local` cluster (tiny-grpo workload): the demo's knee layout (colocated,
   one device), a disaggregated 1 engine + 1 rank plan, and a colocated plan over both devices (dp 2).
2. Trains each `--steps` steps with `mosearch train` (vLLM CPU rollouts, PyTorch/gloo training, Ray),
   every prediction pinned to PROFILE (a profile measured on this machine: `mosearch profile --out`).
3. Runs `mosearch calibrate --from mosearch` on the first plan's run alone, on a copy of the cluster.
4. Predicts every run with the model before and after that calibration and writes predicted vs
   measured per phase to results/bench/calibrate_transfer.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from mosearch.bench import provenance

REPO = Path(__file__).resolve().parents[2]
PLANS = {  # name -> predictor_accuracy.plan_vector arguments (mode, rollout devices, train devices, log2 mb, k, log2 chunks)
    "colocated-dp1-mb32": ("colocated", 1, 0, 5, 0, 0),
    "disagg-mb32": ("disaggregated", 1, 1, 5, 0, 0),
    "colocated-dp2-mb32": ("colocated", 2, 0, 5, 0, 0),
}
PHASES = ("rollout_s", "train_s", "sync_s", "step_s")


def mosearch(*argv: str, env: dict, log: Path) -> None:
    with log.open("a") as f:
        f.write("$ mosearch " + " ".join(argv) + "\n")
        f.flush()
        done = subprocess.run([sys.executable, "-m", "mosearch", *argv], stdout=f, stderr=subprocess.STDOUT, env=env,
                              cwd=REPO)
    if done.returncode:
        raise SystemExit(f"mosearch {argv[0]} exited with {done.returncode}; see {log}")


def cpu_model() -> str:
    from problems.placement import machine

    return machine.describe(machine.detect())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", required=True, help="a profile measured on this machine")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--runs", default=str(REPO / "runs" / "calibrate-transfer"))
    ap.add_argument("--analyse-only", action="store_true", help="reuse the runs, train nothing")
    ap.add_argument("--out", default=str(REPO / "results" / "bench" / "calibrate_transfer.md"))
    args = ap.parse_args()

    from mosearch.bench.predictor_accuracy import plan_vector
    from problems.placement.problem import PlacementProblem

    runs = Path(args.runs).resolve()
    runs.mkdir(parents=True, exist_ok=True)
    log = runs / "log.txt"
    profile = runs / "profile.yaml"
    if not args.analyse_only:
        shutil.copyfile(args.profile, profile)
    env = {**os.environ, "MOSEARCH_PROFILE": str(profile), "PYTHONPATH": str(REPO)}
    os.environ["MOSEARCH_PROFILE"] = str(profile)
    started = time.time()
    prob = PlacementProblem.from_files(REPO / "problems/clusters/local.yaml", REPO / "problems/workloads/tiny-grpo.yaml")
    loads = {}
    for name, vec in PLANS.items():
        plan_file = runs / f"{name}.yaml"
        if not args.analyse_only:
            plan_file.write_text(prob.decode(plan_vector(prob, *vec), plan_id=name).to_yaml())
            shutil.rmtree(runs / name, ignore_errors=True)
            mosearch("train", "--plan", str(plan_file), "--steps", str(args.steps), "--out", str(runs / name),
                     "--eval-every", "0", "--checkpoint-every", "0", "--no-progress", env=env, log=log)
            (runs / name / "load.json").write_text(json.dumps(os.getloadavg()))
        f = runs / name / "load.json"
        loads[name] = json.loads(f.read_text()) if f.is_file() else None

    import yaml

    from mosearch.calibrate_logs import phases
    from mosearch.commands.calibrate import _predictor, describe

    def calibrate_on(name: str) -> tuple[dict, Path]:
        """`mosearch calibrate` on one plan's run, on a copy of the cluster (its calibration file lands beside it)."""
        work = runs / f"cluster-{name}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        cluster = work / "local.yaml"
        text = (REPO / "problems/clusters/local.yaml").read_text().replace("../../profiles/local.yaml", str(profile))
        cluster.write_text(text)
        mosearch("calibrate", "--cluster", str(cluster), "--from", "mosearch", "--log", str(runs / name),
                 "--plan", str(runs / f"{name}.yaml"), env=env, log=log)
        return yaml.safe_load((work / "local.calibration.yaml").read_text())["gpu_types"], cluster

    measured, predictors = {}, {}
    first = next(iter(PLANS))
    corrs = {}
    for name in PLANS:
        corrs[name], cluster = calibrate_on(name)
        run = {"source": "mosearch", "log": str(runs / name), "plan": str(runs / f"{name}.yaml")}
        meas, _, _ = phases("mosearch", run["log"])
        summary = json.loads((runs / name / "summary.json").read_text())
        meas["throughput_samples_s"] = summary["run"]["prompts_per_step"] * summary["run"]["group_size"] / meas["step_s"]
        measured[name], predictors[name] = meas, _predictor(run, str(cluster))
    corr = corrs[first]
    uncalibrated = {name: predictors[name]({}) for name in PLANS}
    rows = [(name, measured[name], uncalibrated[name], predictors[name](corr)) for name in PLANS]

    def err(p, m):
        return f"{(p / m - 1) * 100:+.0f}%"

    c = corr["cpu-local"]
    lines = [
        "# Calibration from one run, predicting other plans' runs (this machine)",
        "", provenance.line(), "",
        f"Regenerate: `python -m mosearch.bench.calibrate_transfer --profile PROFILE --steps {args.steps}` with PROFILE "
        "measured on the machine (`mosearch profile --out PROFILE`; here this machine's cached profile, measured by "
        "`mosearch train` on first use, before any run refitted it). Cluster `local` (2 cpu-local devices), workload "
        f"`tiny-grpo`, each plan trained {args.steps} steps by `mosearch train`; measured = median of steps 2..N of "
        "its metrics.jsonl (`time`: rollout, train, weight_sync, wall), as `mosearch calibrate` reads a run; samples/s = "
        "samples per step / that step time.",
        f"Machine: {cpu_model()}, {platform.machine()}; load average (1/5/15 min) after each run: "
        + ", ".join(f"{n} {'/'.join(f'{x:.1f}' for x in v) if v else 'not recorded'}" for n, v in loads.items())
        + " (the runs' own processes included; above about 2.5 other work shared the cores). "
        + (f"Wall time {time.time() - started:.0f} s." if not args.analyse_only else "Analysis of earlier runs."),
        "",
        f"`mosearch calibrate --from mosearch --log {first}` fitted (cpu-local): {describe(c)}.",
        "",
        "| plan | figure | measured | before | error | calibrated | error |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, meas, before, after in rows:
        tag = f"{name} (fitted on)" if name == first else name
        for k in (*PHASES, "throughput_samples_s"):
            if k in meas:
                lines.append(f"| {tag} | {k} | {meas[k]:.4g} | {before[k]:.4g} | {err(before[k], meas[k])} | "
                             f"{after[k]:.4g} | {err(after[k], meas[k])} |")
    held = [r for r in rows if r[0] != first]
    lines += ["", "Held-out plans, absolute error of the step time before -> after: "
              + "; ".join(f"{n} {abs(b['step_s'] / m['step_s'] - 1) * 100:.0f}% -> "
                          f"{abs(a['step_s'] / m['step_s'] - 1) * 100:.0f}%" for n, m, b, a in held) + "."]
    # every direction: calibrated on one plan's run, each other plan predicted before and after
    def abs_err(p, m):
        return abs(p / m - 1) * 100

    lines += ["", "## Every direction", "",
              "Calibrated on each plan's run in turn, the other two predicted. Phases: mean absolute error over "
              "rollout, training and sync.", "",
              "| calibrated on | predicted | step before | step after | phases before | phases after |",
              "|---|---|---:|---:|---:|---:|"]
    steps_b, steps_a, ph_b, ph_a = [], [], [], []
    for on in PLANS:
        for name in PLANS:
            if name == on:
                continue
            m, b, a = measured[name], uncalibrated[name], predictors[name](corrs[on])
            ks = [k for k in ("rollout_s", "train_s", "sync_s") if m.get(k, 0) > 0]
            sb, sa = abs_err(b["step_s"], m["step_s"]), abs_err(a["step_s"], m["step_s"])
            pb = sum(abs_err(b[k], m[k]) for k in ks) / len(ks)
            pa = sum(abs_err(a[k], m[k]) for k in ks) / len(ks)
            steps_b.append(sb), steps_a.append(sa), ph_b.append(pb), ph_a.append(pa)
            lines.append(f"| {on} | {name} | {sb:.0f}% | {sa:.0f}% | {pb:.0f}% | {pa:.0f}% |")
    lines += ["", f"Over the {len(steps_b)} directions, median step error {np.median(steps_b):.0f}% -> "
              f"{np.median(steps_a):.0f}%, median phase error {np.median(ph_b):.0f}% -> {np.median(ph_a):.0f}%; "
              f"better after in {sum(a < b for a, b in zip(steps_a, steps_b))} of {len(steps_b)} by the step, "
              f"{sum(a < b for a, b in zip(ph_a, ph_b))} of {len(ph_b)} by the phases."]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
