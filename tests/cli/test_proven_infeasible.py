"""Limits no plan can meet are refused before the search, from lower bounds that hold for every
plan (problems/placement/explain.py), with the figure the limit would need; the bounds are
checked against plans the model scores."""

from __future__ import annotations

import numpy as np
import pytest

import mosearch.planner.run as planner_run
from mosearch.cli import main
from mosearch.results import load_run
from problems.placement.explain import least_cost, least_mem_frac, limit_infeasibility
from problems.placement.problem import PlacementProblem
from tests.cli.conftest import CLUSTERS, ROOT, WORKLOADS

MIXED8, QWEN7 = str(CLUSTERS / "mixed-8.yaml"), str(WORKLOADS / "qwen2.5-7b-grpo.yaml")
CASES = [(CLUSTERS / "mixed-8.yaml", WORKLOADS / "qwen2.5-7b-grpo.yaml"),
         (CLUSTERS / "mixed-64.yaml", WORKLOADS / "qwen2.5-32b-grpo.yaml"),
         (ROOT / "benchmarks/clusters/l4-t4-a10g.yaml", ROOT / "benchmarks/workloads/qwen2.5-1.5b-grpo-1k.yaml")]


@pytest.fixture
def no_search(monkeypatch):
    """Any search or seeding started fails the test: the answer must come before them."""
    def boom(*a, **k):
        raise AssertionError("the search started")
    monkeypatch.setattr(planner_run, "run_search", boom)
    monkeypatch.setattr(planner_run.seeding, "Corners", boom)


def _plan(tmp_path, *limits):
    return main(["plan", "--cluster", MIXED8, "--workload", QWEN7, "--out", str(tmp_path / "x"), "--quiet",
                 "--no-report", *limits])


def test_a_budget_below_the_cheapest_plan_is_refused_before_the_search(tmp_path, capsys, no_search):
    assert _plan(tmp_path, "--max-cost", "0.3") == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("mosearch: --max-cost 0.3: proven infeasible: the cheapest plan that can run costs at "
                          "least $1.40/h: a rollout engine needs at least 1 x L40S")
    assert err.strip().endswith("(--max-cost 1.40 or more)")
    assert not (tmp_path / "x" / "front.csv").exists()


def test_a_memory_bound_no_plan_meets_is_refused_before_the_search(tmp_path, capsys, no_search):
    assert _plan(tmp_path, "--max-mem-frac", "0.2") == 2
    err = capsys.readouterr().err
    assert err.startswith("mosearch: --max-mem-frac 0.2: proven infeasible: every plan needs at least 0.30 of some "
                          "GPU's memory")
    assert "(the lowest kv_mem_frac)" in err and len(err.strip().splitlines()) == 1


def test_a_tight_memory_bound_raises_the_least_cost(capsys):
    p = PlacementProblem.from_files(*CASES[1])
    assert least_cost(p, 0.6)[0] > least_cost(p, 1.0)[0]
    flag, why, fix = limit_infeasibility(p, 4.0, 0.6)  # 32B states at 0.6 of each GPU: more GPUs
    assert flag == "--max-cost 4" and "training holds at least 131 GB" in why and fix.startswith("--max-cost 4.")


def test_limits_the_bounds_do_not_rule_out_reach_the_search(tmp_path, capsys, no_search):
    with pytest.raises(AssertionError, match="the search started"):
        _plan(tmp_path, "--max-cost", "1.5", "--max-mem-frac", "0.9")


@pytest.mark.parametrize("case", range(len(CASES)), ids=lambda i: CASES[i][0].stem)
def test_the_bounds_hold_for_every_plan_the_model_scores(case):
    p = PlacementProblem.from_files(*CASES[case])
    rng = np.random.default_rng(case)
    X = p.layout.repair(p.xl + rng.random((20000, p.n_var)) * (p.xu - p.xl))
    r = p.evaluate_matrix(X)
    kv_ok = r["kv_shortfall"] <= 0  # engines hold one longest sample: the only rollout constraint
    mem, _ = least_mem_frac(p)
    assert 0 < mem <= 1 and (r["peak_mem_frac"][kv_ok] >= mem * (1 - 1e-9)).all()
    for f in (1.0, 0.8, 0.6):
        feasible = kv_ok & (r["peak_mem_frac"] <= f)
        least, _ = least_cost(p, f)
        assert feasible.sum() > 50 and 0 < least < np.inf
        assert (r["cost_usd_h"][feasible] >= least * (1 - 1e-9)).all()


def test_the_bounds_hold_on_a_searched_front(mixed8_run):
    run = load_run(mixed8_run)
    p = PlacementProblem.from_files(MIXED8, QWEN7)
    least, _ = least_cost(p)
    mem, _ = least_mem_frac(p)
    assert (run.F[:, 1] >= least).all() and (run.F[:, 2] >= mem * (1 - 1e-9)).all()
    for plan in run.all_plans:  # no plan found is ruled out by a proof at its own figures
        assert limit_infeasibility(p, plan.predicted["cost_usd_h"], plan.predicted["peak_mem_frac"]) is None
