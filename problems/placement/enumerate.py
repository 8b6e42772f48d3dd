"""Exhaustive enumeration of a small placement space and its exact Pareto front.

The space is the set of distinct *repaired* vectors (fixed points of `Layout.repair`) with every
integer variable at every value and kv_mem_frac on a grid (`KV_GRID`, the only coarsening).
`space_size` counts it exactly: the pool/TP/PP/mode block is enumerated through repair and
deduplicated (repair couples those variables); the other variables are independent of it.

The enumeration evaluates one representative per class of vectors the model cannot tell apart
or that another vector weakly dominates (objectives and constraints both no worse). The rules,
each justified by the model's code and checked on random vectors by the tests (`canonical`):
  R1 sync_route has no effect when the cluster has one region (every engine is local);
  R2 colocated mode ignores pipeline_chunks (the flow uses one chunk; repair now sets it too);
  R3 the rollout TP of a pool without rollout GPUs has no effect (no engine reads it);
  R4 async with staleness bound 0 flows and scores exactly as disaggregated;
  R5 FSDP and ZeRO-3 are the same in the model (same memory divisor and collective volume);
  R6 without egress charges, ZeRO-2 weakly dominates none and ZeRO-1: same collectives,
     optimizer step and gradient shards no larger, so time and memory no higher (staleness
     follows the training time). With egress, a faster step bills more egress per hour.
`n_space` is the full count; `n_evaluated` what was scored after the rules.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

import numpy as np

from problems.pareto import non_dominated
from problems.placement.names import SHARDINGS
from problems.placement.problem import PlacementProblem, objectives

# vLLM gpu_memory_utilization grid: the 0.9 default of vLLM, verl's 0.5 default and one level
# between; kv_mem_frac is the only real-valued variable, so the only coarsened dimension
KV_GRID = (0.5, 0.7, 0.9)
MAX_COUPLED = 3_000_000  # raw pool x TP x PP x mode combinations enumerated through repair
_Z1, _Z2, _Z3, _FSDP = (SHARDINGS.index(s) for s in ("zero1", "zero2", "zero3", "fsdp"))


@dataclass
class EnumerationResult:
    """Feasible plans (all of them when `kept_all`, else the front only) and the exact front."""

    X: np.ndarray  # (n, n_var) repaired, canonical plan vectors
    F: np.ndarray  # (n, 4) minimised objectives, problem.OBJECTIVES order
    front_idx: np.ndarray  # rows of X/F on the Pareto front of the feasible plans
    n_space: int  # distinct repaired vectors with kv on the grid
    n_evaluated: int
    n_feasible: int
    seconds: float
    kv_grid: tuple[float, ...]
    kept_all: bool
    info: dict = field(default_factory=dict)

    @property
    def front_X(self) -> np.ndarray:
        return self.X[self.front_idx]

    @property
    def front_F(self) -> np.ndarray:
        return self.F[self.front_idx]


# ---------------------------------------------------------------- non-dominated filter
def nondominated(F: np.ndarray) -> np.ndarray:
    """Indices of the rows of F (minimised) no other row dominates; equal rows all stay."""
    return np.flatnonzero(non_dominated(F, keep_duplicates=True))


# ---------------------------------------------------------------- the space
def _coupled_block(problem: PlacementProblem) -> tuple[np.ndarray, np.ndarray]:
    """Distinct repaired (pool roles, rollout TP, train TP, PP, mode) blocks: (full, after R3)."""
    lay = problem.layout
    P = lay.n_pools
    axes = ([range(int(c) + 1) for c in lay.counts] * 2 + [range(int(n)) for n in lay.rtp_n]
            + [range(len(lay.tp_options)), range(len(lay.pp_options)), range(3)])
    raw = int(np.prod([len(a) for a in axes], dtype=float))
    if raw > MAX_COUPLED:
        raise ValueError(f"cluster too large to enumerate: {raw:,} pool/TP/PP/mode combinations "
                         f"(limit {MAX_COUPLED:,})")
    cols = _block_cols(lay)
    base = lay.repair(np.atleast_2d((problem.xl + problem.xu) / 2))[0]
    out = []
    for part in _batched(itertools.product(*axes), 200_000):
        X = np.repeat(base[None, :], len(part), axis=0)
        X[:, cols] = part
        out.append(np.unique(lay.repair(X)[:, cols], axis=0))
    full = np.unique(np.vstack(out), axis=0)
    # R3: engine TP only matters where the pool has rollout GPUs (colocated: shared GPUs)
    reduced = full.copy()
    reduced[:, 2 * P:3 * P] = np.where(full[:, :P] > 0, full[:, 2 * P:3 * P], 0)
    return full, np.unique(reduced, axis=0)


def _block_cols(lay) -> list[int]:
    return list(range(3 * lay.n_pools)) + [lay.g("train_tp_idx"), lay.g("train_pp_idx"), lay.g("mode")]


def _batched(it, n):
    while True:
        part = list(itertools.islice(it, n))
        if not part:
            return
        yield np.array(part, dtype=float)


def _free_axes(problem: PlacementProblem, mode: int, kv_grid, reduced: bool) -> list[tuple[str, list]]:
    """Values of the variables outside the coupled block that repair keeps, for one mode.

    Read off the repair itself (each axis swept alone on a plan of that mode), so the count
    follows the encoding; the rules then drop values in the reduced space."""
    axes = []
    for name in FREE_NAMES:
        vals = list(kv_grid) if name == "kv_mem_frac" else _repaired_values(problem, mode, name)
        if reduced:
            if name == "sharding":  # R5, and R6 when no traffic is billed
                keep = {_Z2, _Z3} if _no_egress(problem) else {0, _Z1, _Z2, _Z3}
                vals = [v for v in vals if v in keep]
            elif name == "staleness_bound" and mode == 2:  # R4
                vals = [v for v in vals if v >= 1]
            elif name == "log2_pipeline_chunks" and mode == 0:  # R2
                vals = vals[:1]
            elif name == "sync_route" and len(problem.cluster.regions) == 1:  # R1
                vals = vals[:1]
        axes.append((name, vals))
    return axes


FREE_NAMES = ("kv_mem_frac", "log2_max_num_seqs", "sharding", "log2_micro_batch", "recompute",
              "optimizer_offload", "staleness_bound", "log2_pipeline_chunks", "sync_route")


def _repaired_values(problem: PlacementProblem, mode: int, name: str) -> list[float]:
    lay = problem.layout
    col = lay.g(name)
    x = (problem.xl + problem.xu) / 2
    x[lay.g("mode")] = mode
    vals = np.arange(problem.xl[col], problem.xu[col] + 1)
    X = np.repeat(x[None, :], len(vals), axis=0)
    X[:, col] = vals
    R = lay.repair(X)
    if not (R[:, lay.g("mode")] == mode).all():
        raise ValueError(f"repair changes mode {mode} of a mid-range plan; cannot count {name}")
    return sorted(set(R[:, col].tolist()))


def _free_grid(problem, mode, kv_grid, reduced) -> tuple[list[int], np.ndarray]:
    axes = _free_axes(problem, mode, kv_grid, reduced)
    cols = [problem.layout.g(name) for name, _ in axes]
    mesh = np.meshgrid(*[np.array(v, dtype=float) for _, v in axes], indexing="ij")
    return cols, np.column_stack([m.reshape(-1) for m in mesh])


def space_size(problem: PlacementProblem, kv_grid=KV_GRID) -> int:
    """Distinct repaired plan vectors with kv_mem_frac on `kv_grid` (no rule applied)."""
    full, _ = _coupled_block(problem)
    return _count(problem, full, kv_grid, reduced=False)


def _count(problem, block, kv_grid, reduced) -> int:
    total = 0
    for mode in range(3):
        n_rows = int((block[:, -1] == mode).sum())
        total += n_rows * int(np.prod([len(v) for _, v in _free_axes(problem, mode, kv_grid, reduced)]))
    return total


def canonical(problem: PlacementProblem, X: np.ndarray) -> np.ndarray:
    """Apply rules R1-R6 to repaired vectors: the result scores the same or weakly dominates."""
    lay = problem.layout
    P = lay.n_pools
    X = np.array(np.atleast_2d(X), dtype=float, copy=True)
    mode = X[:, lay.g("mode")]
    if len(problem.cluster.regions) == 1:
        X[:, lay.g("sync_route")] = 0
    X[mode == 0, lay.g("log2_pipeline_chunks")] = 0
    X[:, 2 * P:3 * P] = np.where(X[:, :P] > 0, X[:, 2 * P:3 * P], 0)
    r4 = (mode == 2) & (X[:, lay.g("staleness_bound")] == 0)
    X[r4, lay.g("mode")] = 1
    sh = X[:, lay.g("sharding")]
    sh = np.where(sh == _FSDP, _Z3, sh)
    X[:, lay.g("sharding")] = np.where(sh < _Z2, _Z2, sh) if _no_egress(problem) else sh
    return X


def _no_egress(problem: PlacementProblem) -> bool:
    return not (problem.ctx.region_egress > 0).any()


# ---------------------------------------------------------------- enumeration
def enumerate_front(problem: PlacementProblem, max_plans: int = 40_000_000, kv_grid=KV_GRID,
                    chunk: int = 262_144, keep_all: int = 2_000_000) -> EnumerationResult:
    """Score every canonical plan (in chunks, vectorised) and return the exact feasible front.

    Raises ValueError when more than `max_plans` plans would be evaluated. The feasible plans
    are all returned when at most `keep_all` of them exist; otherwise only the front is.
    """
    t0 = time.perf_counter()
    full, block = _coupled_block(problem)
    n_space = _count(problem, full, kv_grid, reduced=False)
    n_eval = _count(problem, block, kv_grid, reduced=True)
    if n_eval > max_plans:
        raise ValueError(f"{n_eval:,} plans to evaluate (space {n_space:,}) exceeds max_plans={max_plans:,}")
    lay = problem.layout
    bcols = _block_cols(lay)
    base = lay.repair(np.atleast_2d((problem.xl + problem.xu) / 2))[0]
    Xs, Fs = [], []
    front_X, front_F = np.empty((0, lay.n_var)), np.empty((0, 4))
    n_feas, kept_all, done = 0, True, 0
    for mode in range(3):
        rows = block[block[:, -1] == mode]
        if len(rows) == 0:
            continue
        fcols, free = _free_grid(problem, mode, kv_grid, reduced=True)
        per = max(1, chunk // len(free))
        for s in range(0, len(rows), per):
            b = rows[s:s + per]
            X = np.repeat(base[None, :], len(b) * len(free), axis=0)
            X[:, bcols] = np.repeat(b, len(free), axis=0)
            X[:, fcols] = np.tile(free, (len(b), 1))
            r = problem.evaluate_matrix(X)
            done += len(X)
            ok = (problem._constraints(r) <= 0).all(axis=1)
            X, F = X[ok], objectives(r)[ok]
            n_feas += len(X)
            if kept_all and n_feas <= keep_all:
                Xs.append(X)
                Fs.append(F)
            elif kept_all:
                kept_all, Xs, Fs = False, [], []
            # running front: the front of (front so far + this chunk's front)
            nd = nondominated(F)
            cand_X, cand_F = np.vstack([front_X, X[nd]]), np.vstack([front_F, F[nd]])
            nd = nondominated(cand_F)
            front_X, front_F = cand_X[nd], cand_F[nd]
    assert done == n_eval, (done, n_eval)
    if kept_all and Xs:
        X, F = np.vstack(Xs), np.vstack(Fs)
        front_idx = nondominated(F)
    else:
        X, F, front_idx = front_X, front_F, np.arange(len(front_F))
    return EnumerationResult(X=X, F=F, front_idx=front_idx, n_space=n_space, n_evaluated=n_eval,
                             n_feasible=n_feas, seconds=time.perf_counter() - t0, kv_grid=tuple(kv_grid),
                             kept_all=kept_all, info={"coupled_rows": len(full), "coupled_rows_reduced": len(block)})
