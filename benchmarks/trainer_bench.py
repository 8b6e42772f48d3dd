"""Trainer benchmark: does the demo learn, how fast is it, async vs sync (and TRL when installed).

    python benchmarks/trainer_bench.py [--minutes 10] [--out results/bench]

Writes results/bench/trainer.md and trainer_reward_curve.png. Every figure is measured by this
script on the machine it runs on (the table says which); nothing is copied in.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PLAN = ROOT / "tests" / "trainer" / "data" / "local_plan.yaml"
# The demo defaults: what `mosearch demo` trains (tiny model, arithmetic, short supervised warm start).
DEMO = dict(model="tiny", task="arithmetic", prompts_per_step=32, group_size=8, max_new_tokens=4,
            warm_start_steps=150, lr=2e-4, eval_every=10, eval_size=128, checkpoint_every=0)


def _plan(tmp: Path, mode: str, k: int, chunks: int) -> Path:
    data = yaml.safe_load(PLAN.read_text())
    data["execution"] = {"mode": mode, "staleness_bound": k, "pipeline_chunks": chunks}
    data["plan_id"] = f"bench-{mode}-k{k}-c{chunks}"
    path = tmp / f"{data['plan_id']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _rows(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def learning_curve(tmp: Path, minutes: float) -> dict:
    """Train with the demo defaults until the time budget is spent; held-out reward every eval."""
    from trainer.driver import Driver, RunConfig

    out = tmp / "curve"
    cfg = RunConfig(plan=str(_plan(tmp, "disaggregated", 0, 2)), out=str(out), steps=100_000, progress=False, **DEMO)
    d = Driver(cfg)
    t0 = time.time()
    d.setup()
    # stop at the first step boundary after the budget: the loop reads cfg.steps each step
    import threading

    def stopper():
        while d.status != "finished" and time.time() - t0 < minutes * 60:
            time.sleep(1)
        cfg.steps = min(cfg.steps, d.step + 1)

    threading.Thread(target=stopper, daemon=True).start()
    try:
        d.fit()
    finally:
        d.shutdown()
    rows = _rows(out)
    t_start = t0
    curve, elapsed = [], 0.0
    for r in rows:
        if "time" in r:
            elapsed += r["time"]["wall"]
        if "reward_heldout" in r:
            curve.append((r["step"], elapsed, r["reward_heldout"]))
    return {"curve": curve, "wall_s": time.time() - t_start, "steps": d.step}


def throughput(tmp: Path, mode: str, k: int, chunks: int, steps: int) -> dict:
    from trainer.driver import RunConfig, run

    out = tmp / f"tp-{mode}-{k}-{chunks}"
    cfg = RunConfig(plan=str(_plan(tmp, mode, k, chunks)), out=str(out), steps=steps, progress=False,
                    **(DEMO | {"eval_every": 0, "warm_start_steps": DEMO["warm_start_steps"]}))
    s = run(cfg)
    return s["measured"]


def plot(curve: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([c[1] / 60 for c in curve], [c[2] for c in curve], marker="o")
    ax.set_xlabel("training wall time (min, evaluation excluded)")
    ax.set_ylabel("held-out exact-match reward")
    ax.set_title("tiny model, arithmetic, GRPO (vLLM rollouts on Ray, CPU)")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--steps", type=int, default=30, help="steps per throughput run")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench"))
    ap.add_argument("--work", default=str(ROOT / "runs" / "bench-trainer"))
    args = ap.parse_args()
    tmp = Path(args.work)
    tmp.mkdir(parents=True, exist_ok=True)
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)

    lc = learning_curve(tmp, args.minutes)
    plot(lc["curve"], outdir / "trainer_reward_curve.png")
    sync = throughput(tmp, "disaggregated", 0, 1, args.steps)
    asyn = throughput(tmp, "async", 2, 1, args.steps)
    try:
        import trl  # noqa: F401

        trl_note = "TRL is installed but the side-by-side run is not implemented yet"
    except ImportError:
        trl_note = "not measured: TRL is not installed in this environment (`pip install -e .[compare]`)"

    lines = [
        "# Trainer benchmark",
        "",
        f"Measured by `python benchmarks/trainer_bench.py --minutes {args.minutes:g} --steps {args.steps}` on "
        f"{platform.machine()} CPU ({platform.processor() or 'unknown'}), no GPU; Ray local, vLLM CPU build, fp32.",
        "The machine was shared with other jobs, so absolute speeds are noisy.",
        "",
        "Demo defaults: " + ", ".join(f"{k}={v}" for k, v in DEMO.items()) + "; plan: 1 rollout engine + 1 training rank "
        "(disaggregated, 2 pipeline chunks).",
        "",
        "## Held-out reward (greedy, 128 held-out prompts)",
        "",
        "| step | train wall (min) | held-out reward |",
        "|---:|---:|---:|",
    ]
    lines += [f"| {s} | {t / 60:.2f} | {r:.3f} |" for s, t, r in lc["curve"]]
    first, last = lc["curve"][0][2], lc["curve"][-1][2]
    lines += ["", f"From {first:.3f} to {last:.3f} in {lc['steps']} steps ({lc['wall_s'] / 60:.1f} min including "
                  "set-up, warm start and evaluation). Curve: `trainer_reward_curve.png`.", "",
              f"## Throughput, {args.steps} steps each (first step excluded as warm-up)", "",
              "| run | samples/s | tokens/s (prompt+gen) | gen tokens/s | step s | rollout s | train s | staleness |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, m in (("ours, disaggregated sync", sync), ("ours, async k=2", asyn)):
        lines.append(f"| {name} | {m['throughput_samples_s']:.1f} | {m['throughput_tokens_s']:.0f} | {m['gen_tokens_s']:.0f} | "
                     f"{m['step_s']:.3f} | {m['rollout_s']:.3f} | {m['train_s']:.3f} | {m['staleness']:.2f} |")
    lines += ["", f"Async k=2 / sync samples/s: {asyn['throughput_samples_s'] / sync['throughput_samples_s']:.2f}x.", "",
              f"TRL GRPOTrainer: {trl_note}.", ""]
    (outdir / "trainer.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
