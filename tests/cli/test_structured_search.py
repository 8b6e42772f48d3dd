"""The structured extension of the search (pool-level seeds), canonical plans, and honest answers
when no plan meets the limits."""

from pathlib import Path

import numpy as np
import pytest

from mosearch.cli import main
from mosearch.planner import canonical
from mosearch.planner.structured import StructuredSeeds, front_2d, share_grid
from problems.placement.problem import PlacementProblem, objectives

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = ROOT / "problems" / "clusters"
WORKLOADS = ROOT / "problems" / "workloads"
MIXED8 = str(CLUSTERS / "mixed-8.yaml")
QWEN7 = str(WORKLOADS / "qwen2.5-7b-grpo.yaml")
BENCH = ROOT / "benchmarks"


@pytest.fixture(scope="module")
def issue_problem():
    return PlacementProblem.from_files(BENCH / "clusters" / "issue-h100-a10g-4090.yaml",
                                       BENCH / "workloads" / "qwen2.5-14b-grpo-4k.yaml")


def test_front_2d_against_the_quadratic_filter():
    rng = np.random.default_rng(0)
    f = rng.integers(0, 20, size=(300, 2)).astype(float)
    fast = set(front_2d(f[:, 0], f[:, 1]).tolist())
    dominated = ((f[None, :, :] <= f[:, None, :]).all(axis=2) & (f[None, :, :] < f[:, None, :]).any(axis=2)).any(axis=1)
    slow = {i for i in range(len(f)) if not dominated[i]}
    # one row per distinct non-dominated point
    assert {tuple(f[i]) for i in fast} == {tuple(f[i]) for i in slow} and len(fast) == len({tuple(f[i]) for i in slow})


def test_share_grid_samples_within_its_cap_and_keeps_single_pools():
    counts = np.array([8] * 12)
    G = share_grid(counts, 100, np.random.default_rng(1))
    assert len(G) <= 100 and (G.sum(axis=1) > 0).all()
    assert any((G > 0).sum(axis=1) == 1) and any((G == counts).all(axis=1))
    many = np.array([16] * 40)  # more single-pool footprints than the cap: the whole cluster first
    G = share_grid(many, 30, np.random.default_rng(2))
    whole = (G == many).all(axis=1)
    assert len(G) == 30 and whole.sum() == 1 and ((G > 0).sum(axis=1) == 1)[~whole].all()


def test_structured_seeds_reach_the_structured_reference(tmp_path):
    """The seeds alone (before MaOEA-CS) against the reference's branch and bound, on a smaller
    cousin of the issue's cluster (the reference's time grows with the pools' sizes)."""
    from mosearch.bench import structured_reference as sr

    cl = tmp_path / "c.yaml"
    cl.write_text("name: c\nregions:\n  r: {inter_node_gbs: 25}\nnode_groups:\n"
                  "  - {gpu: H100, nodes: 1, gpus_per_node: 4, region: r}\n"
                  "  - {gpu: A10G, nodes: 1, gpus_per_node: 8, region: r}\n"
                  "  - {gpu: RTX-4090, nodes: 1, gpus_per_node: 2, region: r}\n")
    problem = PlacementProblem.from_files(cl, BENCH / "workloads" / "qwen2.5-14b-grpo-4k.yaml")
    s = StructuredSeeds(problem, seed=1)
    ref = sr.StructuredReference(problem)
    full = float(problem.layout.counts @ ref.price)
    for budget in (None, 0.5 * full):
        assert s.best_within(budget) >= 0.98 * ref.fastest(budget).throughput
    # the fastest seed splits pools between roles: not a colocated plan on one GPU type
    i = np.flatnonzero(s.ok)[np.argmin(s.F[s.ok, 0])]
    plan = problem.decode(s.X[i], lifetime=False)
    assert plan.execution.mode != "colocated"
    assert len({p.gpu for p in plan.pools if p.used_gpus}) >= 2
    seeds = s.seeds()
    r = problem.evaluate_matrix(seeds)
    assert (r["feasible"] > 0).all() and len(seeds) >= 5


def test_canonical_plans_keep_objectives_and_drop_idle_knobs():
    p = PlacementProblem.from_files(MIXED8, QWEN7)
    L = p.layout
    rng = np.random.default_rng(5)
    X = L.repair(p.xl + rng.random((3000, p.n_var)) * (p.xu - p.xl))
    X[:500, L.g("mode")] = 2  # plenty of async k = 0
    X[:500, L.g("staleness_bound")] = 0
    X = L.repair(X)
    r0 = p.evaluate_matrix(X)
    C = canonical.canonicalize(p, X)
    r1 = p.evaluate_matrix(C)
    assert (objectives(r1) == objectives(r0)).all()
    assert ((r1["feasible"] > 0) | (r0["feasible"] == 0)).all()
    # async k = 0 is written as disaggregated
    assert not ((C[:, L.g("mode")] == 2) & (C[:, L.g("staleness_bound")] == 0)).any()
    assert ((X[:, L.g("mode")] == 2) & (X[:, L.g("staleness_bound")] == 0)).any()
    # idempotent
    assert (canonical.canonicalize(p, C) == C).all()
    # a knob left on matters: switching it off changes an objective or loses feasibility
    for name in ("optimizer_offload", "recompute"):
        on = np.flatnonzero(C[:, L.g(name)] == 1)
        assert len(on) and (X[:, L.g(name)] == 1).sum() > len(on)  # some were idle and were switched off
        V = C[on].copy()
        V[:, L.g(name)] = 0
        rv = p.evaluate_matrix(V)
        changed = (objectives(rv) != objectives(r1)[on]).any(axis=1) | ((rv["feasible"] == 0) & (r1["feasible"][on] > 0))
        assert changed.all()
    # fewest chunks: one fewer doubling changes something wherever chunks stay above 1
    up = np.flatnonzero(C[:, L.g("log2_pipeline_chunks")] > 0)
    V = C[up].copy()
    V[:, L.g("log2_pipeline_chunks")] -= 1
    rv = p.evaluate_matrix(V)
    assert ((objectives(rv) != objectives(r1)[up]).any(axis=1) | ((rv["feasible"] == 0) & (r1["feasible"][up] > 0))).all()


