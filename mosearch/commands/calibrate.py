"""`mosearch calibrate`: fit a cluster's corrections to the model from the runs a team already makes.

    mosearch calibrate --cluster C --from verl --log train.log --config ppo.yaml --workload W [overrides]
    mosearch calibrate --cluster C --from mosearch --log runs/r1 --plan plans/p002.yaml

Reads the run's step timings (mosearch/calibrate_logs.py), places the config that ran on the cluster
as `mosearch import` does (or takes the plan file that ran), predicts each run with the model and
fits per-GPU-type corrections (problems/placement/corrections.py) so that the predicted phases meet the
measured ones; writes them beside the cluster (`<cluster>.calibration.yaml`, named by the cluster's
`calibration:` key, which is added when missing) and prints predicted vs measured per phase, before
and after. Runs accumulate: a later call adds its runs to the file's and refits on all of them.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np
import yaml

from problems.errors import InputError

SOURCES = ("verl", "areal", "rlinf", "mosearch")
FITTED_PHASES = ("rollout_s", "train_s", "sync_s", "switch_s", "step_s")
REPORTED = ("rollout_s", "train_s", "sync_s", "step_s")
RIDGE = 0.05  # pull toward no correction: with one run per phase the smallest change that fits it


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="fit a cluster's corrections to the model from run logs (verl, AReaL, "
                                         "RLinf, this trainer)")
    p.set_defaults(trailing_inputs="overrides")
    p.add_argument("overrides", nargs="*", metavar="OVERRIDE", help="hydra-style overrides the run passed (verl)")
    p.add_argument("--cluster", required=True, help="the cluster the runs ran on")
    p.add_argument("--from", dest="source", required=True, choices=SOURCES, help="what wrote the logs")
    p.add_argument("--log", action="append", required=True,
                   help="a run's log: console output, JSONL, a TensorBoard directory, a wandb offline run (its directory or run-*.wandb), or this trainer's run "
                        "directory (repeat for several runs of the same config)")
    p.add_argument("--plan", help="the plan file that ran (this trainer's runs; any source)")
    p.add_argument("--config", help="the verl / AReaL config that ran (read as `mosearch import` reads it)")
    p.add_argument("--workload", help="workload spec (model, batch, lengths) of the config")
    p.add_argument("--out", help="calibration file to write (default: the one the cluster names, else "
                                 "<cluster>.calibration.yaml beside it)")
    from mosearch.commands.profile import add_profile_flag

    add_profile_flag(p)
    p.set_defaults(func=run)


def _plan_for(args, cluster_path: str, cluster_name: str, out_dir: Path) -> str:
    from problems.placement.planfiles import PlanInputs

    if args.plan:
        plan = PlanInputs.load(args.plan).plan
        if plan.cluster.name != cluster_name:
            raise InputError(args.plan, "cluster.name", f"a plan of cluster {plan.cluster.name!r}",
                             f"a plan of {cluster_name!r}, the cluster being calibrated")
        return str(Path(args.plan).resolve())
    # verl's config may be its defaults plus the overrides the run passed, as `mosearch import` reads it
    if args.source not in ("verl", "areal") or not (args.config or (args.source == "verl" and args.overrides)):
        raise InputError("command line", "--plan", "missing",
                         "--plan PLAN, or --config CONFIG --workload W for verl and AReaL")
    if not args.workload:
        raise InputError("command line", "--workload", "missing", "the workload spec of --config")
    from mosearch.commands.import_config import import_plan
    from mosearch.results import plan_yaml

    plan, _ = import_plan(args.source, args.config, list(args.overrides), cluster_path, args.workload)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{args.source}-{Path(args.config).stem if args.config else 'args'}.yaml"
    path.write_text(plan_yaml(plan))
    return str(path.resolve())


def _predictor(run: dict, cluster_path: str):
    """corrections -> the model's phases for this run (its plan, its settings, the cluster)."""
    from problems.placement.predict import predict_plan, predict_run
    from problems.placement.specs import load_cluster

    base = load_cluster(cluster_path)
    if run["source"] == "mosearch":
        import json

        summary = json.loads((Path(run["log"]) / "summary.json").read_text())

        def predict(corr):
            # the cluster being calibrated where the run's plan names it (the local cluster of an emulated run stays)
            adjust = lambda c: dataclasses.replace(base if c.name == base.name else c, corrections=corr)  # noqa: E731
            return predict_run(run["plan"], summary, adjust=adjust)[0]
        return predict
    kw = {k: max(1, round(v)) for k, v in run.get("lengths", {}).items()}
    if "response_max" in kw and "response_mean" in kw:
        kw["response_max"] = max(kw["response_max"], kw["response_mean"])

    def predict(corr):
        return predict_plan(run["plan"], cluster=dataclasses.replace(base, corrections=corr), **kw)
    return predict


