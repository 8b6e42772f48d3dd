"""Pareto dominance and epsilon fronts: the one non-dominated filter of the project.

Every objective matrix here is minimised, one row per point. Dominance is the usual one:
a dominates b when a <= b everywhere and a < b somewhere; identical rows do not dominate each
other. What to do with identical rows is the caller's choice, made explicitly:
`keep_duplicates=True` keeps them all (a reference set, a sort), False keeps the first (an
archive, where the point already held wins).

The filter itself is moocore's `is_nondominated` (the dimension-sweep algorithm of Kung,
Luccio and Preparata 1975, O(n log^(m-2) n)); pymoo already depends on moocore.

An epsilon front keeps a few points of a non-dominated set such that every point of the set
is epsilon-dominated by one kept: some kept row is no worse than it by more than `eps` in any
objective (Laumanns, Thiele, Deb, Zitzler 2002, additive form). It is chosen greedily (set
cover: the point covering most still-uncovered points first), after the best point of each
objective, so the extremes of the front are always shown.

Coarse dominance (`coarsely_dominated`) drops the points of a non-dominated set that are only
there by a margin below `eps`: b is coarsely dominated when some a is no worse than it by more
than `eps` in every objective and better by more than `eps` in each of the `strict` ones.
The relation improves the `strict` objectives by more than `eps` at each step, so no point
dominates itself and a chain of them ends at a kept point: every point dropped has a kept one
better than it by more than `eps` in each strict objective.
"""

from __future__ import annotations

import moocore
import numpy as np

# rows x rows booleans held at once when building the cover relation (~64 MB)
_COVER_BLOCK = 1 << 26


def non_dominated(F: np.ndarray, keep_duplicates: bool = False) -> np.ndarray:
    """Boolean mask of the rows of F no other row dominates.

    Identical rows: all kept with `keep_duplicates`, else only the first of them."""
    F = np.asarray(F, dtype=float)
    if F.ndim != 2:
        raise ValueError(f"expected a 2-D objective matrix, got shape {F.shape}")
    if len(F) == 0:
        return np.zeros(0, dtype=bool)
    if F.shape[1] == 1:  # moocore needs two or more objectives
        best = F[:, 0] == F[:, 0].min()
        if not keep_duplicates:
            best[np.flatnonzero(best)[1:]] = False
        return best
    return np.asarray(moocore.is_nondominated(F, keep_weakly=keep_duplicates), dtype=bool)


def merge(held: np.ndarray, new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Non-dominated merge of an archive with a batch (both minimised, `held` non-dominated).

    Returns (which held rows stay, which new rows enter): a new row dominated by or equal to a
    held one (or to an earlier new one) stays out; a held row dominated by a new one leaves."""
    held = np.asarray(held, dtype=float)
    new = np.asarray(new, dtype=float)
    keep = non_dominated(np.vstack([held, new]) if len(held) else new, keep_duplicates=False)
    return keep[: len(held)], keep[len(held):]


def covers(A: np.ndarray, B: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """C[i, j]: row A_i epsilon-dominates row B_j (A_i <= B_j + eps in every objective)."""
    A = np.asarray(A, dtype=float)
    B = np.asarray(B, dtype=float)
    eps = np.broadcast_to(np.asarray(eps, dtype=float), (A.shape[1],))
    out = np.empty((len(A), len(B)), dtype=bool)
    step = max(1, _COVER_BLOCK // max(1, len(B) * A.shape[1]))
    for s in range(0, len(A), step):
        out[s:s + step] = (A[s:s + step, None, :] <= B[None, :, :] + eps).all(axis=2)
    return out


def epsilon_front(F: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """Indices (ascending) of an epsilon front of F: every row of F is epsilon-dominated by
    one of them, and each is non-dominated in F.

    Ties in the greedy choice go to the lower index, so a caller that orders F by preference
    (e.g. fastest first) gets the preferred one of equally useful points."""
    F = np.asarray(F, dtype=float)
    eps = np.asarray(eps, dtype=float)
    if np.any(eps < 0):
        raise ValueError("epsilon must be >= 0 in every objective")
    if len(F) == 0:
        return np.zeros(0, dtype=np.int64)
    nd = np.flatnonzero(non_dominated(F))  # a point dominated in F is covered by what covers its dominator
    G = F[nd]
    m = G.shape[1]
    # best of each objective, ties by the other objectives in order: the extremes a reader looks for
    chosen = [int(np.lexsort(tuple(G[:, k] for k in [*range(m)][::-1] if k != j) + (G[:, j],))[0]) for j in range(m)]
    C = covers(G, G, eps)
    uncovered = ~C[chosen].any(axis=0)
    cols = np.flatnonzero(uncovered)
    while len(cols):
        sub = C[:, cols]
        gain = sub.sum(axis=1)
        i = int(np.argmax(gain))  # first of the maxima: the lower index
        chosen.append(i)
        cols = cols[~sub[i]]
    return np.unique(nd[np.asarray(chosen, dtype=np.int64)])


def coarsely_dominated(F: np.ndarray, eps: np.ndarray, strict: np.ndarray) -> np.ndarray:
    """Boolean mask of the rows b of F that some row a coarsely dominates: a <= b + eps in every
    objective and a < b - eps in each objective of `strict` (a boolean mask of columns, at least
    one). No row coarsely dominates itself."""
    F = np.asarray(F, dtype=float)
    eps = np.broadcast_to(np.asarray(eps, dtype=float), (F.shape[1],))
    strict = np.asarray(strict, dtype=bool)
    if np.any(eps < 0):
        raise ValueError("epsilon must be >= 0 in every objective")
    if not strict.any():
        raise ValueError("coarse dominance needs at least one strict objective")
    out = np.zeros(len(F), dtype=bool)
    step = max(1, _COVER_BLOCK // max(1, len(F) * F.shape[1]))
    for s in range(0, len(F), step):
        B = F[s:s + step]
        near = (F[:, None, :] <= B[None, :, :] + eps).all(axis=2)
        better = (F[:, None, strict] < B[None, :, strict] - eps[strict]).all(axis=2)
        out[s:s + step] = (near & better).any(axis=0)
    return out
