"""Fronts searched for an executor (`mosearch plan --executor`) start in that executor as planned.

Every plan of the front (front.csv) of a 7B GRPO run on mixed-64, 70B PPO runs on h100-64 and mixed-64
and a small 1.5B run on mixed-8, per executor, is exported and started by the executor's own start-up
code (tests/export/targets.py): a refusal fails the test, and what the executor asks for (GPUs per
node and in all, DP, TP/PP, the critic's layout, engines, mode) must be exactly the plan's.

The fronts are searched once per session with a reduced budget (conftest.py `fronts`), so CI spends its
time on the executors' checks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mosearch.export import ExportContext
from problems.errors import NoFeasiblePlan
from problems.placement.problem import PlacementProblem
from problems.placement.specs import load_cluster, load_workload

from .conftest import EVALS, front_paths as _paths
from .targets import check_areal, check_rlinf, check_verl

ROOT = Path(__file__).resolve().parents[2]
CASES = [("mixed-64", "qwen2.5-7b-grpo"), ("h100-64", "llama3.1-70b-ppo"), ("mixed-64", "llama3.1-70b-ppo"),
         ("mixed-8", "qwen2.5-1.5b-grpo")]
# AReaL has no optimizer offload during the step and always shards fully: 70B PPO does not fit
# mixed-64's GPUs without it (the model's memory), so that front is empty (checked below)
EMPTY = {("areal", "mixed-64", "llama3.1-70b-ppo")}


@pytest.fixture(scope="session")
def model_path(tmp_path_factory) -> str:
    """verl reads the critic's HF config from disk: the local tiny model stands in for the user's."""
    from trainer.models.tiny import build_tiny

    return str(build_tiny(tmp_path_factory.mktemp("model") / "tiny"))


CHECKS = {"verl": check_verl, "areal": check_areal, "rlinf": check_rlinf}
PARAMS = [(e, c, w) for e in CHECKS for c, w in CASES if (e, c, w) not in EMPTY]


@pytest.mark.slow
@pytest.mark.parametrize("executor,cluster,workload", PARAMS, ids=[f"{e}-{c}-{w}" for e, c, w in PARAMS])
def test_every_front_plan_starts_in_its_executor_as_planned(fronts, model_path, executor, cluster, workload):
    plans, c, w = fronts(executor, cluster, workload)
    assert plans, "the front is empty"
    ctx = ExportContext.from_specs(c, w)
    problem = PlacementProblem(c, w, executor=executor)
    for plan in plans:
        assert problem.executor_problem(plan) is None
        if executor == "verl":
            check_verl(plan, ctx, w, model_path)
        else:
            CHECKS[executor](plan, ctx, w)


@pytest.mark.slow
@pytest.mark.parametrize("executor", list(CHECKS))
def test_weight_paths_from_a_model_directory_pass_each_executors_start_up(fronts, model_path, executor):
    """A workload naming a model directory: the export fills the weight keys (verl: the critic's too,
    PPO), and the executor's start-up code takes the config with them."""
    import dataclasses

    plans, c, w = fronts(executor, "h100-64", "llama3.1-70b-ppo")
    ctx = dataclasses.replace(ExportContext.from_specs(c, w), model_dir=model_path)
    if executor == "verl":
        check_verl(plans[0], ctx, w, model_path)
    else:
        CHECKS[executor](plans[0], ctx, w)


@pytest.mark.slow
def test_areal_cannot_fit_70b_ppo_on_mixed_64(tmp_path):
    """No optimizer offload in AReaL: the search reports why it found no plan instead of a front."""
    from mosearch.planner.run import plan_run
    from mosearch.planner.search import SearchSettings

    c, w = _paths("mixed-64", "llama3.1-70b-ppo")
    with pytest.raises(NoFeasiblePlan, match="least memory found"):
        plan_run(str(c), str(w), tmp_path, SearchSettings(evals=EVALS, seed=0, progress=False), report=False,
                 executor="areal", restriction=False)


