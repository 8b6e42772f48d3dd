"""HetRL-style search: maximise throughput under a budget by multi-level successive halving.

After HetRL (arXiv 2512.12476; no public code, this is our own reading): the joint problem is
split into levels searched one inside the other, and the search budget goes to promising
upper-level choices by successive halving.
  level 1  GPU assignment: GPUs of each pool given to rollout / training (or shared) and the
           execution mode, drawn within the budget (counts scaled down to fit the $/h);
  level 2  parallelism: rollout TP per pool, training TP and PP, sharding;
  level 3  micro-batching: micro-batch, pipeline chunks, max_num_seqs, KV fraction,
           recomputation, optimizer offload, staleness bound.
Each level-1 arm gets an equal share of a round's evaluations: half draw new level-2 and
level-3 choices, half keep the arm's best level 2 and redraw level 3 only. Arms are ranked by
their best feasible throughput (budget included as a constraint); the better half survives.
"""

from __future__ import annotations

import numpy as np

from problems.placement.baselines._common import Scorer, budgeted, random_plans, rank
from problems.placement.enumerate import KV_GRID
from problems.placement.problem import PlacementProblem

DEFAULT_EVALS = 20_000
ARMS = 64
LEVEL2 = ("train_tp_idx", "train_pp_idx", "sharding")  # plus the rollout TP columns


def _assignments(prob: PlacementProblem, n: int, budget: float | None, rng) -> np.ndarray:
    """Level 1: (n, 2P + 1) rollout GPUs, training GPUs per pool and the mode, within budget."""
    lay = prob.layout
    P = lay.n_pools
    X = random_plans(prob, n, rng)
    A = np.column_stack([X[:, :2 * P], X[:, lay.g("mode")]])
    if budget is not None:
        price = np.array([p.gpu.price_usd_h for p in prob.cluster.pools])
        colo = A[:, -1] == 0
        used = np.where(colo[:, None], A[:, :P], A[:, :P] + A[:, P:2 * P])
        cost = used @ price
        f = np.where(cost > budget, budget / np.maximum(cost, 1e-9), 1.0)
        A[:, :2 * P] = np.floor(A[:, :2 * P] * f[:, None])
    return A


def plan(problem: PlacementProblem, budget_usd_h: float | None = None, evals: int | None = None, seed: int = 0,
         kv_grid=KV_GRID):
    prob = budgeted(problem, budget_usd_h)
    score = Scorer(prob)
    rng = np.random.default_rng(seed)
    lay = prob.layout
    P = lay.n_pools
    total = evals or DEFAULT_EVALS
    arms = _assignments(prob, min(ARMS, max(2, total // 16)), budget_usd_h, rng)
    rounds = int(np.ceil(np.log2(len(arms)))) + 1
    l2 = list(range(2 * P, 3 * P)) + [lay.g(n) for n in LEVEL2]
    # level 3 is every other column: random_plans draws it anew for each evaluation
    a_cols = list(range(2 * P)) + [lay.g("mode")]
    best_x = [None] * len(arms)  # each arm's best vector so far
    best_key = np.full(len(arms), -np.inf)
    pool_R, pool_F, pool_ok, pool_v = [], [], [], []
    alive = np.arange(len(arms))
    for rnd in range(rounds):
        per_arm = max(2, (total // rounds) // len(alive))
        X = random_plans(prob, per_arm * len(alive), rng, kv_grid=kv_grid)
        arm_of = np.repeat(alive, per_arm)
        X[:, a_cols] = arms[arm_of]
        refine = (np.arange(len(X)) % per_arm) < per_arm // 2
        for j, a in enumerate(arm_of):
            if refine[j] and best_x[a] is not None:
                X[j, l2] = best_x[a][l2]  # keep the arm's best parallelism, redraw micro-batching
        R, F, ok, viol, _ = score(X)
        key = np.where(ok, -F[:, 0], -1.0 - viol)  # feasible throughput above any infeasible
        for a in alive:
            m = arm_of == a
            j = np.flatnonzero(m)[np.argmax(key[m])]
            if key[j] > best_key[a]:
                best_key[a], best_x[a] = key[j], R[j]
        o = rank(F, ok, viol)[:8]
        pool_R.append(R[o]), pool_F.append(F[o]), pool_ok.append(ok[o]), pool_v.append(viol[o])
        if len(alive) == 1 or score.evals >= total:
            break
        alive = alive[np.argsort(-best_key[alive], kind="stable")][: max(1, len(alive) // 2)]
    R, F, ok, viol = np.vstack(pool_R), np.vstack(pool_F), np.concatenate(pool_ok), np.concatenate(pool_v)
    _, first = np.unique(F, axis=0, return_index=True)  # one plan per distinct score
    R, F, ok, viol = R[first], F[first], ok[first], viol[first]
    o = rank(F, ok, viol)[:8]
    return score.result("hetrl-sh", R[o], F[o], ok[o], ["hetrl"] * len(o), budget_usd_h,
                        arms=len(arms), rounds=rounds)
