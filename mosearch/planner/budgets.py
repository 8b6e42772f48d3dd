"""Budget polish: every budget's and every throughput floor's best plan, made locally optimal.

The evolutionary search and the Pareto local search (polish.py) fill a four-objective front;
budget picks (`pick --max-cost B`, `--min-throughput T`) read its throughput-cost projection,
where plans one or two edits away from a front plan (the knee with one GPU fewer and its engine
TP retuned) were often faster within the same budget and were missed, differently for each seed.

The budgets and floors covered are every cost and every throughput on the throughput-cost front
of the plans so far: the answer to any budget is the front plan with the largest cost within it,
so a front where no plan has a dominating neighbour within the moves has no budget or floor left
to improve. From each front plan not yet expanded, every one-edit neighbour (`moves`: a pool's
GPU counts by 1, 2, 4, ... or to none or all, GPUs between its roles, a colocated pool resized, its
engine TP alone or with a concurrency, every training-layout knob, TP x PP together, the memory
savers together, mode with staleness, kv share, chunks, sync route) is scored in one vectorised
call; plans that enter the front are expanded next round (not those within `EPS` of an expanded
plan in both objectives). When a round adds nothing, each front plan's promising neighbours get a
second edit: within its cost the fastest, above its throughput the cheapest, among the feasible
and among those that miss a memory or KV limit; those that still miss a limit, a third
(`MAX_EDITS`). It ends when nothing is left to expand (`converged`) or at its evaluation cap.

In the planner (`run.py`) it starts from the structured seeds, built with one fixed seed
whatever `--seed` is, runs to their local optimum, then adds the search's archive and goes on: no
random moves, so every seed's answer at every budget is at least that seed-independent optimum's,
and the seeds' own finds are polished the same way.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import numpy as np

from mosearch.planner import plankeys
from mosearch.planner.structured import front_2d, spread
from problems.placement.names import SHARDINGS
from problems.placement.problem import objectives

KV_STEPS = (-0.1, -0.05, 0.05, 0.1)  # kv_mem_frac moves (vLLM's gpu_memory_utilization)
KV_VALUES = (0.5, 0.7, 0.9)
ENGINE_SEQS = (6, 8, 10)  # log2 max_num_seqs tried with each engine TP
SMALL_RANGE = 8  # integer globals with this many values or fewer are tried at every value
# a front plan within this share of an expanded one in both throughput and cost is not expanded:
# chains of ever smaller gains (kv_mem_frac steps) would otherwise cost most of the time
EPS = 0.005
MAX_EDITS = 3  # edits from a front plan: two for any, a third after two that left a limit missed
PROMISING = (3, 2)  # neighbours per front plan and kind kept for a second edit, and for a third
BLOCK = 100_000  # plans per model call
# after the front converges, the starting plans within this share of the front's throughput at
# their cost (or below), and the front plans skipped as within EPS of an expanded one, are expanded
# once: a budget's best plan is often one edit from a plan the front dominates by a little (4
# generating + 8 training GPUs, one GPU too many) or from a skipped one, never from an expanded one
NEAR = 0.1
RELOCATE_MAX_POOLS = 4  # generation-relocation moves (~P (P - 1) log2(n)^2 / 2 of them) up to this many pools
NEAR_MIN_EVALS = 200_000  # the near pass and what follows: as many evaluations as before it, at least these


def count_steps(n: int) -> np.ndarray:
    """GPU-count changes of a pool of n GPUs: +-1, 2, 4, ... below n."""
    s = [1 << j for j in range(max(1, int(n).bit_length())) if (1 << j) < max(n, 2)]
    return np.array(sorted({*s, *(-v for v in s)}), dtype=float)


@dataclass
class Moves:
    """One-edit moves of the plan vector: each adds values to (or sets) a few columns together
    (a role move shifts GPUs between a pool's rollout and training; a layout move sets the
    training parallelism, or its memory savers, as one)."""

    cols: np.ndarray  # (m, w) column indices, -1: none
    vals: np.ndarray  # (m, w)
    setv: np.ndarray  # (m, w) bool: set instead of add

    def apply(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every move on every row: (len(X) * m, d) and each row's parent index."""
        n, m = len(X), len(self.cols)
        V = np.repeat(X, m, axis=0)
        parent = np.repeat(np.arange(n), m)
        rows = np.arange(n * m)
        for k in range(self.cols.shape[1]):
            on = np.tile(self.cols[:, k] >= 0, n)
            r = rows[on]
            c = np.tile(self.cols[:, k], n)[on]
            v = np.tile(self.vals[:, k], n)[on]
            st = np.tile(self.setv[:, k], n)[on]
            V[r, c] = np.where(st, v, V[r, c] + v)
        return V, parent


