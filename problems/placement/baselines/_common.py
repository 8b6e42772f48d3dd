"""What every baseline shares: its result type, scoring by the problem's own model, plan templates."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from problems.placement.names import SHARDINGS
from problems.placement.enumerate import KV_GRID
from problems.placement.problem import PlacementProblem, objectives


@dataclass
class BaselineResult:
    """Plans a baseline proposes, best first, scored by the same model as the search."""

    name: str
    X: np.ndarray  # (n, n_var) repaired plan vectors
    F: np.ndarray  # (n, 4) minimised objectives in problem.OBJECTIVES order
    feasible: np.ndarray  # (n,) bool: every constraint of the problem (and of the budget) met
    labels: list[str]  # what each row is (e.g. the GPU type it runs on)
    evals: int  # plans the baseline scored with the model
    seconds: float
    budget_usd_h: float | None = None
    info: dict = field(default_factory=dict)

    @property
    def throughput(self) -> np.ndarray:
        return -self.F[:, 0]

    @property
    def cost(self) -> np.ndarray:
        return self.F[:, 1]


def budgeted(problem: PlacementProblem, budget_usd_h: float | None) -> PlacementProblem:
    """The same problem with the budget as its max_cost constraint (the tighter of the two)."""
    if budget_usd_h is None:
        return problem
    lim = dict(problem.limits)
    old = lim.get("max_cost_usd_h")
    lim["max_cost_usd_h"] = float(budget_usd_h) if old is None else min(old, float(budget_usd_h))
    return PlacementProblem(problem.cluster, problem.workload, efficiencies=problem.efficiencies, **lim)


class Scorer:
    """Repairs and scores populations, counting evaluations."""

    def __init__(self, problem: PlacementProblem):
        self.problem = problem
        self.evals = 0
        self.t0 = time.perf_counter()

    def __call__(self, X: np.ndarray):
        """-> (repaired X, F, feasible, total violation, evaluate_matrix dict)."""
        p = self.problem
        R = p.layout.repair(np.atleast_2d(X))
        r = p.evaluate_matrix(R)
        G = p._constraints(r)
        self.evals += len(R)
        return R, objectives(r), (G <= 0).all(axis=1), np.clip(G, 0, None).sum(axis=1), r

    def result(self, name, X, F, feasible, labels, budget, **info) -> BaselineResult:
        return BaselineResult(name=name, X=np.atleast_2d(X), F=np.atleast_2d(F), feasible=np.asarray(feasible, bool),
                              labels=list(labels), evals=self.evals, seconds=time.perf_counter() - self.t0,
                              budget_usd_h=budget, info=info)


def rank(F: np.ndarray, feasible: np.ndarray, violation: np.ndarray) -> np.ndarray:
    """Order: feasible by throughput (then cost), then infeasible by violation."""
    key_feas = np.where(feasible, 0, 1)
    return np.lexsort((F[:, 1], np.where(feasible, F[:, 0], violation), key_feas))


def template(problem: PlacementProblem) -> np.ndarray:
    """A mid-range vector with everything zeroed: callers set the fields they search."""
    lay = problem.layout
    x = np.zeros(lay.n_var)
    x[lay.g("kv_mem_frac")] = KV_GRID[-1]
    x[lay.g("log2_max_num_seqs")] = 8
    x[lay.g("sharding")] = SHARDINGS.index("fsdp")
    return x


def pools_of_type(problem: PlacementProblem) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, p in enumerate(problem.cluster.pools):
        out.setdefault(p.gpu.name, []).append(i)
    return out


def random_plans(problem: PlacementProblem, n: int, rng: np.random.Generator, allowed: np.ndarray | None = None,
                 kv_grid=KV_GRID) -> np.ndarray:
    """Uniform vectors in the bounds, kv on the grid, pools outside `allowed` left empty."""
    lay = problem.layout
    X = problem.xl + rng.random((n, problem.n_var)) * (problem.xu - problem.xl + 1) - 0.5
    X = np.clip(np.rint(X), problem.xl, problem.xu)
    # GPU counts uniform in [0, count] make empty pools rare: draw a share instead, some zero
    P = lay.n_pools
    share = rng.random((n, 2 * P)) * (rng.random((n, 2 * P)) > 0.25)
    X[:, :2 * P] = np.rint(share * np.tile(lay.counts, 2))
    X[:, lay.g("kv_mem_frac")] = rng.choice(kv_grid, n)
    if allowed is not None:
        X[:, :P] *= allowed
        X[:, P:2 * P] *= allowed
    return X


def within(problem: PlacementProblem, R: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """Rows of a repaired population that use only the allowed pools (repair may add others)."""
    P = problem.layout.n_pools
    used = (R[:, :P] > 0) | (R[:, P:2 * P] > 0)
    return ~(used & ~allowed[None, :]).any(axis=1)


def neighbours(problem: PlacementProblem, X: np.ndarray, allowed: np.ndarray | None, kv_grid=KV_GRID) -> np.ndarray:
    """Every single-variable +-1 move (kv moves along its grid) of each row, within the bounds."""
    lay = problem.layout
    P = lay.n_pools
    kv = lay.g("kv_mem_frac")
    grid = np.array(kv_grid, dtype=float)
    out = []
    for j in range(problem.n_var):
        if allowed is not None and j < 2 * P and not allowed[j % P]:
            continue
        for d in (-1, 1):
            Y = X.copy()
            if j == kv:
                pos = np.clip(np.searchsorted(grid, Y[:, kv]) + d, 0, len(grid) - 1)
                Y[:, kv] = grid[pos]
            else:
                step = d * np.maximum(1, np.rint(lay.counts[j % P] / 8)) if j < 2 * P else d
                Y[:, j] = np.clip(Y[:, j] + step, problem.xl[j], problem.xu[j])
            out.append(Y)
    return np.vstack(out)


def climb(score: Scorer, X0: np.ndarray, evals: int, allowed: np.ndarray | None = None, kv_grid=KV_GRID,
          keep: int = 4):
    """Greedy hill climbing on throughput (feasible first) from the best `keep` rows of X0.

    Returns the best (R, F, feasible, violation) found, including X0's own scores."""
    problem = score.problem
    R, F, ok, viol, _ = score(X0)
    if allowed is not None:
        m = within(problem, R, allowed)
        R, F, ok, viol = R[m], F[m], ok[m], viol[m]
    start = score.evals
    while len(R) and score.evals - start < evals:
        o = rank(F, ok, viol)[:keep]
        cand = neighbours(problem, R[o], allowed, kv_grid)
        cand = cand[: max(1, evals - (score.evals - start))]
        Rc, Fc, okc, vc, _ = score(cand)
        if allowed is not None:
            m = within(problem, Rc, allowed)
            Rc, Fc, okc, vc = Rc[m], Fc[m], okc[m], vc[m]
        before = _best_key(F, ok, viol)
        R, F, ok, viol = (np.vstack([R[o], Rc]), np.vstack([F[o], Fc]), np.concatenate([ok[o], okc]),
                          np.concatenate([viol[o], vc]))
        if _best_key(F, ok, viol) <= before:  # no strictly better plan among the neighbours
            break
    return R, F, ok, viol


def _best_key(F, ok, viol) -> tuple:
    if ok.any():
        return (1, float(-F[ok, 0].min()))
    return (0, float(-viol.min()))
