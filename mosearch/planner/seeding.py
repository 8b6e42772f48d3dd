"""Corner heuristics that seed the first population, and heuristic baseline plans.

A small structured grid of plans is built and scored by the model in one vectorised call:
footprints (every GPU; each GPU type alone; each pool at power-of-two sizes; role splits
such as the fastest pools training while the others generate) crossed with execution
modes and common layouts (TP, PP, sharding, micro-batch, recomputation, engine TP).
Every footprint x mode is also tried with a memory-lean layout (ZeRO-3 with optimizer
offload and recomputation, micro-batch 1, the smallest TP / PP / engine TP; the KV cache at
vLLM's default share and at half of the memory): the common layouts never offload, so for a
model that needs offload to train on a few GPUs the grid would otherwise hold no feasible
small-footprint plan, and the cheapest and least-memory corners would be far from the front's
ends (the search then has to find them alone). These rows take a tenth of the grid at most
(sampled when there are more); the common layouts are sampled into the rest. The grid is
deduplicated after the repair (layouts that repair to the same plan are scored once). From
the feasible ones the corners are picked:

- fastest: highest throughput, cost ignored;
- cheapest: lowest $/h;
- least-memory: lowest peak memory fraction;
- on-policy: highest throughput with staleness 0;
- verl-style: everything colocated on all GPUs of one type (the best such type).

The best plan per GPU type ("homogeneous") and the verl-style plan double as baselines
when `problems.placement` has no baseline planners of its own. The grid's evaluations
count toward the run's evaluation total.
"""

from __future__ import annotations

import itertools

import numpy as np

from problems.pareto import non_dominated as non_dominated_mask
from problems.placement.names import SHARDINGS
from problems.placement.plan import Plan

GRID_MAX = 3000  # candidates scored (sampled from the grid when it is larger)
KV_FRAC = 0.9  # vLLM's default gpu_memory_utilization
LOG2_SEQS = 8  # 256 concurrent sequences per engine, vLLM's default max_num_seqs
LOG2_CHUNKS = 2
LEAN_KV_FRACS = (KV_FRAC, 0.5)  # the memory-lean rows' KV cache shares
LEAN_SHARE = 10  # the memory-lean rows take at most 1/LEAN_SHARE of the grid


def _pow2_sizes(n: int) -> list[int]:
    out, v = [], 1
    while v < n:
        out.append(v)
        v *= 2
    return out + [int(n)]


def _footprints(problem):
    """(rollout-or-shared vector, train vector, modes allowed, tag) per footprint."""
    L = problem.layout
    counts = L.counts.astype(int)
    P = L.n_pools
    gpus = [p.gpu.name for p in problem.cluster.pools]
    tflops = np.array([p.gpu.tflops for p in problem.cluster.pools])
    feet = []
    z = np.zeros(P, dtype=int)
    # colocated: shared GPUs
    feet.append((counts.copy(), counts.copy(), "colo", "all"))
    for t in sorted(set(gpus)):
        m = np.array([g == t for g in gpus])
        feet.append((np.where(m, counts, 0), np.where(m, counts, 0), "colo", f"verl:{t}"))
    for i in range(P):
        for n in _pow2_sizes(counts[i]):
            v = z.copy()
            v[i] = n
            feet.append((v, v.copy(), "colo", f"type:{gpus[i]}"))
    # disaggregated / async: disjoint roles
    for share in (2, 4):  # 1/2 or 3/4 of every pool generates
        r = counts - counts // share
        feet.append((r, counts - r, "split", "all"))
    for t in sorted(set(gpus)):
        m = np.array([g == t for g in gpus])
        r = counts - counts // 2
        feet.append((np.where(m, r, 0), np.where(m, counts - r, 0), "split", f"type:{t}"))
    order = np.argsort(-tflops, kind="stable")
    for k in range(1, P):
        train = np.isin(np.arange(P), order[:k])
        feet.append((np.where(train, 0, counts), np.where(train, counts, 0), "split", "all"))
        feet.append((np.where(train, counts, 0), np.where(train, 0, counts), "split", "all"))
    return feet


