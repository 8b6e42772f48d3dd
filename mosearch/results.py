"""A run directory: writing and reading front.csv, front.json, plans/, history.csv, run.yaml.

front.csv/front.json hold the epsilon front people read (`decide.epsilon_front`);
front_all.csv/front_all.json the plans the search found: every non-dominated plan less those
another plan matches within the resolution in every objective and beats by more than the
resolution in both throughput and cost (`decide.found_front`; e.g. a plan slower and dearer by
more than 5% than another, kept only for a peak memory 0.1 lower); plans/ one file per plan of
the latter, so any plan id of either file can be trained.

Every file is written atomically (`problems.atomic`: a temporary file in the same directory,
fsynced, then renamed over the target), so a reader or an interrupted run never sees half a file.
The files of one result must also agree with each other (front.csv, front.json and plans/
list the same plans), so `staged` writes a whole result into a hidden directory beside the
run directory and swaps the two in one atomic rename (Linux renameat2 RENAME_EXCHANGE; two
renames elsewhere, where a reader may briefly find no directory). Entries the planner does
not write (checkpoint/, a picked plan.yaml) are carried over as hard links.
"""

from __future__ import annotations

import csv
import ctypes
import errno
import io
import json
import os
import re
import shutil
import sys
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import yaml

from mosearch.decide import COLUMNS
from problems.atomic import atomic_write_text
from problems.errors import InputError
from problems.placement.plan import Plan
from problems.placement.planfiles import from_file, rebase

# The contract of front.csv (DESIGN.md, "File contracts"); decision fields follow.
METRICS = ("throughput_samples_s", "throughput_tokens_s", "cost_usd_h", "usd_per_1k_samples", "peak_mem_frac", "staleness")
FRONT_COLUMNS = ("plan_id", *METRICS)
WRITE_THREADS = 8


def flatten_plan(plan: Plan) -> dict[str, object]:
    """The plan's decision fields as flat columns: per pool roles, then layout and mode."""
    row: dict[str, object] = {}
    for p in plan.pools:
        for key in ("rollout_gpus", "train_gpus", "shared_gpus", "rollout_tp"):
            row[f"{p.pool}.{key}"] = getattr(p, key)
    for section in ("rollout", "train", "execution", "weight_sync"):
        for key, value in getattr(plan, section).model_dump(mode="json").items():
            row[f"{section}.{key}"] = value
    return row


def metric_row(plan: Plan) -> dict[str, object]:
    pred = plan.predicted
    return {"plan_id": plan.plan_id, **{m: pred.get(m, float("nan")) for m in METRICS}}


def _csv_text(rows: list[dict[str, object]], first: tuple[str, ...]) -> str:
    columns = list(first)
    for row in rows:
        columns += [k for k in row if k not in columns]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _fmt(v) for k, v in row.items()})
    return buf.getvalue()


def _fmt(v: object) -> object:
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    return v


def front_table(plans: list[Plan], extra_first: tuple[str, ...] = ()) -> str:
    rows = [{**metric_row(p), **flatten_plan(p)} for p in plans]
    return _csv_text(rows, (*extra_first, *FRONT_COLUMNS))


def _json_plans(plans: list[Plan]) -> list[dict]:
    return [{**metric_row(p), "plan": p.model_dump(mode="json")} for p in plans]


def _plans_json(rows: list[dict]) -> str:
    """{"plans": [...]} with one plan a line. Indented output would run json's pure-Python
    encoder: 1.8 s for a mixed-64 run's 1,915 plans."""
    return '{"plans": [\n' + ",\n".join(json.dumps(r) for r in rows) + "\n]}\n"


def _scalar(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v != v:
            return ".nan"
        if v in (float("inf"), float("-inf")):
            return ".inf" if v > 0 else "-.inf"
        return repr(v)
    return json.dumps(str(v))  # a JSON string is a valid YAML double-quoted scalar


_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}


