"""`mosearch profile`: measure the local device and fit the performance model's parameters to it."""

from __future__ import annotations

import argparse
import platform
import time

import yaml
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from problems.atomic import atomic_write_text
from problems.placement.calibration import fit
from problems.placement.profile import PROFILE_VERSION, RUN_FITTED, Profile
from problems.placement.catalog import gpu_aliases, gpu_catalog

GRIDS = {
    # the default grid: about a minute of measurement on a 2-core machine with the tiny model
    "default": dict(matmul=dict(sizes=(256, 512, 1024, 2048), repeats=7), bandwidth=dict(mib=(64, 256), repeats=7),
                    train=dict(micro_batches=(1, 4, 8, 16), seq_lens=(32, 64, 128), repeats=5),
                    rollout=dict(batches=(1, 8, 32, 64), prompt_lens=(16, 64), decode_tokens=32, repeats=5),
                    collective=dict(sizes=(2**12, 2**16, 2**20, 2**23, 2**25), repeats=7)),
    "quick": dict(matmul=dict(sizes=(256, 512)), bandwidth=dict(mib=(32,)),
                  train=dict(micro_batches=(1, 4), seq_lens=(32, 64), repeats=3),
                  rollout=dict(batches=(1, 8), prompt_lens=(16,), decode_tokens=8, repeats=1),
                  collective=dict(sizes=(2**12, 2**20), repeats=2)),
}


STEP_KEYS = {"matmul": "matmul", "bandwidth": "memory_bandwidth", "train": "train_step", "collective": "collective",
             "offload": "offload", "rollout": "rollout"}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help="measure this device and fit the performance model to it")
    p.add_argument("--out", help="profile YAML to write (e.g. profiles/local.yaml)")
    p.add_argument("--show", metavar="PROFILE", nargs="?", const="",
                   help="measure nothing: print a profile's machine, fitted figures and what runs refitted them "
                        "(default: this machine's cached profile of its device)")
    p.add_argument("--refit", metavar="PROFILE",
                   help="measure nothing: refit an existing profile's raw measurements with the current model "
                        "formulas (run-fitted overheads are kept) and write it to --out")
    p.add_argument("--only", metavar="STEP", nargs="+", choices=sorted(STEP_KEYS),
                   help="measure only these steps and merge them into the existing --out profile (its other "
                        "measurements and run-fitted overheads are kept), then refit")
    p.add_argument("--model", default="tiny", help="'tiny' or a local Hugging Face model directory")
    p.add_argument("--device-type", help="catalog GPU type this device is (default: cpu-local, or the CUDA device's name)")
    p.add_argument("--grid", choices=sorted(GRIDS), default="default")
    p.set_defaults(func=run)


def local_device_type() -> str:
    import torch

    if not torch.cuda.is_available():
        return "cpu-local"
    name = torch.cuda.get_device_name(0)
    aliases = gpu_aliases(gpu_catalog())
    for token in name.replace("NVIDIA", "").split():
        if token.lower() in aliases:
            return aliases[token.lower()]
    return name


def _fit_for(model_path: str, rows: dict):
    """Fit `rows` with the architecture of the model they were measured on (fp32, as measured)."""
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(model_path)
    params = rows["train_step"][0]["params"]
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv_per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * 4  # fp32
    fitted = fit(rows, params=params, layers=cfg.num_hidden_layers, hidden=cfg.hidden_size,
                 kv_bytes_per_token=kv_per_token, weight_bytes=params * 4,
                 ffn=getattr(cfg, "intermediate_size", None), gated=getattr(cfg, "hidden_act", "silu") == "silu")
    return cfg, params, fitted


def refit(args: argparse.Namespace) -> int:
    from problems.placement.profile import load_profile
    from trainer.models.tiny import resolve_model

    old = load_profile(args.refit)
    _, _, fitted = _fit_for(str(resolve_model(old.model.get("path", "tiny"))), old.measurements)
    kept = {k: getattr(old.fitted, k) for k in RUN_FITTED}
    new = old.model_copy(update={"fitted": fitted.model_copy(update=kept)})
    atomic_write_text(args.out, yaml.safe_dump(new.model_dump(mode="json"), sort_keys=False))
    _print_fitted(Console(), f"{args.refit} refitted -> {args.out}", old.fitted, new.fitted)
    return 0


def _print_fitted(console, title: str, old, new) -> None:
    table = Table(title=title)
    table.add_column("parameter")
    if old is not None:
        table.add_column("before", justify="right")
    table.add_column("fitted", justify="right")
    for key, value in new.model_dump().items():
        cells = [] if old is None else [_fmt(getattr(old, key))]
        table.add_row(key, *cells, _fmt(value))
    console.print(table)


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.4g}"


