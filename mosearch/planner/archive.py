"""The archive of every feasible, non-dominated plan a search has evaluated.

Updated once per evaluated batch in O(batch x archive) comparisons: new points dominated by
(or equal to) an archived point are dropped, archived points dominated by a survivor leave.
"""

from __future__ import annotations

import numpy as np


def dominated_by(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """For each row of B: is it dominated by, or equal to, some row of A (minimisation)?"""
    if len(A) == 0 or len(B) == 0:
        return np.zeros(len(B), dtype=bool)
    le = (A[:, None, :] <= B[None, :, :]).all(axis=2)
    lt = (A[:, None, :] < B[None, :, :]).any(axis=2)
    eq = ~lt & le  # identical objective vectors: keep the one already held
    return (le & lt).any(axis=0) | eq.any(axis=0)


def strictly_dominated_by(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    if len(A) == 0 or len(B) == 0:
        return np.zeros(len(B), dtype=bool)
    le = (A[:, None, :] <= B[None, :, :]).all(axis=2)
    lt = (A[:, None, :] < B[None, :, :]).any(axis=2)
    return (le & lt).any(axis=0)


def non_dominated_mask(F: np.ndarray) -> np.ndarray:
    """Rows of F that no other row dominates; of identical rows only the first is kept."""
    F = np.asarray(F, dtype=float)
    n = len(F)
    if n == 0:
        return np.zeros(0, dtype=bool)
    keep = ~strictly_dominated_by(F, F)
    _, first = np.unique(F, axis=0, return_index=True)
    unique = np.zeros(n, dtype=bool)
    unique[first] = True
    return keep & unique


class Archive:
    """Feasible non-dominated decision vectors X with their minimised objectives F."""

    def __init__(self, n_var: int, n_obj: int):
        # one attribute, replaced in one step, so an interrupt never leaves X and F out of step
        self._data = (np.empty((0, n_var)), np.empty((0, n_obj)))

    @property
    def X(self) -> np.ndarray:
        return self._data[0]

    @property
    def F(self) -> np.ndarray:
        return self._data[1]

    def __len__(self) -> int:
        return len(self.F)

    def add(self, X: np.ndarray, F: np.ndarray, feasible: np.ndarray | None = None) -> int:
        """Merge a batch; returns how many of its points entered the archive."""
        X = np.asarray(X, dtype=float)
        F = np.asarray(F, dtype=float)
        ok = np.isfinite(F).all(axis=1)
        if feasible is not None:
            ok &= np.asarray(feasible, dtype=bool)
        X, F = X[ok], F[ok]
        if len(F) == 0:
            return 0
        nd = non_dominated_mask(F)
        X, F = X[nd], F[nd]
        fresh = ~dominated_by(self.F, F)
        X, F = X[fresh], F[fresh]
        if len(F) == 0:
            return 0
        stay = ~strictly_dominated_by(F, self.F)
        self._data = (np.vstack([self.X[stay], X]), np.vstack([self.F[stay], F]))
        return len(F)
