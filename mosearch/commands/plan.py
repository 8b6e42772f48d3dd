"""`mosearch plan`: search the placement plans of a cluster for a workload; write the front."""

from __future__ import annotations

import argparse
import sys
import time


from mosearch import decide
from mosearch.decide import Limits
from mosearch.planner import algorithms
from mosearch.planner.checkpoint import DEFAULT_EVERY
from mosearch.planner.search import SearchSettings
from problems.errors import InputError
from problems.placement.executors import EXECUTORS


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="search placement plans and write the Pareto front to a run directory")
    p.add_argument("--cluster", help="cluster spec YAML (see problems/clusters/)")
    p.add_argument("--workload", help="workload spec YAML (see problems/workloads/)")
    p.add_argument("--out", help="run directory to write (created if missing)")
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="go on with an interrupted run from its last checkpoint, with its own inputs and settings "
                        "(--time: a new time limit for the rest)")
    p.add_argument("--checkpoint-every", type=int, default=DEFAULT_EVERY, metavar="K",
                   help=f"save the search state every K generations into RUN_DIR/checkpoint/ (default {DEFAULT_EVERY})")
    p.add_argument("--algorithm", default=algorithms.DEFAULT,
                   help=f"search algorithm (default {algorithms.DEFAULT}); baselines: nsga3, moead, rvea, agemoea2, "
                        "deap-nsga3, random")
    p.add_argument("--evals", type=int, help=f"evaluation budget (default {SearchSettings.evals} when --time is not given)")
    p.add_argument("--time", type=float, dest="time_s", metavar="SECONDS",
                   help="wall-time limit of the search (with --evals, whichever comes first)")
    p.add_argument("--seed", type=int, help="random seed (default 1)")
    p.add_argument("--pop-size", type=int, default=SearchSettings.pop_size)
    p.add_argument("--max-cost", type=float, help="budget, $/h")
    p.add_argument("--min-throughput", type=float, help="samples/s")
    p.add_argument("--max-staleness", type=float, help="mean policy-version lag")
    p.add_argument("--max-mem-frac", type=float, help="peak memory as a fraction of each GPU's")
    p.add_argument("--resolution", metavar="throughput=0.05,cost=0.05,memory=0.15,staleness=1",
                   help="plans closer than this count as one on the front shown (throughput and cost relative, "
                        "memory and staleness absolute; unnamed objectives keep these defaults)")
    p.add_argument("--executor", choices=list(EXECUTORS), default=None,
                   help="search only plans this executor can start as planned: mosearch (this project's trainer, "
                        "the default), verl 0.9.1, areal 1.0.4, rlinf 0.3.0 (rules: problems/placement/executors.py)")
    p.add_argument("--jobs", type=int, default=1, help="evaluate populations across this many Ray tasks (default 1: in process)")
    p.add_argument("--no-report", action="store_true", help="skip the plots and report.html")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    from mosearch.commands.profile import add_profile_flag

    add_profile_flag(p)
    p.set_defaults(func=run)


RESUME_FIXED = ("cluster", "workload", "out", "evals", "seed", "max_cost", "min_throughput", "max_staleness",
                "max_mem_frac", "resolution", "executor")


def _check_resume(args) -> None:
    given = [n for n in RESUME_FIXED if getattr(args, n) is not None]
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise InputError(None, flag, "cannot be changed when resuming", "only --resume RUN_DIR (and --time, --quiet)")
    if args.time_s is not None and args.time_s <= 0:
        raise InputError(None, "--time", f"got {args.time_s}", "a positive number of seconds")


def _check(args) -> None:
    for flag, v in (("--cluster", args.cluster), ("--workload", args.workload), ("--out", args.out)):
        if not v:
            raise InputError(None, flag, "missing", f"{flag} (or --resume RUN_DIR)")
    _check_out(args.out)
    if args.evals is not None and args.evals < 1:
        raise InputError(None, "--evals", f"got {args.evals}", "a positive number of evaluations")
    if args.time_s is not None and args.time_s <= 0:
        raise InputError(None, "--time", f"got {args.time_s}", "a positive number of seconds")
    if args.pop_size < 4:
        raise InputError(None, "--pop-size", f"got {args.pop_size}", "at least 4")
    if args.jobs < 1:
        raise InputError(None, "--jobs", f"got {args.jobs}", "1 or more")
    if args.seed is not None and not 0 <= args.seed < 2 ** 32:  # what NumPy's generators take
        raise InputError(None, "--seed", f"got {args.seed}", "an integer from 0 to 2**32 - 1")
    Limits(args.max_cost, args.min_throughput, args.max_staleness, args.max_mem_frac).check()
    algorithms.check_name(args.algorithm)
    _resolution(args)
    if args.checkpoint_every < 1:
        raise InputError(None, "--checkpoint-every", f"got {args.checkpoint_every}", "1 or more generations")


