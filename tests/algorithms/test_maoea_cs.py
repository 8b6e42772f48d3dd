"""MaOEACS as a pymoo algorithm: runs, phases, integer/mixed problems, repair, pymoo hooks."""

import numpy as np
import pytest
from pymoo.core.callback import Callback
from pymoo.core.problem import Problem
from pymoo.core.repair import Repair
from pymoo.indicators.igd import IGD
from pymoo.optimize import minimize
from pymoo.problems import get_problem

from mosearch.algorithms import MaOEACS


def test_dtlz2_converges_and_fills_result():
    problem = get_problem("dtlz2", n_var=12, n_obj=3)
    res = minimize(problem, MaOEACS(pop_size=60), ("n_eval", 12_000), seed=1)
    assert res.F.shape[1] == 3 and res.X.shape[1] == 12
    assert res.algorithm.evaluator.n_eval >= 12_000
    igd = IGD(problem.pareto_front(get_reference_dirs(3))).do(res.F)
    assert igd < 0.08, igd


def get_reference_dirs(m):
    from pymoo.util.ref_dirs import get_reference_directions

    return get_reference_directions("das-dennis", m, n_partitions=12)


def test_population_size_rounded_to_multiple_of_m():
    problem = get_problem("dtlz2", n_var=7, n_obj=3)
    res = minimize(problem, MaOEACS(pop_size=100), ("n_gen", 2), seed=0)
    assert len(res.algorithm.pop) == 102
    res = minimize(problem, MaOEACS(pop_size=2), ("n_gen", 2), seed=0)
    assert len(res.algorithm.pop) == 6  # at least 2M


def test_phase_switch_fires_once_nadir_settles():
    problem = get_problem("dtlz2", n_var=7, n_obj=3)
    res = minimize(problem, MaOEACS(pop_size=30), ("n_gen", 400), seed=3)
    algo = res.algorithm
    assert algo.phase == 1
    assert algo.switch_iter is not None and algo.switch_iter > 50  # never before iteration 51
    counts = algo.operator_counts
    # phase 1 mostly corner search, phase 2 mostly SBX
    assert counts[(0, "corner")] > counts[(0, "sbx")]
    assert counts[(1, "sbx")] > counts[(1, "corner")]
    # the rule itself: largest relative nadir change over 50 iterations below 1e-3 M
    h = np.array(algo.nadir_history)
    k = algo.switch_iter - 1
    assert np.nanmax(np.abs(h[k] - h[k - 50]) / np.abs(h[k - 50])) < 3e-3
    for j in range(50, k):
        assert not np.nanmax(np.abs(h[j] - h[j - 50]) / np.abs(h[j - 50])) < 3e-3


def test_switch_share_starts_phase_two_at_that_share_of_the_budget():
    problem = get_problem("dtlz2", n_var=7, n_obj=3)
    res = minimize(problem, MaOEACS(pop_size=30, switch_share=0.25), ("n_eval", 1500), seed=3)
    algo = res.algorithm
    # 50 generations of 30: the entry's rule could not fire before iteration 51
    assert algo.phase == 1
    assert algo.switch_iter == 13  # first selection after 375 evaluations: 30 initial + 12 x 30 = 390
    assert algo.operator_counts[(1, "sbx")] > algo.operator_counts[(1, "corner")]
    assert minimize(problem, MaOEACS(pop_size=30), ("n_eval", 1500), seed=3).algorithm.phase == 0
    with pytest.raises(ValueError, match="switch_share"):
        MaOEACS(switch_share=1.5)


def test_phase_switch_is_one_way():
    problem = get_problem("dtlz2", n_var=7, n_obj=3)
    seen = []

    class Watch(Callback):
        def notify(self, algorithm):
            seen.append(algorithm.phase)

    minimize(problem, MaOEACS(pop_size=30), ("n_gen", 300), seed=4, callback=Watch())
    first = seen.index(1)
    assert all(p == 1 for p in seen[first:])


def test_callbacks_display_and_generation_termination(capsys):
    problem = get_problem("dtlz1", n_var=7, n_obj=3)
    gens = []

    class Count(Callback):
        def notify(self, algorithm):
            gens.append(algorithm.n_gen)

    res = minimize(problem, MaOEACS(pop_size=24), ("n_gen", 15), seed=2, callback=Count(), verbose=True)
    assert gens == list(range(1, 16))
    out = capsys.readouterr().out
    assert "n_gen" in out and "n_eval" in out
    assert res.exec_time > 0 and res.algorithm.budget == 15 * 24


class IntBox(Problem):
    """Two objectives over four integers in [0, 9]: trade x0+x1 against x2+x3, both must be even."""

    def __init__(self, **kw):
        super().__init__(n_var=4, n_obj=2, n_ieq_constr=0, xl=0, xu=9, vtype=int, **kw)

    def _evaluate(self, x, out, *args, **kwargs):
        out["F"] = np.column_stack([x[:, 0] + x[:, 1] + 0.1 * x[:, 2], 18 - x[:, 0] - x[:, 1] + x[:, 3]])


class EvenRepair(Repair):
    def _do(self, problem, X, **kwargs):
        X = np.asarray(X, dtype=float).copy()
        X[:, 2:] = 2 * np.floor(X[:, 2:] / 2)
        return X


def test_integer_problem_with_user_repair():
    res = minimize(IntBox(), MaOEACS(pop_size=20, repair=EvenRepair(), archive=True), ("n_eval", 1500), seed=5)
    X = res.algorithm.pop.get("X").astype(float)
    assert np.all(X == np.round(X)) and X.min() >= 0 and X.max() <= 9
    assert np.all(X[:, 2:] % 2 == 0)
    # the optimum sets x2 = x3 = 0 and spans x0 + x1 from 0 to 18
    assert np.all(res.X[:, 2:] == 0)
    assert set(np.round(res.F[:, 0]).astype(int)) >= {0, 18}


def test_mixed_integer_mask():
    problem = get_problem("dtlz2", n_var=6, n_obj=3)
    mask = np.array([False, False, True, True, False, False])
    problem.xu = np.array([1, 1, 3, 3, 1, 1], dtype=float)
    res = minimize(problem, MaOEACS(pop_size=30, integer=mask), ("n_gen", 10), seed=6)
    X = res.algorithm.pop.get("X")
    assert np.all(X[:, mask] == np.round(X[:, mask]))
    assert np.any(X[:, ~mask] != np.round(X[:, ~mask]))


def test_rejects_unbounded_and_bad_mask():
    class Free(Problem):
        def __init__(self):
            super().__init__(n_var=2, n_obj=2)

        def _evaluate(self, x, out, *a, **k):
            out["F"] = x

    with pytest.raises(ValueError, match="bounds"):
        minimize(Free(), MaOEACS(pop_size=10), ("n_gen", 2))
    with pytest.raises(ValueError, match="mask"):
        minimize(get_problem("dtlz2", n_var=5, n_obj=3), MaOEACS(pop_size=12, integer=[True]), ("n_gen", 2))