def run(args: argparse.Namespace) -> int:
    import os

    if args.show is not None:
        return show(args.show)
    if not args.out:
        from problems.errors import InputError

        raise InputError("command line", "--out", "missing", "--out PROFILE (or --show)")
    if args.refit:
        return refit(args)

    # One local device is one core: Ray gives each trainer actor num_cpus=1 and one OpenMP thread,
    # so the profile measures the same way (and is not skewed by threads spinning on a busy machine).
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch  # heavy imports stay out of `mosearch --help`

    if not torch.cuda.is_available():
        torch.set_num_threads(1)

    from mosearch.profile import measure
    from trainer.models.tiny import resolve_model

    console = Console()
    model_path = str(resolve_model(args.model))
    grid = GRIDS[args.grid]
    steps = [
        ("dense matmul", "matmul", lambda: measure.matmul(**grid["matmul"])),
        ("memory bandwidth", "memory_bandwidth", lambda: measure.memory_bandwidth(**grid["bandwidth"])),
        ("training steps", "train_step", lambda: measure.train_steps(model_path, **grid["train"])),
        ("collective (2 workers)", "collective", lambda: measure.collective(**grid["collective"])),
        ("offload round trip", "offload", lambda: measure.offload(model_path)),
        ("vLLM prefill/decode/sync", "rollout", lambda: measure.rollout(model_path, **grid["rollout"])),
    ]
    rows: dict = {}
    old = None
    if args.only:  # re-measure some steps of an existing profile
        from pathlib import Path

        from problems.placement.profile import load_profile

        from problems.errors import InputError

        if not Path(args.out).is_file():
            raise InputError(args.out, None, "not found", "an existing profile for --only to update")
        old = load_profile(args.out)
        rows = dict(old.measurements)
        wanted = {STEP_KEYS[s] for s in args.only}
        steps = [s for s in steps if s[1] in wanted]
    started = time.perf_counter()
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task("profiling", total=len(steps))
        for label, key, fn in steps:
            progress.update(task, description=f"profiling: {label}")
            result = fn()
            if key == "rollout":
                rows.update(result)
            else:
                rows[key] = result
            progress.advance(task)

    cfg, params, fitted = _fit_for(model_path, rows)
    if old is not None:
        kept = {k: getattr(old.fitted, k) for k in RUN_FITTED}
        new = old.model_copy(update={"measurements": rows, "fitted": fitted.model_copy(update=kept),
                                     "machine": this_machine(torch)})
        atomic_write_text(args.out, yaml.safe_dump(new.model_dump(mode="json"), sort_keys=False))
        _print_fitted(console, f"{', '.join(args.only)} re-measured -> {args.out}", old.fitted, new.fitted)
        return 0
    profile = Profile(
        version=PROFILE_VERSION,
        device_type=args.device_type or local_device_type(),
        host={"machine": platform.machine(), "processor": platform.processor() or platform.machine(),
              "torch": torch.__version__, "threads": torch.get_num_threads(),
              "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
              "seconds": round(time.perf_counter() - started, 1), "grid": args.grid},
        model={"path": args.model, "params": params, "layers": cfg.num_hidden_layers, "hidden": cfg.hidden_size},
        machine=this_machine(torch),
        measurements=rows,
        fitted=fitted,
    )
    atomic_write_text(args.out, yaml.safe_dump(profile.model_dump(mode="json"), sort_keys=False))

    _print_fitted(console, f"profile of {profile.device_type} ({profile.host['seconds']} s) -> {args.out}", None, fitted)
    return 0


def this_machine(torch) -> dict:
    """The machine record a profile measured here carries (problems/placement/machine.py)."""
    from problems.placement import machine

    return {**machine.detect(), "threads": torch.get_num_threads()}


ALL_STEPS = tuple(STEP_KEYS)


