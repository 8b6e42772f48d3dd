"""Trainer benchmark: does the demo learn, how fast is it against TRL, async vs sync.

    python -m mosearch.bench.trainer_bench [--minutes 10] [--steps 20] [--out results/bench]

1. Learning: the `mosearch demo` stages with the demo's own defaults (plan the local cluster, pick
   the knee, train the tiny model on arithmetic), held-out reward every few steps, until the demo's
   step count or the time budget ends. Writes trainer_reward_curve.png.
2. Speed, in one run on the same tiny model and task: our synchronous trainer against TRL's
   GRPOTrainer (mosearch/bench/trl_compare.py, a separate process) at the demo's batch shape, and our
   async mode (k=2) against sync at a shape where rollout and training take comparable time.

Needs the `compare` extra (pinned TRL and datasets; ./setup.sh installs it). Writes
results/bench/trainer.md (with --skip-curve: trainer_speed.md). Every figure is measured by this script on the machine it runs
on; the load average is read before and after each part because the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml
from mosearch.bench import provenance

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
PLAN = ROOT / "tests" / "trainer" / "data" / "local_plan.yaml"


def demo_defaults() -> dict:
    """The defaults `mosearch demo` trains with, read from its parser so they cannot drift."""
    import argparse as ap

    from mosearch.commands import demo

    sub = ap.ArgumentParser().add_subparsers()
    demo.add_parser(sub)
    args = sub.choices["demo"].parse_args([])
    return vars(args)


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _fixed_plan(tmp: Path, mode: str, k: int, chunks: int, micro_batch: int | None = None,
                max_num_seqs: int | None = None) -> Path:
    """1 engine + 1 rank on `local` (tests/trainer/data/local_plan.yaml), in `mode`; optionally
    another training micro-batch and engine concurrency."""
    data = yaml.safe_load(PLAN.read_text())
    data["execution"] = {"mode": mode, "staleness_bound": k, "pipeline_chunks": chunks}
    if micro_batch:
        data["train"]["micro_batch"] = micro_batch
    if max_num_seqs:
        data["rollout"]["max_num_seqs"] = max_num_seqs
    if mode == "colocated":  # both devices take turns: 2 engines, then 2 DDP ranks
        data["pools"][0].update(rollout_gpus=0, train_gpus=0, shared_gpus=2)
        data["train"]["dp"] = 2
    data["plan_id"] = f"bench-{mode}-k{k}-c{chunks}" + (f"-mb{micro_batch}-s{max_num_seqs}" if micro_batch else "")
    path = tmp / f"{data['plan_id']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _train_cfg(d: dict) -> dict:
    return dict(model="tiny", task="arithmetic", prompts_per_step=d["prompts_per_step"], group_size=d["group_size"],
                max_new_tokens=d["max_new_tokens"], warm_start_steps=d["warm_start_steps"], lr=d["lr"],
                lr_schedule=d["lr_schedule"], lr_final_ratio=d["lr_final_ratio"], mini_batches=d["mini_batches"],
                temperature=d["temperature"], seed=d["seed"])


def demo_plan(tmp: Path, d: dict) -> Path:
    """Stages 1-2 of the demo: search the local cluster's front and pick its knee."""
    from mosearch.cli import main

    front, plan = tmp / "front", tmp / "plan.yaml"
    if main(["plan", "--cluster", d["cluster"], "--workload", d["workload"], "--out", str(front),
             "--evals", str(d["evals"]), "--seed", str(d["seed"])]):
        raise SystemExit("demo plan stage failed")
    if main(["pick", str(front), "--knee", "--out", str(plan)]):
        raise SystemExit("demo pick stage failed")
    return plan