def _check_out(out: str) -> None:
    """--out must be, or be creatable as, a directory: a file there (or on its path) ended in
    FileExistsError / NotADirectoryError with a traceback after the search."""
    from pathlib import Path

    path = Path(out)
    while not path.exists() and path != path.parent:
        path = path.parent
    if path.exists() and not path.is_dir():
        raise InputError(None, "--out", f"{path} is a file", "a run directory (new, or one `mosearch plan` wrote)")


def _resolution(args):
    try:
        return decide.RESOLUTION if args.resolution is None else decide.parse_resolution(args.resolution)
    except ValueError as err:
        raise InputError(None, "--resolution", str(err)) from None


def run(args) -> int:
    from mosearch.commands.profile import follow_machine

    follow_machine(args)
    from mosearch.planner.run import plan_run, resume_run
    from mosearch.report.terminal import console, front_table

    t0 = time.perf_counter()
    if args.resume:
        _check_resume(args)
        args.out = args.resume
        outcome = resume_run(args.resume, progress=not args.quiet, time_s=args.time_s, report=not args.no_report,
                             checkpoint_every=args.checkpoint_every)
    else:
        _check(args)
        calibration_line(args.cluster)
        # --time alone: the time limit alone; neither: the default budget
        evals = args.evals if args.evals is not None else None if args.time_s is not None else SearchSettings.evals
        settings = SearchSettings(algorithm=args.algorithm, evals=evals, time_s=args.time_s, seed=1 if args.seed is None else args.seed,
                                  pop_size=args.pop_size, jobs=args.jobs, progress=not args.quiet)
        limits = Limits(args.max_cost, args.min_throughput, args.max_staleness, args.max_mem_frac)
        outcome = plan_run(args.cluster, args.workload, args.out, settings, limits, report=not args.no_report,
                           checkpoint_every=args.checkpoint_every, resolution=_resolution(args),
                           executor=args.executor)
    res = outcome.result
    out = console()
    knee_id = outcome.plans[outcome.knee].plan_id if outcome.knee is not None else None
    shown = [outcome.plans[i] for i in outcome.front]
    top = shown[:10]
    if knee_id and all(p.plan_id != knee_id for p in top):
        top.append(outcome.plans[outcome.knee])
    out.print(front_table(top, outcome.baselines,
                          f"{len(shown)} distinct plans of {len(outcome.plans)} Pareto plans found (fastest 10 shown; "
                          f"the rest: mosearch show {args.out})", knee_id))
    if outcome.restriction is not None:
        from mosearch.planner.restriction import describe

        out.print(describe(outcome.restriction))
    for note in outcome.notes:
        out.print(f"note: {note}", soft_wrap=True)
    far = extrapolated(args.cluster if not args.resume else None, shown)
    if far:
        out.print(far, soft_wrap=True)
    state = "PARTIAL (interrupted): " if res.partial else ""
    # the time of all the evaluations counted (the structured stage's and the seeds' too, not only the
    # evolutionary search's) and of writing the results: what the user waited for
    out.print(f"{state}{outcome.evaluations} evaluations in {time.perf_counter() - t0:.1f} s, hypervolume "
                  f"{res.history[-1]['hv']:.4f}; knee {knee_id}. Written to {args.out}/ "
                  f"(front.csv, plans/{'' if args.no_report else ', report.html'}). Next: mosearch pick {args.out}")
    if res.partial:
        print("mosearch: search interrupted; the front written is what was found so far", file=sys.stderr)
        return 130
    return 0


def calibration_line(cluster_path: str) -> None:
    """One line when the cluster carries corrections fitted on its runs (`mosearch calibrate`)."""
    from problems.placement.specs import load_cluster

    cluster = load_cluster(cluster_path)
    if cluster.calibration:
        from problems.placement.corrections import load_calibration

        cal = load_calibration(cluster.calibration)
        from mosearch.commands.calibrate import describe

        what = "; ".join(f"{g}: {describe(c.model_dump())}" for g, c in cal.gpu_types.items())
        print(f"mosearch: calibrated: predictions use {cluster.calibration}, fitted on {len(cal.runs)} run(s) of this "
              f"cluster ({what})", file=sys.stderr)


def extrapolated(cluster_path: str | None, plans) -> str | None:
    """On a calibrated cluster: which plans of the front are far from every calibrated run."""
    from problems.placement.corrections import calibrated_layouts, extrapolation
    from problems.placement.specs import load_cluster

    if cluster_path is None:
        return None
    runs = calibrated_layouts(load_cluster(cluster_path))
    far = [p.plan_id for p in plans if extrapolation(p, runs)]
    if not far:
        return None
    return (f"extrapolated: {len(far)} of the {len(plans)} plans of the front are far from the {len(runs)} calibrated "
            f"run(s) (another mode, layout or GPU type, or over 2x their engines or ranks): {', '.join(far[:10])}"
            + (", ..." if len(far) > 10 else "") + "; `mosearch show RUN --with PLAN` says why; report.html marks them")