def moves(L) -> Moves:
    P = L.n_pools
    xl, xu = L.bounds()
    out: list[list[tuple[int, float, bool]]] = []  # each move: (column, value, set?) parts
    add = lambda j, d: (j, float(d), False)  # noqa: E731
    put = lambda j, v: (j, float(v), True)  # noqa: E731
    for i in range(P):
        n = int(L.counts[i])
        for j in (i, P + i):  # rollout and training GPUs of pool i
            out += [[add(j, d)] for d in count_steps(n)] + [[put(j, 0)], [put(j, n)]]
        # roles: GPUs from training to rollout and back, the whole pool to one role; both roles by
        # the same count (a colocated pool grows or shrinks)
        out += [[add(i, d), add(P + i, -d)] for d in count_steps(n)]
        out += [[add(i, d), add(P + i, d)] for d in count_steps(n)]
        out += [[put(i, n), put(P + i, 0)], [put(i, 0), put(P + i, n)], [put(i, n), put(P + i, n)]]
        out += [[put(2 * P + i, k)] for k in range(int(L.rtp_n[i]))]
        if P <= RELOCATE_MAX_POOLS:
            # generation moved from another pool to d more GPUs of this one, with each engine TP that
            # divides d (its training GPUs stay): three edits apart otherwise, the way between them
            # dearer or slower than the front, and an engine TP larger than d is repaired back to the
            # old pool (l40-a30-rack x Qwen2.5-32B: 4 L40 generating for A100s -> 2 spare A100s, TP 2)
            out += [[put(h, 0), add(i, d), put(2 * P + i, k)] for h in range(P) if h != i
                    for d in count_steps(n) if d > 0
                    for k in range(int(L.rtp_n[i])) if L.rtp_options[i, k] <= d and d % L.rtp_options[i, k] == 0]
        # engines added on this pool as one edit: d more generating GPUs with an engine TP that divides d (the
        # pool's TP alone is another edit, and d GPUs at the old TP may not hold the model: tri-region-80 x
        # Qwen2.5-32B, 8 L4 at TP 8 generating beside the MI300X pool)
        out += [[add(i, d), put(2 * P + i, k)] for d in count_steps(n) if d > 0
                for k in range(int(L.rtp_n[i])) if L.rtp_options[i, k] <= d and d % L.rtp_options[i, k] == 0]
        # training GPUs with the layout to use them as one edit: d more training GPUs with each TP x PP (the
        # count alone leaves the old layout, which the new count may not divide: tri-region-80 x Qwen2.5-32B,
        # 12 MI300X at DP3 TP2 PP2 -> 14 at DP7 TP2 PP1); fewer GPUs are left to the count move and the near pass
        tpj, ppj = L.g("train_tp_idx"), L.g("train_pp_idx")
        out += [[add(P + i, d), put(tpj, a), put(ppj, b)] for d in count_steps(n) if d > 0
                for a in range(int(xu[tpj]) + 1) for b in range(min(3, int(xu[ppj]) + 1))]
        # the engine as one edit: its TP with a concurrency to match (a larger engine holds more
        # sequences; either change alone may leave the KV cache short or the engine underused)
        out += [[put(2 * P + i, k), put(L.g("log2_max_num_seqs"), q)] for k in range(int(L.rtp_n[i]))
                for q in ENGINE_SEQS]
    for name in ("log2_max_num_seqs", "train_tp_idx", "train_pp_idx", "sharding", "log2_micro_batch",
                 "recompute", "optimizer_offload", "mode", "staleness_bound", "log2_pipeline_chunks", "sync_route"):
        j = L.g(name)
        lo, hi = int(round(xl[j])), int(round(xu[j]))
        if hi - lo + 1 <= SMALL_RANGE:
            out += [[put(j, v)] for v in range(lo, hi + 1)]
        else:
            out += [[add(j, d)] for d in (-2, -1, 1, 2)]
    kv = L.g("kv_mem_frac")
    out += [[add(kv, d)] for d in KV_STEPS] + [[put(kv, v)] for v in KV_VALUES]
    # mode and staleness together: async at each bound (the mode alone is repaired to k = 0)
    out += [[put(L.g("mode"), 2), put(L.g("staleness_bound"), k)] for k in range(1, int(L.max_staleness) + 1)]
    # the training layout as one edit: TP x PP, and the memory savers (sharding, recomputation,
    # optimizer offload) together
    tp, pp = L.g("train_tp_idx"), L.g("train_pp_idx")
    out += [[put(tp, a), put(pp, b)] for a in range(int(xu[tp]) + 1) for b in range(min(3, int(xu[pp]) + 1))]
    out += [[put(L.g("sharding"), z), put(L.g("recompute"), rc), put(L.g("optimizer_offload"), of)]
            for z in (SHARDINGS.index("zero2"), SHARDINGS.index("zero3")) for rc in (0, 1) for of in (0, 1)]
    w = max(len(m) for m in out)
    cols = np.full((len(out), w), -1, dtype=int)
    vals = np.zeros((len(out), w))
    setv = np.zeros((len(out), w), dtype=bool)
    for a, m in enumerate(out):
        for b, (j, v, st) in enumerate(m):
            cols[a, b], vals[a, b], setv[a, b] = j, v, st
    return Moves(cols, vals, setv)


