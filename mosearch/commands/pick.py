"""`mosearch pick`: choose one plan from a run's front and write it as a plan file."""

from __future__ import annotations

import argparse
from pathlib import Path


from mosearch import decide
from mosearch.decide import Limits
from mosearch.report.terminal import console, front_table, plan_tables
from mosearch.results import load_run
from problems.atomic import atomic_write_text
from problems.errors import InputError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pick", help="choose a plan from a front (knee, limits, weights) and write plan.yaml")
    p.add_argument("run_dir", metavar="RUN", help="run directory written by `mosearch plan`")
    rule = p.add_mutually_exclusive_group()
    rule.add_argument("--knee", action="store_true", help="the knee of the front (the default rule)")
    rule.add_argument("--weights", metavar="throughput=..,cost=..,memory=..,staleness=..",
                      help="importance weights; the plan minimising the achievement function on normalised objectives")
    p.add_argument("--max-cost", type=float, help="$/h")
    p.add_argument("--min-throughput", type=float, help="samples/s")
    p.add_argument("--max-staleness", type=float, help="mean policy-version lag")
    p.add_argument("--max-mem-frac", type=float, help="peak memory fraction")
    p.add_argument("--out", help="plan file to write (default RUN/plan.yaml)")
    p.set_defaults(func=run)


def run(args) -> int:
    run_ = load_run(args.run_dir)
    if not run_.plans:
        raise InputError(str(Path(args.run_dir) / "front.json"), "plans", "the front is empty", "a run that found plans")
    weights = None
    if args.weights:
        try:
            weights = decide.parse_weights(args.weights)
        except ValueError as err:
            raise InputError(None, "--weights", str(err)) from None
    limits = Limits(args.max_cost, args.min_throughput, args.max_staleness, args.max_mem_frac)
    F = run_.F
    choice = decide.choose(F, limits, weights)
    con = console()
    if run_.partial:
        con.print("[yellow]note: this front comes from an interrupted search (partial)[/]")
    if choice.index is None:
        near = [run_.plans[i] for i in choice.closest]
        con.print(f"[red]No plan of the {len(run_.plans)} on the front meets {limits.describe()}.[/] "
                      f"The closest:")
        con.print(front_table(near, {}, "closest plans (least total relative miss)", None))
        return 1
    plan = run_.plans[choice.index]
    how = "knee of the front" if choice.rule == "knee" else f"weights {args.weights}"
    within = f" among {len(choice.candidates)} plans within {limits.describe()}" if limits.any() else ""
    con.print(f"[bold]Chose {plan.plan_id}[/] by {how}{within}.")
    for t in plan_tables(plan, run_.plans):
        con.print(t)
    out = Path(args.out) if args.out else Path(args.run_dir) / "plan.yaml"
    atomic_write_text(out, plan.to_yaml())
    con.print(f"Wrote {out}. Run it: mosearch train --plan {out}")
    return 0
