"""Pool-level decomposition: structured heterogeneous plans that seed MaOEA-CS (an extension).

On a mixed cluster the plans that matter have structure: which pools train, which generate
(and with what engine TP each), which do both; then the training layout; then the execution
mode and its knobs. Variation on the flat vector seldom moves a whole pool from one role to
another, and the corner grid only tries whole-cluster role splits, so on a cluster such as
H100 + A10G + RTX-4090 the search used to stay with colocated H100 plans while plans that
train on most H100s and generate everywhere else are far faster. This module builds those
plans directly, stage by stage, each stage one vectorised call to the model:

1. roles: each pool trains on 0, 1/4, 1/2, 3/4 or all of its GPUs (`SHARES`); the rest of the
   pool generates or stays off; colocated plans share the training GPUs instead;
2. training layout per training footprint: every layout of `layouts()` (TP x PP x sharding x
   micro-batch x recomputation x optimizer offload) is scored on the footprint alone; the
   fastest that fits memory is kept (runners-up for stage 5), and for colocated plans the one
   with the least training plus context-switch time;
3. engine TP per pool and GPU count: the fastest TP whose engine holds the KV cache of a longest
   sample, the pool generating alone;
4. pairs of a training and a generating footprint (quarter shares of each pool, disjoint): the
   estimate samples / max(training time, rollout time), an optimistic estimate,
   picks the pairs near the best estimate at each GPU cost; each is scored in every mode
   (async with the largest k and the footprint's best engine settings of KV share x sequences
   per engine, disaggregated with 4 chunks, async with k = 1 and the largest k at vLLM's
   defaults and half the sequences), and every training footprint colocated (both sequence counts);
5. refinement: the best plans (fastest within each cost level, the fastest plan of the fastest
   footprints, and of each footprint within `PAIR_SLACK` of the fastest at its cost; at most
   `REFINE_BASES`, sampled beyond the fastest third) get every single-knob change of
   the global variables and of each pool's engine TP (also together with max_num_seqs), and
   moves of a few GPUs, engines or replicas per pool, a generating move also with the pool's
   best and runner-up engine TP for its new count at each engine setting of stage 4
   (`REFINE_ROUNDS` rounds).

Everything is scored by the placement problem itself, so the seeds are real plans with the
model's objectives; MaOEA-CS starts from them (with the corner seeds) and its archive keeps
every feasible non-dominated one. Large clusters (many pools) sample the footprints
(`MAX_TRAIN_FOOTPRINTS`) and cap the pairs (`MAX_PAIRS`), so the stage's cost stays bounded.
"""

from __future__ import annotations

import itertools

import numpy as np

from mosearch.planner import plankeys
from problems.placement.names import SHARDINGS
from problems.placement.problem import objectives

SHARES = (0.0, 0.25, 0.5, 0.75, 1.0)
# Caps on the footprints and pairs scored: a model call costs about in proportion to the pools,
# so the caps shrink as pools grow and the stage takes a few seconds on any cluster.
MAX_TRAIN_FOOTPRINTS = 600  # training (and generating) footprints, sampled above this
MAX_PAIRS = 10000  # (training, generating) footprint pairs of stage 4 scored with each mode
POOL_WORK = 360_000  # footprint cap x layouts x pools
PAIR_SLACK = 0.05  # pairs kept: estimate within 5% of the best estimate at that cost or below
REFINE_BASES = 150  # plans refined per round in stage 5 (fewer with many pools)
REFINE_ROUNDS = 4  # rounds always run; more follow while a round still improves the front
MAX_REFINE_ROUNDS = 8
KEEP_LAYOUTS = 3  # layouts kept per training footprint for the refinement
KV_FRAC = 0.9  # vLLM's default gpu_memory_utilization
LOG2_SEQS = 8  # vLLM's default max_num_seqs, 256
_Z2, _Z3 = SHARDINGS.index("zero2"), SHARDINGS.index("zero3")


def train_counts(n: int) -> list[int]:
    return sorted({int(round(n * s)) for s in SHARES})


def layouts(L) -> np.ndarray:
    """(n, 6) training layouts: tp idx, pp idx, sharding, log2 micro-batch, recompute, offload.
    ZeRO-2 stands for the unsharded states too (same collectives, smaller optimizer shards)."""
    pp = range(min(3, len(L.pp_options)))  # PP 1, 2, 4
    return np.array(list(itertools.product(range(len(L.tp_options)), pp, (_Z2, _Z3), (0, 2), (0, 1), (0, 1))),
                    dtype=float)


