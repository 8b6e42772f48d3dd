"""Choosing one plan from a front, and the front a person reads.

Pure NumPy on an objective matrix. `F` has one row per plan and the four objectives in
natural units and directions, in the order of `OBJECTIVES`:
throughput (samples/s, higher is better), cost ($/h), peak memory fraction, staleness
(all three lower is better). `minimised(F)` turns it into the all-minimised form.

Resolution. Two plans closer than `RESOLUTION` in an objective count as equal in it:
throughput and cost relatively (5%), memory and staleness absolutely (0.15, one version). It
sets the epsilon front people read (`epsilon_front`) and the ties of the rules below.

Rules (`choose`), each among the plans within every limit given:
- `--max-cost B`: the fastest plan. Throughputs within the resolution of the fastest count as
  equal; among those the cheaper wins, then less memory, then less staleness (each again up to
  its resolution); of plans equal in all four, the fastest.
- `--min-throughput T`: the cheapest plan. Costs within the resolution of the cheapest count as
  equal; among those the faster wins, then less memory, then less staleness (each up to its
  resolution); of plans equal in all four, the cheapest.
- `--knee` (the default without limits): the knee of throughput against $ per sample (`knee`).
- `--weights`: the augmented achievement function (`achievement`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from problems.pareto import coarsely_dominated
from problems.pareto import epsilon_front as _epsilon_front
from problems.placement.names import OBJECTIVE_COLUMNS, OBJECTIVE_NAMES
from problems.placement.names import OBJECTIVES as _OBJECTIVES
from problems.pareto import non_dominated

# the objectives' registry (problems/placement/names.py), as arrays in its order
OBJECTIVES = {o.name: o.column for o in _OBJECTIVES}  # name on the command line -> column in front.csv
NAMES = OBJECTIVE_NAMES
COLUMNS = OBJECTIVE_COLUMNS
SENSE = np.array([o.sense for o in _OBJECTIVES])  # +1: minimise as is; -1: maximise
# the differences a person decides at (the registry says why these)
RESOLUTION = np.array([o.resolution for o in _OBJECTIVES])
RELATIVE = np.array([o.relative for o in _OBJECTIVES])  # resolution as a share of the value, else absolute

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


def _parse_per_objective(text: str, start: np.ndarray, what: str) -> np.ndarray:
    """'throughput=2,cost=1' -> `start` with the named objectives replaced (finite numbers >= 0)."""
    out = start.copy()
    for item in filter(None, (t.strip() for t in text.split(","))):
        name, sep, value = item.partition("=")
        name = name.strip().lower()
        if not sep or name not in OBJECTIVES:
            raise ValueError(f"{item!r}: expected NAME=NUMBER with NAME one of {', '.join(NAMES)}")
        try:
            v = float(value)
        except ValueError:
            raise ValueError(f"{item!r}: {value.strip()!r} is not a number") from None
        if not np.isfinite(v) or v < 0:
            raise ValueError(f"{item!r}: {what} must be a finite number >= 0")
        out[NAMES.index(name)] = v
    return out


def parse_resolution(text: str) -> np.ndarray:
    """'throughput=0.01,memory=0.1' -> resolution in OBJECTIVES order; unnamed ones keep their default."""
    return _parse_per_objective(text, RESOLUTION, "a resolution")


def describe_resolution(res: np.ndarray) -> str:
    return ", ".join(f"{n} {r:.0%}" if rel else f"{n} {r:g}" for n, r, rel in zip(NAMES, res, RELATIVE))


def _resolution_space(F: np.ndarray, res: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Minimised objectives in which the resolution is one additive epsilon per column:
    relative columns on a log scale (a 2% step is log(1.02) anywhere on it)."""
    M = minimised(F)
    rel = RELATIVE
    M[:, rel] = np.log(np.maximum(np.abs(M[:, rel]), 1e-12)) * np.sign(SENSE[rel])
    eps = np.where(rel, np.log1p(res), res)
    return M, eps


def epsilon_front(F: np.ndarray, res: np.ndarray = RESOLUTION) -> np.ndarray:
    """Indices of the front people read: every plan of F is matched, within the resolution in
    every objective, by one of them (`problems.pareto.epsilon_front`). Where plans are equally
    useful the earlier row is kept, so order F by preference (fastest first)."""
    F = np.atleast_2d(np.asarray(F, dtype=float))
    if len(F) == 0:
        return np.zeros(0, dtype=np.int64)
    M, eps = _resolution_space(F, np.asarray(res, dtype=float))
    return _epsilon_front(M, eps)


# plans found that no other plan beats by more than the resolution in both of these are kept
COARSE_STRICT = ("throughput", "cost")


