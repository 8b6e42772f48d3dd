"""How each export is started: the file it is written as (with the keys that make the executor's own
config loader compose it) and the exact command lines that start it.

- verl 0.9.1: the export is a hydra config with a defaults list on verl's own `ppo_trainer` or
  `ppo_megatron_trainer` (found through `hydra.searchpath: pkg://verl.trainer.config`), started with
  `python -m verl.trainer.main_ppo --config-path DIR --config-name NAME`. Keys verl's YAML does not list
  (`override_transformer_config.apply_rope_fusion`, ...) merge as part of the file, so no `+`/`++` is needed.
  Plans with the rollout and training on different GPU types start through `mosearch.export.launch_verl`,
  with one `ray start` line per node naming the GPUs each role may use there.
- AReaL 1.0.4: a config for its single-controller entry (`python3 examples/math/gsm8k_rl.py --config FILE`,
  which loads it with `areal.api.cli_args.load_expr_config`: hydra compose of FILE), with a defaults list on
  the user's AReaL config (`areal_base.yaml` beside it: dataset, model paths) and `scheduler.type`.
- RLinf 0.3.0: a hydra config for its reasoning entry (`python examples/reasoning/main_grpo.py --config-path
  DIR --config-name NAME`, run from an RLinf checkout) with a defaults list on the user's RLinf config
  (`rlinf_base.yaml` beside it).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from problems.placement.names import COLOCATED
from problems.placement.plan import Plan
from mosearch.export import layout as L
from mosearch.export import verl as V
from mosearch.export.context import ExportContext

VERL_SEARCHPATH = "pkg://verl.trainer.config"  # verl's own config directory, as an installed package
AREAL_ENTRY = "examples/math/gsm8k_rl.py"  # AReaL 1.0.4's RL entry script (its README's quickstart)
RLINF_ENTRY = "examples/reasoning/main_grpo.py"  # RLinf 0.3.0's reasoning entry (hydra.main, version_base 1.1)
BASES = {"areal": "areal_base", "rlinf": "rlinf_base"}  # the user's own config, beside the export
MODEL_PLACEHOLDER = "MODEL_DIR"  # in a command: the model's weights, when the workload names no directory

# Ray custom resources that pin verl's pools to the plan's nodes (mosearch.export.launch_verl)
ROLE_RESOURCE = {L.TRAIN: "mosearch_train", L.ROLLOUT: "mosearch_rollout"}


def default_file(target: str, plan: Plan) -> str:
    """The file name the header tells the user to save a printed export as."""
    return f"{target}-{plan.plan_id}.yaml"


def needs_role_pinning(plan: Plan, ctx: ExportContext) -> bool:
    """verl: rollout and training on separate GPUs of more than one GPU type; its pools name GPU counts only,
    so without pinning Ray may put the trainer on the rollout's GPU type."""
    return plan.execution.mode != COLOCATED and len({n.gpu for n in L.nodes(plan, ctx)}) > 1


def document(target: str, plan: Plan, ctx: ExportContext, data: dict) -> dict:
    """The export as the file the launch command reads: the hydra keys first, then the exporter's keys."""
    if target == "verl":
        return {"hydra": {"searchpath": [VERL_SEARCHPATH]}, "defaults": [V.config_name(plan), "_self_"], **data}
    if target == "areal":
        multi = len(L.nodes(plan, ctx)) > 1
        return {"defaults": [BASES["areal"], "_self_"], "experiment_name": f"mosearch-{plan.plan_id}",
                "trial_name": "trial0", "scheduler": {"type": "ray" if multi else "local"}, **data}
    if target == "rlinf":
        return {"defaults": [BASES["rlinf"], "_self_"], **data}
    raise KeyError(target)


def _config_args(path: Path | None, plan: Plan, target: str) -> tuple[str, str]:
    """(--config-path, --config-name) of the file."""
    if path is None:
        return '"$PWD"', Path(default_file(target, plan)).stem
    return shlex.quote(str(path.resolve().parent)), path.stem


def _model_overrides(target: str, ctx: ExportContext) -> list[str]:
    if ctx.model_dir is not None or not ctx.has_workload:
        return []
    if target == "verl":
        return [f"actor_rollout_ref.model.path={MODEL_PLACEHOLDER}"] + (
            [f"critic.model.path={MODEL_PLACEHOLDER}"] if ctx.algorithm == "ppo" else [])
    return []


def ray_start_lines(plan: Plan, ctx: ExportContext) -> list[str]:
    """One `ray start` per node of the layout: node 0 is the head; each node declares how many of its GPUs
    each role may take there (`mosearch.export.launch_verl` asks for one unit per GPU)."""
    out = []
    for rank, n in enumerate(L.nodes(plan, ctx)):
        res = {ROLE_RESOURCE[r]: n.count(r) for r in (L.ROLLOUT, L.TRAIN) if n.count(r)}
        where = "--head" if rank == 0 else "--address=HEAD_IP:6379"
        out.append(f"node {rank} ({n.pool}): ray start {where} --num-gpus={n.size} "
                   f"--resources='{json.dumps(res, separators=(', ', ': '))}'")
    return out


def commands(target: str, plan: Plan, ctx: ExportContext, path: Path | None = None) -> list[str]:
    """The lines that start the export written at `path` (None: printed; saved as `default_file`)."""
    cpath, cname = _config_args(path, plan, target)
    file = shlex.quote(str(path.resolve())) if path is not None else default_file(target, plan)
    if target == "verl":
        extra = _model_overrides(target, ctx)
        if needs_role_pinning(plan, ctx):
            return ray_start_lines(plan, ctx) + [
                " ".join(["python -m mosearch.export.launch_verl --config-path", cpath, "--config-name", cname, *extra])]
        return [" ".join(["python -m verl.trainer.main_ppo --config-path", cpath, "--config-name", cname, *extra])]
    if target == "areal":
        return [f"python3 {AREAL_ENTRY} --config {file}"]
    if target == "rlinf":
        return [f"python {RLINF_ENTRY} --config-path {cpath} --config-name {cname}"]
    raise KeyError(target)


def header(target: str, plan: Plan, ctx: ExportContext, path: Path | None = None) -> list[str]:
    """The header lines that say how to start the export."""
    out = []
    if path is None:
        out.append(f"save this output as {default_file(target, plan)} in the directory you start from")
    if target in BASES:
        what = {"areal": "AReaL 1.0.4 config (e.g. its examples/math/gsm8k_grpo.yaml: dataset, model paths)",
                "rlinf": "RLinf 0.3.0 config (e.g. its examples/reasoning/config/math/*-megatron.yaml or "
                         "*-fsdp.yaml: model, data, optimizer)"}[target]
        out.append(f"beside it, {BASES[target]}.yaml: your {what}; this file's keys override it")
    if target == "verl" and needs_role_pinning(plan, ctx):
        out.append("start Ray on each node of the layout as below (HEAD_IP: node 0's address), then the trainer "
                   "through mosearch.export.launch_verl (mosearch installed on every node): it pins verl's trainer "
                   "pool to mosearch_train GPUs and its rollout pools to mosearch_rollout GPUs")
    where = {"verl": "", "areal": " (from an AReaL 1.0.4 checkout)", "rlinf": " (from an RLinf 0.3.0 checkout)"}[target]
    out.append(f"start it with{where}:")
    out += ["  " + c for c in commands(target, plan, ctx, path)]
    if any(MODEL_PLACEHOLDER in c for c in commands(target, plan, ctx, path)):
        out.append(f"  ({MODEL_PLACEHOLDER}: the model's Hugging Face directory)")
    return out
