"""Best homogeneous deployment: any plan (any mode) that uses GPUs of one type only.

Per GPU type: random plans restricted to that type's pools (plus the verl-style colocated
plans as starting points), then greedy hill climbing on throughput over single-variable moves,
all scored by the model. Rows: the best plan of each type, best first; `info["overall"]` is
the label of row 0.
"""

from __future__ import annotations

import numpy as np

from problems.placement.baselines import verl_colocated
from problems.placement.baselines._common import Scorer, budgeted, climb, pools_of_type, random_plans, rank
from problems.placement.enumerate import KV_GRID
from problems.placement.problem import PlacementProblem

DEFAULT_EVALS = 12_000  # per GPU type: sampling half, climbing half


def plan(problem: PlacementProblem, budget_usd_h: float | None = None, evals: int | None = None, seed: int = 0,
         kv_grid=KV_GRID):
    prob = budgeted(problem, budget_usd_h)
    score = Scorer(prob)
    rng = np.random.default_rng(seed)
    per_type = evals or DEFAULT_EVALS
    P = prob.layout.n_pools
    rows, labels = [], []
    for gpu, idx in pools_of_type(prob).items():
        allowed = np.zeros(P, bool)
        allowed[idx] = True
        seeds = np.vstack([verl_colocated.candidates(prob, [i], kv_grid) for i in idx]
                          + [verl_colocated.candidates(prob, idx, kv_grid)])
        X0 = np.vstack([random_plans(prob, max(1, per_type // 2 - len(seeds)), rng, allowed, kv_grid), seeds])
        R, F, ok, viol = climb(score, X0, per_type - len(X0), allowed, kv_grid)
        if len(R) == 0:
            continue
        b = rank(F, ok, viol)[0]
        rows.append((R[b], F[b], ok[b], viol[b]))
        labels.append(gpu)
    X, F, ok, viol = (np.array([r[i] for r in rows]) for i in range(4))
    o = rank(F, ok, viol)
    return score.result("best-homogeneous", X[o], F[o], ok[o], [labels[i] for i in o], budget_usd_h,
                        overall=labels[o[0]])