def learning_curve(tmp: Path, plan: Path, d: dict, minutes: float, eval_every: int) -> dict:
    """Stage 3 of the demo with its defaults; stops at the demo's step count or the time budget."""
    from trainer.driver import Driver, RunConfig

    out = tmp / "curve"
    cfg = RunConfig(plan=str(plan), out=str(out), steps=d["steps"], progress=False, eval_every=eval_every,
                    eval_size=128, checkpoint_every=0, **_train_cfg(d))
    t0 = time.time()
    drv = Driver(cfg)
    drv.setup()
    t_ready = time.time()

    def stopper():  # the loop reads cfg.steps every step: end at the first step boundary after the budget
        while drv.status != "finished" and time.time() - t_ready < minutes * 60:
            time.sleep(1)
        cfg.steps = min(cfg.steps, drv.step + 1)

    threading.Thread(target=stopper, daemon=True).start()
    try:
        drv.fit()
    finally:
        drv.shutdown()
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    curve, elapsed = [], 0.0
    for r in rows:
        if "time" in r:
            elapsed += r["time"]["wall"]  # includes evaluation: the wall clock a user waits
        if "reward_heldout" in r:
            curve.append((r["step"], elapsed, r["reward_heldout"], r.get("reward_train")))
    result = {"curve": curve, "setup_s": t_ready - t0, "rl_s": time.time() - t_ready, "steps": drv.step,
              "mode": drv.mode, "plan_id": drv.plan.plan_id}
    (tmp / "curve.json").write_text(json.dumps(result))
    return result


def throughput(tmp: Path, mode: str, k: int, chunks: int, steps: int, shape: dict, plan_kw: dict) -> dict:
    from trainer.driver import RunConfig, run

    out = tmp / f"tp-{mode}-{k}-{chunks}-{shape['group_size']}"
    cfg = RunConfig(plan=str(_fixed_plan(tmp, mode, k, chunks, **plan_kw)), out=str(out), steps=steps, progress=False,
                    eval_every=0, checkpoint_every=0, **shape)
    return run(cfg, log=lambda m: None)["measured"] | {"load": _load()}


def trl(tmp: Path, steps: int, shape: dict, use_vllm: bool) -> dict:
    """TRL's GRPOTrainer in its own process (it must not share our Ray session or vLLM engine)."""
    out = tmp / f"trl-{'vllm' if use_vllm else 'hf'}.json"
    cmd = [sys.executable, "-m", "mosearch.bench.trl_compare", "--steps", str(steps), "--json", str(out),
           "--prompts-per-step", str(shape["prompts_per_step"]), "--group-size", str(shape["group_size"]),
           "--max-new-tokens", str(shape["max_new_tokens"]), "--lr", str(shape["lr"]),
           "--temperature", str(shape["temperature"]), "--warm-start-steps", str(shape["warm_start_steps"])]
    if use_vllm:
        cmd.append("--vllm")
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if p.returncode or not out.is_file():
        lines = p.stderr.strip().splitlines() or ["no output"]
        last = next((x for x in reversed(lines) if "Error" in x), lines[-1])  # the exception, not a progress bar
        return {"error": last.strip()[:300].replace("|", "/")}
    return json.loads(out.read_text()) | {"load": _load()}