def found_front(F: np.ndarray, res: np.ndarray = RESOLUTION) -> np.ndarray:
    """Indices of the plans of F kept as found (front_all): F less each plan some other plan of F
    matches within the resolution in every objective and beats by more than the resolution in
    throughput and in cost (`problems.pareto.coarsely_dominated`): a plan stays unless another is
    both faster and cheaper by more than the resolution without being worse by more than it in
    memory or staleness. For every plan dropped a kept one is faster and cheaper by more than the
    resolution."""
    F = np.atleast_2d(np.asarray(F, dtype=float))
    if len(F) == 0:
        return np.zeros(0, dtype=np.int64)
    M, eps = _resolution_space(F, np.asarray(res, dtype=float))
    return np.flatnonzero(~coarsely_dominated(M, eps, np.isin(NAMES, COARSE_STRICT)))


def usd_per_1k(F: np.ndarray) -> np.ndarray:
    """$ per 1,000 trained samples from $/h and samples/s."""
    F = np.atleast_2d(np.asarray(F, dtype=float))
    return F[:, 1] / np.maximum(F[:, 0], 1e-12) / 3.6


def _first(keys: tuple[np.ndarray, ...]) -> int:
    """Index of the lexicographic minimum, first key first."""
    return int(np.lexsort(keys[::-1])[0])


def _near_best(F: np.ndarray, cand: np.ndarray, j: int, res: np.ndarray) -> np.ndarray:
    """The rows of `cand` within the resolution of the best of them in objective j."""
    v = F[cand, j]
    if j == 0:
        return cand[v * (1.0 + res[0]) >= v.max()]
    if j == 1:
        return cand[v <= v.min() * (1.0 + res[1])]
    return cand[v <= v.min() + res[j]]


def _cascade(F: np.ndarray, cand: np.ndarray, order: tuple[int, ...], res: np.ndarray,
             final: tuple[np.ndarray, ...] | None = None) -> int:
    """Keep the plans within the resolution of the best in each objective of `order` in turn,
    then take the lexicographic best of the survivors: in the first objective of `order` and the
    others after it (exactly), or by `final` (key columns over all rows of F)."""
    cand = np.asarray(cand)
    for j in order:
        cand = _near_best(F, cand, j, res)
    if final is None:
        M = minimised(F)
        final = tuple(M[:, j] for j in order)
    return int(cand[_first(tuple(k[cand] for k in final))])


def fastest(F: np.ndarray, res: np.ndarray = RESOLUTION) -> int:
    """The fastest plan, where throughputs within the resolution count as equal: among those,
    the cheaper (within the resolution), then less memory, then less staleness; of the plans
    still equal, the fastest."""
    F = np.atleast_2d(np.asarray(F, dtype=float))
    return _cascade(F, np.arange(len(F)), (0, 1, 2, 3), res)


def cheapest(F: np.ndarray, res: np.ndarray = RESOLUTION) -> int:
    """The cheapest plan, where costs within the resolution count as equal: among those, the
    faster, then less memory, then less staleness; of the plans still equal, the cheapest."""
    F = np.atleast_2d(np.asarray(F, dtype=float))
    return _cascade(F, np.arange(len(F)), (1, 0, 2, 3), res)


def knee(F: np.ndarray, res: np.ndarray = RESOLUTION) -> int:
    """The knee of throughput against $ per sample.

    On the plans no other plan beats in both (higher samples/s and lower $/1k samples), with
    t = (T_max - T) / (T_max - T_min) and c = (u - u_min) / (u_max - u_min) (T throughput,
    u $/1k samples; the fastest plan sits at (0, 1), the cheapest per sample at (1, 0)), the
    knee minimises t + c: it lies farthest on the good side of the line through the two ends
    (Das 1999; the 2-D case of KnEA, Zhang, Tian, Jin 2015). A plan both fastest and cheapest
    per sample is the knee; of plans scoring the same (a straight front, or just two plans), the
    cheaper per sample. Plans within the resolution of the knee in throughput and $/sample
    count as the same point. Among them the plans within the resolution of the least memory are
    kept, then of the least staleness; the knee itself if it is one of them, else the fastest.
    """
    F = np.atleast_2d(np.asarray(F, dtype=float))
    if len(F) == 1:
        return 0
    T, u = F[:, 0], usd_per_1k(F)
    two = np.flatnonzero(non_dominated(np.column_stack([-T, u]), keep_duplicates=True))
    t_span, u_span = np.ptp(T[two]), np.ptp(u[two])
    t = (T[two].max() - T[two]) / (t_span if t_span > 0 else 1.0)
    c = (u[two] - u[two].min()) / (u_span if u_span > 0 else 1.0)
    # ties (a straight front, or two plans only: both ends score 1): the cheaper per sample
    k = two[_first((np.round(t + c, 12), u[two], -T[two]))]
    # within the resolution on either side of the knee in both
    same = np.flatnonzero((T * (1.0 + res[0]) >= T[k]) & (T <= T[k] * (1.0 + res[0]))
                          & (u <= u[k] * (1.0 + res[1])) & (u * (1.0 + res[1]) >= u[k]))
    return _cascade(F, same, (2, 3), res, final=(np.arange(len(F)) != k, -T, u))


