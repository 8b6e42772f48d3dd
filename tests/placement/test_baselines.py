"""Baseline planners: plans for every shipped cluster, scored by the same model, within budget,
and covered by the exact front on mixed-8."""

import numpy as np
import pytest

from problems.placement.baselines import BASELINE_PLANNERS
from problems.placement.enumerate import enumerate_front, space_size
from problems.placement.problem import objectives

from tests.placement.conftest import problem

SHIPPED = [("mixed-8", "qwen2.5-7b-grpo"), ("mixed-64", "qwen2.5-7b-grpo"), ("h100-64", "qwen2.5-7b-grpo"),
           ("hetero-1024", "qwen2.5-7b-grpo"), ("local", "tiny-grpo")]


@pytest.fixture(scope="module")
def problems():
    return {c: problem(*c) for c in SHIPPED}


def _full_cost(p):
    return sum(pool.count * pool.gpu.price_usd_h for pool in p.cluster.pools)


@pytest.mark.parametrize("name", list(BASELINE_PLANNERS))
@pytest.mark.parametrize("case", SHIPPED, ids=lambda c: c[0])
def test_every_baseline_plans_every_shipped_cluster(problems, name, case):
    p = problems[case]
    res = BASELINE_PLANNERS[name](p, evals=4000, seed=0)
    assert res.feasible.any(), f"{name} found no feasible plan on {case}"
    assert res.feasible[0]  # best first
    assert np.array_equal(p.layout.repair(res.X), res.X)
    r = p.evaluate_matrix(res.X)  # the same model gives the same objectives and feasibility
    assert np.allclose(objectives(r), res.F)
    assert np.array_equal((p._constraints(r) <= 0).all(axis=1), res.feasible)
    assert res.evals > 0 and res.seconds >= 0 and len(res.labels) == len(res.X)
    thr = -res.F[res.feasible, 0]
    assert thr[0] == thr.max()


@pytest.mark.parametrize("name", ["hetrl-sh", "milp"])
@pytest.mark.parametrize("case", SHIPPED[:4], ids=lambda c: c[0])
def test_budgeted_baselines_respect_the_budget(problems, name, case):
    p = problems[case]
    budget = 0.4 * _full_cost(p)
    res = BASELINE_PLANNERS[name](p, budget_usd_h=budget, evals=4000, seed=1)
    assert res.feasible.any()
    assert (res.cost[res.feasible] <= budget + 1e-9).all()
    # the budget binds: the unconstrained best of the same planner costs more or is no faster
    free = BASELINE_PLANNERS[name](p, evals=4000, seed=1)
    assert free.throughput[0] >= res.throughput[0] - 1e-9 or free.cost[0] > budget


def test_verl_rows_are_colocated_on_one_type(problems):
    p = problems[("mixed-64", "qwen2.5-7b-grpo")]
    res = BASELINE_PLANNERS["verl-colocated"](p)
    lay = p.layout
    P = lay.n_pools
    types = np.array([pool.gpu.name for pool in p.cluster.pools])
    assert sorted(res.labels) == sorted(set(types))
    for x, label in zip(res.X, res.labels):
        assert x[lay.g("mode")] == 0
        assert set(types[x[:P] > 0]) == {label}


@pytest.mark.parametrize("case", SHIPPED[:4], ids=lambda c: c[0])
def test_verl_rows_are_plans_verl_can_start(problems, case):
    """The baseline is verl as it ships: every row passes verl's own start-up rules (no CPU optimizer
    step with FSDP, the distributed optimizer with Megatron)."""
    from problems.placement.problem import PlacementProblem

    p = problems[case]
    verl = PlacementProblem(p.cluster, p.workload, executor="verl")
    res = BASELINE_PLANNERS["verl-colocated"](p, evals=4000, seed=0)
    for x in res.X:
        plan = p.decode(x, lifetime=False)
        assert verl.executor_problem(plan) is None, (case, plan.train)


@pytest.mark.slow
def test_exact_front_covers_every_baseline_on_mixed8():
    """The enumerated front of mixed-8 (one KV level, shared with the baselines) is feasible and
    mutually non-dominated, and it weakly dominates the best plans of every baseline, which it
    must if the enumeration really is exhaustive."""
    p = problem("mixed-8", "qwen2.5-7b-grpo")
    kv = (0.9,)
    ex = enumerate_front(p, kv_grid=kv)
    assert ex.n_space == space_size(p, (0.5, 0.7, 0.9)) // 3  # linear in the KV grid
    assert ex.n_evaluated < ex.n_space / 10
    front = ex.front_F
    assert len(front) > 10
    assert (p._constraints(p.evaluate_matrix(ex.front_X)) <= 0).all()
    le = (front[:, None, :] <= front[None, :, :]).all(axis=2)
    lt = (front[:, None, :] < front[None, :, :]).any(axis=2)
    assert not (le & lt).any()  # no front point dominates another
    budget = 0.6 * _full_cost(p)
    for name, planner in BASELINE_PLANNERS.items():
        res = planner(p, budget_usd_h=budget if name in ("hetrl-sh", "milp") else None, seed=0, kv_grid=kv)
        for f in res.F[res.feasible][:3]:
            covered = (front <= f + 1e-9 * (1 + np.abs(f))).all(axis=1)
            assert covered.any(), f"{name} plan {f} is not covered by the exact front"


def test_the_baselines_go_on_where_verl_starts_no_colocated_plan(tmp_path):
    """11 H100 on an 8- and a 3-GPU machine (planned as nodes of 1): where the colocated baseline finds
    no plan verl starts (its batch and node rules), it says so with a ValueError and the planner's
    baselines go on without it; any row it does give is one verl starts."""
    from mosearch.planner.seeding import Corners, baseline_plans
    from problems.placement.problem import PlacementProblem
    from problems.placement.specs import load_cluster, load_workload

    path = tmp_path / "c.yaml"
    path.write_text("name: c\nregions: {r: {inter_node_gbs: 25}}\nnode_groups:\n"
                    "  - {gpu: H100, nodes: 1, gpus_per_node: 8, region: r}\n"
                    "  - {gpu: H100, nodes: 1, gpus_per_node: 3, region: r}\n")
    c, w = load_cluster(path), load_workload("problems/workloads/qwen2.5-1.5b-grpo.yaml")
    p, verl = PlacementProblem(c, w), PlacementProblem(c, w, executor="verl")
    try:
        res = BASELINE_PLANNERS["verl-colocated"](p, evals=4000, seed=0)
    except ValueError as err:
        assert "no colocated plan verl starts" in str(err)
    else:
        assert all(verl.executor_problem(p.decode(x, lifetime=False)) is None for x in res.X)
    assert baseline_plans(p, Corners(p, seed=0), evals=2000)