def plot(curve: list, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.plot([c[1] / 60 for c in curve], [c[2] for c in curve], marker="o", ms=3, label="held-out (greedy)")
    ax.plot([c[1] / 60 for c in curve[1:]], [c[3] for c in curve[1:]], alpha=0.6, label="train batch (sampled)")
    ax.set_xlabel("RL wall time (min, after the warm start and set-up)")
    ax.set_ylabel("exact-match reward")
    ax.set_title(title, fontsize=9)
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _row(name: str, m: dict) -> str:
    return (f"| {name} | {m['throughput_samples_s']:.1f} | {m['throughput_tokens_s']:.0f} | {m['step_s']:.3f} | "
            f"{m['rollout_s']:.3f} | {m['train_s']:.3f} | {m['staleness']:.2f} | {m['load']} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=10.0, help="time budget of the RL phase of the learning run")
    ap.add_argument("--eval-every", type=int, default=20)
    ap.add_argument("--steps", type=int, default=20, help="steps per throughput run")
    ap.add_argument("--async-group", type=int, default=16, help="group size of the async vs sync runs")
    ap.add_argument("--skip-curve", action="store_true",
                    help="speed runs only, written to trainer_speed.md (trainer.md keeps the learning curve)")
    ap.add_argument("--curve-plan", choices=["knee", "fixed"], default="knee",
                    help="knee: the plan the demo picks; fixed: 1 engine + 1 rank, disaggregated, micro-batch 16")
    ap.add_argument("--reuse-curve", action="store_true",
                    help="take the learning curve of the last run from --work/curve.json instead of training again")
    ap.add_argument("--speed-micro-batch", type=int, default=128,
                    help="training micro-batch of the speed runs' plan (TRL trains the whole batch at once)")
    ap.add_argument("--speed-max-seqs", type=int, default=256, help="engine concurrency of the speed runs' plan")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench"))
    ap.add_argument("--work", default=str(ROOT / "runs" / "bench-trainer"))
    args = ap.parse_args()
    tmp = Path(args.work)
    tmp.mkdir(parents=True, exist_ok=True)
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    d = demo_defaults()
    shape = _train_cfg(d)
    # the command as it reproduces the figures: where the outputs and work files go does not change them
    shown = [a for i, a in enumerate(sys.argv[1:]) if a not in ("--out", "--work")
             and (i == 0 or sys.argv[i] not in ("--out", "--work"))]
    cmd = "python -m mosearch.bench.trainer_bench " + " ".join(shown)
    lines = ["# Trainer benchmark", "", provenance.line(), "",
             f"Measured by `{cmd.strip()}` on {platform.machine()} CPU, {os.cpu_count()} cores shared with other jobs, "
             "no GPU; Ray local, vLLM CPU build, fp32. Load average (1/5/15 min) is noted per part: speeds are noisy.",
             "", "Demo defaults (`mosearch demo`, read from its parser): "
             + ", ".join(f"{k}={d[k]}" for k in ("steps", "warm_start_steps", "lr", "lr_schedule", "lr_final_ratio",
                                                   "mini_batches", "prompts_per_step", "group_size",
                                                   "max_new_tokens", "temperature")) + "; task arithmetic "
             "(a+b or a-b, operands 0-19, non-negative results; 482 train / 128 held-out distinct prompts).", ""]

    if not args.skip_curve:
        if args.reuse_curve:
            lc = json.loads((tmp / "curve.json").read_text())
            load0, load1 = lc["load"]
        else:
            load0 = _load()
            plan = demo_plan(tmp, d) if args.curve_plan == "knee" else _fixed_plan(tmp, "disaggregated", 0, 2)
            lc = learning_curve(tmp, plan, d, args.minutes, args.eval_every)
            load1 = _load()
            lc["load"] = [load0, load1]
            (tmp / "curve.json").write_text(json.dumps(lc))
        title = (f"tiny model, arithmetic, GRPO ({lc['mode']}, {args.curve_plan} plan); warm start {d['warm_start_steps']} "
                 f"steps, lr {d['lr']:g} {d['lr_schedule']}, {d['prompts_per_step']}x{d['group_size']}, "
                 f"{d['mini_batches']} update(s)/step")
        plot(lc["curve"], outdir / "trainer_reward_curve.png", title)
        first, last = lc["curve"][0][2], lc["curve"][-1][2]
        best = max(c[2] for c in lc["curve"])
        hit = next((c for c in lc["curve"] if c[2] >= 0.6), None)
        lines += ["## 1. Does the demo learn? Held-out reward (greedy, 128 held-out prompts)", "",
                  f"Plan: `{lc['plan_id']}` (mode {lc['mode']}; {args.curve_plan}). Set-up (Ray, engines, warm start) "
                  f"{lc['setup_s']:.0f} s; RL {lc['rl_s'] / 60:.1f} min for {lc['steps']} steps. Load {load0} -> {load1}.",
                  "", "| step | RL wall (min) | held-out reward | train batch reward |", "|---:|---:|---:|---:|"]
        lines += [f"| {s} | {t / 60:.2f} | {r:.3f} | {'-' if tr is None else f'{tr:.3f}'} |" for s, t, r, tr in lc["curve"]]
        lines += ["", f"Held-out reward {first:.3f} at step 0 (after the warm start, before RL) -> {last:.3f} at the "
                  f"end (best {best:.3f}); first >= 0.6 "
                  + (f"at step {hit[0]}, {hit[1] / 60:.1f} min of RL." if hit else "not reached.")
                  + " Curve: `trainer_reward_curve.png`.", ""]

    # Speed: the demo's batch shape with one optimizer update per step, as TRL's GRPOTrainer takes.
    # The plan is 1 engine + 1 rank with a micro-batch and engine concurrency suited to this
    # machine (TRL trains the whole batch as one micro-batch); TRL's loop is synchronous and
    # on-policy, so our synchronous modes are its match and async k = 2 is reported beside them.
    speed = shape | {"mini_batches": 1, "lr_schedule": "constant", "group_size": args.async_group}
    kw = {"micro_batch": args.speed_micro_batch, "max_num_seqs": args.speed_max_seqs}
    sync = throughput(tmp, "disaggregated", 0, 1, args.steps, speed, kw)
    piped = throughput(tmp, "disaggregated", 0, 4, args.steps, speed, kw)
    coloc = throughput(tmp, "colocated", 0, 1, args.steps, speed, kw)
    asyn = throughput(tmp, "async", 2, 1, args.steps, speed, kw)
    trl_hf = trl(tmp, args.steps, speed, use_vllm=False)

    head = ["| run | samples/s | tokens/s (prompt+gen) | step s | rollout s | train s | staleness | load |",
            "|---|---:|---:|---:|---:|---:|---:|---|"]
    lines += [f"## 2. Speed: ours (sync, elastic pipelining, async k=2) vs TRL GRPOTrainer ({args.steps} steps each, "
              "first step excluded as warm-up)", "",
              f"Same tiny model (same warm start), task, batch {speed['prompts_per_step']} prompts x "
              f"{speed['group_size']}, max {speed['max_new_tokens']} new tokens, temperature {speed['temperature']}, "
              f"constant lr {speed['lr']:g}, one optimizer update per step, GRPO loss, no KL. Ours: 1 vLLM engine + 1 "
              f"training rank (one core each; colocated: both cores take turns), training micro-batch {args.speed_micro_batch}, engine concurrency "
              f"{args.speed_max_seqs}. TRL: one process, both cores, the whole batch as one micro-batch, "
              "generating with transformers (its vLLM colocate mode fails on the CPU build of vLLM: "
              "`'Parameter' object has no attribute 'weight_loader'`). TRL and datasets come from the "
              "`compare` extra (pyproject.toml; ./setup.sh installs it).", ""] + head
    lines += [_row("ours, disaggregated sync", sync), _row("ours, sync + elastic pipelining (4 chunks)", piped),
              _row("ours, colocated on both devices (2 engines, then 2 DDP ranks)", coloc), _row("ours, async k=2", asyn)]
    for name, t in (("TRL GRPOTrainer, transformers generate", trl_hf),):
        if "error" in t:
            lines.append(f"| {name} | failed: {t['error']} | | | | | | |")
        else:
            lines.append(f"| {name} (TRL {t['trl_version']}, {t['threads']} threads) | {t['samples_s']:.1f} | "
                         f"{t['tokens_s']:.0f} | {t['step_s']:.3f} | - | - | 0 | {t['load']} |")
    ok = [t for t in (trl_hf,) if "error" not in t]
    if ok:
        best_trl = max(ok, key=lambda t: t["tokens_s"])
        best_sync = max((sync, piped, coloc), key=lambda m: m["throughput_tokens_s"])
        lines += ["", f"Tokens/s against the best TRL run (TRL with {best_trl['generation']}): ours sync "
                  f"{sync['throughput_tokens_s'] / best_trl['tokens_s']:.2f}x, sync + elastic pipelining "
                  f"{piped['throughput_tokens_s'] / best_trl['tokens_s']:.2f}x, colocated on both devices "
                  f"{coloc['throughput_tokens_s'] / best_trl['tokens_s']:.2f}x (best on-policy mode "
                  f"{best_sync['throughput_tokens_s'] / best_trl['tokens_s']:.2f}x), async k=2 "
                  f"{asyn['throughput_tokens_s'] / best_trl['tokens_s']:.2f}x."]
    lines += ["", f"Async k=2 / sync samples/s: {asyn['throughput_samples_s'] / sync['throughput_samples_s']:.2f}x; "
              f"async k=2 / sync + elastic pipelining: {asyn['throughput_samples_s'] / piped['throughput_samples_s']:.2f}x.", ""]
    # a speed-only run keeps the committed learning curve: its table goes beside it
    (outdir / ("trainer_speed.md" if args.skip_curve else "trainer.md")).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
