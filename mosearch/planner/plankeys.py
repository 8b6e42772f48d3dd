"""One 64-bit hash per plan vector, and sets of them as sorted arrays: which plans a local
search has scored already, without keeping the rows (a 32-pool plan is ~100 numbers).

Integers are hashed exactly and kv_mem_frac at the 4 decimals a plan keeps. Two of a million
plans collide with probability about 1e-8; a collision only skips one plan.
"""

from __future__ import annotations

import numpy as np

WEIGHTS = np.random.default_rng(20260425).integers(1, 2**63, size=4096, dtype=np.uint64) | np.uint64(1)


def keys(X: np.ndarray) -> np.ndarray:
    """One hash per row of X."""
    V = np.rint(np.asarray(X, dtype=float) * 1e4).astype(np.int64).view(np.uint64)
    with np.errstate(over="ignore"):
        return V @ WEIGHTS[:V.shape[1]]  # modulo 2^64, as the sum of products; twice as fast


def unique(k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct values of k and the first index of each (by sorting: numpy's hash-based
    unique is far slower on these 64-bit hashes)."""
    order = np.argsort(k, kind="stable")
    ks = k[order]
    first = np.r_[True, ks[1:] != ks[:-1]] if len(ks) else np.zeros(0, dtype=bool)
    return ks[first], order[first]


def member(a: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Which values of a are in the sorted array s (a binary search each: np.isin sorts s again,
    and s, the hashes seen, grows to hundreds of thousands)."""
    if len(s) == 0:
        return np.zeros(len(a), dtype=bool)
    i = np.minimum(np.searchsorted(s, a), len(s) - 1)
    return s[i] == a


def union(s: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The sorted distinct values of the sorted distinct s and of b (b inserted, s not re-sorted)."""
    b = unique(b)[0]
    b = b[~member(b, s)]
    return np.insert(s, np.searchsorted(s, b), b)


def fresh(X: np.ndarray, seen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of X neither repeated in X nor in `seen` (sorted hashes): their indices, ascending,
    and their hashes."""
    u, idx = unique(keys(X))
    new = ~member(u, seen)
    return np.sort(idx[new]), u[new]
