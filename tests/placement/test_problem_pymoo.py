"""The problem runs unchanged under pymoo algorithms and MaOEA-CS."""

import numpy as np
from pymoo.algorithms.moo.nsga3 import NSGA3
from pymoo.optimize import minimize
from pymoo.util.ref_dirs import get_reference_directions

from problems.placement import CONSTRAINTS, OBJECTIVES, PlacementProblem, PlacementRepair
from tests.placement.conftest import problem


def test_nsga3_with_repair_finds_feasible_plans():
    p = problem("mixed-8", "qwen2.5-7b-grpo", max_cost_usd_h=20.0)
    ref = get_reference_directions("das-dennis", 4, n_partitions=4)
    res = minimize(p, NSGA3(ref_dirs=ref, pop_size=len(ref), repair=p.repair()), ("n_gen", 15), seed=1)
    assert res.F is not None and res.F.shape[1] == len(OBJECTIVES)
    assert np.all(res.G <= 0) and res.G.shape[1] == len(CONSTRAINTS)
    for x in np.atleast_2d(res.X):
        plan = p.decode(x, lifetime=False)
        assert plan.predicted["cost_usd_h"] <= 20.0 + 1e-9


def test_maoea_cs_runs_on_placement():
    from mosearch.algorithms.maoea_cs import MaOEACS

    p = problem("mixed-64", "qwen2.5-7b-grpo", max_staleness=2)
    res = minimize(p, MaOEACS(pop_size=40, repair=PlacementRepair(), integer=p.integer_mask, constraints=True),
                   ("n_gen", 10), seed=2)
    assert res.F is not None and np.all(np.atleast_2d(res.G) <= 0)
    assert np.all(np.atleast_2d(res.F)[:, 3] <= 2 + 1e-9)


def test_limits_enter_the_constraints():
    free = problem("mixed-64", "qwen2.5-7b-grpo")
    tight = problem("mixed-64", "qwen2.5-7b-grpo", max_cost_usd_h=10.0, min_throughput=5.0, max_staleness=0)
    rng = np.random.default_rng(0)
    X = free.layout.repair(free.xl + rng.random((2000, free.n_var)) * (free.xu - free.xl))
    out_f, out_t = {}, {}
    free._evaluate(X, out_f)
    tight._evaluate(X, out_t)
    assert np.array_equal(out_f["F"], out_t["F"])
    assert np.all(out_f["G"][:, 2:5] == -1)
    r = tight.evaluate_matrix(X)
    assert np.array_equal(out_t["G"][:, 2] > 0, r["cost_usd_h"] > 10.0)
    assert np.array_equal(out_t["G"][:, 3] > 0, r["throughput_samples_s"] < 5.0)
    assert np.array_equal(out_t["G"][:, 4] > 0, r["staleness"] > 0)


def test_constructor_from_objects_matches_files():
    a = problem("mixed-8", "qwen2.5-7b-grpo")
    b = PlacementProblem(a.cluster, a.workload)
    X = a.layout.repair(np.random.default_rng(1).random((50, a.n_var)) * a.xu)
    oa, ob = {}, {}
    a._evaluate(X, oa)
    b._evaluate(X, ob)
    assert np.array_equal(oa["F"], ob["F"])
    plans = [a.decode(x, lifetime=False) for x in X[:5]]
    r = a.evaluate_plans(plans)
    assert np.allclose(r["throughput_samples_s"], a.evaluate_matrix(X[:5])["throughput_samples_s"])