def _gpu_types(plan_file: str) -> list[str]:
    from problems.placement.planfiles import PlanInputs

    return sorted({p.gpu for p in PlanInputs.load(plan_file).plan.pools if p.used_gpus})


def fit(runs: list[dict], cluster_path: str) -> tuple[dict, list[dict]]:
    """({gpu: corrections}, report rows) for these runs."""
    from scipy.optimize import least_squares

    from problems.placement.corrections import ADDED, FACTOR_BOUND, FACTORS, PHASE_OF

    preds = [_predictor(r, cluster_path) for r in runs]
    types = sorted({g for r in runs for g in r["gpus"]})
    n = len(FACTORS) + len(ADDED)
    scale = {p: max(float(np.mean([r["measured"][p] for r in runs if r["measured"].get(p, 0.0) > 0] or [1.0])), 1e-6)
             for p in FITTED_PHASES}

    def corrections(x) -> dict:
        out = {}
        for i, g in enumerate(types):
            v = x[i * n:(i + 1) * n]
            out[g] = {**{k: float(np.exp(v[j])) for j, k in enumerate(FACTORS)},
                      **{k: float(v[len(FACTORS) + j]) * scale[PHASE_OF[k]] for j, k in enumerate(ADDED)}}
        return out

    def residuals(x):
        corr = corrections(x)
        res = []
        for r, predict in zip(runs, preds):
            p = predict({g: corr[g] for g in r["gpus"]})
            res += [p[k] / r["measured"][k] - 1 for k in FITTED_PHASES if r["measured"].get(k, 0.0) > 0]
        return np.array(res + list(RIDGE * x))

    lo = np.tile([-np.log(FACTOR_BOUND)] * len(FACTORS) + [-1.0] * len(ADDED), len(types))
    hi = np.tile([np.log(FACTOR_BOUND)] * len(FACTORS) + [1.0] * len(ADDED), len(types))  # |added| <= the phase's mean
    x0 = np.zeros(len(types) * n)
    sol = least_squares(residuals, x0, bounds=(lo, hi), diff_step=1e-3, max_nfev=80)
    corr = corrections(sol.x)
    report = []
    for r, predict in zip(runs, preds):
        before, after = predict({}), predict({g: corr[g] for g in r["gpus"]})
        report.append({"log": r["log"], "source": r["source"], "plan": r["plan"],
                       **{k: {"measured": r["measured"].get(k), "before": float(before[k]), "after": float(after[k])}
                          for k in REPORTED}})
    return corr, report


def describe(c: dict) -> str:
    return (f"decode_eff x{c['decode_eff']:.3g}, mfu x{c['mfu']:.3g}, sync time x{c['sync']:.3g}, rollout host work "
            f"x{c['rollout_host']:.3g}, {c['train_call_s'] * 1e3:+.3g} ms per training step, "
            f"{c.get('dp_microbatch_s', 0.0) * 1e3:+.3g} ms per micro-batch of a rank when dp > 1, "
            f"{c.get('switch_call_s', 0.0) * 1e3:+.3g} ms per colocated switch, "
            f"{c.get('step_call_s', 0.0) * 1e3:+.3g} ms per step beyond its phases")


