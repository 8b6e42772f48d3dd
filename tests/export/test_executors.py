"""Fronts searched for an executor (`mosearch plan --executor`) start in that executor as planned.

Every plan of the front (front.csv) of results/bench/executors.md's cases (a 7B GRPO run on mixed-64, 70B
PPO runs on h100-64 and mixed-64, a small 1.5B run on mixed-8, and the three clusters written for that
benchmark: H200 + L40S in two regions, A100 nodes of uneven sizes, H100 + A10G in three regions with a 32B
model), per executor, is written as `mosearch export --out` writes it, composed
exactly as the command in its header composes it, and started by the executor's own start-up code
(tests/export/targets.py, which names what needs GPUs): a refusal fails the test, and what the executor
asks for (GPUs per node and in all, DP, TP/PP, the critic's layout, engines, mode) must be exactly the plan's.

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

from mosearch.bench import executors as B

from .conftest import EVALS, front_paths as _paths
from .targets import CHECKS, Workdir

ROOT = Path(__file__).resolve().parents[2]
# results/bench/executors.md's cases: the shipped clusters and those written for that benchmark
CASES = B.SHIPPED + B.NEW
# AReaL has no optimizer offload during the step and always shards fully: 70B PPO does not fit
# mixed-64's GPUs without it (the model's memory), so that front is empty (checked below)
EMPTY = {("areal", "mixed-64", "llama3.1-70b-ppo")}


@pytest.fixture(scope="session")
def work(tmp_path_factory) -> Workdir:
    """Where the exports are written, the users' base configs beside them; the local tiny model stands in
    for the user's weights (verl reads the critic's HF config, AReaL the tokenizer)."""
    from trainer.models.tiny import build_tiny

    root = tmp_path_factory.mktemp("exports")
    return Workdir(root, str(build_tiny(root / "tiny")))


PARAMS = [(e, c, w) for e in CHECKS for c, w in CASES if (e, c, w) not in EMPTY]


@pytest.mark.slow
@pytest.mark.parametrize("executor,cluster,workload", PARAMS, ids=[f"{e}-{c}-{w}" for e, c, w in PARAMS])
def test_every_front_plan_starts_in_its_executor_as_planned(fronts, work, executor, cluster, workload):
    plans, c, w = fronts(executor, cluster, workload)
    assert plans, "the front is empty"
    ctx = ExportContext.from_specs(c, w)
    problem = PlacementProblem(c, w, executor=executor)
    for plan in plans:
        assert problem.executor_problem(plan) is None
        CHECKS[executor](plan, ctx, w, work)


@pytest.mark.slow
@pytest.mark.parametrize("executor", list(CHECKS))
def test_weight_paths_from_a_model_directory_pass_each_executors_start_up(fronts, work, executor):
    """A workload naming a model directory: the export fills the weight keys (verl: the critic's too,
    PPO), its command needs no placeholder, and the executor's start-up code takes the config with them."""
    import dataclasses

    import shutil

    from .targets import hf_config_dir

    plans, c, w = fronts(executor, "h100-64", "llama3.1-70b-ppo")
    # the workload's model as a directory: its architecture's config.json (RLinf divides its vocabulary by
    # TP), the stand-in tokenizer beside it (AReaL loads one)
    model_dir = Path(hf_config_dir(w.model, work.root / f"model-dir-{executor}"))
    for f in Path(work.model_path).iterdir():
        if "token" in f.name or f.name in ("vocab.json", "merges.txt"):
            shutil.copy(f, model_dir / f.name)
    ctx = dataclasses.replace(ExportContext.from_specs(c, w), model_dir=str(model_dir))
    got = CHECKS[executor](plans[0], ctx, w, work)
    assert "MODEL_DIR" not in got["path"].read_text()


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


def test_a_missing_package_is_an_error_of_the_bench_not_a_refusal(monkeypatch):
    """mosearch.bench.executors: a refusal (the executor's assertion) counts against the plan; an ImportError
    (the executor's package, or one it imports, missing) stops the benchmark naming it."""
    from mosearch.bench import executors as B
    from tests.export import targets as T

    def refuses(plan, ctx, workload, work):
        raise AssertionError("n_gpus (56) must be divisible by model_parallel_size (16)")

    def missing(plan, ctx, workload, work):
        raise ModuleNotFoundError("No module named 'verl'", name="verl")

    monkeypatch.setitem(T.CHECKS, "verl", refuses)
    assert B._accepted("verl", [object(), object()], None, None, None) == (
        0, "AssertionError: n_gpus (56) must be divisible by model_parallel_size (16)", 0)
    monkeypatch.setitem(T.CHECKS, "verl", missing)
    with pytest.raises(B.MissingPackage, match="verl: ModuleNotFoundError: No module named 'verl'"):
        B._accepted("verl", [object()], None, None, None)
