"""Choosing one plan from a front: knee, user limits, weighted achievement scalarisation.

Pure NumPy on an objective matrix. `F` has one row per plan and the four objectives in
natural units and directions, in the order of `OBJECTIVES`:
throughput (samples/s, higher is better), cost ($/h), peak memory fraction, staleness
(all three lower is better). `minimised(F)` turns it into the all-minimised form.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# name used on the command line -> column in front.csv
OBJECTIVES = {
    "throughput": "throughput_samples_s",
    "cost": "cost_usd_h",
    "memory": "peak_mem_frac",
    "staleness": "staleness",
}
NAMES = tuple(OBJECTIVES)
COLUMNS = tuple(OBJECTIVES.values())
# +1: minimise as is; -1: maximise
SENSE = np.array([-1.0, 1.0, 1.0, 1.0])

# Augmentation of the achievement function: a small multiple of the weighted sum breaks ties
# between weakly Pareto-optimal points (Wierzbicki's augmented ASF; Miettinen 1999, sec. 3.5).
ASF_RHO = 1e-4


def minimised(F: np.ndarray) -> np.ndarray:
    """Natural-units objectives -> every column minimised."""
    return np.asarray(F, dtype=float) * SENSE


def normalise(M: np.ndarray, ideal: np.ndarray | None = None, nadir: np.ndarray | None = None) -> np.ndarray:
    """Minimised objectives scaled so the front's ideal is 0 and its nadir is 1 per column.

    A column with no spread (every plan equal) maps to 0: it cannot tell plans apart.
    """
    M = np.asarray(M, dtype=float)
    lo = M.min(axis=0) if ideal is None else np.asarray(ideal, dtype=float)
    hi = M.max(axis=0) if nadir is None else np.asarray(nadir, dtype=float)
    span = hi - lo
    flat = span <= 1e-12 * np.maximum(1.0, np.abs(hi))
    out = (M - lo) / np.where(flat, 1.0, span)
    out[:, flat] = 0.0
    return out


def knee(F: np.ndarray) -> int:
    """Index of the knee: the plan farthest on the ideal side of the hyperplane through the
    per-objective best plans, in normalised objectives (Das 1999; Zhang, Tian, Jin, KnEA 2015).

    When the extreme plans do not span a hyperplane with positive normal (a degenerate front,
    e.g. two objectives sharing their best plan), the plane sum(f) = 1 through the unit points
    is used instead.
    """
    F = np.atleast_2d(np.asarray(F, dtype=float))
    if len(F) == 1:
        return 0
    N = normalise(minimised(F))
    live = N.max(axis=0) > 0  # objectives that differ between plans
    if not live.any():
        return 0
    Z = N[:, live]
    extremes = Z[np.argmin(Z, axis=0)]  # one plan per objective: best in it
    w = None
    try:
        if np.linalg.matrix_rank(extremes) == Z.shape[1]:
            w = np.linalg.solve(extremes, np.ones(Z.shape[1]))
    except np.linalg.LinAlgError:
        w = None
    if w is None or not np.all(np.isfinite(w)) or np.any(w <= 0):
        w = np.ones(Z.shape[1])
    # signed distance below the plane w.z = 1 (positive: bulging toward the ideal point)
    dist = (1.0 - Z @ w) / np.linalg.norm(w)
    # ties (e.g. a straight front): the plan nearest the ideal point
    return int(np.lexsort((np.linalg.norm(Z, axis=1), -np.round(dist, 12)))[0])


@dataclass(frozen=True)
class Limits:
    max_cost: float | None = None
    min_throughput: float | None = None
    max_staleness: float | None = None
    max_mem_frac: float | None = None

    def any(self) -> bool:
        return any(v is not None for v in (self.max_cost, self.min_throughput, self.max_staleness, self.max_mem_frac))

    def describe(self) -> str:
        parts = []
        if self.min_throughput is not None:
            parts.append(f"throughput >= {self.min_throughput:g} samples/s")
        if self.max_cost is not None:
            parts.append(f"cost <= {self.max_cost:g} $/h")
        if self.max_staleness is not None:
            parts.append(f"staleness <= {self.max_staleness:g}")
        if self.max_mem_frac is not None:
            parts.append(f"peak memory <= {self.max_mem_frac:g}")
        return ", ".join(parts) or "no limits"


def limit_shortfall(F: np.ndarray, limits: Limits) -> np.ndarray:
    """Per plan, how far it misses the limits: sum of relative misses (0 = meets all).

    Relative to the limit itself, so a 10% miss on cost weighs like a 10% miss on
    throughput; an absolute floor keeps a limit of 0 (e.g. staleness 0) meaningful.
    """
    F = np.atleast_2d(np.asarray(F, dtype=float))
    miss = np.zeros(len(F))

    def rel(excess: np.ndarray, bound: float) -> np.ndarray:
        return np.maximum(excess, 0.0) / max(abs(bound), 1.0 if bound == 0 else 1e-12)

    if limits.min_throughput is not None:
        miss += rel(limits.min_throughput - F[:, 0], limits.min_throughput)
    if limits.max_cost is not None:
        miss += rel(F[:, 1] - limits.max_cost, limits.max_cost)
    if limits.max_mem_frac is not None:
        miss += rel(F[:, 2] - limits.max_mem_frac, limits.max_mem_frac)
    if limits.max_staleness is not None:
        miss += rel(F[:, 3] - limits.max_staleness, limits.max_staleness)
    return miss


def within(F: np.ndarray, limits: Limits) -> np.ndarray:
    return limit_shortfall(F, limits) <= 0.0


def closest(F: np.ndarray, limits: Limits, n: int = 3) -> np.ndarray:
    """Indices of the n plans that miss the limits least."""
    return np.argsort(limit_shortfall(F, limits), kind="stable")[:n]


def parse_weights(text: str) -> np.ndarray:
    """'throughput=2,cost=1' -> weights in OBJECTIVES order; unnamed objectives get 0."""
    w = np.zeros(len(NAMES))
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, sep, value = item.partition("=")
        name = name.strip().lower()
        if not sep or name not in OBJECTIVES:
            raise ValueError(f"{item!r}: expected NAME=NUMBER with NAME one of {', '.join(NAMES)}")
        try:
            v = float(value)
        except ValueError:
            raise ValueError(f"{item!r}: {value.strip()!r} is not a number") from None
        if not np.isfinite(v) or v < 0:
            raise ValueError(f"{item!r}: a weight must be a finite number >= 0")
        w[NAMES.index(name)] = v
    if w.sum() <= 0:
        raise ValueError("at least one weight must be positive")
    return w


def achievement(F: np.ndarray, weights: np.ndarray, rho: float = ASF_RHO) -> np.ndarray:
    """Augmented achievement scalarising function on normalised objectives, reference = ideal.

    s(f) = max_i w_i * n_i(f) + rho * sum_i w_i * n_i(f); the minimiser is Pareto-optimal and,
    unlike a weighted sum, can land on concave parts of the front. A larger weight means
    falling short in that objective costs more, so the choice moves toward plans good in it.
    """
    N = normalise(minimised(np.atleast_2d(F)))
    w = np.asarray(weights, dtype=float) / np.sum(weights)
    wn = N * w
    return wn.max(axis=1) + rho * wn.sum(axis=1)


def by_weights(F: np.ndarray, weights: np.ndarray) -> int:
    return int(np.argmin(achievement(F, weights)))


@dataclass
class Choice:
    index: int | None  # None: nothing meets the limits
    rule: str
    candidates: np.ndarray  # indices that met the limits
    closest: np.ndarray  # when index is None: the nearest misses


def choose(F: np.ndarray, limits: Limits = Limits(), weights: np.ndarray | None = None) -> Choice:
    """Apply the limits, then the knee (default) or the weights among the plans left."""
    F = np.atleast_2d(np.asarray(F, dtype=float))
    ok = np.flatnonzero(within(F, limits))
    rule = "weights" if weights is not None else "knee"
    if len(ok) == 0:
        return Choice(None, rule, ok, closest(F, limits))
    sub = F[ok]
    i = by_weights(sub, weights) if weights is not None else knee(sub)
    return Choice(int(ok[i]), rule, ok, np.array([], dtype=int))
