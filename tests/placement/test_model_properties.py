"""Properties the performance model must have, whatever its efficiency figures."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from problems.placement import PlacementProblem, explain_infeasible, load_workload
from problems.placement.model.memory import model_state_bytes
from problems.placement.specs import load_cluster
from tests.placement.conftest import WORKLOADS, problem, write_cluster


def _random_population(p, n, seed):
    rng = np.random.default_rng(seed)
    return p.layout.repair(p.xl + rng.random((n, p.n_var)) * (p.xu - p.xl))


@pytest.fixture(scope="module")
def mixed8():
    return problem("mixed-8", "qwen2.5-7b-grpo")


def test_more_gpus_never_lower_best_throughput(tmp_path, mixed8):
    """Every plan of the smaller cluster is a plan of the larger one with the same prediction, so the
    larger cluster's best throughput is at least the smaller's; extra GPUs must also be usable."""
    groups = [{"gpu": "H100", "nodes": 1, "gpus_per_node": 4, "region": "us-east"},
              {"gpu": "L40S", "nodes": 2, "gpus_per_node": 4, "region": "us-east"}]
    big = PlacementProblem.from_files(write_cluster(tmp_path, "mixed-12", groups, {"us-east": {"inter_node_gbs": 50}}),
                                      WORKLOADS / "qwen2.5-7b-grpo.yaml")
    X = _random_population(mixed8, 4000, 0)
    small_r = mixed8.evaluate_matrix(X)
    big_r = big.evaluate_matrix(X)
    assert big_r["repaired"].max() == 0
    for key in ("throughput_samples_s", "cost_usd_h", "peak_mem_frac", "staleness"):
        assert np.allclose(small_r[key], big_r[key]), key
    feas_s, feas_b = small_r["feasible"] > 0, big_r["feasible"] > 0
    best_small = small_r["throughput_samples_s"][feas_s].max()
    Xb = np.vstack([X, _random_population(big, 4000, 1)])
    rb = big.evaluate_matrix(Xb)
    assert rb["throughput_samples_s"][rb["feasible"] > 0].max() >= best_small
    assert feas_b.sum() == feas_s.sum()


@given(seed=st.integers(0, 10_000))
@settings(max_examples=25, deadline=None)
def test_larger_micro_batch_never_lowers_memory(seed):
    p = _P["mixed-64"]
    X = _random_population(p, 400, seed)
    j = p.layout.g("log2_micro_batch")
    Y = X.copy()
    Y[:, j] = np.minimum(Y[:, j] + 1, p.xu[j])
    a, b = p.evaluate_matrix(X), p.evaluate_matrix(Y)
    assert np.all(b["peak_mem_gb_train"] >= a["peak_mem_gb_train"] - 1e-9)
    assert np.all(b["peak_mem_frac"] >= a["peak_mem_frac"] - 1e-12)


@given(seed=st.integers(0, 10_000))
@settings(max_examples=25, deadline=None)
def test_larger_staleness_bound_never_lowers_async_throughput(seed):
    p = _P["mixed-64"]
    X = _random_population(p, 400, seed)
    X[:, p.layout.g("mode")] = 2
    X = p.layout.repair(X)
    async_rows = X[:, p.layout.g("mode")] == 2
    k = p.layout.g("staleness_bound")
    prev = None
    for bound in range(0, p.workload.max_staleness + 1):
        X[:, k] = bound
        thr = p.evaluate_matrix(X)["throughput_samples_s"][async_rows]
        if prev is not None:
            assert np.all(thr >= prev * (1 - 1e-12))
        prev = thr


def test_cost_is_additive_over_pools():
    p = _P["mixed-64"]
    X = _random_population(p, 500, 7)
    r = p.evaluate_matrix(X)
    prices = np.array([pool.gpu.price_usd_h for pool in p.cluster.pools])
    for i in range(0, 500, 50):
        plan = p.decode(X[i], lifetime=False)
        by_pool = sum(roles.used_gpus * price for roles, price in zip(plan.pools, prices))
        assert r["gpu_usd_h"][i] == pytest.approx(by_pool)
        assert r["cost_usd_h"][i] == pytest.approx(by_pool + r["egress_usd_h"][i])
    # idle GPUs are not billed: the plan pays for the GPUs it uses only
    assert np.all(r["gpu_usd_h"] <= sum(pool.count * pool.gpu.price_usd_h for pool in p.cluster.pools) + 1e-9)


def test_adam_mixed_precision_is_16_bytes_per_param(mixed8):
    ctx = mixed8.ctx  # qwen2.5-7b GRPO without a reference model: one trained copy
    one = np.array([1])
    full = model_state_bytes(ctx, one, one, one, np.array([0]), np.array([0]))[0]
    assert full / ctx.params == pytest.approx(16.0)
    z3 = model_state_bytes(ctx, one, one, np.array([8]), np.array([3]), np.array([0]))[0]
    assert z3 / ctx.params == pytest.approx(2.0)
    z1 = model_state_bytes(ctx, one, one, np.array([8]), np.array([1]), np.array([0]))[0]
    assert z1 / ctx.params == pytest.approx(4.0 + 12.0 / 8)


def test_qwen7b_grpo_colocated_fits_8_h100(tmp_path):
    path = write_cluster(tmp_path, "h100-8", [{"gpu": "H100", "nodes": 1, "gpus_per_node": 8, "region": "r"}])
    p = PlacementProblem.from_files(path, WORKLOADS / "qwen2.5-7b-grpo.yaml")
    lay = p.layout
    x = np.zeros(p.n_var)
    x[0] = 8  # 8 shared GPUs
    x[lay.g("kv_mem_frac")] = 0.7
    x[lay.g("log2_max_num_seqs")] = 8
    x[lay.g("sharding")] = 4  # fsdp over 8 ranks, tp=pp=1, micro-batch 1, recompute (verl's defaults)
    x[lay.g("recompute")] = 1
    x[lay.g("mode")] = 0
    plan = p.decode(x)
    assert plan.execution.mode == "colocated" and plan.train.dp == 8
    assert plan.predicted["feasible"] == 1.0
    assert plan.predicted["peak_mem_frac"] < 1.0
    assert explain_infeasible(p.cluster, p.workload, samples=2000) is None


def test_llama70b_training_does_not_fit_8_l4(tmp_path):
    path = write_cluster(tmp_path, "l4-8", [{"gpu": "L4", "nodes": 1, "gpus_per_node": 8, "region": "r"}])
    cluster = load_cluster(path)
    workload = load_workload(WORKLOADS / "llama3.1-70b-ppo.yaml")
    p = PlacementProblem(cluster, workload)
    r = p.evaluate_matrix(_random_population(p, 5000, 0))
    assert r["feasible"].max() == 0
    assert np.all(r["peak_mem_frac"] > 1.0)
    reason = explain_infeasible(cluster, workload, samples=500)
    assert reason is not None and "training" in reason and "L4" in reason


def test_llama70b_weights_do_not_fit_an_engine_of_4090s(tmp_path):
    path = write_cluster(tmp_path, "g4", [{"gpu": "RTX-4090", "nodes": 1, "gpus_per_node": 4, "region": "r"}])
    reason = explain_infeasible(load_cluster(path), load_workload(WORKLOADS / "llama3.1-70b-ppo.yaml"), samples=200)
    assert reason is not None and "per rollout engine" in reason and "4 x 24 GB" in reason


def test_efficiency_overrides_change_predictions():
    base = problem("local", "tiny-grpo")
    slow = problem("local", "tiny-grpo", efficiencies={"cpu-local": {"mfu": 0.05, "decode_step_s": 0.01}})
    X = _random_population(base, 200, 0)
    a, b = base.evaluate_matrix(X), slow.evaluate_matrix(X)
    assert np.all(b["train_compute_s"] > a["train_compute_s"])
    assert np.all(b["rollout_s"] > a["rollout_s"])


def test_bad_efficiency_override_is_an_input_error():
    from problems.errors import InputError

    with pytest.raises(InputError, match="efficiencies.cpu-local.mfu"):
        problem("local", "tiny-grpo", efficiencies={"cpu-local": {"mfu": 2.0}})
    with pytest.raises(InputError, match="not a GPU type"):
        problem("local", "tiny-grpo", efficiencies={"H100": {"mfu": 0.3}})


def test_local_tiny_plans_are_feasible_and_sensible():
    p = problem("local", "tiny-grpo")
    X = _random_population(p, 500, 0)
    r = p.evaluate_matrix(X)
    assert r["feasible"].mean() > 0.5
    assert np.all(r["used_gpus"] <= 2)
    best = np.argmax(np.where(r["feasible"] > 0, r["throughput_samples_s"], -1))
    plan = p.decode(X[best])
    assert plan.predicted["step_s"] > 0 and plan.predicted["lifetime_planned_gb"] <= plan.predicted["caching_alloc_gb"] + 1e-9


def test_memory_breakdown_is_ordered():
    p = _P["mixed-64"]
    X = _random_population(p, 30, 5)
    for x in X:
        d = p.lifetime_peak(x)
        assert d["lifetime_live_gb"] <= d["lifetime_planned_gb"] + 1e-9
        assert d["lifetime_live_gb"] <= d["caching_alloc_gb"] + 1e-9


_P = {"mixed-64": problem("mixed-64", "qwen2.5-7b-grpo")}