def measure_machine(named, out) -> None:
    """This machine's profile of the device `named` profiles: `named`'s run-fitted terms as priors, scaled
    by the host-speed ratio (`carry_run_fitted`; until this machine's runs refit them), every device
    measurement taken again here (`--only` all steps, the
    default grid: about a minute on 2 cores), written to `out`. In a subprocess: the measurement runs on
    one thread (OMP_NUM_THREADS=1), as the trainer's actors do, whatever the calling process uses."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from problems.placement import machine

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".measuring.yaml")
    shutil.copyfile(named, tmp)
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "OMP_NUM_THREADS": "1", machine.ENV: machine.AS_NAMED,
           "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "mosearch", "profile", "--only", *ALL_STEPS, "--out", str(tmp)],
                          env=env, capture_output=True, text=True)
    if done.returncode:
        tmp.unlink(missing_ok=True)
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"`mosearch profile` exited with {done.returncode}: {tail}")
    ratio = carry_run_fitted(Path(named), tmp)
    tmp.replace(out)
    machine.say(f"measured this machine's profile in {time.perf_counter() - started:.0f} s -> {out}"
                + (f"; run-fitted terms carried over at its host speed, x{ratio:.2g}" if ratio != 1.0 else ""))


# the profile's fixed host costs that both machines measure: per training micro-batch, per generate call,
# per decode step (calibration.fit's intercepts: Python, launches, scheduling)
HOST_COSTS = ("train_overhead_s", "prefill_overhead_s", "decode_step_overhead_s")
HOST_RATIO_BOUND = 4.0


def host_ratio(old, new) -> float:
    """This machine's host costs over the other machine's: the geometric mean of HOST_COSTS' ratios,
    within [1/4, 4] (1 when none is measured on both)."""
    import math

    r = [getattr(new, k) / getattr(old, k) for k in HOST_COSTS if getattr(old, k) > 0 and getattr(new, k) > 0]
    if not r:
        return 1.0
    g = math.exp(sum(math.log(x) for x in r) / len(r))
    return min(HOST_RATIO_BOUND, max(1 / HOST_RATIO_BOUND, g))


def carry_run_fitted(named, measured) -> float:
    """The run-fitted terms of `named` (another machine's runs) carried into `measured` (this machine's
    device measurements): orchestration is host work, so each is scaled by the ratio of the host costs
    both machines measured (`host_ratio`); they are this machine's priors until its own runs refit them
    (problems/placement/runfit.py). Returns the ratio."""
    from pathlib import Path

    from problems.placement.profile import load_profile
    from problems.placement.runfit import TERMS

    old, new = load_profile(named), load_profile(measured)
    ratio = host_ratio(old.fitted, new.fitted)
    carried = {k: getattr(old.fitted, k) * ratio for k in RUN_FITTED}
    fitted = new.fitted.model_copy(update=carried)
    prior = {k: getattr(fitted, k) for k in TERMS}
    new = new.model_copy(update={"fitted": fitted, "runs": [], "run_fit": {
        "prior": prior, "host_ratio": ratio, "carried_from": Path(named).name}})
    atomic_write_text(str(measured), yaml.safe_dump(new.model_dump(mode="json"), sort_keys=False))
    return ratio


def show(path: str) -> int:
    """A profile's machine, fitted figures and the runs that refitted its run-fitted terms."""
    from pathlib import Path

    from problems.errors import InputError
    from problems.placement import machine
    from problems.placement.profile import load_profile

    if not path:
        p = machine.cached_profile(local_device_type_light())
        if not p.is_file():
            raise InputError(str(p), None, "not found", "this machine's profile: `mosearch plan`, `train` or `demo` "
                             "measure it, or give a profile file")
        path = str(p)
    prof = load_profile(path)
    console = Console()
    rec = prof.machine
    here = machine.detect()
    console.print(f"{path}: {prof.device_type}, measured on "
                  + (machine.describe(rec) + (" (this machine)" if machine.same_machine(rec, here) else
                                              " (another machine; this one is " + machine.describe(here) + ")")
                     if rec else "an unrecorded machine"))
    _print_fitted(console, "fitted", None, prof.fitted)
    from problems.placement.runfit import describe_fit

    for line in describe_fit(prof):
        console.print(line, soft_wrap=True)
    return 0


def local_device_type_light() -> str:
    """cpu-local unless this machine has a GPU of a catalog type (without importing torch)."""
    from problems.placement import machine

    gpu = machine.detect().get("gpu")
    if not gpu:
        return "cpu-local"
    aliases = gpu_aliases(gpu_catalog())
    return next((aliases[t.lower()] for t in gpu.replace("NVIDIA", "").split() if t.lower() in aliases), gpu)


def add_profile_flag(p) -> None:
    p.add_argument("--profile", metavar="PATH",
                   help="the profile of this machine's device to predict with (default: the cluster's when it was "
                        "measured on this machine, else this machine's own, measured once and cached)")


def follow_machine(args) -> None:
    """Before a command reads a cluster: `--profile` pins this machine's profile; otherwise a profile of a
    local device measured on another machine is replaced by this machine's, measured when missing."""
    import os
    from pathlib import Path

    from problems.errors import InputError
    from problems.placement import machine

    if getattr(args, "profile", None):
        if not Path(args.profile).is_file():
            raise InputError(args.profile, None, "not found", "a profile written by `mosearch profile`")
        os.environ[machine.ENV] = str(Path(args.profile).resolve())
    machine.set_measurer(measure_machine)
