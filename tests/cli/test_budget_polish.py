"""Budget polish (mosearch/planner/budgets.py): the plan a budget should get when the search
stopped one edit short of it, and the same answer at every budget for two seeds."""

import tempfile
from pathlib import Path

import numpy as np
import pytest

from mosearch.planner.budgets import budget_polish, count_steps, moves
from mosearch.planner.run import plan_run
from mosearch.planner.search import SearchSettings
from mosearch.planner.structured import StructuredSeeds, front_2d
from problems.placement.problem import PlacementProblem, objectives

ROOT = Path(__file__).resolve().parents[2]
MIXED8 = ROOT / "problems" / "clusters" / "mixed-8.yaml"
QWEN7 = ROOT / "problems" / "workloads" / "qwen2.5-7b-grpo.yaml"


@pytest.fixture(scope="module")
def problem():
    return PlacementProblem.from_files(MIXED8, QWEN7)


def _tc(problem, X):
    r = problem.evaluate_matrix(X)
    F = objectives(r)
    return -F[:, 0], F[:, 1], r["feasible"] > 0


def test_count_steps_are_powers_of_two_both_ways():
    assert count_steps(8).tolist() == [-4, -2, -1, 1, 2, 4]
    assert count_steps(1).tolist() == [-1, 1]


def test_moves_keep_plans_valid_after_repair(problem):
    L = problem.layout
    x = StructuredSeeds(problem, seed=1).population_seeds(1)
    V, parent = moves(L).apply(x)
    assert len(V) == len(moves(L).cols) and (parent == 0).all()
    R = L.repair(V)
    xl, xu = L.bounds()
    assert (R >= xl - 1e-9).all() and (R <= xu + 1e-9).all()
    assert (np.abs(V - x).sum(axis=1) > 0).mean() > 0.8  # most moves change the plan


def test_polish_finds_the_faster_plan_one_edit_away(problem):
    """Start from a plan one edit worse than a known plan (same or lower cost, >= 3% slower): the
    polish must give the budget of the known plan at least the known plan's throughput."""
    s = StructuredSeeds(problem, seed=1)
    ok = np.flatnonzero(s.ok)
    front = ok[front_2d(s.F[ok, 0], s.F[ok, 1])]
    L = problem.layout
    mv = moves(L)
    case = None
    for i in front[np.argsort(s.F[front, 1])]:  # cheapest first: a deterministic choice
        x = s.X[i]
        thr, cost = -s.F[i, 0], s.F[i, 1]
        V = L.repair(mv.apply(x[None, :])[0])
        t, c, feas = _tc(problem, V)
        worse = np.flatnonzero(feas & (c <= cost * (1 + 1e-9)) & (t < 0.97 * thr) & (t > 0.3 * thr))
        if len(worse):
            case = (x, thr, cost, V[worse[np.argmax(t[worse])]])
            break
    assert case is not None
    x, thr, cost, start = case
    t0, c0, _ = _tc(problem, start[None, :])
    assert t0[0] < 0.97 * thr  # the "search" alone (this one plan) is slower within the budget
    bp = budget_polish(problem, start[None, :])
    assert bp.converged and len(bp.X)
    t, c, feas = _tc(problem, bp.X)
    within = feas & (c <= cost * (1 + 1e-9))
    assert within.any() and t[within].max() >= thr * (1 - 1e-9)


def _best_within(plans, budget):
    thr = [p.predicted["throughput_samples_s"] for p in plans if p.predicted["cost_usd_h"] <= budget * (1 + 1e-9)]
    return max(thr, default=0.0)


def test_budget_picks_agree_across_two_seeds():
    """mixed-8 x qwen2.5-7b with a short search: at budgets spread along both seeds' fronts, the
    fastest plan within each budget is within 2% between seeds 1 and 2."""
    fronts = {}
    for seed in (1, 2):
        with tempfile.TemporaryDirectory() as tmp:
            out = plan_run(str(MIXED8), str(QWEN7), Path(tmp) / "run",
                           SearchSettings(evals=3000, seed=seed, pop_size=40, progress=False), report=False)
        fronts[seed] = out.plans
        assert out.result.X.shape[0] >= len(out.plans)
    costs = sorted({round(p.predicted["cost_usd_h"], 6) for plans in fronts.values() for p in plans})
    budgets = [costs[int(i)] for i in np.linspace(0, len(costs) - 1, 12).round()]
    for b in budgets:
        a, c = _best_within(fronts[1], b), _best_within(fronts[2], b)
        assert min(a, c) >= 0.98 * max(a, c), (b, a, c)


def test_polish_expands_plans_the_front_dominates_by_a_little():
    """l40-a30-rack x qwen2.5-32b PPO: generating on 4 L40s while 8 A100s train (ZeRO-3, async) is
    dominated by a faster $16/h plan, so the front never expands it; with one A100 fewer it is the
    fastest plan within $15.2/h. The near-front pass must find it; without the pass (near=0) the
    budget gets a slower plan, so the case needs the pass: 0.952 samples/s against the target's 0.959 (a 0.7%
    gap, 2% before the memory model counted a fused layer's k and v at the KV width, which lets a cheaper ZeRO-3
    plan fit; far above any rounding)."""
    problem = PlacementProblem.from_files(ROOT / "benchmarks" / "clusters" / "budgets" / "l40-a30-rack.yaml",
                                          ROOT / "benchmarks" / "workloads" / "budgets" / "qwen2.5-32b-ppo.yaml")
    L = problem.layout
    P = L.n_pools
    assert [p.gpu.name for p in problem.cluster.pools] == ["L40", "A30", "A100-80G"]

    def plan(rollout, train, rtp_idx, **g):
        x = np.zeros(L.n_var)
        x[:P], x[P:2 * P], x[2 * P:3 * P] = rollout, train, rtp_idx
        for name, v in g.items():
            x[L.g(name)] = v
        return L.repair(x[None])[0]

    common = dict(log2_micro_batch=0, optimizer_offload=1, mode=2, staleness_bound=1)
    faster = plan([0, 0, 2], [0, 0, 8], [0, 2, 1], kv_mem_frac=0.9, log2_max_num_seqs=7, train_tp_idx=2,
                  train_pp_idx=1, sharding=2, recompute=0, **common)
    dominated = plan([4, 0, 0], [0, 0, 8], [2, 0, 2], kv_mem_frac=0.6841, log2_max_num_seqs=8, train_tp_idx=0,
                     train_pp_idx=0, sharding=3, recompute=1, **common)
    target = dominated.copy()
    target[P + 2] -= 1  # one A100 fewer: dp 7
    (tf, cf), (td, cd), (tt, ct) = (np.column_stack(_tc(problem, x[None])[:2])[0] for x in (faster, dominated, target))
    assert _tc(problem, target[None])[2][0] and ct < cf < cd and td < tf and td > 0.9 * tf

    start = np.vstack([faster, dominated])
    best = {}
    for near in (0.0, 0.1):
        bp = budget_polish(problem, start, near=near)
        assert bp.converged
        t, c, feas = _tc(problem, np.vstack([start, bp.X]))
        within = feas & (c <= ct * (1 + 1e-9))
        best[near] = t[within].max() if within.any() else 0.0
    assert best[0.0] < tt * (1 - 1e-3)
    assert best[0.1] >= tt * (1 - 1e-9)