def test_rules_name_what_each_executor_refuses():
    """A plan the unrestricted search likes, checked against each executor: the rule comes back in one line."""
    cp, wp = _paths("mixed-64", "qwen2.5-7b-grpo")
    c, w = load_cluster(cp), load_workload(wp)
    free = PlacementProblem(c, w)
    X = free.layout.repair(free.xl + np.random.default_rng(1).random((400, free.n_var)) * (free.xu - free.xl))
    plans = [free.decode(x, lifetime=False) for x in X[:120]]
    for executor in ("verl", "areal", "rlinf"):
        pb = PlacementProblem(c, w, executor=executor)
        whys = [pb.executor_problem(p) for p in plans]
        refused = [y for y in whys if y]
        assert refused, executor
        assert all("\n" not in y and y.startswith(pb.executor.runs) for y in refused)
        # repair moves every plan into the executor's space: the rules then hold (or the constraint says not)
        R = pb.layout.repair(X)
        assert (pb.layout.repair(R) == R).all()  # idempotent
        r = pb.evaluate_matrix(R)
        ok = r["executor"] == 0
        assert ok.mean() > 0.5, (executor, ok.mean())
        for x in R[ok][:40]:
            assert pb.executor_problem(pb.decode(x, lifetime=False)) is None


def test_an_areal_front_is_scored_with_the_eager_modules_it_runs(tmp_path):
    """AReaL's FSDP engine has no switch for fused kernels: a problem for AReaL scores a fused workload's
    plans with eager layers (slower, more activations) and says so; its plans carry the executor, so
    `predict --plan` scores them the same way; a plan scored fused that no longer fits with eager layers
    is refused for AReaL in one line, naming the memory it would need."""
    from problems.placement.predict import predict_plan

    cp, wp = _paths("mixed-64", "qwen2.5-7b-grpo")
    c, w = load_cluster(cp), load_workload(wp)
    assert w.elementwise_kernels == "fused"
    free, areal = PlacementProblem(c, w), PlacementProblem(c, w, executor="areal")
    assert free.executor_note is None and PlacementProblem(c, w, executor="verl").executor_note is None
    assert "eager modules" in areal.executor_note and "fused" in areal.executor_note
    X = areal.layout.repair(areal.xl + np.random.default_rng(2).random((400, areal.n_var)) * (areal.xu - areal.xl))
    # the same executor step work on both (AReaL takes the engine's log-probs and keeps its states on the GPU:
    # model/executor_costs.py), so only the layers differ
    from problems.placement.model.fitted import apply_executor

    apply_executor(free.ctx, "areal")
    ra, rf = areal.evaluate_matrix(X), free.evaluate_matrix(X)
    assert (ra["peak_mem_frac"] >= rf["peak_mem_frac"]).all() and (ra["peak_mem_frac"] > rf["peak_mem_frac"]).any()
    assert (ra["step_s"] >= rf["step_s"] * (1 - 1e-9)).all()
    # a plan of the AReaL problem says so, and predict scores it as the front did
    ok = np.flatnonzero((ra["executor"] == 0) & (ra["peak_mem_frac"] <= 1.0))
    plan = areal.decode(X[ok[0]], plan_id="p000", lifetime=False)
    assert plan.executor == "areal"
    path = tmp_path / "p000.yaml"
    path.write_text(plan.to_yaml())
    got = predict_plan(path)
    assert got["throughput_samples_s"] == pytest.approx(plan.predicted["throughput_samples_s"], rel=1e-9)
    assert any("eager modules" in a for a in got["assumptions"])
    # fits as planned (fused) but not with AReaL's layers: refused, in one line
    tight = np.flatnonzero((ra["executor"] == 0) & (rf["peak_mem_frac"] <= 1.0) & (ra["peak_mem_frac"] > 1.0))
    assert len(tight)
    fused_plan = free.decode(X[tight[0]], lifetime=False)
    assert fused_plan.executor is None and areal.executor_problem(fused_plan) is None
    why = areal.executor_refusal(fused_plan)
    assert why.startswith("AReaL 1.0.4 trains Hugging Face's eager modules") and "\n" not in why
    assert f"{ra['peak_mem_frac'][tight[0]]:.0%} of its GPUs' memory" in why