def _key(k) -> str:
    k = str(k)
    return k if _PLAIN_KEY.fullmatch(k) and k.lower() not in _YAML_WORDS else json.dumps(k)


def _block(value, indent: str) -> list[str]:
    lines = []
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                lines.append(f"{indent}{_key(k)}:")
                lines += _block(v, indent + "  ")
            else:
                lines.append(f"{indent}{_key(k)}: {_empty(v) if isinstance(v, (dict, list)) else _scalar(v)}")
    else:
        for v in value:
            sub = _block(v, indent + "  ") if isinstance(v, (dict, list)) and v else [f"{indent}  {_scalar(v)}"]
            lines.append(f"{indent}- {sub[0].lstrip()}")
            lines += sub[1:]
    return lines


def _empty(v) -> str:
    return "{}" if isinstance(v, dict) else "[]"


def plan_yaml(plan: Plan) -> str:
    """The plan as block YAML, read back by `load_plan` (yaml.safe_load) to the same plan.

    Emitted directly: PyYAML's representer takes ~20 ms a plan, seconds for a front of hundreds."""
    return "\n".join(_block(plan.model_dump(mode="json"), "")) + "\n"


def write_front(out: Path, plans: list[Plan], front=None) -> None:
    """`plans`: every plan found; `front`: the rows of it people read (default: all). Each file names
    the plans' specs relative to its own folder (problems.placement.planfiles)."""
    plans = rebase(plans, Path.cwd(), out)
    shown = plans if front is None else [plans[int(i)] for i in front]
    atomic_write_text(out / "front.csv", front_table(shown))
    atomic_write_text(out / "front.json", _plans_json(_json_plans(shown)))
    atomic_write_text(out / "front_all.csv", front_table(plans))
    atomic_write_text(out / "front_all.json", _plans_json(_json_plans(plans)))
    plan_dir = out / "plans"
    plan_dir.mkdir(parents=True, exist_ok=True)
    keep = {f"{p.plan_id}.yaml" for p in plans}
    texts = [(plan_dir / f"{p.plan_id}.yaml", plan_yaml(p)) for p in rebase(plans, out, plan_dir)]
    # each file is fsynced before its rename; threads overlap those waits (fsync releases the GIL)
    with ThreadPoolExecutor(max_workers=WRITE_THREADS) as pool:
        list(pool.map(lambda item: atomic_write_text(*item), texts))
    for stale in plan_dir.glob("*.yaml"):  # a previous run into the same directory
        if stale.name not in keep:
            stale.unlink()


def write_baselines(out: Path, baselines: dict[str, Plan]) -> None:
    """Baseline planners' plans beside the front, named by planner."""
    plans = rebase(list(baselines.values()), Path.cwd(), out)
    rows = [{"baseline": name, **metric_row(p), **flatten_plan(p)} for name, p in baselines.items()]
    atomic_write_text(out / "baselines.csv", _csv_text(rows, ("baseline", *FRONT_COLUMNS)))
    data = [{"baseline": name, **d} for name, d in zip(baselines, _json_plans(plans))]
    atomic_write_text(out / "baselines.json", _plans_json(data))


HISTORY_COLUMNS = ("generation", "evaluations", "wall_s", "hv", "front_size", "feasible_share",
                   "best_throughput", "min_cost")


def write_history(out: Path, rows: list[dict[str, object]]) -> None:
    atomic_write_text(out / "history.csv", _csv_text(rows, HISTORY_COLUMNS))


def write_run_info(out: Path, info: dict) -> None:
    atomic_write_text(out / "run.yaml", yaml.safe_dump(info, sort_keys=False))


# ------------------------------------------------------------------ committing a whole result

STAGE_TAG = ".staging-"
_RENAME_EXCHANGE = 2  # linux/fs.h


