"""`mosearch import --from verl|areal CONFIG --cluster C --workload W`: a config a user already runs,
read as a plan on that cluster, scored by the model, and set against a front."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from mosearch.cli import Parser
from mosearch.compare import against_front, check_same_problem, summary
from problems.atomic import atomic_write_text
from problems.errors import InputError
from problems.placement.plan import SpecRef, file_sha256
from problems.placement.plancheck import check_plan
from problems.placement.problem import PlacementProblem
from problems.placement.specs import load_cluster, load_workload
from problems.specio import read_yaml_mapping
from mosearch.export.read import READERS, Setting, apply_overrides, layout_from_header, place


class _ArgsFromFiles(Parser):
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
    p.set_defaults(arg_files={}, trailing_inputs="inputs")  # overrides may also follow the options
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


SYSTEMS = {"verl": "verl", "areal": "AReaL"}  # as the systems write their names
HYDRA_GROUPS = ("model_engine",)  # verl config-group choices an override may make (trainer/config/model_engine)


def split_inputs(source: str, inputs: list[str]) -> tuple[str | None, list[str]]:
    """(config file or None, overrides): a first argument without '=' is the config file."""
    if inputs and "=" not in inputs[0]:
        return inputs[0], list(inputs[1:])
    if source == "areal":
        raise InputError(None, "CONFIG", "missing", "the AReaL YAML config you run")
    return None, list(inputs)


def _written(config: str | None, overrides: list[str], arg_files: dict[str, str] | None):
    """Where the user wrote a config key: the override that set it (on the command line, or in the @FILE
    it was read from), else the config file (verl with no file: its defaults, set on the command line)."""
    by_key = {o.split("=", 1)[0].lstrip("+"): (arg_files or {}).get(o, "command line") for o in overrides}

    def where(key: str | None) -> str:
        parts = (key or "").split(".")
        for n in range(len(parts), 0, -1):  # an override of a.b sets a.b.c too
            if ".".join(parts[:n]) in by_key:
                return by_key[".".join(parts[:n])]
        return config or "command line"
    return where


def _says(s: Setting, source: str) -> str:
    text = f"{s.key}={s.value}" if s.value is not None else f"{s.key} unset"
    text += f" ({SYSTEMS[source]}'s default)" if s.default and s.value is not None else ""
    return text + (f" ({s.what})" if s.what else "")


def _workload_value(workload, key: str):
    """The workload's value of a key a config sets too (Setting.workload_key)."""
    return {"prompts_per_step": workload.prompts_per_step, "samples_per_prompt": workload.samples_per_prompt,
            "prompt_len": workload.prompt_len, "response_len.max": workload.response_max,
            "algorithm": workload.algorithm, "kl_reference": workload.has_reference,
            "max_staleness": workload.max_staleness}[key]


def disagreements(shape, workload, source: str):
    """(one line per config value that is not the workload's: the config's key and value, the workload's;
    the workload to score with). A staleness above the workload's bound is scored as the config runs (the
    plan carries it), the rest with the workload's values (the model scores the workload)."""
    lines = []
    for s in shape.settings:
        ours = _workload_value(workload, s.workload_key)
        if s.workload_key == "max_staleness":
            if s.means > ours:
                lines.append(f"{_says(s, source)}: above the workload's max_staleness {ours}: scored as the "
                             "config runs.")
                workload = replace(workload, max_staleness=s.means)
        elif s.means != ours:
            theirs = ("algorithm is ppo (a reference model)" if s.workload_key == "kl_reference" and workload.algorithm
                      == "ppo" else f"{s.workload_key} is {str(ours).lower() if isinstance(ours, bool) else ours}")
            lines.append(f"{_says(s, source)}: the workload's {theirs}: scored with the workload's.")
    return lines, workload