@dataclass(frozen=True)
class Limits:
    max_cost: float | None = None
    min_throughput: float | None = None
    max_staleness: float | None = None
    max_mem_frac: float | None = None

    def any(self) -> bool:
        return any(v is not None for v in (self.max_cost, self.min_throughput, self.max_staleness, self.max_mem_frac))

    def check(self) -> None:
        """Refuse limits no plan can meet by their sign (one line naming the flag; `plan` and `pick` alike)."""
        from problems.errors import InputError

        if self.max_mem_frac is not None and not 0 < self.max_mem_frac <= 1:
            raise InputError(None, "--max-mem-frac", f"got {self.max_mem_frac}", "a fraction in (0, 1]")
        for flag, v in (("--max-cost", self.max_cost), ("--min-throughput", self.min_throughput),
                        ("--max-staleness", self.max_staleness)):
            if v is not None and not 0 <= v < float("inf"):  # inf: no limit is leaving the flag out
                raise InputError(None, flag, f"got {v}", "a finite number >= 0 (leave the flag out for no limit)")

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
    w = _parse_per_objective(text, np.zeros(len(NAMES)), "a weight")
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


RULES = ("knee", "fastest", "cheapest", "weights")


@dataclass
class Choice:
    index: int | None  # None: nothing meets the limits
    rule: str  # one of RULES
    candidates: np.ndarray  # indices that met the limits
    closest: np.ndarray  # when index is None: the nearest misses


def rule_for(limits: Limits, weights: np.ndarray | None = None, knee_flag: bool = False) -> str:
    """Which question the limits ask: a budget asks for speed, a throughput floor for thrift."""
    if weights is not None:
        return "weights"
    if knee_flag:
        return "knee"
    if limits.max_cost is not None:
        return "fastest"
    if limits.min_throughput is not None:
        return "cheapest"
    return "knee"


def choose(F: np.ndarray, limits: Limits = Limits(), weights: np.ndarray | None = None, rule: str | None = None,
           res: np.ndarray = RESOLUTION) -> Choice:
    """Apply the limits, then the rule (default: `rule_for(limits, weights)`) among the plans left."""
    F = np.atleast_2d(np.asarray(F, dtype=float))
    rule = rule or rule_for(limits, weights)
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}")
    ok = np.flatnonzero(within(F, limits))
    if len(ok) == 0:
        return Choice(None, rule, ok, closest(F, limits))
    sub = F[ok]
    if rule == "weights":
        if weights is None:
            raise ValueError("the weights rule needs weights")
        i = by_weights(sub, weights)
    else:
        i = {"knee": knee, "fastest": fastest, "cheapest": cheapest}[rule](sub, res)
    return Choice(int(ok[i]), rule, ok, np.array([], dtype=int))


def neighbours(F: np.ndarray, f: np.ndarray, res: np.ndarray = RESOLUTION) -> tuple[int | None, int | None]:
    """On a front F, the plans next to the objectives f: (a little faster, a little cheaper).

    Faster: the cheapest plan faster than f by more than the resolution (ties: faster).
    Cheaper: the fastest plan cheaper than f by more than the resolution (ties: cheaper)."""
    F = np.atleast_2d(np.asarray(F, dtype=float))
    up = np.flatnonzero(F[:, 0] > f[0] * (1.0 + res[0]))
    down = np.flatnonzero(F[:, 1] * (1.0 + res[1]) < f[1])
    faster = int(up[_first((F[up, 1], -F[up, 0], F[up, 2], F[up, 3]))]) if len(up) else None
    cheaper = int(down[_first((-F[down, 0], F[down, 1], F[down, 2], F[down, 3]))]) if len(down) else None
    return faster, cheaper


def why(F: np.ndarray, choice: Choice, limits: Limits, res: np.ndarray = RESOLUTION) -> str:
    """One line: why this plan."""
    f = F[choice.index]
    within_ = f" within {limits.describe()}" if limits.any() else ""
    n = f"{len(choice.candidates)} plan(s)"
    if choice.rule == "fastest":
        return (f"fastest of {n}{within_} ({f[0]:.3g} samples/s at {f[1]:.4g} $/h; throughputs within "
                f"{res[0]:.0%} of the fastest count as equal, then cheaper, less memory, less staleness)")
    if choice.rule == "cheapest":
        return (f"cheapest of {n}{within_} ({f[1]:.4g} $/h for {f[0]:.3g} samples/s; costs within {res[1]:.0%} "
                f"of the cheapest count as equal, then faster, less memory, less staleness)")
    if choice.rule == "knee":
        return (f"knee of throughput against $ per sample among {n}{within_} ({f[0]:.3g} samples/s at "
                f"{usd_per_1k(f[None])[0]:.3g} $/1k samples, the plan farthest on the good side of the line from the "
                f"fastest plan to the cheapest per sample)")
    return f"best achievement of the given weights among {n}{within_}"
