"""Reductions over the (few) pools of an (N, P) array, column by column.

NumPy reduces a short trailing axis slowly (about 25x slower than P elementwise passes for
P = 3 and N = 10,000), and these reductions are the model's hot path.
"""

from __future__ import annotations

import numpy as np


def psum(a):
    a = np.asarray(a)
    out = a[:, 0].copy()
    for j in range(1, a.shape[1]):
        out += a[:, j]
    return out


def pmax(a):
    a = np.asarray(a)
    out = a[:, 0].copy()
    for j in range(1, a.shape[1]):
        np.maximum(out, a[:, j], out=out)
    return out


def pmin(a):
    a = np.asarray(a)
    out = a[:, 0].copy()
    for j in range(1, a.shape[1]):
        np.minimum(out, a[:, j], out=out)
    return out


def pany(a):
    a = np.asarray(a, dtype=bool)
    out = a[:, 0].copy()
    for j in range(1, a.shape[1]):
        out |= a[:, j]
    return out


def pargmax(a):
    """First index of the maximum along pools, like np.argmax(axis=1)."""
    a = np.asarray(a)
    best = a[:, 0].copy()
    idx = np.zeros(a.shape[0], dtype=np.int64)
    for j in range(1, a.shape[1]):
        better = a[:, j] > best
        idx[better] = j
        np.maximum(best, a[:, j], out=best)
    return idx


def over_region_pairs(region, used, matrix, combine, start: float):
    """Per plan, `combine` (np.minimum / np.maximum) of matrix[i, j] over the pairs of different
    regions i < j that both hold a used pool; `start` where the plan spans one region.
    region: (P,) region index per pool; used: (N, P) bool; matrix: (R, R)."""
    out = np.full(used.shape[0], start)
    regs = np.unique(region)
    for i in regs:
        for j in regs:
            if i < j:
                both = pany(used & (region == i)) & pany(used & (region == j))
                out = np.where(both, combine(out, matrix[i, j]), out)
    return out
