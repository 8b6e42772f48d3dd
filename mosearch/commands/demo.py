"""`mosearch demo`: the whole product on this machine — plan, pick the knee, train the tiny model."""

from __future__ import annotations

import argparse
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="plan for the local cluster, pick the knee plan, train the tiny model on it")
    p.add_argument("--cluster", default=str(PACKAGE_ROOT / "problems" / "clusters" / "local.yaml"))
    p.add_argument("--workload", default=str(PACKAGE_ROOT / "problems" / "workloads" / "tiny-grpo.yaml"))
    p.add_argument("--out", default="results/demo", help="where the front, the plan and the run go")
    p.add_argument("--evals", type=int, default=3000, help="plans the search evaluates")
    p.add_argument("--steps", type=int, default=40, help="RL steps to train")
    p.add_argument("--warm-start-steps", type=int, default=150,
                   help="supervised steps on the task first, so RL starts from a model that sometimes succeeds")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
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
                                          "--seed", str(args.seed)]),
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
