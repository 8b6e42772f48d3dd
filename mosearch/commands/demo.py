"""`mosearch demo`: the whole product on this machine — plan, pick the knee, train the tiny model."""

from __future__ import annotations

import argparse
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
# What the demo trains: the tiny model on the arithmetic task (operands 0-19, see trainer/tasks.py).
# Warm start 220 supervised steps: held-out 0.148 (<= 0.2, right format: digits then end of sequence).
# RL: 64 prompts x 16 samples, lr 5e-4 decayed by a cosine to 5e-5 over the run's 300 steps, 4 optimizer
# updates per step on quarters of the batch. With a constant 5e-4 the held-out reward rose to ~0.48 and
# then oscillated; with the decay it kept rising. Runs of the fixed 1-engine + 1-rank plan (same seed,
# load 6-12, held-out reward at steps 200 / 220): 300-step cosine 0.54 / 0.57 (0.64 at 240), the same
# with 4 updates per step 0.63 / 0.66 (chosen), 220-step cosine 0.63 / 0.63 and on the knee plan 0.59 / 0.59;
# lr 8e-4 and 1e-3 (with 20 warm-up steps) lost the warm start's accuracy first. Answers have at most 2
# digits + end of sequence, so 4 new tokens suffice. On `local` the knee plan (with the shipped profile)
# is colocated on one device: about 2.2 s per step on a quiet 2-core machine, 300 steps ~11 minutes.
DEFAULTS = dict(steps=300, warm_start_steps=220, lr=5e-4, lr_schedule="cosine", lr_final_ratio=0.1, mini_batches=4,
                prompts_per_step=64, group_size=16, max_new_tokens=4, temperature=1.0)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="plan for the local cluster, pick the knee plan, train the tiny model on it")
    p.add_argument("--cluster", default=str(PACKAGE_ROOT / "problems" / "clusters" / "local.yaml"))
    p.add_argument("--workload", default=str(PACKAGE_ROOT / "problems" / "workloads" / "tiny-grpo.yaml"))
    p.add_argument("--out", default="results/demo", help="where the front, the plan and the run go")
    p.add_argument("--evals", type=int, default=3000, help="plans the search evaluates")
    # Training defaults: measured in results/bench/trainer.md (mosearch/bench/trainer_bench.py reads them).
    p.add_argument("--steps", type=int, default=DEFAULTS["steps"], help="RL steps to train")
    p.add_argument("--warm-start-steps", type=int, default=DEFAULTS["warm_start_steps"],
                   help="supervised steps on the task first: right output format, low accuracy (held-out <= 0.2)")
    p.add_argument("--lr", type=float, default=DEFAULTS["lr"], help="RL learning rate")
    p.add_argument("--lr-schedule", default=DEFAULTS["lr_schedule"], choices=["constant", "cosine", "linear"])
    p.add_argument("--lr-final-ratio", type=float, default=DEFAULTS["lr_final_ratio"])
    p.add_argument("--mini-batches", type=int, default=DEFAULTS["mini_batches"], help="optimizer updates per step")
    p.add_argument("--prompts-per-step", type=int, default=DEFAULTS["prompts_per_step"])
    p.add_argument("--group-size", type=int, default=DEFAULTS["group_size"], help="samples per prompt")
    p.add_argument("--max-new-tokens", type=int, default=DEFAULTS["max_new_tokens"])
    p.add_argument("--temperature", type=float, default=DEFAULTS["temperature"])
    p.add_argument("--seed", type=int, default=0)
    from mosearch.commands.profile import add_profile_flag

    add_profile_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mosearch.commands.profile import follow_machine

    follow_machine(args)
    from rich.console import Console

    from mosearch.cli import main

    console = Console()
    out = Path(args.out)
    front = out / "front"
    plan = out / "plan.yaml"
    stages = [
        ("1/3 search the placement front", ["plan", "--cluster", args.cluster, "--workload", args.workload,
                                            "--out", str(front), "--evals", str(args.evals), "--seed", str(args.seed)]),
        ("2/3 pick the knee of the front", ["pick", str(front), "--knee", "--out", str(plan)]),
        ("3/3 train on the chosen plan", ["train", "--plan", str(plan), "--steps", str(args.steps),
                                          "--out", str(out / "run"), "--warm-start-steps", str(args.warm_start_steps),
                                          "--seed", str(args.seed), "--task", "arithmetic", "--lr", str(args.lr),
                                          "--lr-schedule", args.lr_schedule, "--lr-final-ratio", str(args.lr_final_ratio),
                                          "--mini-batches", str(args.mini_batches),
                                          "--prompts-per-step", str(args.prompts_per_step),
                                          "--group-size", str(args.group_size),
                                          "--max-new-tokens", str(args.max_new_tokens),
                                          "--temperature", str(args.temperature)]),
    ]
    for title, argv in stages:
        console.rule(f"[bold]mosearch demo {title}")
        console.print("$ mosearch " + " ".join(argv), style="dim")
        code = main(argv)
        if code:
            console.print(f"[red]demo stopped: `mosearch {argv[0]}` exited with {code}")
            return code
    console.rule("[bold green]demo done")
    console.print(f"front and report: {front}/report.html   plan: {plan}   run: {out / 'run'}/metrics.jsonl")
    return 0
