"""Pareto local search on the archive: the last part of the evaluation budget fills the front.

An evolutionary search converges to about a population's worth of well-spread plans, while
the placement front is fine-grained (a 4-objective front of a small cluster has ~1,500 plans).
Pareto local search (Paquete, Chiarandini, Stuetzle 2004) visits each archived plan's
neighbours, one variable changed at a time, and keeps whatever is non-dominated: here every
neighbour of a batch of unexplored archive members is scored in one vectorised call.

Neighbours of x: each integer variable one step down and up, each integer variable with at
most `SMALL_RANGE` values at every value, each real variable by +-`REAL_STEP` of its range.
When every archived plan has been expanded (a Pareto local optimum) and budget is left, the
search goes on with random two-variable moves from random archived plans (e.g. one GPU from
training to rollout together with a new engine TP), which single moves cannot reach through
the repair.

Adaptive use (`SearchSettings.adaptive`, the default; `search._alternate`): batches of about
`batch_evals` plans, alternating with MaOEA-CS generations by which of the two put more plans
into the archive per evaluation lately. A local search that adds plans more slowly than the
evolutionary search it interrupts spends the budget worse than that search would.
"""

from __future__ import annotations

import numpy as np

SMALL_RANGE = 6  # integer variables with this many values or fewer are tried at every value
REAL_STEP = 0.05  # step of a real variable, as a share of its range
BATCH_PLANS = 16  # archive members expanded per evaluated batch
PAIR_BATCH = 512  # random two-variable moves per batch once the archive is a local optimum
STALE_ROUNDS = 50  # batches without a fresh plan before giving up


def neighbours(X: np.ndarray, xl: np.ndarray, xu: np.ndarray, integer: np.ndarray) -> np.ndarray:
    X = np.atleast_2d(np.asarray(X, dtype=float))
    n, d = X.shape
    rows = []
    for j in range(d):
        if integer[j]:
            lo, hi = np.ceil(xl[j] - 1e-9), np.floor(xu[j] + 1e-9)
            values = np.arange(lo, hi + 1) if hi - lo + 1 <= SMALL_RANGE else None
            if values is not None:
                V = np.repeat(X, len(values), axis=0)
                V[:, j] = np.tile(values, n)
            else:
                V = np.vstack([X, X])
                V[:n, j] -= 1
                V[n:, j] += 1
        else:
            step = REAL_STEP * (xu[j] - xl[j])
            V = np.vstack([X, X])
            V[:n, j] -= step
            V[n:, j] += step
        rows.append(np.clip(V, xl, xu))
    return np.vstack(rows) if rows else np.empty((0, d))


def pair_moves(A: np.ndarray, xl, xu, integer, rng: np.random.Generator, n: int) -> np.ndarray:
    """n random plans from A, each with two different variables moved by +-1 step (integers) or
    +-REAL_STEP of the range (reals)."""
    d = A.shape[1]
    V = A[rng.integers(0, len(A), n)].copy()
    for _ in range(2):
        j = rng.integers(0, d, n)
        step = np.where(integer[j], 1.0, REAL_STEP * (xu[j] - xl[j])) * rng.choice([-1.0, 1.0], n)
        V[np.arange(n), j] += step
    return np.clip(V, xl, xu)


def _keys(X: np.ndarray) -> list[bytes]:
    return [r.tobytes() for r in np.round(X, 6)]


class ParetoLocalSearch:
    """The search as an object whose whole state (rng, explored, seen, stale) can be saved
    between batches (`checkpoint.py`); `step` is one batch."""

    def __init__(self, rec, repair=None, integer: np.ndarray | None = None, seed: int = 0,
                 batch_evals: int | None = None):
        self.rec = rec
        self.rng = np.random.default_rng(seed)
        self.xl, self.xu = np.asarray(rec.xl, dtype=float), np.asarray(rec.xu, dtype=float)
        if integer is None:
            integer = np.asarray(getattr(rec, "integer_mask", np.zeros(rec.n_var, dtype=bool)), dtype=bool)
        self.integer = integer
        self.fix = (lambda X: repair._do(rec, X)) if repair is not None else (lambda X: X)
        self.explored: set[bytes] = set()
        self.seen: set[bytes] = set(_keys(rec.archive.X))
        self.stale = 0
        # about this many evaluations per batch (None: BATCH_PLANS archive members, PAIR_BATCH moves)
        self.batch_evals = batch_evals

    def done(self) -> bool:
        return self.stale >= STALE_ROUNDS or len(self.rec.archive.X) == 0

    def step(self) -> None:
        A = self.rec.archive.X
        todo = [i for i, k in enumerate(_keys(A)) if k not in self.explored]
        if todo:
            k = BATCH_PLANS
            if self.batch_evals is not None:  # members whose neighbours make about batch_evals plans
                k = max(1, int(round(self.batch_evals / max(1, len(neighbours(A[:1], self.xl, self.xu, self.integer))))))
            pick = self.rng.permutation(todo)[:k]
            self.explored.update(_keys(A[pick]))
            N = self.fix(neighbours(A[pick], self.xl, self.xu, self.integer))
        else:
            n = PAIR_BATCH if self.batch_evals is None else min(PAIR_BATCH, self.batch_evals)
            N = self.fix(pair_moves(A, self.xl, self.xu, self.integer, self.rng, n))
        keys = _keys(N)
        fresh, uniq = [], set()
        for i, k in enumerate(keys):
            if k not in self.seen and k not in uniq:
                uniq.add(k)
                fresh.append(i)
        self.seen.update(uniq)
        self.stale = 0 if fresh else self.stale + 1
        if fresh:
            self.rec.evaluate(N[fresh])

    def run(self, on_step=None) -> None:
        """Step until done; `on_step()` after each whole batch (where a checkpoint may be taken)."""
        while not self.done():
            self.step()
            if on_step is not None:
                on_step()


def pareto_local_search(rec, repair=None, integer: np.ndarray | None = None, seed: int = 0) -> None:
    """Expand unexplored archive members until none is left; the recording problem's hook
    stops it at the budget (or time limit, or Ctrl-C) by raising."""
    ParetoLocalSearch(rec, repair, integer, seed).run()
