"""A pymoo Problem that forwards to the placement problem and records what it evaluates.

Every algorithm (MaOEA-CS or a baseline) sees this wrapper, so the archive of feasible
non-dominated plans, the evaluation count and the feasible share are kept the same way for
all of them, whatever each algorithm keeps itself.
"""

from __future__ import annotations

import numpy as np
from pymoo.core.problem import Problem

from mosearch.planner.archive import Archive

# pymoo's default tolerance for equality constraints
EQ_TOL = 1e-4


class RecordingProblem(Problem):
    def __init__(self, inner: Problem, evaluation=None, on_batch=None):
        super().__init__(n_var=inner.n_var, n_obj=inner.n_obj, n_ieq_constr=inner.n_ieq_constr,
                         n_eq_constr=inner.n_eq_constr, xl=inner.xl, xu=inner.xu, vtype=getattr(inner, "vtype", None))
        self.inner = inner
        self.evaluation = evaluation  # None: call the inner problem in this process
        self.archive = Archive(inner.n_var, inner.n_obj)
        self.n_evals = 0
        self.n_feasible = 0
        self.last_feasible_share = 0.0
        self.batches = 0
        self.n_entered = 0  # evaluated plans that entered the archive (each counted once, even if later dominated)
        self.g_best = None  # per constraint: smallest value seen (> 0: never satisfied)
        self.on_batch = on_batch  # called after each recorded batch; may raise to stop the search

    def __getattr__(self, name):
        # decode, encode, cluster, workload... of the placement problem
        inner = self.__dict__.get("inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)

    def _keys(self) -> list[str]:
        return ["F"] + (["G"] if self.n_ieq_constr else []) + (["H"] if self.n_eq_constr else [])

    def _evaluate(self, X, out, *args, **kwargs):
        X = np.atleast_2d(np.asarray(X, dtype=float))
        keys = self._keys()
        if self.evaluation is None:
            res = self.inner.evaluate(X, return_values_of=keys, return_as_dictionary=True)
        else:
            res = self.evaluation(X, keys)
        for k in keys:
            out[k] = np.asarray(res[k], dtype=float).reshape(len(X), -1)
        self.record(X, out)

    def record(self, X: np.ndarray, out: dict) -> None:
        F = out["F"]
        feasible = np.isfinite(F).all(axis=1)
        G, H = out.get("G"), out.get("H")
        if G is not None and np.size(G):
            feasible &= (G <= 0).all(axis=1)
            low = np.nanmin(G, axis=0)
            self.g_best = low if self.g_best is None else np.fmin(self.g_best, low)
        if H is not None and np.size(H):
            feasible &= (np.abs(H) <= EQ_TOL).all(axis=1)
        self.n_evals += len(X)
        self.n_feasible += int(feasible.sum())
        self.last_feasible_share = float(feasible.mean()) if len(X) else 0.0
        self.n_entered += self.archive.add(X, F, feasible)
        self.batches += 1
        if self.on_batch is not None:
            self.on_batch(self)
