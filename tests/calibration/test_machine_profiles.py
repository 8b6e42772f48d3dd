"""Profiles follow the machine: a profile of a local device measured on another machine is replaced by
this machine's (measured once, cached in the user's cache directory), `--profile` pins one."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from problems.placement import machine
from problems.placement.profile import load_profile
from problems.placement.specs import load_cluster

from tests.calibration.conftest import HERE

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "profiles" / "local.yaml"


def local_cluster(tmp_path: Path, profile: Path) -> Path:
    spec = yaml.safe_load((REPO / "problems" / "clusters" / "local.yaml").read_text())
    spec["profiles"] = {"cpu-local": str(profile)}
    path = tmp_path / "local.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def fake_measurer(tflops: float, calls: list):
    """Writes `named` with this machine's record and another matmul peak, as the measurement would."""
    def measure(named: Path, out: Path) -> None:
        calls.append((named, out))
        data = yaml.safe_load(Path(named).read_text())
        data["machine"] = dict(HERE)
        data["fitted"]["tflops"] = tflops
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(yaml.safe_dump(data))
    return measure


def test_committed_profile_records_its_machine_and_differs_from_another():
    rec = load_profile(COMMITTED).machine
    assert rec["cpu"] == "Intel Xeon" and rec["cores"] == 2 and rec["torch"]
    assert not machine.same_machine(rec, HERE)
    assert machine.machine_key("cpu-local", rec) != machine.machine_key("cpu-local", HERE)
    assert machine.same_machine(rec, {**rec, "threads": 8, "driver": "x"})  # recorded, not compared


def test_profile_of_another_machine_is_measured_here_once_and_cached(follow, capsys):
    calls = []
    machine.set_measurer(fake_measurer(0.777, calls))
    cluster = load_cluster(local_cluster(follow, COMMITTED))
    cached = machine.cached_profile("cpu-local")
    assert len(calls) == 1 and calls[0] == (COMMITTED, cached)
    assert str(follow / "cache") in str(cached) and cached.is_file()
    assert cluster.profiles["cpu-local"] == str(cached)
    assert cluster.pools[0].gpu.tflops == pytest.approx(0.777)
    err = capsys.readouterr().err
    assert "Intel Xeon" in err and "Test CPU 9000" in err and "measuring" in err
    # the next read uses the cache: no second measurement
    again = load_cluster(local_cluster(follow, COMMITTED))
    assert len(calls) == 1 and again.pools[0].gpu.tflops == pytest.approx(0.777)


def test_profile_of_this_machine_is_used_as_named(follow):
    mine = follow / "mine.yaml"
    data = yaml.safe_load(COMMITTED.read_text())
    data["machine"] = dict(HERE)
    mine.write_text(yaml.safe_dump(data))

    def never(named, out):
        raise AssertionError("measured a profile of this machine")
    machine.set_measurer(never)
    cluster = load_cluster(local_cluster(follow, mine))
    assert cluster.profiles["cpu-local"] == str(mine)


def test_without_a_measurer_the_named_profile_is_used_and_said(follow, capsys):
    cluster = load_cluster(local_cluster(follow, COMMITTED))
    assert cluster.profiles["cpu-local"] == str(COMMITTED)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not this machine" in err[0]


def test_pinned_profile_and_as_named(follow, monkeypatch):
    pinned = follow / "pinned.yaml"
    data = yaml.safe_load(COMMITTED.read_text())
    data["fitted"]["tflops"] = 0.321
    pinned.write_text(yaml.safe_dump(data))
    calls = []
    machine.set_measurer(fake_measurer(0.9, calls))
    monkeypatch.setenv(machine.ENV, str(pinned))
    assert load_cluster(local_cluster(follow, COMMITTED)).pools[0].gpu.tflops == pytest.approx(0.321)
    monkeypatch.setenv(machine.ENV, machine.AS_NAMED)
    assert load_cluster(local_cluster(follow, COMMITTED)).profiles["cpu-local"] == str(COMMITTED)
    assert calls == []


def test_failed_measurement_keeps_the_named_profile(follow, capsys):
    def broken(named, out):
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("half")
        raise RuntimeError("no vLLM here")
    machine.set_measurer(broken)
    cluster = load_cluster(local_cluster(follow, COMMITTED))
    assert cluster.profiles["cpu-local"] == str(COMMITTED)
    assert not machine.cached_profile("cpu-local").exists()
    assert "no vLLM here" in capsys.readouterr().err


def test_gpu_profile_is_local_only_on_a_machine_with_that_gpu(follow, monkeypatch):
    canon = {"h100": "H100", "h100-sxm": "H100", "a100": "A100"}.get
    assert not machine.is_local("H100", lambda n: canon(n.lower()))
    monkeypatch.setattr(machine, "_HERE", {**HERE, "gpu": "NVIDIA H100 80GB HBM3"})
    assert machine.is_local("H100", lambda n: canon(n.lower()))
    assert not machine.is_local("A100", lambda n: canon(n.lower()))
    assert machine.is_local("cpu-local", lambda n: None)


def test_profile_flag_of_a_missing_file_is_one_line(tmp_path, capsys):
    from mosearch.cli import main

    code = main(["plan", "--cluster", str(REPO / "problems/clusters/local.yaml"), "--workload",
                 str(REPO / "problems/workloads/tiny-grpo.yaml"), "--out", str(tmp_path / "r"),
                 "--profile", str(tmp_path / "nope.yaml")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and "nope.yaml" in err[0] and "not found" in err[0]


def test_run_fitted_terms_are_carried_over_at_the_host_speed_ratio(tmp_path):
    """A profile measured here starts from the other machine's run-fitted terms scaled by how much
    faster this host's measured fixed costs are (bounded), as the priors its own runs refit."""
    from mosearch.commands.profile import HOST_COSTS, HOST_RATIO_BOUND, carry_run_fitted
    from problems.placement.profile import RUN_FITTED

    old = load_profile(COMMITTED)
    data = yaml.safe_load(COMMITTED.read_text())
    for k in HOST_COSTS:  # this host: half the other's fixed costs
        data["fitted"][k] = getattr(old.fitted, k) / 2
    data["fitted"]["rollout_sample_s"] = 123.0  # what the copy held: replaced by the carried figure
    here = tmp_path / "here.yaml"
    here.write_text(yaml.safe_dump(data))
    assert carry_run_fitted(COMMITTED, here) == pytest.approx(0.5)
    new = load_profile(here)
    for k in RUN_FITTED:
        assert getattr(new.fitted, k) == pytest.approx(getattr(old.fitted, k) * 0.5)
    assert new.run_fit["prior"]["rollout_sample_s"] == pytest.approx(old.fitted.rollout_sample_s * 0.5)
    assert new.runs == [] and new.fitted.tflops == data["fitted"]["tflops"]
    for k in HOST_COSTS:  # a host 100x faster: bounded
        data["fitted"][k] = getattr(old.fitted, k) / 100
    here.write_text(yaml.safe_dump(data))
    assert carry_run_fitted(COMMITTED, here) == pytest.approx(1 / HOST_RATIO_BOUND)
