"""The files a plan names (its cluster and its workload), found the same way by every command.

A plan file names them relative to its own folder (`mosearch plan` and `mosearch pick` write them
so: `rebase`), so a plan runs from any working directory and travels with its specs. Plans written
before that (a path as typed, relative to the working directory of the search) still load: a
relative path not found beside the plan is tried from the working directory. An absolute path is
used as is.

`PlanInputs` is one run's view of a plan and its specs: each file is read once, on first use, and
a file the plan names but that is not there is one line naming the plan, the key and where it was
looked for (never a silent skip).

In memory (a plan the planner just made, or one read from a run directory by `mosearch.results`)
the paths are relative to the working directory; on disk, relative to the file holding the plan.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from problems.errors import InputError
from problems.placement.plan import Plan, load_plan

KINDS = ("cluster", "workload")


def locate(named: str, plan_file: str | Path) -> Path | None:
    """The file a plan at `plan_file` names as `named`: absolute as is; relative: beside the plan,
    else from the working directory (plans written before paths were plan-relative); None if absent."""
    return _find(named, Path(plan_file).parent)


def _find(named: str, folder: Path) -> Path | None:
    p = Path(named)
    for cand in ((p,) if p.is_absolute() else (folder / p, p)):
        if cand.is_file():
            return cand
    return None


def missing(plan_file: str | Path, kind: str | None, named: str, flag: str | None = None) -> InputError:
    """The one line for a file the plan names (its `kind`: cluster or workload) that is not there."""
    where = Path(plan_file).parent / named
    how = f"the {kind or ''} spec the plan was made with, at that path".replace("  ", " ") + (
        f", or give {flag}" if flag else "")
    return InputError(str(plan_file), f"{kind}.path" if kind else None,
                      f"{named}: no such file (looked beside the plan: {where}, and in the working directory)", how)


def require(plan_file: str | Path, kind: str | None, named: str, flag: str | None = None) -> Path:
    """`locate`, or the one-line error."""
    found = locate(named, plan_file)
    if found is None:
        raise missing(plan_file, kind, named, flag)
    return found


def rebase(plans: list[Plan], src_dir: str | Path, dst_dir: str | Path) -> list[Plan]:
    """The plans with each relative spec path that was valid from `src_dir` rewritten to be valid
    from `dst_dir` (absolute ones stay; one not found stays as it was)."""
    src, dst = Path(src_dir), os.path.abspath(dst_dir)
    new: dict[str, str] = {}  # a front's plans share their specs: each path is looked up once

    def moved(path: str) -> str:
        if path not in new:
            found = None if Path(path).is_absolute() else _find(path, src)
            new[path] = path if found is None else Path(os.path.relpath(os.path.abspath(found), dst)).as_posix()
        return new[path]

    out = []
    for plan in plans:
        changes = {k: getattr(plan, k).model_copy(update={"path": moved(getattr(plan, k).path)}) for k in KINDS
                   if moved(getattr(plan, k).path) != getattr(plan, k).path}
        out.append(plan.model_copy(update=changes) if changes else plan)
    return out


def for_file(plan: Plan, dest: str | Path) -> Plan:
    """An in-memory plan (paths from the working directory) as the plan file `dest` names them."""
    return rebase([plan], Path.cwd(), Path(dest).parent)[0]


def from_file(plans: list[Plan], source: str | Path) -> list[Plan]:
    """Plans read from the file `source` (paths from its folder) with paths from the working directory."""
    return rebase(plans, Path(source).parent, Path.cwd())


@dataclass
class PlanInputs:
    """A plan file and the specs it names, each read at most once. `cluster_file`/`workload_file`
    given: used instead of the paths the plan names (a command's --cluster / --workload)."""

    plan_file: Path
    plan: Plan
    given: dict[str, Path] = field(default_factory=dict)
    _loaded: dict = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, plan_file: str | Path, plan: Plan | None = None, cluster_file: str | Path | None = None,
             workload_file: str | Path | None = None) -> "PlanInputs":
        plan_file = Path(plan_file)
        given = {k: Path(v) for k, v in (("cluster", cluster_file), ("workload", workload_file)) if v}
        return cls(plan_file, plan or load_plan(plan_file), given)

    def path(self, kind: str) -> Path | None:
        """Where the `kind` spec is (a given file wins over the plan's path); None when absent."""
        if kind in self.given:
            return self.given[kind]
        return locate(getattr(self.plan, kind).path, self.plan_file)

    def require_path(self, kind: str, flag: str | None = None) -> Path:
        got = self.path(kind)
        if got is None:
            raise missing(self.plan_file, kind, getattr(self.plan, kind).path, flag)
        return got

    def has(self, kind: str) -> bool:
        return self.path(kind) is not None

    def _read(self, kind: str, flag: str | None):
        if kind not in self._loaded:
            from problems.placement.specs import load_cluster, load_workload

            self._loaded[kind] = (load_cluster if kind == "cluster" else load_workload)(self.require_path(kind, flag))
        return self._loaded[kind]

    def cluster(self, flag: str | None = None):
        """The plan's cluster (read once); one line when its file is not there."""
        return self._read("cluster", flag)

    def workload(self, flag: str | None = None):
        """The plan's workload (read once); one line when its file is not there."""
        return self._read("workload", flag)
