"""Every run refits: a measured run moves the run-fitted terms of this machine's profile (bounded), the
next prediction moves toward the measurement, `mosearch profile --show` lists the runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from problems.placement import machine, runfit
from problems.placement.predict import predict_run
from problems.placement.problem import PlacementProblem
from problems.placement.profile import load_profile

from tests.calibration.conftest import HERE

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def setup(follow):
    """A local cluster whose profile was measured on this (test) machine, and a colocated plan of it."""
    tmp_path = follow
    data = yaml.safe_load((REPO / "profiles/local.yaml").read_text())
    data["machine"] = dict(HERE)
    profile = tmp_path / "mine.yaml"
    profile.write_text(yaml.safe_dump(data))
    spec = yaml.safe_load((REPO / "problems/clusters/local.yaml").read_text())
    spec["profiles"] = {"cpu-local": str(profile)}
    cluster = tmp_path / "local.yaml"
    cluster.write_text(yaml.safe_dump(spec))
    prob = PlacementProblem.from_files(cluster, REPO / "problems/workloads/tiny-grpo.yaml")
    X = prob.layout.repair(prob.xl + np.random.default_rng(0).random((40, prob.n_var)) * (prob.xu - prob.xl))
    plans = [prob.decode(x, lifetime=False) for x in X]
    plan = next(p for p in plans if p.execution.mode == "colocated")
    path = tmp_path / "plan.yaml"
    path.write_text(plan.to_yaml())
    return path, profile


def summary_for(path, rollout_x: float, train_x: float) -> dict:
    """A run's summary (as the driver writes it) whose phases took these multiples of the prediction."""
    s = {"run": {"model": "tiny", "algo": "grpo", "prompts_per_step": 16, "group_size": 8, "mini_batches": 1,
                 "max_new_tokens": 12},
         "layout": {"engines": 1, "dp": 1, "notes": [], "device": "cpu"}, "mode": "colocated", "steps": 8,
         "measured": {"prompt_tokens_mean": 6.0, "response_tokens_mean": 11.0}}
    pred, _ = predict_run(path, s, local_cluster=None)
    s["measured"].update(rollout_s=pred["rollout_s"] * rollout_x, train_s=pred["train_s"] * train_x,
                         step_s=pred["step_s"] * max(rollout_x, train_x))
    return s


def test_run_refits_and_next_prediction_moves_toward_the_measurement(setup, capsys):
    path, profile = setup
    summary = summary_for(path, rollout_x=0.6, train_x=1.3)
    before, _ = predict_run(path, summary, local_cluster=None)
    assert before["profiles"] == {"cpu-local": str(profile)}
    line = runfit.refit_after_run(path, summary, before, run_dir="runs/x")
    cached = machine.cached_profile("cpu-local")
    assert cached.is_file() and "refitted" in line and "residual" in line and str(cached) in line
    after, _ = predict_run(path, summary, local_cluster=None)  # the cluster now reads this machine's cache
    assert after["profiles"] == {"cpu-local": str(cached)}
    meas = summary["measured"]
    for phase in ("rollout_s", "train_s"):
        assert abs(after[phase] - meas[phase]) < 0.8 * abs(before[phase] - meas[phase]), phase
    new = load_profile(cached)
    assert new.fitted.rollout_call_s < load_profile(profile).fitted.rollout_call_s
    assert new.fitted.tflops == load_profile(profile).fitted.tflops  # device figures untouched
    assert len(new.runs) == 1 and new.runs[0]["run"] == "runs/x"
    # the repository's (the cluster's) file is not written
    assert load_profile(profile).runs == []


def test_refit_is_bounded_by_its_prior(setup):
    path, _ = setup
    summary = summary_for(path, rollout_x=40.0, train_x=1.0)
    pred, _ = predict_run(path, summary, local_cluster=None)
    runfit.refit_after_run(path, summary, pred)
    new = load_profile(machine.cached_profile("cpu-local"))
    prior = new.run_fit["prior"]
    assert new.fitted.rollout_call_s == pytest.approx(prior["rollout_call_s"] * runfit.BOUND)
    assert new.run_fit["scales"]["rollout_call_s"] == pytest.approx(runfit.BOUND)
    assert new.run_fit["scales"]["rollout_sample_s"] == pytest.approx(runfit.BOUND)


