"""Budget polish: every budget's and every throughput floor's best plan, made locally optimal.

The evolutionary search and the Pareto local search (polish.py) fill a four-objective front;
budget picks (`pick --max-cost B`, `--min-throughput T`) read its throughput-cost projection,
where plans one or two edits away from a front plan (the knee with one GPU fewer and its engine
TP retuned) were often faster within the same budget and were missed, differently for each seed.

The budgets and floors covered are every cost and every throughput on the throughput-cost front
of the archive (the structured seeds and the search's plans together): the answer to any budget
is the front plan with the largest cost within it, so a front where no plan has a dominating
neighbour has no budget or floor left to improve. From each front plan not yet expanded, every
one-edit neighbour (`one_edit`) is scored in one call; new plans that enter the throughput-cost
front are expanded in the next round. When a round adds nothing, two-edit neighbours of the
expanded plans are scored: each plan's most promising one-edit neighbours (within its budget the
fastest, above its throughput the cheapest, each also ignoring the memory and KV limits, whose
second edit often mends them) expanded by every one-edit move. The search ends when a two-edit
round adds nothing as well (or at `SearchSettings.budget_polish_evals`).

Deterministic given the archive: no random moves, so seeds whose archives share the same
throughput-cost front reach the same local optimum, and seeds that differ mostly converge to it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from mosearch.planner.structured import front_2d
from problems.placement.problem import objectives

KV_STEPS = (-0.1, -0.05, 0.05, 0.1)  # kv_mem_frac moves (vLLM's gpu_memory_utilization)
KV_VALUES = (0.5, 0.7, 0.9)
SMALL_RANGE = 8  # integer globals with this many values or fewer are tried at every value
PROMISING = 4  # one-edit neighbours per plan and criterion expanded by the two-edit round
BLOCK = 100_000  # plans per model call


def count_steps(n: int) -> np.ndarray:
    """GPU-count changes of a pool of n GPUs: +-1, 2, 4, ... below n."""
    s = [1 << j for j in range(max(1, int(n).bit_length())) if (1 << j) < max(n, 2)]
    return np.array(sorted({*s, *(-v for v in s)}), dtype=float)


@dataclass
class Moves:
    """One-edit moves of the plan vector as (columns, values, set?) rows: a move adds values to
    (or sets) one or two columns (a role move shifts GPUs between a pool's rollout and training)."""

    cols: np.ndarray  # (m, 2) column indices, -1: none
    vals: np.ndarray  # (m, 2)
    setv: np.ndarray  # (m, 2) bool: set instead of add

    def apply(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every move on every row: (len(X) * m, d) and each row's parent index."""
        n, m = len(X), len(self.cols)
        V = np.repeat(X, m, axis=0)
        parent = np.repeat(np.arange(n), m)
        rows = np.arange(n * m)
        for k in range(2):
            c = np.tile(self.cols[:, k], n)
            v = np.tile(self.vals[:, k], n)
            s = np.tile(self.setv[:, k], n)
            on = c >= 0
            r, c, v, s = rows[on], c[on], v[on], s[on]
            V[r, c] = np.where(s, v, V[r, c] + v)
        return V, parent


def moves(L) -> Moves:
    P = L.n_pools
    xl, xu = L.bounds()
    out: list[tuple[int, float, bool, int, float, bool]] = []
    for i in range(P):
        n = int(L.counts[i])
        for j in (i, P + i):  # rollout and training GPUs of pool i
            out += [(j, d, False, -1, 0.0, False) for d in count_steps(n)]
            out += [(j, 0.0, True, -1, 0.0, False), (j, float(n), True, -1, 0.0, False)]
        # roles: GPUs from training to rollout and back, the whole pool to one role
        out += [(i, d, False, P + i, -d, False) for d in count_steps(n)]
        out += [(i, float(n), True, P + i, 0.0, True), (i, 0.0, True, P + i, float(n), True)]
        out += [(2 * P + i, float(k), True, -1, 0.0, False) for k in range(int(L.rtp_n[i]))]
    for name in ("log2_max_num_seqs", "train_tp_idx", "train_pp_idx", "sharding", "log2_micro_batch",
                 "recompute", "optimizer_offload", "mode", "staleness_bound", "log2_pipeline_chunks", "sync_route"):
        j = L.g(name)
        lo, hi = int(round(xl[j])), int(round(xu[j]))
        if hi - lo + 1 <= SMALL_RANGE:
            out += [(j, float(v), True, -1, 0.0, False) for v in range(lo, hi + 1)]
        else:
            out += [(j, d, False, -1, 0.0, False) for d in (-2.0, -1.0, 1.0, 2.0)]
    kv = L.g("kv_mem_frac")
    out += [(kv, d, False, -1, 0.0, False) for d in KV_STEPS]
    out += [(kv, v, True, -1, 0.0, False) for v in KV_VALUES]
    # mode and staleness together: async at each bound (the mode alone is repaired to k = 0)
    mode, k = L.g("mode"), L.g("staleness_bound")
    out += [(mode, 2.0, True, k, float(s), True) for s in range(1, int(L.max_staleness) + 1)]
    A = np.array(out, dtype=float)
    return Moves(A[:, [0, 3]].astype(int), A[:, [1, 4]], A[:, [2, 5]].astype(bool))


_W = np.random.default_rng(20260425).integers(1, 2**63, size=4096, dtype=np.uint64) | np.uint64(1)


def _keys(X: np.ndarray) -> np.ndarray:
    """One 64-bit hash per plan vector (integers exact, kv_mem_frac at the 4 decimals a plan
    keeps): sorting and membership on hashes instead of rows. Two of a million plans collide
    with probability about 1e-8; a collision only skips one neighbour."""
    V = np.rint(np.asarray(X, dtype=float) * 1e4).astype(np.int64).view(np.uint64)
    with np.errstate(over="ignore"):
        return (V * _W[:V.shape[1]]).sum(axis=1, dtype=np.uint64)


def _fresh(X: np.ndarray, seen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of X neither repeated in X nor in `seen` (sorted hashes): their indices and hashes."""
    k = _keys(X)
    u, idx = np.unique(k, return_index=True)
    new = ~np.isin(u, seen, assume_unique=True)
    return np.sort(idx[new]), u[new]


@dataclass
class BudgetPolish:
    """The polish's outcome: every feasible plan it scored that entered the throughput-cost front
    at some point (X, F, feasible as the archive takes them) and its counts."""

    X: np.ndarray
    F: np.ndarray
    evaluations: int
    rounds: int
    two_edit_rounds: int
    wall_s: float
    converged: bool


def budget_polish(problem, X0: np.ndarray, max_evals: int = 2_000_000, max_s: float | None = None) -> BudgetPolish:
    """Local search from the plans X0 (the archive) until no one- or two-edit neighbour of any
    throughput-cost front plan enters that front. Stops early at `max_evals` evaluations or
    `max_s` seconds (then `converged` is False)."""
    t0 = time.perf_counter()
    L = problem.layout
    mv = moves(L)
    X0 = L.repair(np.asarray(X0, dtype=float).reshape(-1, L.n_var))
    ev = 0

    def score(X):
        nonlocal ev
        out = {"thr": [], "cost": [], "ok": [], "F": []}
        for a in range(0, len(X), BLOCK):
            r = problem.evaluate_matrix(X[a:a + BLOCK])
            F = objectives(r)
            out["F"].append(F)
            out["thr"].append(-F[:, 0])
            out["cost"].append(F[:, 1])
            out["ok"].append((r["feasible"] > 0) & np.isfinite(F).all(axis=1))
            # memory and KV aside (a second edit may mend them): the budget and floor read this
            out.setdefault("soft", []).append(np.isfinite(F[:, :2]).all(axis=1))
        ev += len(X)
        return {k: np.concatenate(v) if v else np.zeros(0) for k, v in out.items()}

    s = score(X0)
    keep = np.flatnonzero(s["ok"])
    fx = front_2d(s["F"][keep, 0], s["F"][keep, 1])
    FX, FF = X0[keep][fx], s["F"][keep][fx]  # the throughput-cost front so far
    expanded1 = np.zeros(0, dtype=np.uint64)
    expanded2 = np.zeros(0, dtype=np.uint64)
    seen = np.unique(_keys(X0))  # scored (as repaired) or generated (before the repair) already
    found_X, found_F = [], []
    rounds = two = 0
    converged = False

    def over() -> bool:
        return ev >= max_evals or (max_s is not None and time.perf_counter() - t0 >= max_s)

    def merge(N) -> None:
        """Score the unseen rows of N and fold the feasible ones into the front."""
        nonlocal FX, FF, seen
        idx, raw = _fresh(N, seen)  # moves that repeat a plan or land where an earlier one did
        N = L.repair(N[idx])
        idx, k = _fresh(N, seen)
        seen = np.union1d(seen, np.concatenate([raw, k]))
        N = N[idx]
        if len(N) == 0:
            return
        r = score(N)
        ok = r["ok"]
        allX = np.vstack([FX, N[ok]])
        allF = np.vstack([FF, r["F"][ok]])
        fx = front_2d(allF[:, 0], allF[:, 1])
        entered = fx[fx >= len(FX)]
        if len(entered):
            found_X.append(allX[entered])
            found_F.append(allF[entered])
        FX, FF = allX[fx], allF[fx]

    while not over():
        rounds += 1
        keys = _keys(FX)
        todo = np.flatnonzero(~np.isin(keys, expanded1))
        if len(todo):
            expanded1 = np.union1d(expanded1, keys[todo])
            V, _ = mv.apply(FX[todo])
            merge(V)
            continue
        # a one-edit local optimum: two edits from the plans not yet expanded that far
        todo = np.flatnonzero(~np.isin(keys, expanded2))
        if not len(todo):
            converged = True
            break
        two += 1
        expanded2 = np.union1d(expanded2, keys[todo])
        B = FX[todo]
        V, parent = mv.apply(B)
        V = L.repair(V)
        r = score(V)
        thr0, cost0 = -FF[todo, 0], FF[todo, 1]
        picks = []
        for b in range(len(B)):
            rows = np.flatnonzero(parent == b)
            t, c, ok, soft = r["thr"][rows], r["cost"][rows], r["ok"][rows], r["soft"][rows]
            within = soft & (c <= cost0[b] * (1 + 1e-9)) & np.isfinite(t)
            above = soft & (t >= thr0[b] * (1 - 1e-9)) & np.isfinite(c)
            for m, key in ((within & ok, -t), (within & ~ok, -t), (above & ok, c), (above & ~ok, c)):
                idx = np.flatnonzero(m)
                picks.extend(rows[idx[np.argsort(key[idx], kind="stable")[:PROMISING]]])
        # the one-edit neighbours themselves were scored in the one-edit rounds (seen)
        if picks:
            W, _ = mv.apply(V[np.unique(picks)])
            merge(W)
    X = np.vstack(found_X) if found_X else np.zeros((0, L.n_var))
    F = np.vstack(found_F) if found_F else np.zeros((0, 4))
    return BudgetPolish(X, F, ev, rounds, two, time.perf_counter() - t0, converged)