LAYOUT_NAMES = ("train_tp_idx", "train_pp_idx", "sharding", "log2_micro_batch", "recompute", "optimizer_offload")


def _blank(L, n: int, *, kv: float, route: int) -> np.ndarray:
    X = np.zeros((n, L.n_var))
    X[:, L.g("kv_mem_frac")] = kv
    X[:, L.g("log2_max_num_seqs")] = LOG2_SEQS
    X[:, L.g("sync_route")] = route
    return X


def _sample_rows(n: int, cap: int, rng: np.random.Generator, keep_first: int = 0) -> np.ndarray:
    if n <= cap:
        return np.arange(n)
    rest = rng.choice(np.arange(keep_first, n), size=cap - keep_first, replace=False)
    return np.sort(np.concatenate([np.arange(keep_first), rest]))


def fine_counts(n: int) -> list[int]:
    """Every count for pools of up to 8 GPUs (a budget often buys an odd number), else the shares."""
    return list(range(n + 1)) if n <= 8 else train_counts(n)


def _grid(per_pool: list[list[int]], cap: int, rng: np.random.Generator) -> np.ndarray:
    """The product of per-pool options without the all-zero row; `cap` random rows of it when larger."""
    if cap <= 0:
        return np.zeros((0, len(per_pool)))
    total = float(np.prod([float(len(o)) for o in per_pool]))
    if total - 1 <= cap:
        G = np.array(list(itertools.product(*per_pool)), dtype=float).reshape(-1, len(per_pool))
        return G[G.any(axis=1)]
    G = np.array([[o[j] for o, j in zip(per_pool, (rng.random(len(per_pool)) * [len(o) for o in per_pool]).astype(int))]
                  for _ in range(2 * cap)], dtype=float)
    G = np.unique(G[G.any(axis=1)], axis=0)
    return G[rng.choice(len(G), size=min(cap, len(G)), replace=False)]


def share_grid(counts: np.ndarray, cap: int, rng: np.random.Generator) -> np.ndarray:
    """Footprints, at most `cap`: every pool at a share of `SHARES` of its GPUs (the single-pool
    ones and the whole cluster always, the others sampled when too many), then finer counts of
    small pools (`fine_counts`) with what the cap leaves."""
    P = len(counts)
    fixed = [np.asarray(counts, dtype=float)]  # the whole cluster, each pool whole, then its shares
    for share in reversed(SHARES[1:]):
        for i in range(P):
            v = np.zeros(P)
            v[i] = int(round(counts[i] * share))
            if v[i] > 0 and not any((v == f).all() for f in fixed):
                fixed.append(v)
    fixed = np.array(fixed)[:cap]
    coarse = _grid([train_counts(int(n)) for n in counts], max(0, cap - len(fixed)), rng)
    out = np.unique(np.vstack([fixed, coarse]), axis=0)
    if len(out) < cap:
        fine = _grid([fine_counts(int(n)) for n in counts], 4 * cap, rng)
        known = {tuple(r) for r in out}
        fine = np.array([r for r in fine if tuple(r) not in known]).reshape(-1, P)
        if len(fine):
            fine = fine[rng.permutation(len(fine))[:cap - len(out)]]
            out = np.vstack([out, fine])
    return out[:cap] if len(out) > cap else out


def _rollout_sizes(n: int) -> list[int]:
    """GPU counts a pool may generate on: all of them up to 64, else powers of two and the
    complements of the training shares."""
    if n <= 64:
        return list(range(1, n + 1))
    pow2 = [1 << j for j in range(n.bit_length()) if (1 << j) <= n]
    return sorted(set(pow2) | ({n - t for t in train_counts(n)} - {0}))


def front_2d(f0: np.ndarray, f1: np.ndarray) -> np.ndarray:
    """Rows non-dominated in two minimised objectives, O(n log n): by f1, then f0, each row that
    improves on the best f0 so far."""
    if len(f0) == 0:
        return np.zeros(0, dtype=int)
    order = np.lexsort((f0, f1))
    best = np.minimum.accumulate(f0[order])
    improves = np.r_[True, f0[order][1:] < best[:-1]]
    return np.sort(order[improves])


