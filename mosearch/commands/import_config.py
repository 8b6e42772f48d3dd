"""`mosearch import --from verl|areal CONFIG --cluster C --workload W`: a config a user already runs,
read as a plan on that cluster, scored by the model, and set against a front."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from mosearch.compare import against_front, check_same_problem, summary
from problems.atomic import atomic_write_text
from problems.errors import InputError
from problems.placement.plan import SpecRef, file_sha256
from problems.placement.plancheck import check_plan
from problems.placement.problem import PlacementProblem
from problems.placement.specs import load_cluster, load_workload
from problems.specio import read_yaml_mapping


class _ArgsFromFiles(argparse.ArgumentParser):
    """argparse's `@FILE` (fromfile_prefix_chars: the arguments in FILE, one per line), except that a file
    it cannot read is one line naming it (argparse prints its usage and a raw errno), and each argument
    read from a file is remembered with that file (`arg_files`: an override's error names where it was
    written)."""

    def _read_args_from_files(self, arg_strings):
        out = []
        for arg in arg_strings:
            if not arg or arg[0] not in self.fromfile_prefix_chars:
                out.append(arg)
                continue
            path = arg[1:]
            try:
                lines = Path(path).read_text().splitlines()
            except (OSError, UnicodeDecodeError) as err:
                why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
                raise InputError(path, None, f"cannot read it: {why}", "a file of arguments, one per line") from None
            read = self._read_args_from_files([a for line in lines for a in self.convert_arg_line_to_args(line)])
            files = self.get_default("arg_files")
            files.update({a: files.get(a, path) for a in read})  # from a nested @FILE: the innermost file
            out += read
        return out


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import", help="read a verl / AReaL config you run as a plan, score it, compare with a front",
                       fromfile_prefix_chars="@")
    p.__class__ = _ArgsFromFiles  # the subcommands' parsers are made by argparse, of its own class
    p.set_defaults(arg_files={})
    p.add_argument("inputs", nargs="*", metavar="CONFIG|OVERRIDE",
                   help="the YAML config you run (AReaL: required; verl: optional), then the hydra-style overrides "
                        "you pass on the command line (a.b=value, model_engine=megatron); @FILE reads arguments "
                        "from FILE, one per line (e.g. what a verl script passes to main_ppo)")
    p.add_argument("--config-name", help="verl: the config main_ppo composes (ppo_trainer, ppo_megatron_trainer)")
    p.add_argument("--config-path", help="verl: accepted as main_ppo takes it (the config is verl's own)")
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


HYDRA_GROUPS = ("model_engine",)  # verl config-group choices an override may make (trainer/config/model_engine)


def split_inputs(source: str, inputs: list[str]) -> tuple[str | None, list[str]]:
    """(config file or None, overrides): a first argument without '=' is the config file."""
    if inputs and "=" not in inputs[0]:
        return inputs[0], list(inputs[1:])
    if source == "areal":
        raise InputError(None, "CONFIG", "missing", "the AReaL YAML config you run")
    return None, list(inputs)


def import_plan(source: str, config: str | None, overrides: list[str], cluster_path: str, workload_path: str,
                rollout_on: list[str] | None = None, train_on: list[str] | None = None,
                config_name: str | None = None):
    """(plan with the model's predictions, warnings) for a config file (or none: verl's defaults) plus overrides."""
    from mosearch.export.read import READERS, apply_overrides, layout_from_header, place

    where = config or "command line"
    base = read_yaml_mapping(config, f"a {source} config") if config else {}
    groups = {o.split("=", 1)[0]: o.split("=", 1)[1] for o in overrides
              if "=" in o and o.split("=", 1)[0].lstrip("+") in HYDRA_GROUPS}
    cfg = apply_overrides(base, [o for o in overrides if o.split("=", 1)[0] not in groups], where)
    if source == "verl":
        cfg["_hydra"] = {"config_name": config_name, "model_engine": groups.get("model_engine")}
    shape = READERS[source](cfg, where)
    cluster, workload = load_cluster(cluster_path), load_workload(workload_path)
    largest = max(p.gpus_per_node for p in cluster.pools)
    if shape.node_gpus is not None and shape.node_gpus[1] > largest:
        key, n = shape.node_gpus
        raise InputError(where, key, f"{n} GPUs per node, but the nodes of cluster {cluster.name!r} hold at most "
                         f"{largest}", "at most the GPUs a node of the cluster has")
    warnings = list(shape.warnings)
    if shape.elementwise_kernels not in (None, workload.elementwise_kernels):
        # the kernels are the config's, not the plan's: score what it runs
        warnings.append(f"the config runs elementwise_kernels {shape.elementwise_kernels}, the workload says "
                        f"{workload.elementwise_kernels}: scored as the config runs.")
        workload = replace(workload, elementwise_kernels=shape.elementwise_kernels)
    ref = lambda name, path: SpecRef(name=name, path=str(path), sha256=file_sha256(path))  # noqa: E731
    fixed = layout_from_header(Path(config).read_text()) if config else None
    plan = place(shape, cluster, ref(cluster.name, cluster_path), ref(workload.name, workload_path),
                 f"{source}-{Path(config).stem if config else 'args'}", rollout_on, train_on, where, fixed)
    check_plan(plan, workload, cluster, where)
    problem = PlacementProblem(cluster, workload)
    try:
        r = problem.evaluate_plans([plan])
    except ValueError as err:  # a layout the search space cannot hold (e.g. a TP it never tries)
        raise InputError(where, None, f"cannot be scored: {err}", "a layout of this cluster's search space") from None
    plan = plan.model_copy(update={"predicted": {k: float(np.asarray(v)[0]) for k, v in r.items()}})
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


def run(args: argparse.Namespace) -> int:
    split = (lambda s: [x.strip() for x in s.split(",") if x.strip()] if s else None)
    config, overrides = split_inputs(args.source, args.inputs)
    if args.source != "verl" and args.config_name:
        raise InputError(None, "--config-name", "given for AReaL", "verl only (AReaL reads one YAML)")
    plan, warnings = import_plan(args.source, config, overrides, args.cluster, args.workload,
                                 split(args.rollout_on), split(args.train_on), args.config_name)
    if args.front:
        check_same_problem(plan, args.front, config or "command line")
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
