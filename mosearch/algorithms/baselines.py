"""Registry of the algorithms MaOEA-CS is compared with, all run the same way.

Each entry turns (problem, evaluation budget, seed) into the objective vectors of the
final feasible non-dominated set, so every algorithm is scored on the same kind of
output and stops at the same number of evaluations:

- `maoea-cs`: ours, N = 25 M (the competition's population sizes, 125 / 250 at
  M = 5 / 10), archive off (the benchmark scores the final population);
- `maoea-cs-switch`: the same with the phase switch `mosearch plan` uses
  (`switch_share=PLANNER_SWITCH_SHARE`: phase 2 by that share of the budget at the latest;
  the share was chosen on the placement problem, `mosearch/planner/search.py`);
- `nsga3`, `moead`, `rvea`: pymoo, with Das-Dennis reference directions (one layer
  H = 5 at M = 5: 126 directions; two layers H = 3 + 2 at M = 10: 275, the NSGA-III
  paper's layout), population size = number of directions; SBX/PM eta 20;
- `agemoea2`: pymoo AGE-MOEA-II with N = 25 M;
- `deap-nsga3`: DEAP's `selNSGA3` with the same reference directions, SBX/PM eta 20,
  random pairing, evaluation batched through the pymoo problem;
- `random`: uniform random search keeping the non-dominated set (a floor, not a
  competitor; its set is unbounded, which flatters IGD).

`pymoo`'s MOEA/D rejects constrained problems; the registry says which entries can
handle constraints.
"""

from __future__ import annotations

import random as _random
from dataclasses import dataclass
from typing import Callable

import numpy as np
from pymoo.optimize import minimize
from pymoo.util.ref_dirs import get_reference_directions

from mosearch.algorithms.maoea_cs import PLANNER_SWITCH_SHARE, MaOEACS
from problems.pareto import non_dominated

Runner = Callable[[object, int, int], np.ndarray]


def reference_directions(m: int) -> np.ndarray:
    """Das-Dennis directions: one layer for M <= 5 (H = 5 at M = 5), two layers (3, 2) above."""
    if m <= 5:
        h = {2: 99, 3: 12, 4: 7, 5: 5}.get(m, 5)
        return get_reference_directions("das-dennis", m, n_partitions=h)
    outer = get_reference_directions("das-dennis", m, n_partitions=3)
    inner = get_reference_directions("das-dennis", m, n_partitions=2) / 2 + 1 / (2 * m)
    return np.vstack([outer, inner])


def default_pop_size(m: int) -> int:
    """N = 25 M, the population sizes of the competition's final populations."""
    return 25 * m


def _nd_feasible(F: np.ndarray, CV: np.ndarray | None) -> np.ndarray:
    if F is None or len(F) == 0:
        return np.empty((0, 0))
    if CV is not None:
        ok = np.asarray(CV).ravel() <= 0
        F = F[ok]
        if len(F) == 0:
            return F
    return F[non_dominated(F, keep_duplicates=True)]


def _final(res) -> np.ndarray:
    pop = res.pop
    return _nd_feasible(pop.get("F"), pop.get("CV") if res.problem.has_constraints() else None)


def _pymoo(make: Callable[[object], object]) -> Runner:
    def run(problem, n_eval, seed):
        res = minimize(problem, make(problem), ("n_eval", n_eval), seed=seed, verbose=False)
        return _final(res)

    return run


def _make_maoea(problem):
    return MaOEACS(pop_size=default_pop_size(problem.n_obj), archive=False)


def _make_maoea_switch(problem):
    return MaOEACS(pop_size=default_pop_size(problem.n_obj), archive=False, switch_share=PLANNER_SWITCH_SHARE)


def _cv_then_random(pop, P, random_state=None, **kwargs):
    """NSGA-III's binary tournament (pymoo's comp_by_cv_then_random): the smaller constraint
    violation wins, ties at random, drawn from the run's seeded generator. pymoo 0.6.2's own breaks
    ties between equally infeasible plans with an unseeded generator, so one seed gave different fronts."""
    cv = np.asarray(pop.get("CV"), dtype=float).reshape(len(pop), -1)[:, 0]
    a, b = P[:, 0], P[:, 1]
    coin = random_state.random(len(P)) < 0.5
    either_infeasible = (cv[a] > 0) | (cv[b] > 0)
    by_cv = np.where(cv[a] < cv[b], a, np.where(cv[b] < cv[a], b, np.where(coin, a, b)))
    return np.where(either_infeasible, by_cv, np.where(coin, a, b))[:, None].astype(int)


def _make_nsga3(problem):
    from pymoo.algorithms.moo.nsga3 import NSGA3
    from pymoo.operators.selection.tournament import TournamentSelection

    ref = reference_directions(problem.n_obj)
    return NSGA3(ref_dirs=ref, pop_size=len(ref), selection=TournamentSelection(func_comp=_cv_then_random))


def _make_moead(problem):
    from pymoo.algorithms.moo.moead import MOEAD

    return MOEAD(ref_dirs=reference_directions(problem.n_obj), n_neighbors=20, prob_neighbor_mating=0.9)


