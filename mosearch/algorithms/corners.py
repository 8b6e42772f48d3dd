"""Corner solutions of a non-dominated set, and the nadir point estimated from them.

After Singh, Isaacs and Ray (TEVC 2011) as MaOEA-CS uses them (entry report Sec. II;
competition code SelectCorner.m):

- kind 1: for each objective axis, the member with the smallest perpendicular
  distance to that axis, objectives shifted by the ideal point; the axes are the
  columns of 1e-6 + I, exactly as the entry builds them;
- kind 2: for each objective, the member (among the rest) with the smallest value in
  it, kept only if it exceeds the kind-1 nadir in some objective and its objective sum
  is below 1.5 times the nadir's. Deviation: both sums are taken relative to the ideal
  point (the code uses raw objective values), so the rule does not depend on where the
  objectives' origin lies; where the ideal point is the origin (most MaF problems) the
  two agree.

Duplicated objective vectors are removed, so at most 2M corners remain.
"""

from __future__ import annotations

import numpy as np

AXIS_EPS = 1e-6


def axis_directions(m: int) -> np.ndarray:
    """Rows are the M axis directions 1e-6 + e_i, normalised."""
    w = np.full((m, m), AXIS_EPS)
    np.fill_diagonal(w, 1.0)
    return w / np.linalg.norm(w, axis=1, keepdims=True)


def corner_indices(F: np.ndarray, ideal: np.ndarray | None = None) -> np.ndarray:
    """Indices (into F) of the corner solutions of the non-dominated set F, in order.

    F holds only non-dominated rows. Returns kind-1 corners first, then the kind-2 ones,
    without rows whose objective vectors repeat.
    """
    F = np.asarray(F, dtype=float)
    n, m = F.shape
    if n == 0:
        return np.empty(0, dtype=int)
    ideal = F.min(axis=0) if ideal is None else np.asarray(ideal, dtype=float)
    G = F - ideal
    W = axis_directions(m)
    proj = G @ W.T  # (n, m): length along each axis
    perp2 = np.sum(G**2, axis=1, keepdims=True) - proj**2
    kind1 = np.argmin(perp2, axis=0)

    rest = np.setdiff1d(np.arange(n), kind1)
    kind2 = np.empty(0, dtype=int)
    if len(rest):
        cand = np.unique(rest[np.argmin(G[rest], axis=0)])
        nad1 = G[kind1].max(axis=0)
        beyond = np.any(G[cand] > nad1, axis=1)
        small = G[cand].sum(axis=1) < 1.5 * nad1.sum()
        kind2 = cand[beyond & small]

    idx = np.concatenate([kind1, kind2])
    _, first = np.unique(F[idx], axis=0, return_index=True)
    return idx[np.sort(first)]


def nadir_from_corners(F_corners: np.ndarray) -> np.ndarray:
    """The estimated nadir point: the per-objective maximum over the corner set."""
    return np.asarray(F_corners, dtype=float).max(axis=0)