def colocated_singles(L) -> np.ndarray:
    """The cheap end, built directly: one pool at every GPU count (powers of two and the quarter
    shares above 64), colocated, with each engine TP that divides the count and each training TP,
    memory-lean (ZeRO-3, optimizer offload, with and without recomputation) and not (ZeRO-2, with
    and without), micro-batch 1, 256 or 1,024 sequences per engine. A budget below
    the search's cheapest plans is often met by a few GPUs of one pool with every memory saver on,
    four or more edits from any plan the search kept."""
    from mosearch.planner.structured import _rollout_sizes

    P = L.n_pools
    xl, _ = L.bounds()
    rows = []
    z2, z3 = SHARDINGS.index("zero2"), SHARDINGS.index("zero3")
    lean = [(z3, 1, 1), (z3, 0, 1), (z2, 1, 0), (z2, 0, 0)]
    for i in range(P):
        n = int(L.counts[i])
        sizes = sorted(set(_rollout_sizes(n)) if n > 64 else range(1, n + 1))
        for c in sizes:
            for k in range(int(L.rtp_n[i])):
                if c % int(L.rtp_options[i, k]):
                    continue
                for tp in range(len(L.tp_options)):
                    for (z, rc, off), seqs in itertools.product(lean, (8, 10)):
                        x = xl.copy()
                        x[i] = x[P + i] = c
                        x[2 * P + i] = k
                        x[L.g("kv_mem_frac")] = KV_VALUES[-1]
                        x[L.g("log2_max_num_seqs")] = seqs
                        x[L.g("train_tp_idx")] = tp
                        x[L.g("sharding")], x[L.g("recompute")], x[L.g("optimizer_offload")] = z, rc, off
                        rows.append(x)
    return np.array(rows).reshape(-1, L.n_var)


def _promising(group: np.ndarray, r: dict, thr0: np.ndarray, cost0: np.ndarray, feasible: bool,
               keep: int) -> np.ndarray:
    """Rows worth another edit, per group (the front plan they come from, whose throughput and cost
    are thr0, cost0 by group): among the plans that miss a memory or KV limit, the fastest cheaper
    one and the cheapest faster one (an edit may mend them); with `feasible`, also the fastest
    feasible one within its cost, the fastest strictly cheaper one and the cheapest at or above its
    throughput. `keep` of each."""
    t, c, ok, soft = r["thr"], r["cost"], r["ok"], r["soft"]
    within = soft & (c <= cost0[group] * (1 + 1e-9))
    above = soft & (t >= thr0[group] * (1 - 1e-9))
    cheaper = soft & (c < cost0[group] * (1 - 1e-9))
    faster = soft & (t > thr0[group] * (1 + 1e-9))
    crit = [(cheaper & ~ok, -t), (faster & ~ok, c)]
    if feasible:
        # also the fastest strictly cheaper: a GPU fewer often needs its layout or engine retuned
        crit += [(within & ok, -t), (above & ok, c), (cheaper & ok, -t)]
    picks = []
    for m, key in crit:
        idx = np.flatnonzero(m)
        if not len(idx):
            continue
        order = idx[np.lexsort((key[idx], group[idx]))]  # by group, best first within each
        g = group[order]
        first = np.r_[0, np.flatnonzero(np.diff(g)) + 1]
        rank = np.arange(len(order)) - np.repeat(first, np.diff(np.r_[first, len(order)]))
        picks.append(order[rank < keep])
    return np.unique(np.concatenate(picks)) if picks else np.zeros(0, dtype=int)


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