def test_refit_over_several_runs_keeps_the_priors_and_shows_them(setup, capsys):
    from mosearch.cli import main

    path, _ = setup
    for x in (0.5, 0.7):
        summary = summary_for(path, rollout_x=x, train_x=1.0)
        pred, _ = predict_run(path, summary, local_cluster=None)
        runfit.refit_after_run(path, summary, pred, run_dir=f"runs/r{x}")
    new = load_profile(machine.cached_profile("cpu-local"))
    assert len(new.runs) == 2
    # the prior stays the first profile's: the second refit is not compounded on the first
    assert new.run_fit["prior"]["rollout_call_s"] == pytest.approx(
        load_profile(REPO / "profiles/local.yaml").fitted.rollout_call_s)
    capsys.readouterr()
    assert main(["profile", "--show"]) == 0
    out = capsys.readouterr().out
    assert "runs/r0.5" in out and "runs/r0.7" in out and "rollout_call_s" in out and "(this machine)" in out


def test_profile_of_another_machine_is_not_refitted(setup, monkeypatch):
    path, profile = setup
    summary = summary_for(path, rollout_x=0.5, train_x=1.0)
    pred, _ = predict_run(path, summary, local_cluster=None)
    monkeypatch.setattr(machine, "_HERE", {**HERE, "cpu": "Other CPU"})
    line = runfit.refit_after_run(path, summary, pred)
    assert "not refitted" in line and not machine.cached_profile("cpu-local").exists()


def test_fit_tells_two_terms_apart_across_runs():
    """Rollout = base + s_call x call share + s_sample x sample share: runs with different samples per call
    recover both scales (2 and 0.5); one run alone moves them together, pulled toward their priors."""
    truth = (2.0, 0.5)
    runs = []
    for call, sample in ((0.1, 0.05), (0.1, 0.4), (0.1, 0.8)):
        m = 1.0 + truth[0] * call + truth[1] * sample
        runs.append({"measured": {"rollout_s": m}, "base": {"rollout_s": 1.0},
                     "contrib": {"rollout": [call, sample]}})
    prior = dict.fromkeys(runfit.TERMS, 0.01)
    res = runfit.fit(runs, prior)
    assert res["scales"]["rollout_call_s"] == pytest.approx(2.0, rel=0.1)
    assert res["scales"]["rollout_sample_s"] == pytest.approx(0.5, rel=0.1)
    assert res["terms"]["rollout_sample_s"] == pytest.approx(0.005, rel=0.1)
    before, after = res["residual"]["rollout_s"]
    assert after < 0.2 * before
    assert "train_s" not in res["residual"]  # no run measured it: its terms stay at their priors
    assert res["terms"]["microbatch_loop_s"] == 0.01


def test_run_with_a_pinned_profile_leaves_this_machines_profile_alone(setup, monkeypatch):
    path, profile = setup
    summary = summary_for(path, rollout_x=0.5, train_x=1.0)
    pred, _ = predict_run(path, summary, local_cluster=None)
    runfit.refit_after_run(path, summary, pred, run_dir="runs/a")  # creates this machine's profile
    cached = machine.cached_profile("cpu-local")
    monkeypatch.setenv(machine.ENV, str(profile))  # pinned to the cluster's file
    pred, _ = predict_run(path, summary, local_cluster=None)
    assert pred["profiles"] == {"cpu-local": str(profile)}
    line = runfit.refit_after_run(path, summary, pred, run_dir="runs/b")
    assert "not refitted" in line and [r["run"] for r in load_profile(cached).runs] == ["runs/a"]


def test_show_without_a_profile_of_this_machine_is_one_line(setup, capsys):
    from mosearch.cli import main

    assert main(["profile", "--show"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not found" in err[0] and "measure it" in err[0]
    assert main(["profile"]) == 2 and "--out" in capsys.readouterr().err


def test_training_compute_is_refitted_within_its_bounds(setup):
    """A run whose training took 1.6x the model's: the compute factor (mfu / it) takes most of it; the
    model's mfu is never set above 1."""
    path, profile = setup
    summary = summary_for(path, rollout_x=1.0, train_x=1.6)
    before, _ = predict_run(path, summary, local_cluster=None)
    runfit.refit_after_run(path, summary, before)
    new = load_profile(machine.cached_profile("cpu-local"))
    assert new.fitted.train_compute > 1.2
    after, _ = predict_run(path, summary, local_cluster=None)
    meas = summary["measured"]["train_s"]
    assert abs(after["train_s"] / meas - 1) < 0.5 * abs(before["train_s"] / meas - 1)
    # faster than measured: bounded by mfu 1 (the committed profile's mfu is 1: no faster compute)
    fast = summary_for(path, rollout_x=1.0, train_x=0.5)
    runfit.refit_after_run(path, fast, predict_run(path, fast, local_cluster=None)[0])
    again = load_profile(machine.cached_profile("cpu-local"))
    assert again.fitted.train_compute >= load_profile(profile).fitted.mfu - 1e-9