def _exchange(a: Path, b: Path) -> bool:
    """Swap two directories atomically; False where the system cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EXDEV):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _link_tree(src: Path, dst: Path) -> None:
    def link(s, d):
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    shutil.copytree(src, dst, symlinks=True, copy_function=link)


def _carry_over(old: Path, new: Path) -> None:
    for entry in old.iterdir():
        if (new / entry.name).exists() or (new / entry.name).is_symlink() or STAGE_TAG in entry.name:
            continue
        if entry.is_symlink():
            os.symlink(os.readlink(entry), new / entry.name)
        elif entry.is_dir():
            _link_tree(entry, new / entry.name)
        else:
            try:
                os.link(entry, new / entry.name)
            except OSError:
                shutil.copy2(entry, new / entry.name)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_stale_stages(out: Path) -> None:
    """Staging directories left by a killed run (their process is gone)."""
    for d in out.parent.glob(f".{out.name}{STAGE_TAG}*"):
        pid = d.name.rsplit(STAGE_TAG, 1)[1].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(d, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def staged(out: Path):
    """Yield a directory to write a whole result into; on success it becomes `out` in one step.

    When `out` is (or holds) the working directory it cannot be swapped; the files are then
    written in place, each atomically but not all at once."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cwd = Path.cwd().resolve()
    if cwd == out.resolve() or out.resolve() in cwd.parents:
        yield out
        return
    stage = out.parent / f".{out.name}{STAGE_TAG}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    stage.mkdir()
    try:
        yield stage
        _carry_over(out, stage)
        for d in (stage / "plans", stage):
            if d.is_dir():
                _fsync_dir(d)
        if not _exchange(stage, out):
            old = out.parent / f".{out.name}{STAGE_TAG}{os.getpid()}-old"
            os.rename(out, old)
            os.rename(stage, out)
            stage = old
        _fsync_dir(out.parent)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


# ------------------------------------------------------------------ reading


@dataclass
class Run:
    path: Path
    plans: list[Plan]  # the epsilon front (front.json)
    info: dict = field(default_factory=dict)
    baselines: dict[str, Plan] = field(default_factory=dict)
    all_plans: list[Plan] = field(default_factory=list)  # every plan found (front_all.json)

    @property
    def resolution(self) -> np.ndarray:
        from mosearch.decide import NAMES, RESOLUTION

        saved = self.info.get("resolution") or {}
        return np.array([float(saved.get(n, r)) for n, r in zip(NAMES, RESOLUTION)])

    @property
    def F(self) -> np.ndarray:
        """Objectives in natural units, in decide.OBJECTIVES order."""
        return objective_matrix(self.plans)

    @property
    def partial(self) -> bool:
        return bool(self.info.get("partial", False))


def objective_matrix(plans: list[Plan]) -> np.ndarray:
    return np.array([[p.predicted.get(c, np.nan) for c in COLUMNS] for p in plans], dtype=float).reshape(-1, len(COLUMNS))


def _read_plans(path: Path, what: str) -> list[tuple[dict, Plan]]:
    try:
        data = json.loads(path.read_text())
        items = data["plans"]
        plans = from_file([Plan.model_validate(d["plan"]) for d in items], path)
        return list(zip(items, plans))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise InputError(str(path), None, f"cannot read {what}: {err.__class__.__name__}: {err}",
                         "a file written by `mosearch plan`") from None


def load_run(path: str | Path) -> Run:
    path = Path(path)
    front = path / "front.json"
    if not front.is_file():
        raise InputError(str(path), None, "no front.json here", "a run directory written by `mosearch plan --out DIR`")
    plans = [p for _, p in _read_plans(front, "the front")]
    info = {}
    if (path / "run.yaml").is_file():
        info = yaml.safe_load((path / "run.yaml").read_text()) or {}
    baselines = {}
    if (path / "baselines.json").is_file():
        baselines = {d.get("baseline", p.plan_id): p for d, p in _read_plans(path / "baselines.json", "the baselines")}
    all_plans = plans
    if (path / "front_all.json").is_file():
        all_plans = [p for _, p in _read_plans(path / "front_all.json", "the full front")]
    return Run(path, plans, info, baselines, all_plans)
