"""The structured reference (mosearch/bench/structured_reference.py): the model properties its bounds
rest on, checked on random plans, and its answer against brute force over its whole space on a
cluster small enough to enumerate."""

import itertools
from pathlib import Path

import numpy as np
import pytest

from mosearch.bench import structured_reference as sr
from problems.placement.problem import PlacementProblem
from problems.placement.specs import load_cluster, load_workload

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


def _random_plans(problem, n, seed):
    rng = np.random.default_rng(seed)
    return problem.layout.repair(problem.xl + rng.random((n, problem.n_var)) * (problem.xu - problem.xl))


@pytest.fixture(scope="module")
def multi_region():
    return PlacementProblem.from_files(BENCH / "clusters" / "mi300x-a10g-l4-t4.yaml",
                                       BENCH / "workloads" / "qwen2.5-7b-grpo-4k.yaml")


def test_step_is_at_least_the_slower_stage_and_cost_at_least_the_gpus(multi_region):
    p = multi_region
    X = _random_plans(p, 4000, 1)
    r = p.evaluate_matrix(X)
    f = p.layout.fields(X)
    colo = f["mode"] == 0
    assert (r["step_s"] >= np.maximum(r["rollout_bulk_s"], r["train_s"]) * (1 - 1e-12)).all()  # P3
    assert (r["step_s"][colo] >= (r["rollout_bulk_s"] + r["train_s"])[colo] * (1 - 1e-12)).all()
    price = np.array([q.gpu.price_usd_h for q in p.cluster.pools])
    used = f["rollout_gpus"] + f["train_gpus"] + f["shared_gpus"]
    assert (r["cost_usd_h"] >= used @ price - 1e-9).all()  # P4


def test_training_time_ignores_the_rollout_side_and_rollout_time_the_training_side(multi_region):
    p, L = multi_region, multi_region.layout
    P = L.n_pools
    X = _random_plans(p, 3000, 2)
    X = X[X[:, L.g("mode")] > 0]  # disjoint roles
    r0 = p.evaluate_matrix(X)
    rng = np.random.default_rng(3)
    V = X.copy()  # other engine settings, mode and k; same training fields and chunks
    V[:, L.g("kv_mem_frac")] = rng.uniform(0.3, 0.95, len(V))
    V[:, L.g("log2_max_num_seqs")] = rng.integers(3, 11, len(V))
    V[:, L.g("mode")] = rng.integers(1, 3, len(V))
    V[:, L.g("staleness_bound")] = np.where(V[:, L.g("mode")] == 2, rng.integers(0, L.max_staleness + 1, len(V)), 0)
    R = L.repair(V)
    same = (R[:, P:2 * P] == X[:, P:2 * P]).all(axis=1)
    assert same.mean() > 0.5
    r1 = p.evaluate_matrix(R)
    assert np.allclose(r1["train_s"][same], r0["train_s"][same], rtol=1e-12)  # P1
    # P2: the same engines colocated with 1-GPU replicas take no longer to generate
    W = X.copy()
    W[:, P:2 * P] = W[:, :P]
    W[:, L.g("mode")] = 0
    W[:, L.g("train_tp_idx")] = 0
    W[:, L.g("train_pp_idx")] = 0
    RW = L.repair(W)
    keep = (RW[:, :P] == X[:, :P]).all(axis=1)
    r2 = p.evaluate_matrix(RW)
    assert keep.mean() > 0.5
    assert (r2["rollout_bulk_s"][keep] <= r0["rollout_bulk_s"][keep] * (1 + 1e-12)).all()
    assert np.allclose(r2["kv_shortfall"][keep], r0["kv_shortfall"][keep])


def test_memory_is_the_larger_of_the_two_roles(multi_region):
    p, L = multi_region, multi_region.layout
    X = _random_plans(p, 3000, 4)
    X = X[X[:, L.g("mode")] > 0]
    r = p.evaluate_matrix(X)
    low = X.copy()
    low[:, L.g("kv_mem_frac")] = 0.3
    r_low = p.evaluate_matrix(low)
    kv = X[:, L.g("kv_mem_frac")]
    # P5: training's share is what the 0.3-KV twin shows above 0.3; the engines add exactly kv
    assert np.allclose(r["peak_mem_frac"], np.maximum(r_low["peak_mem_frac"], kv))


