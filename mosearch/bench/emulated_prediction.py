"""Predicted against measured for an emulated run: a plan made for a GPU cluster, run
here with `--emulate`, is predicted for exactly what ran (its emulated engines, dp and sharding on
this machine's CPU profile, the devices time-sharing its cores), and set against the run's own
measurement. Beside it, for scale, the same workload's plan for this machine (`local`), which runs
as planned.

    python -m mosearch.bench.emulated_prediction [--steps 10] [--out results/bench/emulated_prediction.md]

Both runs train the demo's shape (tiny model, 64 prompts x 16 samples, responses <= 4 tokens, 4
updates per step; `mosearch/commands/demo.py`), without the warm start (speed does not depend on it;
the prediction uses the lengths the run generated). Timings depend on the machine's load: the load
average is printed beside them.
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

from mosearch.bench import provenance

ROOT = Path(__file__).resolve().parents[2]
SHAPE = ["--prompts-per-step", "64", "--group-size", "16", "--max-new-tokens", "4", "--mini-batches", "4",
         "--eval-every", "0", "--checkpoint-every", "0", "--no-progress"]
CASES = [("emulated: mixed-8 knee", "problems/clusters/mixed-8.yaml", ["--emulate"]),
         ("as planned: local knee", "problems/clusters/local.yaml", [])]
FIGURES = ("step_s", "throughput_samples_s", "train_s")


def mosearch(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "mosearch.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True)
    if proc.returncode:
        raise SystemExit(f"mosearch {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return proc


def case(tmp: Path, name: str, cluster: str, flags: list[str], steps: int) -> dict:
    run = tmp / name.split(":")[0].replace(" ", "-")
    mosearch("plan", "--cluster", cluster, "--workload", "problems/workloads/tiny-grpo.yaml", "--out", str(run / "front"),
             "--evals", "3000", "--seed", "1", "--quiet", "--no-report")
    mosearch("pick", str(run / "front"), "--knee", "--out", str(run / "plan.yaml"))
    load = os.getloadavg()[0]
    t0 = time.time()
    mosearch("train", "--plan", str(run / "plan.yaml"), "--out", str(run / "run"), "--steps", str(steps), *flags, *SHAPE)
    summary = json.loads((run / "run" / "summary.json").read_text())
    pred = json.loads((run / "run" / "predicted_for_run.json").read_text())
    lay = summary["layout"]
    return {"name": name, "plan": summary["plan_id"], "mode": summary["mode"], "wall_s": time.time() - t0,
            "load": (load, os.getloadavg()[0]), "measured": summary["measured"], "predicted": pred["predicted"],
            "ran": f"{lay['engines']} engine(s), dp={lay['dp']} tp={lay['tp']} pp={lay['pp']} {lay['sharding']}",
            "notes": pred["notes"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--out", default=None, help="write the table here too (markdown)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="emupred-") as tmp:
        rows = [case(Path(tmp), *c, args.steps) for c in CASES]
    cmd = "python -m mosearch.bench.emulated_prediction" + (f" --steps {args.steps}" if args.steps != 10 else "")
    lines = ["# Emulated prediction", "", provenance.line(), "",
             f"`{cmd}` ({args.steps} steps each; the first step, engine warm-up, is left out of the means)", "",
             "| run | plan (mode) | what ran | " + " | ".join(f"{f} predicted / measured (error)" for f in FIGURES)
             + " | load average before / after |", "|" + "---|" * (4 + len(FIGURES))]
    for r in rows:
        cells = []
        for f in FIGURES:
            p, m = r["predicted"].get(f), r["measured"].get(f)
            cells.append(f"{p:.3g} / {m:.3g} ({(p / m - 1) * 100:+.0f}%)" if p and m else "-")
        lines.append(f"| {r['name']} | {r['plan']} ({r['mode']}) | {r['ran']} | " + " | ".join(cells)
                     + f" | {r['load'][0]:.1f} / {r['load'][1]:.1f} |")
    lines += ["", *[f"- {r['name']}: " + "; ".join(r["notes"]) for r in rows]]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