def budget_polish(problem, X0: np.ndarray, max_evals: int = 2_000_000, max_s: float | None = None,
                  then: np.ndarray | None = None, near: float = NEAR) -> BudgetPolish:
    """Local search from the plans X0 until no neighbour (one or two edits, three after two that
    missed a limit) of any throughput-cost front plan enters that front; then, when `then` is
    given, the same with those plans added (the planner: X0 the structured seeds, the same for
    every seed, `then` the search's archive, so each seed's answer is at least the seed-independent
    local optimum's). Then the near pass: the starting plans (X0 and `then`) within `near` of the
    front's throughput at their cost, and the front plans skipped as within EPS of an expanded one,
    are expanded once, the front is polished on from what they add, and the front plans skipped
    since are expanded in turn, with at most as many evaluations again as before the pass (at least
    NEAR_MIN_EVALS). Stops early at `max_evals` evaluations, that cap or `max_s` seconds (then
    `converged` is False)."""
    t0 = time.perf_counter()
    L = problem.layout
    mv = moves(L)
    X0 = L.repair(np.vstack([np.asarray(X0, dtype=float).reshape(-1, L.n_var), colocated_singles(L)]))
    stages = [] if then is None else [np.asarray(then, dtype=float).reshape(-1, L.n_var)]
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
    near_X, near_F = [X0[keep]], [s["F"][keep]]  # the starting plans, for the near-front pass
    near_done = False
    fx = front_2d(s["F"][keep, 0], s["F"][keep, 1])
    FX, FF = X0[keep][fx], s["F"][keep][fx]  # the throughput-cost front so far
    expanded = np.zeros(0, dtype=np.uint64)  # expanded, or skipped as within EPS of an expanded plan
    grown = np.zeros(0, dtype=np.uint64)  # expanded
    done_tc = np.zeros((0, 2))  # throughput, cost of the plans expanded
    seen = plankeys.unique(plankeys.keys(X0))[0]  # scored (as repaired) or generated (before the repair) already
    # promising neighbours for another edit: (plans, their front plan's throughput and cost, edits so far)
    pending: list[tuple[np.ndarray, np.ndarray, int]] = []
    found_X, found_F = [], []
    rounds = two = 0
    converged = False

    limit = max_evals  # the near pass lowers it

    def over() -> bool:
        return ev >= limit or (max_s is not None and time.perf_counter() - t0 >= max_s)

    def cut(n: int) -> np.ndarray | None:
        """Which of n plans to expand so that their neighbours stay within the cap: a spread of
        them (the rest later), or None when all fit."""
        room = max(1, (limit - ev) // len(mv.cols))
        return spread(n, room) if n > room else None

    def fold(N, r) -> None:
        """The feasible rows of N into the front; those that enter it are kept as found."""
        nonlocal FX, FF
        ok = r["ok"]
        allX = np.vstack([FX, N[ok]])
        allF = np.vstack([FF, r["F"][ok]])
        fx = front_2d(allF[:, 0], allF[:, 1])
        entered = fx[fx >= len(FX)]
        if len(entered):
            found_X.append(allX[entered])
            found_F.append(allF[entered])
        FX, FF = allX[fx], allF[fx]

    def expand(B: np.ndarray, base: np.ndarray, depth: int) -> None:
        """Score every unseen one-edit neighbour of the plans B (each `depth` edits from the front
        plan whose throughput and cost are `base`); keep the promising ones for another edit: after
        the first edit all four kinds, after the second those that miss a limit, to MAX_EDITS."""
        nonlocal seen
        V, parent = mv.apply(B)
        idx, raw = plankeys.fresh(V, seen)  # moves that repeat a plan or land where an earlier one did
        V, parent = L.repair(V[idx]), parent[idx]
        idx, k = plankeys.fresh(V, seen)
        seen = plankeys.union(seen, np.concatenate([raw, k]))
        V, parent = V[idx], parent[idx]
        if len(V) == 0:
            return
        r = score(V)
        if depth + 1 < MAX_EDITS:
            # grouped by front plan, so each keeps at most PROMISING[depth] of each kind
            # (distinct rows of the few bases, then renumbered over those the neighbours have: the
            # numbering np.unique of base[parent] gives, without sorting a row per neighbour)
            _, per_base = np.unique(base, axis=0, return_inverse=True)
            grp = per_base.reshape(-1)[parent]
            grp = np.searchsorted(np.unique(grp), grp)
            gb = np.zeros((grp.max() + 1, 2))
            gb[grp] = base[parent]
            pick = _promising(grp, r, gb[:, 0], gb[:, 1], feasible=depth == 0, keep=PROMISING[depth])
            if len(pick):
                pending.append((V[pick], base[parent[pick]], depth + 1))
        fold(V, r)

    while not over():
        rounds += 1
        keys = plankeys.keys(FX)
        todo = np.flatnonzero(~plankeys.member(keys, expanded))
        thr, cost = -FF[todo, 0], FF[todo, 1]
        dup = ((done_tc[None, :, 0] >= thr[:, None] * (1 - EPS))
               & (done_tc[None, :, 1] <= cost[:, None] * (1 + EPS))).any(axis=1)
        expanded = plankeys.union(expanded, keys[todo[dup]])  # skipped for good
        todo = todo[~dup]
        if (k := cut(len(todo))) is not None:  # the cap holds within a round too (FX: front_2d's order)
            todo = todo[k]
        expanded = plankeys.union(expanded, keys[todo])
        grown = plankeys.union(grown, keys[todo])
        if len(todo):
            done_tc = np.vstack([done_tc, np.column_stack([-FF[todo, 0], FF[todo, 1]])])
            expand(FX[todo], np.column_stack([-FF[todo, 0], FF[todo, 1]]), 0)
        elif pending:
            # a one-edit local optimum: another edit from the promising neighbours, fewest edits first
            depth = min(p[2] for p in pending)
            now = [p for p in pending if p[2] == depth]
            pending[:] = [p for p in pending if p[2] != depth]
            two += 1
            B, base = np.vstack([p[0] for p in now]), np.vstack([p[1] for p in now])
            if (k := cut(len(B))) is not None:  # the cap holds here too
                B, base = B[k], base[k]
            expand(B, base, depth)
        elif stages:
            N = L.repair(stages.pop(0))
            idx, k = plankeys.fresh(N, seen)
            seen = plankeys.union(seen, k)
            if len(idx):
                r = score(N[idx])
                near_X.append(N[idx][r["ok"]])
                near_F.append(r["F"][r["ok"]])
                fold(N[idx], r)
        elif near > 0:
            # the first time: the starting plans near the front and the front plans skipped as within
            # EPS of an expanded one (whose neighbours are not theirs); then the front plans skipped
            # since, until none is left (or the cap)
            if not near_done:
                near_done = True
                limit = min(max_evals, ev + max(ev, NEAR_MIN_EVALS))
                C, CF = np.vstack([*near_X, FX]), np.vstack([*near_F, FF])
            else:
                C, CF = FX, FF
            ck = plankeys.keys(C)
            order = np.argsort(FF[:, 1])
            best = np.maximum.accumulate(-FF[order, 0])
            at = np.searchsorted(FF[order, 1], CF[:, 1] * (1 + 1e-9), side="right") - 1
            close = (at >= 0) & (-CF[:, 0] >= (1 - near) * best[np.clip(at, 0, None)])
            close &= ~plankeys.member(ck, grown)
            _, first = plankeys.unique(ck[close])
            todo = np.flatnonzero(close)[np.sort(first)]
            if not len(todo):
                converged = True
                break
            if (k := cut(len(todo))) is not None:  # spread along cost
                todo = todo[np.argsort(CF[todo, 1])][k]
            expanded, grown = plankeys.union(expanded, ck[todo]), plankeys.union(grown, ck[todo])
            expand(C[todo], np.column_stack([-CF[todo, 0], CF[todo, 1]]), 0)
        else:
            converged = True
            break
    X = np.vstack(found_X) if found_X else np.zeros((0, L.n_var))
    F = np.vstack(found_F) if found_F else np.zeros((0, 4))
    return BudgetPolish(X, F, ev, rounds, two, time.perf_counter() - t0, converged)
