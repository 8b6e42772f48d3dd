"""The files a plan names, found one way by every command (problems/placement/planfiles.py): written
relative to the plan file by `mosearch plan` and `pick`, so a plan works from any directory; older
plans (paths relative to the working directory of the search) still load; a missing workload is
one line, before anything starts."""

from pathlib import Path

import pytest
import yaml

from mosearch.cli import main
from problems.placement.plan import load_plan
from problems.placement.planfiles import PlanInputs, locate

ROOT = Path(__file__).resolve().parents[2]
CLUSTER, WORKLOAD = "problems/clusters/local.yaml", "problems/workloads/tiny-grpo.yaml"


@pytest.fixture(scope="module")
def picked(tmp_path_factory):
    """A small search typed from the repository root with relative paths, picked into another folder.
    Searched for verl, so the picked plan is one verl can start whichever plan the search picks."""
    import os

    tmp = tmp_path_factory.mktemp("paths")
    here = os.getcwd()
    os.chdir(ROOT)
    try:
        assert main(["plan", "--cluster", CLUSTER, "--workload", WORKLOAD, "--out", str(tmp / "run"),
                     "--evals", "300", "--quiet", "--executor", "verl"]) == 0
        assert main(["pick", str(tmp / "run"), "--out", str(tmp / "a" / "b" / "plan.yaml")]) == 0
    finally:
        os.chdir(here)
    return tmp


def _named(plan_file: Path) -> dict:
    data = yaml.safe_load(plan_file.read_text())
    return {k: data[k]["path"] for k in ("cluster", "workload")}


def test_plans_name_their_specs_relative_to_themselves(picked):
    files = [picked / "a" / "b" / "plan.yaml", *sorted((picked / "run" / "plans").glob("*.yaml"))[:3]]
    for f in files:
        for kind, path in _named(f).items():
            assert not Path(path).is_absolute()
            assert (f.parent / path).resolve() == (ROOT / (CLUSTER if kind == "cluster" else WORKLOAD)).resolve(), f
    # the run directory's JSON names them relative to the run directory, and reads back from anywhere
    from mosearch.results import load_run

    run = load_run(picked / "run")
    assert all(locate(p.workload.path, Path.cwd() / "x.yaml") for p in run.all_plans)


def test_a_picked_plan_runs_from_another_directory(picked, monkeypatch, capsys):
    monkeypatch.chdir(picked / "a")  # neither the repository root nor the plan's folder
    assert main(["export", "b/plan.yaml", "--to", "verl"]) == 0
    out = capsys.readouterr()
    assert "not found" not in out.err and "train_batch_size" in out.out  # the workload was read
    assert main(["predict", "--plan", "b/plan.yaml"]) == 0


def test_plans_with_working_directory_paths_still_load(tmp_path, monkeypatch):
    old = load_plan(ROOT / "tests/trainer/data/local_plan.yaml").model_copy()
    old = old.model_copy(update={"cluster": old.cluster.model_copy(update={"path": CLUSTER}),
                                 "workload": old.workload.model_copy(update={"path": WORKLOAD})})
    f = tmp_path / "old.yaml"
    f.write_text(old.to_yaml())
    monkeypatch.chdir(ROOT)
    inputs = PlanInputs.load(f)
    assert inputs.workload().name == "tiny-grpo" and inputs.cluster().name == "local"
    monkeypatch.chdir(tmp_path)  # from elsewhere such a plan's specs are not found: one line, below
    assert inputs.path("workload") is None


def test_train_with_a_missing_workload_is_one_line(tmp_path, capsys):
    plan = load_plan(ROOT / "tests/trainer/data/local_plan.yaml")
    plan = plan.model_copy(update={"workload": plan.workload.model_copy(update={"path": "gone/workload.yaml"})})
    f = tmp_path / "plan.yaml"
    f.write_text(plan.to_yaml())
    assert main(["train", "--plan", str(f), "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"mosearch: {f}: workload.path: gone/workload.yaml: no such file (looked beside the plan: "
                   f"{tmp_path / 'gone/workload.yaml'}, and in the working directory) (the workload spec the plan "
                   "was made with, at that path)")