def _brute_force(p, budget):
    """Every plan of the reference's space on a 2 x 2-GPU cluster, scored; the fastest feasible
    within the budget among those the repair leaves as they are."""
    L = p.layout
    P = L.n_pools
    per_pool = []
    for i in range(P):
        opts = []
        for t in sr.count_grid(int(L.counts[i])):
            for rr in sr.count_grid(int(L.counts[i])):
                if t + rr > L.counts[i]:
                    continue
                for k in range(int(L.rtp_n[i])):
                    if (rr == 0 and k == 0) or (rr > 0 and rr % L.rtp_options[i, k] == 0):
                        opts.append((t, rr, k))
        per_pool.append(opts)
    lays = list(itertools.product(range(len(L.tp_options)), [i for i in sr.PP_GRID if i < len(L.pp_options)],
                                  sr.SHARD_GRID, sr.MB_GRID, (0, 1), (0, 1)))
    modes = [(1, 0, c) for c in sr.CHUNKS_GRID] + [(2, k, c) for k in range(1, L.max_staleness + 1) for c in sr.CHUNKS_GRID]
    rows = []
    for feet in itertools.product(*per_pool):
        t = [f[0] for f in feet]
        r = [f[1] for f in feet]
        k = [f[2] for f in feet]
        colo_ok = all(tt == rr for tt, rr in zip(t, r))
        for lay in lays:
            for mode in modes + ([(0, 0, 0)] if colo_ok else []):
                x = np.zeros(L.n_var)
                x[:P], x[P:2 * P], x[2 * P:3 * P] = r, t, k
                for name, v in zip(sr.LAYOUT_NAMES, lay):
                    x[L.g(name)] = v
                x[L.g("kv_mem_frac")] = sr.KV_GRID[0]
                x[L.g("log2_max_num_seqs")] = sr.SEQS_GRID[0]
                x[L.g("mode")], x[L.g("staleness_bound")], x[L.g("log2_pipeline_chunks")] = mode
                rows.append(x)
    X = np.array(rows)
    R = L.repair(X)
    same = (np.abs(R - X) < 1e-9).all(axis=1)
    r = p.evaluate_matrix(R[same])
    ok = (r["feasible"] > 0) & (r["cost_usd_h"] <= (np.inf if budget is None else budget) + 1e-9)
    return float(r["throughput_samples_s"][ok].max()) if ok.any() else 0.0


def test_reference_matches_brute_force_on_a_small_cluster(tmp_path, monkeypatch):
    monkeypatch.setattr(sr, "KV_GRID", (0.9,))
    monkeypatch.setattr(sr, "SEQS_GRID", (8,))
    cl = tmp_path / "small.yaml"
    cl.write_text("name: small\nregions:\n  r: {inter_node_gbs: 12.5}\nnode_groups:\n"
                  "  - {gpu: L4, nodes: 1, gpus_per_node: 2, region: r}\n"
                  "  - {gpu: T4, nodes: 1, gpus_per_node: 2, region: r}\n")
    wl = tmp_path / "w.yaml"
    wl.write_text("name: w\nmodel: qwen2.5-1.5b\nalgorithm: grpo\nprompts_per_step: 32\nsamples_per_prompt: 8\n"
                  "prompt_len: 256\nresponse_len: {mean: 512, max: 2048}\nmax_staleness: 1\nprecision: fp16\n")
    p = PlacementProblem(load_cluster(cl), load_workload(wl))
    ref = sr.StructuredReference(p)
    full = float(p.layout.counts @ ref.price)
    for budget in (None, 0.5 * full, 0.3 * full):
        best = ref.fastest(budget)
        brute = _brute_force(p, budget)
        assert brute > 0
        assert best.throughput >= brute * (1 - 1e-12)
        # and what it returns is a real plan that meets the budget
        r = p.evaluate_matrix(best.x[None, :])
        assert r["feasible"][0] > 0 and r["throughput_samples_s"][0] == pytest.approx(best.throughput)
        assert budget is None or r["cost_usd_h"][0] <= budget + 1e-9
