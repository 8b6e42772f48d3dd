"""`mosearch export PLAN --to verl|areal|rlinf`: a plan as another system's placement config."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from problems.atomic import atomic_write_text
from problems.errors import InputError
from problems.placement.plan import Plan, SpecRef, file_sha256, load_plan
from problems.placement.plancheck import check_plan
from problems.placement.planfiles import locate, missing
from problems.placement.specs import load_cluster, load_workload
from mosearch.export import EXPORTERS, ExportContext, render


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write a plan as verl / AReaL / RLinf placement configuration")
    p.add_argument("plan", help="plan YAML written by `mosearch pick`")
    p.add_argument("--to", required=True, choices=sorted(EXPORTERS), help="target system")
    p.add_argument("--out", help="write here (atomically) instead of stdout")
    p.add_argument("--cluster", help="cluster spec (default: the path the plan names)")
    p.add_argument("--workload", help="workload spec (default: the path the plan names)")
    p.add_argument("--front", metavar="RUN",
                   help="a run of `mosearch plan` to name the nearest plan the target can run when it cannot run "
                        "this one (default: the run the plan file sits in, if any)")
    p.set_defaults(func=run)


def _find(given: str | None, named: str, plan_path: Path) -> Path | None:
    """The spec file: as given, else where the plan names it (problems.placement.planfiles.locate:
    beside the plan, else from the working directory); None when it is not there."""
    return Path(given) if given else locate(named, plan_path)


def _warn(msg: str) -> None:
    print(f"mosearch export: {msg}", file=sys.stderr)


def _spec(kind: str, given: str | None, plan: Plan, plan_path: Path, load):
    """(path, spec, reference) of the `kind` spec (cluster or workload) the plan is exported with: the
    file given (--cluster / --workload), else the one the plan names. A file other than the one the plan
    was made for (sha256) is said: the plan was searched and scored for that one."""
    named = getattr(plan, kind)
    path = _find(given, named.path, plan_path)
    if path is None:
        raise missing(plan_path, kind, named.path, f"--{kind}")
    spec = load(path)
    ref = SpecRef(name=spec.name, path=str(path), sha256=file_sha256(path))
    if ref.sha256 != named.sha256:
        _warn(f"{path} differs from the {kind} the plan was made for (sha256)")
    return path, spec, ref


def _fit_note(plan: Plan, plan_path: Path, cluster, workload) -> str | None:
    """Whether the plan, scored by the model on specs other than those it was made for, still fits the
    GPUs' memory (its own figures are for the specs it names)."""
    from problems.placement.predict import predict_plan

    p = predict_plan(plan_path, plan=plan, cluster=cluster, workload=workload)
    if p["fits"]:
        return None
    return (f"the model predicts plan {plan.plan_id} does not fit workload {workload.name} on cluster "
            f"{cluster.name}: peak memory {p['peak_mem_frac']:.0%} of a GPU, KV cache short by "
            f"{max(p['kv_shortfall'], 0):.0%} of a sample")


def build_context(plan: Plan, plan_path: Path, cluster_arg: str | None, workload_arg: str | None,
                  specs: dict | None = None) -> ExportContext:
    """The context to export `plan` with. `specs` (when given) receives the loaded `cluster` and
    `workload`, and `plan`: the plan naming the spec files it is exported with (the export's header)."""
    # Both specs are needed: node sizes and pools from the cluster, batch sizes and the TP/head
    # divisibility check from the workload; an export without them would skip checks silently.
    cpath, cluster, cref = _spec("cluster", cluster_arg, plan, plan_path, load_cluster)
    pools = {p.id: p for p in cluster.pools}
    for i, p in enumerate(plan.pools):
        if p.used_gpus == 0:
            continue
        if p.pool not in pools:
            raise InputError(str(plan_path), f"pools[{i}].pool", f"pool {p.pool!r} is not in cluster {cpath}",
                             f"one of {', '.join(pools)}")
        if p.used_gpus > pools[p.pool].count:
            raise InputError(str(plan_path), f"pools[{i}]", f"uses {p.used_gpus} GPUs of {p.pool}",
                             f"at most the {pools[p.pool].count} the cluster has")
    _, workload, wref = _spec("workload", workload_arg, plan, plan_path, load_workload)
    check_plan(plan, workload, cluster, str(plan_path))
    if (cref.sha256, wref.sha256) != (plan.cluster.sha256, plan.workload.sha256):
        note = _fit_note(plan, plan_path, cluster, workload)
        if note:
            _warn(note)
    if specs is not None:
        specs.update(cluster=cluster, workload=workload, plan=plan.model_copy(update={"cluster": cref, "workload": wref}))
    return ExportContext.from_specs(cluster, workload)