def test_equal_objectives_keep_the_simplest_plan():
    p = PlacementProblem.from_files(MIXED8, QWEN7)
    L = p.layout
    rng = np.random.default_rng(6)
    X = L.repair(p.xl + rng.random((200, p.n_var)) * (p.xu - p.xl))
    twin = X.copy()
    twin[:, L.g("optimizer_offload")] = 1  # same or different objectives, always less simple
    both = np.vstack([twin, X])
    F = objectives(p.evaluate_matrix(both))
    keep = canonical.simplest_per_objectives(p, both, F)
    assert len(np.unique(F, axis=0)) == len(keep)
    for i in range(len(X)):
        if (F[i] == F[len(X) + i]).all() and twin[i, L.g("optimizer_offload")] != X[i, L.g("optimizer_offload")]:
            assert i not in keep and len(X) + i in keep


def test_front_written_has_no_async_k0_and_no_equal_objective_twins(tmp_path):
    from mosearch.planner.run import plan_run
    from mosearch.planner.search import SearchSettings
    from mosearch.results import load_run

    plan_run(MIXED8, QWEN7, tmp_path / "r", SearchSettings(evals=1500, pop_size=20, progress=False), report=False)
    run = load_run(tmp_path / "r")
    assert all(not (pl.execution.mode == "async" and pl.execution.staleness_bound == 0) for pl in run.plans)
    assert len(np.unique(run.F, axis=0)) == len(run.F)


def test_unreached_limit_says_no_plan_found_not_infeasible(tmp_path, capsys):
    code = main(["plan", "--cluster", MIXED8, "--workload", QWEN7, "--out", str(tmp_path / "x"), "--evals", "400",
                 "--pop-size", "20", "--min-throughput", "1e6", "--quiet", "--no-report"])
    err = capsys.readouterr().err
    assert code == 1
    assert "no plan found" in err and "the fastest plan found trains" in err and "< 1e+06" in err
    assert "not proven infeasible" in err and "proven infeasible:" not in err
    assert len(err.strip().splitlines()) == 1


def test_proof_by_price_says_proven(tmp_path, capsys):
    code = main(["plan", "--cluster", MIXED8, "--workload", QWEN7, "--out", str(tmp_path / "x"), "--evals", "400",
                 "--pop-size", "20", "--max-cost", "0.5", "--quiet", "--no-report"])
    err = capsys.readouterr().err
    assert code == 2 and "proven infeasible" in err and "not proven" not in err and "L40S" in err


def test_issue_limit_the_old_search_missed_is_met(tmp_path, issue_problem):
    """The issue's report: `--min-throughput 4.5` answered that no plan trains that fast; the model
    rates structured plans far faster, and the search must now return them."""
    code = main(["plan", "--cluster", str(BENCH / "clusters" / "issue-h100-a10g-4090.yaml"),
                 "--workload", str(BENCH / "workloads" / "qwen2.5-14b-grpo-4k.yaml"), "--out", str(tmp_path / "i"),
                 "--evals", "3000", "--min-throughput", "4.5", "--quiet", "--no-report"])
    assert code == 0


def test_refinement_moves_a_pool_into_generation_with_its_own_engine_tp_and_settings():
    # four-types x Qwen2.5-3B, 8k responses, at half the cluster's $/h: the structured reference's
    # fastest plan trains on 7 A100-40G and generates on 2 H100 and 2 RTX-4090 (TP 2, KV share 0.5):
    # 13.58 samples/s at 15.6 $/h. Adding the 4090s one knob at a time (count, then TP, then KV
    # share) passes through slower plans, and the micro-batch comes after that: without the joint
    # move the stage's best was 12.53, without refining near-front footprints 13.20.
    # The scenario is the catalog's (the figures above): scored without the parameters fitted on published RL
    # runs (model/fitted.py), which move H100 out of generation here (reference 13.09 samples/s on A100, A10G
    # and RTX-4090 engines, which this stage reaches to 0.987).
    from problems.placement.model import fitted

    with fitted.disabled():
        p = PlacementProblem.from_files(BENCH / "clusters" / "four-types.yaml",
                                        BENCH / "workloads" / "qwen2.5-3b-grpo-8k.yaml")
    s = StructuredSeeds(p, seed=1)
    assert s.best_within(16.02) >= 0.995 * 13.58
