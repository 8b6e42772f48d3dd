"""The archive of every feasible, non-dominated plan a search has evaluated.

Updated once per evaluated batch (`problems.pareto.merge`): new points dominated by (or equal
to) an archived point are dropped, archived points dominated by a survivor leave.
"""

from __future__ import annotations

import numpy as np

from problems.pareto import merge


class Archive:
    """Feasible non-dominated decision vectors X with their minimised objectives F."""

    def __init__(self, n_var: int, n_obj: int):
        # one attribute, replaced in one step, so an interrupt never leaves X and F out of step
        self._data = (np.empty((0, n_var)), np.empty((0, n_obj)))

    @property
    def state(self) -> tuple[np.ndarray, np.ndarray]:
        """(X, F): a new pair whenever the archive changes, so its identity says whether it did."""
        return self._data

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
        stay, fresh = merge(self.F, F)
        X, F = X[fresh], F[fresh]
        if len(F) == 0:
            return 0
        self._data = (np.vstack([self.X[stay], X]), np.vstack([self.F[stay], F]))
        return len(F)