def spread(n: int, k: int) -> np.ndarray:
    """At most k indices of range(n), evenly spread, the first and the last included."""
    return np.unique(np.linspace(0, n - 1, k).round().astype(int))


class StructuredSeeds:
    """Runs the five stages on construction; `X`, `F`, `ok` hold every full plan scored."""

    def __init__(self, problem, seed: int = 0):
        self.problem = problem
        self.L = problem.layout
        self.rng = np.random.default_rng(seed)
        self.max_mem = float(problem.limits.get("max_mem_frac") or 1.0)
        self.kv = min(KV_FRAC, self.max_mem)
        self.route = 1 if len(problem.cluster.regions) > 1 else 0
        self.evaluations = 0
        # engines alone are scored as colocated plans with 1-GPU replicas (stages 3 and 4): without the
        # executor's rules (which may not allow that stand-in), its plans are repaired into them after
        ex = getattr(problem, "executor", None)
        self.engines = problem.without_executor() if ex is not None and ex.external else problem
        P = self.L.n_pools
        self.n_feet = int(np.clip(POOL_WORK / (len(layouts(self.L)) * P), 24, MAX_TRAIN_FOOTPRINTS))
        self.n_pairs = int(np.clip(MAX_PAIRS * 3 / max(P, 3), 500, MAX_PAIRS))
        self.n_bases = int(np.clip(REFINE_BASES * (4 / max(P, 4)) ** 2, 8, REFINE_BASES))
        self._train_stage()
        if len(self.t_vectors) == 0:
            self.X, self.F, self.ok = np.zeros((0, self.L.n_var)), np.zeros((0, 4)), np.zeros(0, dtype=bool)
            return
        self._rollout_stage()
        X = self._combine_stage()
        self.X, self.F, self.ok = self._score(X)
        self.seen = plankeys.unique(plankeys.keys(self.X))[0]  # hashes of the plans scored (plankeys)
        # refine until the moves stop paying (a round adds nothing to the throughput-cost front of
        # feasible plans), at least REFINE_ROUNDS and at most MAX_REFINE_ROUNDS rounds: a plan found
        # in the last round is a base only in the next (e.g. a footprint reached with one knob
        # still at the memory-lean value the move came from)
        key = self._front_key()
        for r in range(MAX_REFINE_ROUNDS):
            self._refine()
            key, before = self._front_key(), key
            if r + 1 >= REFINE_ROUNDS and key == before:
                break

    # ------------------------------------------------------------ scoring
    def _eval(self, X: np.ndarray) -> dict[str, np.ndarray]:
        self.evaluations += len(X)
        return self.problem.evaluate_matrix(X)

    def _eval_engines(self, X: np.ndarray) -> dict[str, np.ndarray]:
        self.evaluations += len(X)
        return self.engines.evaluate_matrix(X)

    def _score(self, X: np.ndarray):
        return self._score_repaired(self.L.repair(X))

    def _score_repaired(self, R: np.ndarray):
        r = self._eval(R)
        return R, objectives(r), r["feasible"] > 0

    # ------------------------------------------------------------ stage 1 + 2: training footprints and layouts
    def _train_stage(self) -> None:
        L, P = self.L, self.L.n_pools
        T = share_grid(L.counts, self.n_feet, self.rng)
        lay = layouts(L)
        n = len(T) * len(lay)
        # scored colocated with 1-GPU engines and the smallest KV share: the training time of a
        # footprint does not depend on the mode (one chunk), and the rollout's memory stays low
        X = _blank(L, n, kv=0.3, route=self.route)
        X[:, L.g("log2_max_num_seqs")] = 3
        X[:, :P] = np.repeat(T, len(lay), axis=0)
        X[:, P:2 * P] = X[:, :P]
        for j, name in enumerate(LAYOUT_NAMES):
            X[:, L.g(name)] = np.tile(lay[:, j], len(T))
        R = L.repair(X)
        r = self._eval(R)
        fits = (r["peak_mem_frac"] <= self.max_mem) & (r["structure"] <= 0)
        if not fits.any():  # no layout fits any footprint: nothing to build on
            self.t_vectors = np.zeros((0, P))
            return
        R, train_s = R[fits], r["train_s"][fits]
        colo_s = train_s + r["switch_s"][fits]  # colocated, the context switch depends on the layout too
        t_rows = R[:, P:2 * P]
        cols = [L.g(nm) for nm in LAYOUT_NAMES]
        keys, inv = np.unique(t_rows, axis=0, return_inverse=True)
        inv = inv.reshape(-1)
        order = np.lexsort((train_s, inv))
        rank = np.empty(len(order), dtype=int)
        starts = np.r_[0, np.flatnonzero(np.diff(inv[order])) + 1]
        counts = np.diff(np.r_[starts, len(order)])
        rank[order] = np.arange(len(order)) - np.repeat(starts, counts)
        self.t_vectors = keys  # (nT, P) training GPUs per pool
        self.t_layouts = np.full((len(keys), KEEP_LAYOUTS, len(cols)), np.nan)
        self.t_time = np.full((len(keys), KEEP_LAYOUTS), np.inf)
        keep = rank < KEEP_LAYOUTS
        self.t_layouts[inv[keep], rank[keep]] = R[keep][:, cols]
        self.t_time[inv[keep], rank[keep]] = train_s[keep]
        first = np.lexsort((colo_s, inv))
        first = first[np.r_[True, inv[first][1:] != inv[first][:-1]]]
        self.t_layout_colo = np.full((len(keys), len(cols)), np.nan)
        self.t_layout_colo[inv[first]] = R[first][:, cols]

    # ------------------------------------------------------------ stage 3: engine TP per pool and GPU count
    def _rollout_stage(self) -> None:
        L, P = self.L, self.L.n_pools
        rows = []
        for i in range(P):
            n = int(L.counts[i])
            sizes = _rollout_sizes(n)
            for c in sizes:
                for k in range(int(L.rtp_n[i])):
                    if L.rtp_options[i, k] <= c:
                        rows.append((i, c, k))
        X = _blank(L, len(rows), kv=self.kv, route=self.route)
        for j, (i, c, k) in enumerate(rows):
            X[j, i] = c
            X[j, P + i] = c
            X[j, 2 * P + i] = k
        r = self._eval_engines(self.engines.layout.repair(X))
        score = np.where(r["kv_shortfall"] <= 0, r["rollout_s"], np.inf)
        self.best_rtp: dict[tuple[int, int], list[int]] = {}
        for (i, c, k), s in zip(rows, score):
            self.best_rtp.setdefault((i, c), []).append((s, k))
        self.best_rtp = {key: [k for s, k in sorted(v) if np.isfinite(s)] or [0] for key, v in self.best_rtp.items()}

    def _rtp_idx(self, i: int, c: int, choice: int = 0, divides: bool = False) -> int:
        """The pool's best engine TP for c generating GPUs (`divides`: only TPs dividing c, as
        colocated GPUs must hold whole engines)."""
        sizes = [s for s in _rollout_sizes(int(self.L.counts[i])) if s <= c]
        opts = self.best_rtp.get((i, sizes[-1])) if sizes else None
        if divides and opts:
            opts = [k for k in opts if c % int(self.L.rtp_options[i, k]) == 0]
        if not opts:
            return 0
        return opts[min(choice, len(opts) - 1)]

    # ------------------------------------------------------------ stage 4: footprints x modes
    def _modes(self) -> list[tuple[int, int, int]]:
        K = self.L.max_staleness
        m = [(2, K, 0, LOG2_SEQS)] if K >= 1 else []  # first: with the footprint's own engine settings
        m += [(1, 0, 2, LOG2_SEQS)]  # disaggregated with 4 chunks (1 chunk and the rest: stage 5)
        if K >= 1:
            # the largest k also with vLLM's default and half the sequences per engine
            m += [(2, 1, 0, LOG2_SEQS), (2, K, 0, LOG2_SEQS - 1)]
        return m

    def _rollout_footprints(self) -> None:
        """Generating footprints (shares of each pool), scored once: their bulk and tail times do
        not depend on the training side. Each tries every pool's best engine TP, and each pool's
        runner-up in turn (the pool's own best alone need not be best beside others: the slowest
        engine's longest sample bounds the step), with a few engine settings; it keeps the best."""
        L, P = self.L, self.L.n_pools
        Rv = share_grid(L.counts, self.n_feet, self.rng)
        n = len(Rv)
        ri = Rv.astype(int)
        first = np.array([[self._rtp_idx(i, r[i]) if r[i] > 0 else 0 for i in range(P)] for r in ri]).reshape(n, P)
        second = np.array([[self._rtp_idx(i, r[i], 1) if r[i] > 0 else 0 for i in range(P)] for r in ri]).reshape(n, P)
        tps = [first]
        for i in range(P):
            v = first.copy()
            v[:, i] = second[:, i]
            tps.append(v)
        nV = len(tps)
        X = _blank(L, nV * n, kv=self.kv, route=self.route)
        X[:, :P] = np.tile(Rv, (nV, 1))
        X[:, P:2 * P] = X[:, :P]  # colocated with 1-GPU replicas: the engines alone decide the rollout times
        X[:, 2 * P:3 * P] = np.vstack(tps)
        R = self.engines.layout.repair(X)
        same = (R[:, :P] == X[:, :P]).all(axis=1)
        K = max(1, L.max_staleness)
        # engine settings: KV share and sequences per engine trade the bulk against the tail of
        # the longest sample
        settings = self._engine_settings()
        times = []
        for kv, seqs in settings:
            R[:, L.g("kv_mem_frac")] = kv
            R[:, L.g("log2_max_num_seqs")] = seqs
            r = self._eval_engines(R)
            ok = same & (r["kv_shortfall"] <= 0)
            times.append(np.where(ok, np.maximum(r["rollout_bulk_s"], r["rollout_tail_s"] / (K + 1)), np.inf))
        times = np.array(times).reshape(len(settings) * nV, n)  # (setting, variant) x footprint
        best = np.argmin(times, axis=0)
        t = times[best, np.arange(n)]
        ok = np.isfinite(t)
        s_i, v_i = best // nV, best % nV
        self.r_vectors = Rv[ok]
        self.r_time = t[ok]
        self.r_setting = np.array(settings)[s_i[ok]]
        self.r_tp = np.array(tps)[v_i[ok], np.flatnonzero(ok)]

    def _engine_settings(self) -> list[tuple[float, int]]:
        """(KV share, log2 sequences per engine) pairs tried for generating footprints."""
        return [(kv, seqs) for kv in sorted({0.5, self.kv}) for seqs in (LOG2_SEQS, LOG2_SEQS - 1)]

    def _combine_stage(self) -> np.ndarray:
        """Footprint pairs (training, generating) that fit the cluster, kept where their estimated
        throughput, samples / max(training time, rollout time), is within `PAIR_SLACK` of the
        best estimate at their GPU cost or below; each kept pair x mode is a plan."""
        L, P = self.L, self.L.n_pools
        self._rollout_footprints()
        price = np.array([pool.gpu.price_usd_h for pool in self.problem.cluster.pools])
        live = np.flatnonzero(np.isfinite(self.t_time[:, 0]))
        T, Rv = self.t_vectors[live], self.r_vectors
        S = float(self.problem.workload.samples_per_step)
        fits = (T[:, None, :] + Rv[None, :, :] <= L.counts[None, None, :]).all(axis=2)
        a, b = np.nonzero(fits)
        est = S / np.maximum(self.t_time[live[a], 0], self.r_time[b])
        cost = T[a] @ price + Rv[b] @ price
        order = np.lexsort((-est, cost))
        best = np.maximum.accumulate(est[order])
        keep = order[est[order] >= (1 - PAIR_SLACK) * best]
        if len(keep) > self.n_pairs:  # the closest to the running best first
            rank = np.empty(len(order), dtype=int)
            rank[order] = np.arange(len(order))
            gap = est[keep] / best[rank[keep]]
            keep = keep[np.argsort(-gap, kind="stable")[:self.n_pairs]]
        modes = self._modes()
        n_pair = len(keep)
        colo = live
        X = _blank(L, n_pair * len(modes) + 2 * len(colo), kv=self.kv, route=self.route)
        for j, q in enumerate(keep):
            t_i = live[a[q]]
            kv, seqs = self.r_setting[b[q]]
            for m, mode in enumerate(modes):
                x = X[j * len(modes) + m]
                self._fill(x, self.t_vectors[t_i], Rv[b[q]].astype(int), self.t_layouts[t_i, 0], mode)
                x[2 * P:3 * P] = self.r_tp[b[q]]
                x[L.g("kv_mem_frac")] = kv
                x[L.g("log2_max_num_seqs")] = seqs if m == 0 else x[L.g("log2_max_num_seqs")]
        for j, t_i in enumerate(colo):
            t = self.t_vectors[t_i]
            for q, seqs in enumerate((LOG2_SEQS, LOG2_SEQS - 1)):
                self._fill(X[n_pair * len(modes) + 2 * j + q], t, t.astype(int), self.t_layout_colo[t_i], (0, 0, 0, seqs))
        return X

    def _fill(self, x: np.ndarray, t, r, layout, mode, rtp_choice: int = 0) -> None:
        L, P = self.L, self.L.n_pools
        x[:P] = r
        x[P:2 * P] = t
        colo = mode[0] == 0
        x[2 * P:3 * P] = [self._rtp_idx(i, r[i], rtp_choice, divides=colo) if r[i] > 0 else 0 for i in range(P)]
        for j, name in enumerate(LAYOUT_NAMES):
            x[L.g(name)] = layout[j]
        x[L.g("mode")], x[L.g("staleness_bound")], x[L.g("log2_pipeline_chunks")], x[L.g("log2_max_num_seqs")] = mode

    # ------------------------------------------------------------ stage 5: single-knob refinement
    def _front_key(self) -> bytes:
        ok = np.flatnonzero(self.ok)
        F = self.F[ok]
        return np.round(F[front_2d(F[:, 0], F[:, 1])][:, :2], 9).tobytes()

    def _bases(self) -> np.ndarray:
        ok = np.flatnonzero(self.ok)
        if len(ok) == 0:
            return ok
        F = self.F[ok]
        # fastest within each cost level, per execution mode (a colocated plan a faster async one
        # shadows may improve more with its own knobs), then the fastest overall
        mode = self.X[ok, self.L.g("mode")]
        front = np.concatenate([ok[mode == m][front_2d(F[mode == m, 0], F[mode == m, 1])] for m in np.unique(mode)])
        # the fastest plan of each footprint (GPUs per pool and role), the fastest footprints
        # first: refining one plan per footprint reaches more structures than many of one
        order = np.argsort(F[:, 0], kind="stable")
        # (by plan hashes: np.unique(axis=0) compares rows field by field, 9 s of a 4,096-GPU plan)
        _, first = plankeys.unique(plankeys.keys(self.X[ok[order], :2 * self.L.n_pools]))
        per_foot = ok[order[np.sort(first)]]
        fast = per_foot[:self.n_bases // 3]
        # and the fastest plan of each footprint within PAIR_SLACK of the fastest plan at its cost or
        # below: a footprint one move reached is often first slower than the front, until its own
        # knobs are refined (e.g. a pool just added to generation, whose micro-batch comes next)
        by_cost = np.argsort(F[:, 1], kind="stable")
        best = np.maximum.accumulate(-F[by_cost, 0])
        at = np.searchsorted(F[by_cost, 1], self.F[per_foot, 1], side="right") - 1
        near = per_foot[-self.F[per_foot, 0] >= (1 - PAIR_SLACK) * best[at]]
        bases = np.unique(np.concatenate([front, fast, near]))
        if len(bases) > self.n_bases:
            order = np.argsort(self.F[bases, 0], kind="stable")
            bases = bases[np.sort(order[_sample_rows(len(order), self.n_bases, self.rng, keep_first=self.n_bases // 3)])]
        return bases

    def _refine(self) -> None:
        L, P = self.L, self.L.n_pools
        B = self.X[self._bases()]
        if len(B) == 0:
            return
        xl, xu = L.bounds()
        variants = []
        for name in ("log2_max_num_seqs", "train_tp_idx", "train_pp_idx", "sharding", "log2_micro_batch",
                     "recompute", "optimizer_offload", "mode", "staleness_bound", "log2_pipeline_chunks", "sync_route"):
            j = L.g(name)
            for v in range(int(xl[j]), int(xu[j]) + 1):
                V = B.copy()
                V[:, j] = v
                variants.append(V)
        j = L.g("kv_mem_frac")
        for v in (0.5, 0.7, 0.8, 0.95):
            if v <= self.max_mem:
                V = B.copy()
                V[:, j] = v
                variants.append(V)
        seqs = L.g("log2_max_num_seqs")
        for i in range(P):  # each pool's engine TP, every option, alone and with each max_num_seqs
            for k in range(int(L.rtp_n[i])):
                for v in [None, *range(int(xl[seqs]), int(xu[seqs]) + 1)]:
                    V = B.copy()
                    V[:, 2 * P + i] = k
                    if v is not None:
                        V[:, seqs] = v
                    variants.append(V)
        # GPU counts: a pool's generating GPUs by a few GPUs or engines, its training GPUs by one or
        # two replicas (what a budget between two role splits buys)
        rtp = np.take_along_axis(L.rtp_options, B[:, 2 * P:3 * P].astype(int).T, axis=1).T
        rep = (L.tp_options[B[:, L.g("train_tp_idx")].astype(int)] * L.pp_options[B[:, L.g("train_pp_idx")].astype(int)])
        for i in range(P):
            for step in (1, 2, 4, -1, -2, -4):
                for col, unit in ((i, rtp[:, i]), (P + i, rep)):
                    V = B.copy()
                    V[:, col] += step * unit if abs(step) <= 2 else step
                    if col == i and (B[:, L.g("mode")] == 0).any():  # colocated: the shared GPUs move together
                        c = B[:, L.g("mode")] == 0
                        V[c, P + i] = V[c, i]
                    variants.append(V)
                    if col == i:
                        # the same move with the pool's best engine TP for its new count (stage 3)
                        # and its runner-up, at each engine setting of stage 4: a pool that starts generating, or
                        # changes its count, may need another TP (a small GPU whose 1-GPU engine
                        # cannot hold a longest sample's KV cache) and other engine settings, and
                        # one knob at a time does not get there (the first step alone is slower)
                        n_new = np.clip(V[:, i], 0, L.counts[i]).astype(int)
                        for choice in (0, 1):  # the best TP and the runner-up, as in stage 4
                            W = V.copy()
                            W[:, 2 * P + i] = [self._rtp_idx(i, n, choice) if n > 0 else 0 for n in n_new]
                            variants.append(W)
                            for kv, seqs in self._engine_settings():
                                U = W.copy()
                                U[:, L.g("kv_mem_frac")] = kv
                                U[:, L.g("log2_max_num_seqs")] = seqs
                                variants.append(U)
        # each variant once, and none scored before: a knob set to the value a base already has, or a
        # move the repair undoes, repeats a plan (on mixed-64 and a 4,096-GPU cluster 60-70% of a round)
        R = self.L.repair(np.vstack(variants))
        idx, k = plankeys.fresh(R, self.seen)
        self.seen = plankeys.union(self.seen, k)
        R, F, ok = self._score_repaired(R[idx])
        self.X, self.F, self.ok = np.vstack([self.X, R]), np.vstack([self.F, F]), np.concatenate([self.ok, ok])

    # ------------------------------------------------------------ results
    def seeds(self) -> np.ndarray:
        """Feasible plans on the fronts of throughput against each other objective, and of cost
        against memory (two-objective fronts: O(n log n) where the four-objective front of tens of
        thousands of plans is not); the search's archive keeps the non-dominated ones."""
        ok = np.flatnonzero(self.ok)
        F = self.F[ok]
        rows = [front_2d(F[:, a], F[:, b]) for a, b in ((0, 1), (0, 2), (0, 3), (1, 2))]
        return np.unique(self.X[ok[np.unique(np.concatenate(rows))]], axis=0)

    def known(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(X, F, feasible) of the seeds, for the search's archive."""
        X = self.seeds()
        if len(X) == 0:
            return X, np.zeros((0, 4)), np.zeros(0, dtype=bool)
        r = self.problem.evaluate_matrix(X)
        F = objectives(r)
        return X, F, r["feasible"] > 0

    def population_seeds(self, n: int) -> np.ndarray:
        """Up to n feasible plans of the (throughput, cost) front, spread along it by cost."""
        ok = np.flatnonzero(self.ok)
        front = ok[front_2d(self.F[ok, 0], self.F[ok, 1])]
        front = front[np.argsort(self.F[front, 1], kind="stable")]
        if len(front) > n:
            front = front[spread(len(front), n)]
        return self.X[front]

    def best_within(self, max_cost: float | None = None) -> float:
        """Fastest feasible throughput scored here within a budget (0 when none)."""
        m = self.ok & (self.F[:, 1] <= (np.inf if max_cost is None else max_cost))
        return float(-self.F[m, 0].min()) if m.any() else 0.0
