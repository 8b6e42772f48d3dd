"""`mosearch export PLAN --to verl|areal|rlinf`: a plan as another system's placement config."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from problems.atomic import atomic_write_text
from problems.errors import InputError
from problems.placement.plan import Plan, file_sha256, load_plan
from problems.placement.plancheck import check_plan
from problems.placement.planfiles import locate
from problems.placement.specs import load_cluster, load_workload
from mosearch.export import EXPORTERS, ExportContext, render


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write a plan as verl / AReaL / RLinf placement configuration")
    p.add_argument("plan", help="plan YAML written by `mosearch pick`")
    p.add_argument("--to", required=True, choices=sorted(EXPORTERS), help="target system")
    p.add_argument("--out", help="write here (atomically) instead of stdout")
    p.add_argument("--cluster", help="cluster spec (default: the path the plan names)")
    p.add_argument("--workload", help="workload spec (default: the path the plan names)")
    p.set_defaults(func=run)


def _find(given: str | None, named: str, plan_path: Path) -> Path | None:
    """The spec file: as given, else where the plan names it (problems.placement.planfiles.locate:
    beside the plan, else from the working directory); None when it is not there."""
    return Path(given) if given else locate(named, plan_path)


def _warn(msg: str) -> None:
    print(f"mosearch export: {msg}", file=sys.stderr)


def build_context(plan: Plan, plan_path: Path, cluster_arg: str | None, workload_arg: str | None) -> ExportContext:
    cluster = workload = None
    cpath = _find(cluster_arg, plan.cluster.path, plan_path)
    if cpath is None:
        _warn(f"cluster spec {plan.cluster.path} not found: assuming 8 GPUs per node (give --cluster)")
    else:
        cluster = load_cluster(cpath)
        if file_sha256(cpath) != plan.cluster.sha256:
            _warn(f"{cpath} differs from the cluster the plan was made for (sha256)")
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
    wpath = _find(workload_arg, plan.workload.path, plan_path)
    if wpath is None:
        _warn(f"workload spec {plan.workload.path} not found: batch sizes left out (give --workload)")
    else:
        workload = load_workload(wpath)
        check_plan(plan, workload, cluster, str(plan_path))
    return ExportContext.from_specs(cluster, workload)


def run(args: argparse.Namespace) -> int:
    plan_path = Path(args.plan)
    plan = load_plan(plan_path)
    ctx = build_context(plan, plan_path, args.cluster, args.workload)
    text = render(args.to, plan, ctx)
    if args.out:
        atomic_write_text(args.out, text)
    else:
        sys.stdout.write(text)
    return 0
