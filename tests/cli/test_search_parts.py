"""The planner's archive, hypervolume and Ray evaluation against plain computations."""

import numpy as np
import pytest

from mosearch.planner.archive import Archive
from problems.pareto import non_dominated as non_dominated_mask
from mosearch.planner.hv import HVScale


def brute_nd(F):
    keep = []
    for i, f in enumerate(F):
        dom = ((F <= f).all(axis=1) & (F < f).any(axis=1)).any()
        dup = any((F[j] == f).all() for j in range(i))
        keep.append(not dom and not dup)
    return np.array(keep)


def test_non_dominated_mask_matches_brute_force():
    rng = np.random.default_rng(0)
    F = np.round(rng.random((300, 4)), 1)  # coarse values: many ties and duplicates
    assert (non_dominated_mask(F) == brute_nd(F)).all()


def test_archive_in_batches_equals_front_of_everything():
    rng = np.random.default_rng(1)
    X = rng.random((1000, 3))
    F = np.round(rng.random((1000, 4)), 2)
    feas = rng.random(1000) < 0.7
    a = Archive(3, 4)
    for s in range(0, 1000, 64):
        a.add(X[s:s + 64], F[s:s + 64], feas[s:s + 64])
    ref = F[feas][brute_nd(F[feas])]
    assert len(a) == len(ref)
    assert {tuple(r) for r in a.F} == {tuple(r) for r in ref}
    # X stays paired with its F
    for x, f in zip(a.X, a.F):
        i = np.flatnonzero((X == x).all(axis=1))[0]
        assert (F[i] == f).all()


def test_hv_of_one_point():
    s = HVScale(throughput=10.0, cost=100.0, staleness=4.0)
    # throughput 5 -> 0.5, cost 50 -> 0.5, memory 0.5, staleness 2 -> 0.5: box of 0.6^4
    assert s.hv(np.array([[-5.0, 50.0, 0.5, 2.0]])) == pytest.approx(0.6 ** 4)
    assert s.hv(np.array([[-5.0, 500.0, 0.5, 2.0]])) == 0.0  # beyond the reference point


@pytest.mark.slow
def test_ray_evaluation_equals_in_process():
    """--jobs: the real placement problem evaluated across two Ray tasks gives the same arrays."""
    from pathlib import Path

    from mosearch.planner.parallel import RayEvaluation
    from problems.placement.problem import PlacementProblem

    root = Path(__file__).resolve().parents[2]
    p = PlacementProblem.from_files(root / "problems/clusters/mixed-8.yaml", root / "problems/workloads/qwen2.5-7b-grpo.yaml")
    X = np.random.default_rng(2).uniform(p.xl, p.xu, (37, p.n_var))
    ev = RayEvaluation(p, 2)
    try:
        out = ev(X, ["F", "G"])
    finally:
        ev.close()
    ref = p.evaluate(X, return_values_of=["F", "G"], return_as_dictionary=True)
    assert np.allclose(out["F"], ref["F"]) and np.allclose(out["G"], ref["G"])


def test_neighbours_change_one_variable_within_bounds():
    from mosearch.planner.polish import neighbours

    xl, xu = np.array([0.0, 0.0, 0.3]), np.array([10.0, 2.0, 0.95])
    integer = np.array([True, True, False])
    x = np.array([[5.0, 1.0, 0.5]])
    N = neighbours(x, xl, xu, integer)
    changed = (N != x).sum(axis=1)
    assert (changed <= 1).all() and (N >= xl).all() and (N <= xu).all()
    assert {tuple(r) for r in N} >= {(4.0, 1.0, 0.5), (6.0, 1.0, 0.5), (5.0, 0.0, 0.5), (5.0, 2.0, 0.5)}
    assert np.isclose(N[:, 2], 0.5 + 0.05 * 0.65).any()


def test_pareto_local_search_grows_the_front_and_stops_at_the_budget():
    from pathlib import Path

    from mosearch.planner import seeding
    from mosearch.planner.algorithms import problem_repair
    from mosearch.planner.polish import pareto_local_search
    from mosearch.planner.recording import RecordingProblem
    from problems.placement.problem import PlacementProblem

    root = Path(__file__).resolve().parents[2]
    p = PlacementProblem.from_files(root / "problems/clusters/mixed-8.yaml", root / "problems/workloads/qwen2.5-7b-grpo.yaml")

    class Budget(Exception):
        pass

    def stop_at(rec):
        if rec.n_evals >= 4000:
            raise Budget

    rec = RecordingProblem(p, on_batch=stop_at)
    rec.evaluate(seeding.Corners(p, max_n=300).seeds(10))
    start = len(rec.archive)
    with pytest.raises(Budget):
        pareto_local_search(rec, problem_repair(p))
    assert len(rec.archive) > 2 * start
    assert 4000 <= rec.n_evals < 4000 + 2000  # one batch past the budget at most