def _make_rvea(problem):
    from pymoo.algorithms.moo.rvea import RVEA

    ref = reference_directions(problem.n_obj)
    return RVEA(ref_dirs=ref, pop_size=len(ref))


def _make_age2(problem):
    from pymoo.algorithms.moo.age2 import AGEMOEA2

    return AGEMOEA2(pop_size=default_pop_size(problem.n_obj))


def _evaluate(problem, X: np.ndarray):
    out = problem.evaluate(X, return_values_of=["F", "G", "H"], return_as_dictionary=True)
    X = out.get("X", X)  # a problem may move X (MaF9 resamples infeasible points)
    F = out["F"]
    cv = np.zeros(len(X))
    for key in ("G", "H"):
        v = out.get(key)
        if v is not None and np.size(v):
            v = np.asarray(v, dtype=float).reshape(len(X), -1)
            cv += np.maximum(v, 0).sum(axis=1) if key == "G" else np.abs(v).sum(axis=1)
    return np.asarray(X, dtype=float), F, cv


def run_deap_nsga3(problem, n_eval: int, seed: int) -> np.ndarray:
    """DEAP NSGA-III on a pymoo problem; individuals evaluated in one vectorised batch per generation."""
    from deap import base, creator, tools

    m, d = problem.n_obj, problem.n_var
    fit_name, ind_name = f"FitnessMin{m}", f"IndividualMin{m}"
    if not hasattr(creator, fit_name):
        creator.create(fit_name, base.Fitness, weights=(-1.0,) * m)
        creator.create(ind_name, list, fitness=getattr(creator, fit_name))
    Ind = getattr(creator, ind_name)
    _random.seed(seed)
    np.random.seed(seed)  # DEAP's selNSGA3 shuffles its niches with numpy's global generator
    rng = np.random.default_rng(seed)
    xl, xu = problem.xl.astype(float).tolist(), problem.xu.astype(float).tolist()
    ref = reference_directions(m)
    n = len(ref) + (len(ref) % 2)
    constrained = problem.has_constraints()

    def evaluate(inds):
        X, F, cv = _evaluate(problem, np.array(inds, dtype=float))
        for ind, x, f, c in zip(inds, X, F, cv):
            ind[:] = x.tolist()
            # Constraint violation as a penalty above any feasible value (DEAP has no native handling).
            ind.fitness.values = tuple(f + (1e6 * c if constrained else 0.0))
            ind.cv = c
        return len(inds)

    pop = [Ind(x) for x in rng.uniform(problem.xl, problem.xu, size=(n, d)).tolist()]
    used = evaluate(pop)
    while used < n_eval:
        order = _random.sample(pop, len(pop))
        off = [Ind(list(ind)) for ind in order]
        for a, b in zip(off[::2], off[1::2]):
            tools.cxSimulatedBinaryBounded(a, b, eta=20.0, low=xl, up=xu)
        for ind in off:
            tools.mutPolynomialBounded(ind, eta=20.0, low=xl, up=xu, indpb=1.0 / d)
        used += evaluate(off)
        pop = tools.selNSGA3(pop + off, n, ref)
    F = np.array([ind.fitness.values for ind in pop])
    cv = np.array([ind.cv for ind in pop])
    return _nd_feasible(F, cv if constrained else None)


def run_random(problem, n_eval: int, seed: int, batch: int = 2000) -> np.ndarray:
    """Uniform random sampling within bounds; returns the feasible non-dominated set."""
    rng = np.random.default_rng(seed)
    best = np.empty((0, problem.n_obj))
    used = 0
    while used < n_eval:
        k = min(batch, n_eval - used)
        _, F, cv = _evaluate(problem, rng.uniform(problem.xl, problem.xu, size=(k, problem.n_var)))
        used += k
        F = F[cv <= 0]
        best = _nd_feasible(np.vstack([best, F]), None) if len(F) else best
    return best


@dataclass(frozen=True)
class Baseline:
    name: str
    label: str
    run: Runner
    constraints: bool = True


REGISTRY: dict[str, Baseline] = {
    b.name: b
    for b in (
        Baseline("maoea-cs", "MaOEA-CS (ours)", _pymoo(_make_maoea)),
        Baseline("maoea-cs-switch", f"MaOEA-CS, phase 2 by {PLANNER_SWITCH_SHARE:.0%} (ours, planner setting)",
                 _pymoo(_make_maoea_switch)),
        Baseline("nsga3", "NSGA-III (pymoo)", _pymoo(_make_nsga3)),
        Baseline("moead", "MOEA/D (pymoo)", _pymoo(_make_moead), constraints=False),
        Baseline("rvea", "RVEA (pymoo)", _pymoo(_make_rvea)),
        Baseline("agemoea2", "AGE-MOEA-II (pymoo)", _pymoo(_make_age2)),
        Baseline("deap-nsga3", "NSGA-III (DEAP)", run_deap_nsga3),
        Baseline("random", "random search", run_random),
    )
}
