"""`mosearch show`: a run's front as a terminal table, with the baselines' plans beside it."""

from __future__ import annotations

import argparse


from mosearch.report.terminal import console, SORT_KEYS, front_table, sort_plans
from mosearch.results import load_run
from problems.errors import InputError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("show", help="print a run's Pareto front as a table")
    p.add_argument("run_dir", metavar="RUN", help="run directory written by `mosearch plan`")
    p.add_argument("--sort", default="throughput", choices=list(SORT_KEYS),
                   help="objective to sort by (best first; default throughput)")
    p.add_argument("--limit", type=int, default=None, help="show at most N plans")
    p.add_argument("--with", dest="with_plan", metavar="PLAN",
                   help="a scored plan (e.g. from `mosearch import --out`) to set against the front")
    p.add_argument("--all", action="store_true", help="every Pareto plan found (front_all.csv), not only the front")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.limit is not None and args.limit < 1:
        raise InputError(None, "--limit", f"got {args.limit}", "a positive number of rows")
    run_ = load_run(args.run_dir)
    mine = _with_plan(args) if args.with_plan else None  # a bad plan file stops before the table
    plans = sort_plans(run_.all_plans if args.all else run_.plans, args.sort)
    shown = plans[: args.limit] if args.limit else plans
    knee_id = run_.info.get("knee")
    info = run_.info
    src = f"{info.get('algorithm', '?')}, {info.get('evaluations', '?')} evaluations" if info else "no run.yaml"
    if info.get("executor") not in (None, "mosearch"):
        src += f"; plans {info.get('executor_runs', info['executor'])} can start as planned"
    what = (f"{len(plans)} Pareto plans" if args.all else
            f"{len(plans)} distinct plans of {len(run_.all_plans)} Pareto plans found (--all: every one)")
    title = (f"{what}, sorted by {args.sort} ({src})"
             + (f"; first {len(shown)} shown" if len(shown) < len(plans) else "")
             + (" - PARTIAL: search interrupted" if run_.partial else ""))
    console().print(front_table(shown, run_.baselines, title, knee_id))
    if info.get("restriction"):
        from mosearch.planner.restriction import describe

        print(describe(info["restriction"]))
    if mine is not None:
        from mosearch.compare import against_front, summary

        print(summary(mine))
        print(against_front(mine, args.run_dir))
        line = extrapolation_line(mine, args.with_plan)
        if line:
            print(line)
    return 0


def _with_plan(args):
    """The --with plan, read and checked against the run (the same cluster and workload, scored)."""
    from mosearch.compare import check_same_problem
    from problems.placement.plan import load_plan

    mine = load_plan(args.with_plan)
    check_same_problem(mine, args.run_dir, args.with_plan)
    if "throughput_samples_s" not in mine.predicted or "cost_usd_h" not in mine.predicted:
        raise InputError(args.with_plan, "predicted", "no predicted throughput and cost",
                         "a plan scored by the model (mosearch import --out, mosearch pick)")
    return mine


def extrapolation_line(plan, plan_file: str) -> str | None:
    """Where the plan's cluster is calibrated (`mosearch calibrate`): a line when the plan is far from
    every run the calibration was fitted on."""
    from problems.placement.corrections import calibrated_layouts, extrapolation
    from problems.placement.planfiles import PlanInputs

    try:
        cluster = PlanInputs.load(plan_file).cluster()
    except (InputError, OSError):
        return None
    return extrapolation(plan, calibrated_layouts(cluster))
