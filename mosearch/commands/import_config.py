"""`mosearch import --from verl|areal CONFIG --cluster C --workload W`: a config a user already runs,
read as a plan on that cluster, scored by the model, and set against a front."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from problems.atomic import atomic_write_text
from problems.errors import InputError
from problems.placement.plan import SpecRef, file_sha256
from problems.placement.plancheck import check_plan
from problems.placement.problem import PlacementProblem
from problems.placement.specs import load_cluster, load_workload
from problems.specio import read_yaml_mapping


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import", help="read a verl / AReaL config you run as a plan, score it, compare with a front")
    p.add_argument("config", help="the YAML config you run (as you write it)")
    p.add_argument("overrides", nargs="*", help="hydra-style overrides you pass on the command line (a.b=value)")
    p.add_argument("--from", dest="source", required=True, choices=["verl", "areal"], help="which system it is for")
    p.add_argument("--cluster", required=True, help="cluster spec to place it on")
    p.add_argument("--workload", required=True, help="workload spec (model, batch, lengths) to score it with")
    p.add_argument("--rollout-on", help="pools for the rollout GPUs, comma-separated, in order (default: cluster order)")
    p.add_argument("--train-on", help="pools for the training GPUs, comma-separated, in order (default: cluster order)")
    p.add_argument("--front", help="a run directory of `mosearch plan` to set the config against")
    p.add_argument("--out", help="write the plan here (a plan file `mosearch show --with` and `export` read)")
    p.set_defaults(func=run)


def _warn(msg: str) -> None:
    print(f"mosearch import: {msg}", file=sys.stderr)


def import_plan(source: str, config: str, overrides: list[str], cluster_path: str, workload_path: str,
                rollout_on: list[str] | None = None, train_on: list[str] | None = None):
    """(plan with the model's predictions, warnings) for a config file plus overrides."""
    from mosearch.export.read import READERS, apply_overrides, place

    cfg = apply_overrides(read_yaml_mapping(config, f"a {source} config"), list(overrides), config)
    shape = READERS[source](cfg, config)
    cluster, workload = load_cluster(cluster_path), load_workload(workload_path)
    ref = lambda name, path: SpecRef(name=name, path=str(path), sha256=file_sha256(path))  # noqa: E731
    plan = place(shape, cluster, ref(cluster.name, cluster_path), ref(workload.name, workload_path),
                 f"{source}-{Path(config).stem}", rollout_on, train_on, config)
    check_plan(plan, workload, cluster, config)
    problem = PlacementProblem(cluster, workload)
    try:
        r = problem.evaluate_plans([plan])
    except ValueError as err:  # a layout the search space cannot hold (e.g. a TP it never tries)
        raise InputError(config, None, f"cannot be scored: {err}", "a layout of this cluster's search space") from None
    plan = plan.model_copy(update={"predicted": {k: float(np.asarray(v)[0]) for k, v in r.items()}})
    warnings = list(shape.warnings)
    if plan.predicted.get("repaired", 0) > 0:
        x = problem.encode(plan)
        fixed = problem.layout.repair(x[None])[0]
        what = ", ".join(n for n, a, b in zip(problem.var_names, x, fixed) if abs(a - b) > 1e-9)
        warnings.append(f"outside the search space ({what}): scored as the nearest plan in it (the model takes "
                        "power-of-two micro-batches and sequence counts).")
    batch = (cfg.get("data") or {}).get("train_batch_size") if source == "verl" else \
        (cfg.get("train_dataset") or {}).get("batch_size")
    if source == "verl":
        mini = ((cfg.get("actor_rollout_ref") or {}).get("actor") or {}).get("ppo_mini_batch_size", 256)
        updates = (batch or workload.prompts_per_step) / mini if mini else 1
    else:
        updates = ((cfg.get("actor") or {}).get("ppo_n_minibatches") or 1)
    if updates != 1:
        warnings.append(f"the config takes {updates:g} optimizer steps per step; the model scores one "
                        "(it leaves out the extra optimizer steps and gradient all-reduces).")
    if batch is not None and batch != workload.prompts_per_step:
        warnings.append(f"the config's batch is {batch} prompts, the workload's {workload.prompts_per_step}: "
                        "scored with the workload's.")
    return plan, warnings


def against_front(plan, run_dir: str) -> str:
    """'the front has Z samples/s at the same $/h': the fastest front plan costing no more."""
    from mosearch.results import load_run

    run = load_run(run_dir)
    tput, cost = plan.predicted["throughput_samples_s"], plan.predicted["cost_usd_h"]
    cheaper = [p for p in run.plans if p.predicted.get("cost_usd_h", np.inf) <= cost * (1 + 1e-9)]
    if not cheaper:
        return f"the front of {run_dir} has no plan at ${cost:.2f}/h or less"
    best = max(cheaper, key=lambda p: p.predicted["throughput_samples_s"])
    gain = best.predicted["throughput_samples_s"] / tput if tput > 0 else float("inf")
    return (f"the front has {best.predicted['throughput_samples_s']:.3g} samples/s at "
            f"${best.predicted['cost_usd_h']:.2f}/h ({best.plan_id}, {gain:.2f}x yours)")


def summary(plan) -> str:
    p = plan.predicted
    return (f"your config: {p['throughput_samples_s']:.3g} samples/s at ${p['cost_usd_h']:.2f}/h, "
            f"peak memory {p.get('peak_mem_frac', float('nan')):.0%} of a GPU, staleness "
            f"{p.get('staleness', float('nan')):.2g} ({plan.execution.mode}, {plan.used_gpus} GPUs)")


def run(args: argparse.Namespace) -> int:
    split = (lambda s: [x.strip() for x in s.split(",") if x.strip()] if s else None)
    plan, warnings = import_plan(args.source, args.config, args.overrides, args.cluster, args.workload,
                                 split(args.rollout_on), split(args.train_on))
    for w in warnings:
        _warn(w)
    p = plan.predicted
    print(summary(plan))
    if p["peak_mem_frac"] > 1:
        print("  the model predicts it does not fit in GPU memory (peak above 100%)")
    if args.front:
        print(against_front(plan, args.front))
    if args.out:
        from mosearch.results import plan_yaml
        atomic_write_text(args.out, plan_yaml(plan))
    return 0