def import_plan(source: str, config: str | None, overrides: list[str], cluster_path: str, workload_path: str,
                rollout_on: list[str] | None = None, train_on: list[str] | None = None,
                config_name: str | None = None, arg_files: dict[str, str] | None = None):
    """(plan with the model's predictions, warnings) for a config file (or none: verl's defaults) plus overrides.
    `arg_files`: the @FILE each override was read from (one not there: the command line)."""
    where = config or "command line"
    written = _written(config, overrides, arg_files)
    try:
        shape = _read(source, config, overrides, where, config_name)
    except InputError as err:
        if err.file != where:
            raise
        # a bad value names the key the user wrote and where: the config file, the command line or an @FILE
        raise InputError(written(err.key), err.key, err.problem, err.expected) from None
    cluster, workload = load_cluster(cluster_path), load_workload(workload_path)
    largest = max(max(p.node_sizes, default=p.gpus_per_node) for p in cluster.pools)
    if shape.node_gpus is not None and shape.node_gpus[1] > largest:
        key, n = shape.node_gpus
        raise InputError(written(key), key, f"{n} GPUs per node, but the nodes of cluster {cluster.name!r} hold "
                         f"at most {largest}", "at most the GPUs a node of the cluster has")
    warnings = list(shape.warnings)
    if shape.elementwise_kernels not in (None, workload.elementwise_kernels):
        # the kernels are the config's, not the plan's: score what it runs
        warnings.append(f"the config runs elementwise_kernels {shape.elementwise_kernels}, the workload says "
                        f"{workload.elementwise_kernels}: scored as the config runs.")
        workload = replace(workload, elementwise_kernels=shape.elementwise_kernels)
    said, workload = disagreements(shape, workload, source)
    warnings += said
    ref = lambda name, path: SpecRef(name=name, path=str(path), sha256=file_sha256(path))  # noqa: E731
    fixed = layout_from_header(Path(config).read_text()) if config else None
    plan = place(shape, cluster, ref(cluster.name, cluster_path), ref(workload.name, workload_path),
                 f"{source}-{Path(config).stem if config else 'args'}", rollout_on, train_on, where, fixed)
    try:
        check_plan(plan, workload, cluster, where)
    except InputError as err:  # named by the plan's key (pools[i].rollout_tp, train.tp): say the config's
        key = shape.keys.get((err.key or "").rsplit(".", 1)[-1], err.key)
        raise InputError(written(key), key, err.problem, err.expected) from None
    problem = PlacementProblem(cluster, workload)
    # the executor's step work as its code does it (model/executor_costs.py): the config's executor runs the plan
    from problems.placement.model.fitted import apply_executor

    apply_executor(problem.ctx, source)
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
    if shape.updates != 1:
        warnings.append(f"the config takes {shape.updates} optimizer steps per step; the model scores one "
                        "(it leaves out the extra optimizer steps and gradient all-reduces).")
    return plan, warnings


def _launch_keys(source: str, base: dict, config_name: str | None) -> tuple[dict, str | None]:
    """A config written by `mosearch export` (mosearch/export/launch.py) carries the keys its launch command
    composes it with: hydra's defaults list and search path, AReaL's run names and scheduler. They say how
    to start it, not how it places anything; verl's defaults name the config it composes on."""
    base = dict(base)
    defaults = base.pop("defaults", None)
    base.pop("hydra", None)
    if source == "verl" and config_name is None and isinstance(defaults, list):
        names = [d for d in defaults if d in ("ppo_trainer", "ppo_megatron_trainer")]
        config_name = names[0] if names else None
    if source == "areal" and defaults is not None:
        for key in ("experiment_name", "trial_name", "scheduler"):
            base.pop(key, None)
    return base, config_name


def _read(source: str, config: str | None, overrides: list[str], where: str, config_name: str | None):
    """The config's shape: the file, the overrides and, for verl, the hydra choices."""
    base = read_yaml_mapping(config, f"a {source} config") if config else {}
    base, config_name = _launch_keys(source, base, config_name)
    groups = {o.split("=", 1)[0]: o.split("=", 1)[1] for o in overrides
              if "=" in o and o.split("=", 1)[0].lstrip("+") in HYDRA_GROUPS}
    cfg = apply_overrides(base, [o for o in overrides if o.split("=", 1)[0] not in groups], where)
    if source == "verl":
        cfg["_hydra"] = {"config_name": config_name, "model_engine": groups.get("model_engine")}
    return READERS[source](cfg, where)


def run(args: argparse.Namespace) -> int:
    split = (lambda s: [x.strip() for x in s.split(",") if x.strip()] if s else None)
    config, overrides = split_inputs(args.source, args.inputs)
    if args.source != "verl" and args.config_name:
        raise InputError(None, "--config-name", "given for AReaL", "verl only (AReaL reads one YAML)")
    plan, warnings = import_plan(args.source, config, overrides, args.cluster, args.workload,
                                 split(args.rollout_on), split(args.train_on), args.config_name, args.arg_files)
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
