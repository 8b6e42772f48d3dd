"""Canonical plans: equivalent plans are written as one, with every idle knob at its simplest value.

Rules, applied in this order to a population of repaired vectors (vectorised, one model call per
rule and value):
  C1 async with k = 0 flows as disaggregated (on-policy, no overlap): written as disaggregated;
  C2 the engine TP of a pool with no generating GPU is read by nothing: TP 1;
  C3 optimizer offload off, C4 recomputation off, C5 the weight-sync route direct;
  C6 the fewest pipeline chunks, C7 the least sharding (none < ZeRO-1 < ZeRO-2 < ZeRO-3 < FSDP);
each change is kept only where the plan's four objectives stay exactly what they were and a
feasible plan stays feasible, so a rule never trades one figure for another: an offload that
buys memory, or chunks that buy speed, stay. Among plans with equal objectives the simplest
(fewest non-default knobs) is kept.
"""

from __future__ import annotations

import numpy as np

from problems.placement.problem import objectives


def _score(problem, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r = problem.evaluate_matrix(X)
    return objectives(r), r["feasible"] > 0


def _try(problem, X, F0, ok0, V, where=None) -> np.ndarray:
    """X with the rows of V that change no objective and lose no feasibility."""
    V = problem.layout.repair(V)
    F, ok = _score(problem, V)
    keep = (F == F0).all(axis=1) & (ok | ~ok0)
    if where is not None:
        keep &= where
    out = X.copy()
    out[keep] = V[keep]
    return out


def simplicity(problem, X: np.ndarray) -> np.ndarray:
    """How many knobs are away from their simplest value (lower is simpler)."""
    L = problem.layout
    X = np.atleast_2d(X)
    return (X[:, L.g("optimizer_offload")] + X[:, L.g("recompute")] + X[:, L.g("sync_route")]
            + X[:, L.g("log2_pipeline_chunks")] + X[:, L.g("sharding")] + (X[:, L.g("mode")] == 2))


def canonicalize(problem, X: np.ndarray) -> np.ndarray:
    L, P = problem.layout, problem.layout.n_pools
    X = L.repair(np.atleast_2d(np.asarray(X, dtype=float)))
    if len(X) == 0:
        return X
    F0, ok0 = _score(problem, X)
    # C1
    V = X.copy()
    m = (V[:, L.g("mode")] == 2) & (V[:, L.g("staleness_bound")] == 0)
    V[m, L.g("mode")] = 1
    X = _try(problem, X, F0, ok0, V)
    # C2
    V = X.copy()
    idle = V[:, :P] <= 0
    V[:, 2 * P:3 * P] = np.where(idle, 0, V[:, 2 * P:3 * P])
    X = _try(problem, X, F0, ok0, V)
    # C3-C5
    for name in ("optimizer_offload", "recompute", "sync_route"):
        V = X.copy()
        V[:, L.g(name)] = 0
        X = _try(problem, X, F0, ok0, V)
    # C6, C7: the smallest value that changes nothing
    for name in ("log2_pipeline_chunks", "sharding"):
        j = L.g(name)
        hi = int(X[:, j].max())
        for v in range(hi):
            V = X.copy()
            V[:, j] = v
            X = _try(problem, X, F0, ok0, V, where=X[:, j] > v)
    return X


def simplest_per_objectives(problem, X: np.ndarray, F: np.ndarray) -> np.ndarray:
    """Row indices keeping, of each group of equal objective vectors, the simplest plan."""
    if len(F) == 0:
        return np.zeros(0, dtype=int)
    _, inv = np.unique(F, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    order = np.lexsort((simplicity(problem, X), inv))
    first = np.r_[True, inv[order][1:] != inv[order][:-1]]
    return np.sort(order[first])