def _front_dir(given: str | None, plan_path: Path) -> Path | None:
    if given:
        return Path(given)
    for cand in (plan_path.parent, plan_path.parent.parent):  # plan.yaml beside run.yaml, or in plans/
        if (cand / "front_all.json").is_file() or (cand / "front.json").is_file():
            return cand
    return None


def check_executor(target: str, plan: Plan, plan_path: Path, cluster, workload, front: str | None) -> None:
    """Refuse (exit 2, one line) a plan the target cannot start as planned: the rule that forbids it and
    the nearest plan of the front it can run."""
    from problems.placement.problem import PlacementProblem

    problem = PlacementProblem(cluster, workload, executor=target)
    try:
        why = problem.executor_refusal(plan)
    except ValueError as err:  # a layout outside the search space the rules are written for
        why = f"{problem.executor.runs} cannot be checked for it ({err})"
    if why is None:
        return
    hint = f"a plan of a front searched with `mosearch plan --executor {target}`"
    run_dir = _front_dir(front, plan_path)
    if run_dir is not None:
        near = nearest_runnable(problem, plan, run_dir)
        if near is not None:
            thr, cost = near.predicted["throughput_samples_s"], near.predicted["cost_usd_h"]
            if problem.executor_note:  # the target runs the workload otherwise: its figures as it runs it
                r = problem.evaluate_plans([near])
                thr, cost = float(r["throughput_samples_s"][0]), float(r["cost_usd_h"][0])
            hint = f"the nearest plan of {run_dir} it can run: {near.plan_id}, {thr:.3g} samples/s at ${cost:.2f}/h"
        else:
            hint = f"no plan of {run_dir} is one it can run; {hint}"
    raise InputError(str(plan_path), "executor", why, hint)


def nearest_runnable(problem, plan: Plan, run_dir: Path) -> Plan | None:
    """The front's plan, among those the problem's executor can run, nearest in throughput and cost
    (relative differences)."""
    from mosearch.results import load_run

    run = load_run(run_dir)
    if run.info and (run.info.get("cluster", {}).get("sha256") not in (None, plan.cluster.sha256)
                     or run.info.get("workload", {}).get("sha256") not in (None, plan.workload.sha256)):
        return None
    t0, c0 = plan.predicted.get("throughput_samples_s"), plan.predicted.get("cost_usd_h")
    best, key = None, None
    for p in run.all_plans:
        try:
            if problem.executor_refusal(p) is not None:
                continue
        except ValueError:
            continue
        t, c = p.predicted["throughput_samples_s"], p.predicted["cost_usd_h"]
        d = (abs(t - t0) / max(t0, 1e-9) + abs(c - c0) / max(c0, 1e-9)) if t0 and c0 else -t
        if key is None or d < key:
            best, key = p, d
    return best


def run(args: argparse.Namespace) -> int:
    plan_path = Path(args.plan)
    plan = load_plan(plan_path)
    specs: dict = {}
    ctx = build_context(plan, plan_path, args.cluster, args.workload, specs)
    check_executor(args.to, plan, plan_path, specs["cluster"], specs["workload"], args.front)
    text = render(args.to, specs["plan"], ctx, Path(args.out) if args.out else None)  # its header names the specs and the command
    if args.out:
        atomic_write_text(args.out, text)
    else:
        sys.stdout.write(text)
    return 0