def test_corner_grid_reaches_small_footprints_that_need_offload_and_scores_each_plan_once():
    from pathlib import Path

    from mosearch.planner import seeding
    from problems.placement.names import SHARDINGS
    from problems.placement.problem import PlacementProblem

    root = Path(__file__).resolve().parents[2]
    clusters, workloads = root / "problems/clusters", root / "problems/workloads"
    # 32B on 4 H100 + 4 L40S trains only with ZeRO-3 and optimizer offload: the common layouts
    # (never offloaded) have no feasible plan, the memory-lean rows do
    p = PlacementProblem.from_files(clusters / "mixed-8.yaml", workloads / "qwen2.5-32b-grpo.yaml")
    c = seeding.Corners(p, seed=0, max_n=600)
    assert c.ok.any()
    X = c.X[c.ok]
    assert (X[:, p.layout.g("optimizer_offload")] == 1).all()
    assert (X[:, p.layout.g("sharding")] == SHARDINGS.index("zero3")).all()
    # 7B: the cheapest feasible grid plan is a small footprint (1 or 2 GPUs), which needs offload
    p7 = PlacementProblem.from_files(clusters / "mixed-8.yaml", workloads / "qwen2.5-7b-grpo.yaml")
    c7 = seeding.Corners(p7, seed=1, max_n=600)
    cheap = c7.picks["cheapest"]
    assert c7.cost[cheap] < p7.layout.counts @ np.array([pl.gpu.price_usd_h for pl in p7.cluster.pools]) / 4
    assert c7.X[cheap, p7.layout.g("optimizer_offload")] == 1
    # every scored plan is distinct after the repair, and no more than max_n are scored
    for corners in (c, c7):
        assert len(np.unique(corners.X, axis=0)) == len(corners.X) <= 600
        assert len(corners.tags) == len(corners.X)


def test_adaptive_local_search_spends_the_whole_budget_and_hands_back_to_maoea():
    """With `adaptive`, the local search alternates with MaOEA-CS by archive entries per evaluation;
    whatever it does not use goes to MaOEA-CS, so the run ends at the budget, not before."""
    from pathlib import Path

    from mosearch.planner import polish
    from mosearch.planner.search import SearchSettings, run_search
    from problems.placement.problem import PlacementProblem

    root = Path(__file__).resolve().parents[2]
    p = PlacementProblem.from_files(root / "problems/clusters/mixed-8.yaml", root / "problems/workloads/qwen2.5-7b-grpo.yaml")
    batches = []
    step = polish.ParetoLocalSearch.step

    def counted(self):
        n0 = self.rec.n_evals
        step(self)
        batches.append(self.rec.n_evals - n0)

    settings = SearchSettings(evals=3000, seed=1, pop_size=50, progress=False)
    polish.ParetoLocalSearch.step = counted
    try:
        res = run_search(p, settings)
    finally:
        polish.ParetoLocalSearch.step = step
    assert res.stop_reason == "budget" and 3000 <= res.evaluations < 3000 + 2 * settings.pop_size
    assert batches and max(batches) <= 3 * settings.pop_size  # batches of about a population
    assert sum(batches) < 3000 - int(3000 * (1 - settings.polish))  # MaOEA-CS got part of the last share back


def test_plan_key_sets_behave_as_sets():
    from mosearch.planner import plankeys

    rng = np.random.default_rng(1)
    seen = plankeys.unique(rng.integers(0, 50, 40).astype(np.uint64))[0]
    new = rng.integers(0, 80, 60).astype(np.uint64)
    assert set(plankeys.union(seen, new).tolist()) == set(seen.tolist()) | set(new.tolist())
    assert np.all(np.diff(plankeys.union(seen, new).astype(float)) > 0)  # sorted, distinct
    assert plankeys.member(new, seen).tolist() == [v in set(seen.tolist()) for v in new.tolist()]
    assert not plankeys.member(new, seen[:0]).any()
    X = rng.integers(0, 3, (200, 5)).astype(float)
    _, first = np.unique(X, axis=0, return_index=True)  # the first of each distinct row, as numpy finds it
    assert np.array_equal(np.sort(plankeys.unique(plankeys.keys(X))[1]), np.sort(first))
    idx, k = plankeys.fresh(X, plankeys.unique(plankeys.keys(X[:50]))[0])  # seen: sorted, distinct
    rows = {tuple(r) for r in X[:50]}
    want = [i for i in range(len(X)) if tuple(X[i]) not in rows and not any((X[j] == X[i]).all() for j in range(i))]
    assert idx.tolist() == want and len(k) == len(want)
