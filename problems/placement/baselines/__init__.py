"""Baseline planners, each scored by the same performance model as the search.

    from problems.placement.baselines import BASELINE_PLANNERS, BaselineResult
    res = BASELINE_PLANNERS["milp"](problem, budget_usd_h=60.0, evals=None, seed=0)

Every planner is `(problem, budget_usd_h=None, evals=None, seed=0, kv_grid=KV_GRID) ->
BaselineResult` with rows best first: `X` repaired plan vectors (decode with
`problem.decode(x)`), `F` objectives in `problem.OBJECTIVES` order (minimised: -throughput,
$/h, peak memory fraction, staleness), `feasible` (all of the problem's constraints, plus the
budget as max_cost when one is given), `labels`, `evals` (model evaluations spent) and
`seconds`. kv_mem_frac is drawn from the enumeration's KV grid so that, on small clusters, the
exact front of `problems.placement.enumerate` covers every baseline plan.
`evals` is the search effort: verl-colocated caps its candidates per GPU type (default: all,
about 650 per pool set), best-homogeneous spends it per GPU type (default 12,000),
hetrl-sh in total (default 20,000); milp ignores it (its probes and MILPs are fixed,
about 1,600 evaluations on mixed-8). `budget_usd_h=None` means no budget.

  verl-colocated    everything colocated on the GPUs of one type, verl defaults, knobs tuned;
                    one row per GPU type
  best-homogeneous  any plan on one GPU type (sampling + hill climbing); one row per type
  hetrl-sh          HetRL-style multi-level search with successive halving, max throughput
                    under the budget
  milp              AReaL-Hex-style MILP (HiGHS) on a linearised model under the budget, mapped
                    to plans and scored by the full model
"""

from problems.placement.baselines._common import BaselineResult
from problems.placement.baselines import hetrl, homogeneous, milp, verl_colocated

BASELINE_PLANNERS = {
    "verl-colocated": verl_colocated.plan,
    "best-homogeneous": homogeneous.plan,
    "hetrl-sh": hetrl.plan,
    "milp": milp.plan,
}

__all__ = ["BASELINE_PLANNERS", "BaselineResult"]
