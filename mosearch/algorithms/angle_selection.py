"""Max-min angle selection (MaOEA-CS, after MOEA/D-SAS by Cai et al., TCYB 2017).

Objectives are normalised by (f - z*) / (z_nad - z*). Starting from a given set
(the corners), the candidate whose smallest angle to the already selected set is
largest joins next, until n are chosen. The angle is tracked as its cosine: each
candidate keeps the largest cosine to any selected vector, the one with the smallest
such cosine is added, and one vectorised update per step refreshes the rest.
"""

from __future__ import annotations

import numpy as np

_TINY = 1e-12


def _unit(F: np.ndarray, ideal: np.ndarray, nadir: np.ndarray) -> np.ndarray:
    span = np.maximum(nadir - ideal, _TINY)
    V = (F - ideal) / span
    norm = np.linalg.norm(V, axis=1, keepdims=True)
    return V / np.maximum(norm, _TINY)


def max_min_angle_select(F: np.ndarray, start: np.ndarray, n: int, ideal: np.ndarray, nadir: np.ndarray) -> np.ndarray:
    """Indices into F of n selected rows: `start` (kept, in order) then greedy max-min angle picks.

    Rows listed in `start` are not picked again. If n <= len(start) the first n of start
    are returned.
    """
    F = np.asarray(F, dtype=float)
    start = np.asarray(start, dtype=int)
    if n <= len(start):
        return start[:n]
    U = _unit(F, ideal, nadir)
    free = np.ones(len(F), dtype=bool)
    free[start] = False
    cand = np.flatnonzero(free)
    Uc = U[cand]
    if len(start):
        cos = (Uc @ U[start].T).max(axis=1)
    else:
        cos = np.full(len(cand), -np.inf)
    chosen = np.empty(n - len(start), dtype=int)
    alive = np.ones(len(cand), dtype=bool)
    for k in range(len(chosen)):
        j = int(np.argmin(np.where(alive, cos, np.inf)))
        chosen[k] = cand[j]
        alive[j] = False
        np.maximum(cos, Uc @ Uc[j], out=cos)
    return np.concatenate([start, chosen])