def _error(pred: float, meas: float | None) -> str:
    return "-" if not meas else f"{(pred / meas - 1) * 100:+.0f}%"


def report_lines(report: list[dict]) -> list[str]:
    from mosearch.commands.train import format_table

    rows = []
    for r in report:
        for k in REPORTED:
            m = r[k]["measured"]
            rows.append((f"{Path(r['log']).name} {k}", "-" if m is None else f"{m:.4g}", f"{r[k]['before']:.4g}",
                         _error(r[k]["before"], m), f"{r[k]['after']:.4g}", _error(r[k]["after"], m)))
    return format_table(("run phase", "measured", "before", "error", "calibrated", "error"), rows)


def _name_in_cluster(cluster_path: Path, out: Path) -> None:
    """Add `calibration: FILE` to the cluster file (its text and comments kept) where it names none."""
    import os

    text = cluster_path.read_text()
    spec = yaml.safe_load(text)
    rel = os.path.relpath(out.resolve(), cluster_path.resolve().parent)
    if spec.get("calibration") == rel:
        return
    if spec.get("calibration"):
        raise InputError(str(cluster_path), "calibration", f"names {spec['calibration']}, not {rel}",
                         "--out the file the cluster names")
    cluster_path.write_text(text.rstrip("\n") + "\n# corrections fitted on this cluster's runs (mosearch calibrate)\n"
                            f"calibration: {rel}\n")


def run(args: argparse.Namespace) -> int:
    from mosearch.calibrate_logs import phases
    from mosearch.commands.profile import follow_machine
    from problems.placement.corrections import Calibration, load_calibration

    follow_machine(args)  # the cluster's profile of a device this machine has: this machine's, as plan uses
    from problems.specio import read_yaml_mapping

    cluster_path = Path(args.cluster)
    spec = read_yaml_mapping(str(cluster_path), "a cluster spec")
    name = spec.get("name")
    if args.out:
        out = Path(args.out)
    elif spec.get("calibration"):
        out = cluster_path.parent / spec["calibration"]
    else:
        out = cluster_path.with_name(cluster_path.stem + ".calibration.yaml")
    if args.source == "mosearch" and not args.plan:
        raise InputError("command line", "--plan", "missing", "the plan file the run directory ran")
    plan = _plan_for(args, str(cluster_path), name, out.with_suffix(".plans"))
    gpus = _gpu_types(plan)
    from problems.placement.corrections import layout_features
    from problems.placement.planfiles import PlanInputs

    layout = layout_features(PlanInputs.load(plan).plan)
    new = []
    for log in args.log:
        measured, lengths, steps = phases(args.source, log)
        if args.source == "mosearch" and not (Path(log) / "summary.json").is_file():
            raise InputError(log, None, "no summary.json", "a run directory `mosearch train` wrote")
        new.append({"source": args.source, "log": str(Path(log).resolve()), "plan": plan, "gpus": gpus,
                    "layout": layout,
                    "measured": measured, "lengths": lengths, "steps": steps})
    old = load_calibration(out).runs if out.is_file() else []
    runs = [r for r in old if r["log"] not in {n["log"] for n in new}] + new
    corr, report = fit(runs, str(cluster_path))
    cal = Calibration(cluster=name, gpu_types=corr, runs=runs, report={"runs": report})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("# written by `mosearch calibrate` (problems/placement/corrections.py)\n"
                   + yaml.safe_dump(cal.model_dump(mode="json"), sort_keys=False))
    _name_in_cluster(cluster_path, out)
    print(f"calibration of cluster {name!r} from {len(runs)} run(s) -> {out}")
    for g, c in corr.items():
        print(f"  {g}: {describe(c)}")
    for line in report_lines(report):
        print(line)
    print("the step is reported, not fitted: it is composed of the phases fitted")
    return 0