def candidates(problem, rng: np.random.Generator, max_n: int = GRID_MAX) -> tuple[np.ndarray, list[str]]:
    L = problem.layout
    P = L.n_pools
    feet = _footprints(problem)
    modes = {"colo": [(0, 0)], "split": [(1, 0), (2, L.max_staleness), (2, min(1, L.max_staleness))]}
    combos = list(itertools.product(
        range(len(L.tp_options)), range(min(3, len(L.pp_options))), (1, 3), (0, 2), (0, 1), range(int(L.rtp_n.max())),
    ))
    # a layout: (train TP index, PP index, sharding, log2 micro-batch, recompute, engine TP index,
    # optimizer offload, KV share)
    layouts = [(*c, 0, KV_FRAC) for c in combos]
    lean = [(0, 0, SHARDINGS.index("zero3"), 0, 1, 0, 1, kv) for kv in LEAN_KV_FRACS]
    common = [(f, m, layouts[c]) for f in range(len(feet)) for m in modes[feet[f][2]] for c in range(len(layouts))]
    lean_rows = [(f, m, lay) for f in range(len(feet)) for m in modes[feet[f][2]] for lay in lean]
    lean_rows = _sample(lean_rows, max_n // LEAN_SHARE, rng)
    rows = _sample(common, max_n - len(lean_rows), rng) + lean_rows
    X = np.zeros((len(rows), L.n_var))
    tags = []
    route = 1 if len(problem.cluster.regions) > 1 else 0
    for j, (f, (mode, k), lay) in enumerate(rows):
        roll, train, _, tag = feet[f]
        tp_i, pp_i, shard, mb, rec, rtp_k, offload, kv = lay
        X[j, :P] = roll
        X[j, P:2 * P] = train
        X[j, 2 * P:3 * P] = np.minimum(rtp_k, L.rtp_n - 1)
        for name, v in (("kv_mem_frac", kv), ("log2_max_num_seqs", LOG2_SEQS), ("train_tp_idx", tp_i),
                        ("train_pp_idx", pp_i), ("sharding", shard), ("log2_micro_batch", mb), ("recompute", rec),
                        ("optimizer_offload", offload), ("mode", mode), ("staleness_bound", k),
                        ("log2_pipeline_chunks", LOG2_CHUNKS), ("sync_route", route)):
            X[j, L.g(name)] = v
        tags.append(tag)
    X = L.repair(X)
    # layouts that repair to the same plan are scored once (the first row's tag is kept)
    _, first = np.unique(np.round(X, 9), axis=0, return_index=True)
    first = np.sort(first)
    return X[first], [tags[i] for i in first]


def _sample(rows: list, n: int, rng: np.random.Generator) -> list:
    if len(rows) <= n:
        return rows
    keep = rng.choice(len(rows), size=max(n, 0), replace=False)
    return [rows[i] for i in np.sort(keep)]


class Corners:
    """The scored grid and the corner plans picked from it."""

    def __init__(self, problem, seed: int = 0, max_n: int = GRID_MAX):
        self.problem = problem
        rng = np.random.default_rng(seed)
        self.X, self.tags = candidates(problem, rng, max_n)
        r = problem.evaluate_matrix(self.X)
        self.evaluations = len(self.X)
        self.thr = r["throughput_samples_s"]
        self.cost = r["cost_usd_h"]
        self.mem = r["peak_mem_frac"]
        self.stale = r["staleness"]
        self.ok = r["feasible"] > 0
        self.picks = self._pick()

    def _best(self, mask: np.ndarray, key: np.ndarray, tie: np.ndarray) -> int | None:
        idx = np.flatnonzero(mask & self.ok)
        if len(idx) == 0:
            return None
        return int(idx[np.lexsort((tie[idx], key[idx]))[0]])

    def _pick(self) -> dict[str, int]:
        every = np.ones(len(self.X), dtype=bool)
        verl = np.array([t.startswith("verl:") for t in self.tags])
        picks = {
            "fastest": self._best(every, -self.thr, self.cost),
            "cheapest": self._best(every, self.cost, -self.thr),
            "least-memory": self._best(every, self.mem, -self.thr),
            "on-policy": self._best(self.stale <= 0, -self.thr, self.cost),
            "verl-style": self._best(verl, -self.thr, self.cost),
        }
        return {k: v for k, v in picks.items() if v is not None}

    def seeds(self, n_extra: int, seed: int = 0) -> np.ndarray:
        """The corners, then up to n_extra other non-dominated grid plans (spread at random)."""
        corner = np.array(sorted(set(self.picks.values())), dtype=int)
        ok = np.flatnonzero(self.ok)
        F = np.column_stack([-self.thr, self.cost, self.mem, self.stale])[ok]
        nd = ok[non_dominated_mask(F)]
        nd = np.setdiff1d(nd, corner)
        if len(nd) > n_extra:
            nd = np.random.default_rng(seed).choice(nd, size=n_extra, replace=False)
        return self.X[np.concatenate([corner, np.sort(nd)]).astype(int)]

    def best_throughput(self) -> float:
        i = self.picks.get("fastest")
        return float(self.thr[i]) if i is not None else float(np.max(self.thr, initial=1.0))

    def max_feasible_cost(self) -> float:
        return float(self.cost[self.ok].max()) if self.ok.any() else 0.0

    def heuristic_baselines(self) -> dict[str, np.ndarray]:
        """verl-style colocated and the best homogeneous plan per GPU type."""
        out = {}
        if "verl-style" in self.picks:
            out["verl-style colocated"] = self.X[self.picks["verl-style"]]
        types = sorted({t.split(":", 1)[1] for t in self.tags if ":" in t})
        for t in types:
            m = np.array([tag in (f"type:{t}", f"verl:{t}") for tag in self.tags])
            i = self._best(m, -self.thr, self.cost)
            if i is not None:
                out[f"best {t}-only"] = self.X[i]
        return out


def baseline_plans(problem, corners: Corners, evals: int = 4000, seed: int = 0) -> dict[str, Plan]:
    """The baseline planners' best feasible plans (problems.placement.baselines), scored by the
    same model: verl-style colocated and the best homogeneous deployment per GPU type, the
    HetRL-style search and the MILP under the run's budget. The grid's heuristic plans fill in
    for a planner that finds nothing feasible."""
    from problems.placement.baselines import BASELINE_PLANNERS

    out: dict[str, Plan] = {}
    budget = problem.limits["max_cost_usd_h"]
    for planner, fn in BASELINE_PLANNERS.items():
        try:
            res = fn(problem, budget_usd_h=budget, evals=evals, seed=seed)
        except ValueError:  # the planner has no plan in this space (e.g. an executor's rules rule its plans out)
            continue
        corners.evaluations += int(res.evals)
        rows = np.flatnonzero(res.feasible)
        per_type = planner in ("verl-colocated", "best-homogeneous")
        for i in (rows if per_type else rows[:1]):
            name = f"{planner} {res.labels[i]}" if per_type else planner
            slug = name.replace(" ", "-").replace("@", "-")
            out[name] = problem.decode(res.X[i], plan_id=f"baseline-{slug}", lifetime=False)
    if not out:
        for name, x in corners.heuristic_baselines().items():
            slug = name.replace(" ", "-").replace("@", "-")
            out[name] = problem.decode(x, plan_id=f"baseline-{slug}", lifetime=False)
    return out