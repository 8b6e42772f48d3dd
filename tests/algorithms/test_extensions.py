"""Switchable extensions: feasibility-first constraints, seeding, the non-dominated archive."""

import numpy as np
from pymoo.core.callback import Callback
from pymoo.core.evaluator import Evaluator
from pymoo.core.population import Population
from pymoo.core.problem import Problem
from pymoo.optimize import minimize
from pymoo.problems import get_problem
from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

from mosearch.algorithms import MaOEACS


def test_c_dtlz_final_population_feasible_and_converged():
    problem = get_problem("c1dtlz1", n_var=7, n_obj=3)
    res = minimize(problem, MaOEACS(pop_size=60), ("n_eval", 15_000), seed=1)
    assert res.F is not None and np.all(res.CV <= 0)
    # C1-DTLZ1 front: sum f = 0.5 (the constraint only cuts the search space)
    assert np.median(res.F.sum(axis=1)) < 0.6


def test_dc_dtlz_finds_feasible_front():
    problem = get_problem("dc1dtlz1", n_var=7, n_obj=3)
    res = minimize(problem, MaOEACS(pop_size=60), ("n_eval", 15_000), seed=2)
    assert res.F is not None and np.all(res.CV <= 0)
    assert np.median(res.F.sum(axis=1)) < 0.6


class NeedleDTLZ2(Problem):
    """DTLZ2 whose distance variables must all lie in [0.45, 0.55]: about 1e-8 of the box is feasible."""

    def __init__(self):
        super().__init__(n_var=10, n_obj=3, n_ieq_constr=8, xl=0.0, xu=1.0)
        self.inner = get_problem("dtlz2", n_var=10, n_obj=3)

    def _evaluate(self, x, out, *args, **kwargs):
        out["F"] = self.inner.evaluate(x)
        out["G"] = np.abs(x[:, 2:] - 0.5) - 0.05


def test_finds_feasible_when_almost_everything_is_infeasible():
    problem = NeedleDTLZ2()
    rng = np.random.default_rng(0)
    assert not np.any(np.all(np.abs(rng.random((20_000, 8)) - 0.5) <= 0.05, axis=1))
    res = minimize(problem, MaOEACS(pop_size=30), ("n_eval", 6_000), seed=3)
    feasible = np.all(res.algorithm.pop.get("G") <= 0, axis=1)
    assert feasible.mean() == 1.0
    assert np.all(np.abs(np.linalg.norm(res.F, axis=1) - 1.0) < 0.1)


def test_constraints_switch_off_ignores_them():
    problem = NeedleDTLZ2()
    res = minimize(problem, MaOEACS(pop_size=30, constraints=False), ("n_eval", 3_000), seed=3)
    feasible = np.all(res.algorithm.pop.get("G") <= 0, axis=1)
    assert feasible.mean() < 1.0


def _first_pop(problem, algorithm):
    seen = {}

    class Grab(Callback):
        def notify(self, algorithm):
            if algorithm.n_gen == 1:
                seen["X"] = algorithm.pop.get("X").copy()
                seen["n_eval"] = algorithm.evaluator.n_eval

    minimize(problem, algorithm, ("n_gen", 3), seed=7, callback=Grab())
    return seen


def test_seed_array_survives_into_first_population():
    problem = get_problem("dtlz2", n_var=7, n_obj=3)
    seeds = np.full((4, 7), 0.5)
    seeds[:, 0] = [0.0, 0.3, 0.7, 1.0]
    seen = _first_pop(problem, MaOEACS(pop_size=12, sampling=seeds))
    assert len(seen["X"]) == 12
    for s in seeds:
        assert np.any(np.all(np.isclose(seen["X"], s), axis=1))


def test_evaluated_seed_population_not_reevaluated():
    problem = get_problem("dtlz2", n_var=7, n_obj=3)
    pop = Population.new(X=np.random.default_rng(1).random((5, 7)))
    Evaluator().eval(problem, pop)
    seen = _first_pop(problem, MaOEACS(pop_size=12, sampling=pop))
    assert seen["n_eval"] == 12 - 5
    for x in pop.get("X"):
        assert np.any(np.all(np.isclose(seen["X"], x), axis=1))


def test_more_seeds_than_population_are_selected_down():
    problem = get_problem("dtlz2", n_var=7, n_obj=3)
    seeds = np.random.default_rng(2).random((40, 7))
    seen = _first_pop(problem, MaOEACS(pop_size=12, sampling=seeds))
    assert len(seen["X"]) == 12


def test_archive_holds_every_non_dominated_solution_seen():
    problem = get_problem("dtlz2", n_var=7, n_obj=3)
    evaluated = []

    class Log(Callback):
        def notify(self, algorithm):
            evaluated.append(algorithm.off.get("F") if algorithm.off is not None else algorithm.pop.get("F"))

    res = minimize(problem, MaOEACS(pop_size=24), ("n_gen", 20), seed=8, callback=Log())
    allF = np.vstack(evaluated)
    truth = np.unique(allF[NonDominatedSorting().do(allF, only_non_dominated_front=True)], axis=0)
    got = np.unique(res.archive.get("F"), axis=0)
    assert got.shape == truth.shape and np.allclose(got, truth)
    assert res.algorithm.archive is res.archive or len(res.algorithm.archive) == len(res.archive)


def test_archive_switch_off():
    problem = get_problem("dtlz2", n_var=7, n_obj=3)
    res = minimize(problem, MaOEACS(pop_size=24, archive=False), ("n_gen", 5), seed=8)
    assert res.archive is None
