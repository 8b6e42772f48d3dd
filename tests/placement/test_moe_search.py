"""Expert parallelism in the search: a dimension of a mixture of experts' plan vector only, repaired to divide
the routed experts and dp*tp, and each executor's rule (EP only on its Megatron backend)."""

from __future__ import annotations

import numpy as np
import pytest

from problems.placement.encoding import GLOBAL_NAMES, PlanOutsideSpace
from problems.placement.executors import SHARDINGS, get, megatron, violations
from tests.placement.conftest import problem


@pytest.fixture(scope="module")
def moe():
    return problem("mixed-64", "qwen3-30b-a3b-grpo")


def _population(p, n=3000, seed=0):
    rng = np.random.default_rng(seed)
    return p.layout.repair(p.xl + rng.random((n, p.n_var)) * (p.xu - p.xl))


def test_a_dense_workloads_vector_is_unchanged():
    p = problem("mixed-64", "qwen2.5-7b-grpo")
    assert p.layout.ep_options is None and not p.layout.moe
    assert p.n_var == 3 * p.layout.n_pools + len(GLOBAL_NAMES) == 3 * 3 + 12
    f = p.layout.fields(_population(p, 50))
    assert "ep" not in f
    plan = p.decode(_population(p, 1)[0], lifetime=False)
    assert "ep" not in plan.model_dump()["train"]  # a dense plan's file has no ep key
    with pytest.raises(PlanOutsideSpace, match="dense model"):
        p.encode(plan.model_copy(update={"train": plan.train.model_copy(update={"ep": 2})}))


def test_a_moe_vector_has_ep_and_repair_keeps_it_valid(moe):
    L = moe.layout
    assert moe.n_var == 3 * L.n_pools + len(GLOBAL_NAMES) + 1
    assert list(L.ep_options) == [1, 2, 4, 8, 16, 32, 64]  # divisors of 128 experts up to 64
    X = _population(moe)
    f = L.fields(X)
    train = (f["train_gpus"] + f["shared_gpus"]).sum(axis=1)
    dp = train // (f["tp"] * f["pp"])
    assert np.all((dp * f["tp"]) % f["ep"] == 0)
    assert np.all(128 % f["ep"] == 0)
    assert (f["ep"] > 1).mean() > 0.3  # repair lowers EP only where it does not divide
    assert np.array_equal(L.repair(X), X)  # idempotent


def test_a_moe_plan_round_trips_with_its_ep(moe):
    X = _population(moe, 200, seed=3)
    f = moe.layout.fields(X)
    i = int(np.argmax(f["ep"]))
    plan = moe.decode(X[i], lifetime=False)
    assert plan.train.ep == int(f["ep"][i]) > 1
    assert np.allclose(moe.encode(plan), X[i])


def test_ep_changes_the_scored_memory(moe):
    X = _population(moe, 2000, seed=5)
    j = moe.layout.g("train_ep_idx")
    one = X.copy()
    one[:, j] = 0
    one = moe.layout.repair(one)
    r1, r2 = moe.evaluate_matrix(one), moe.evaluate_matrix(X)
    f = moe.layout.fields(X)
    # EP of at least the TP holds no more of the experts than TP-sharded experts (ep 1: expert TP = TP); an EP
    # below the TP holds more (expert TP 1)
    has_ep = (f["ep"] > 1) & (f["ep"] >= f["tp"])
    assert has_ep.any()
    assert np.all(r2["model_states_gb"][has_ep] <= r1["model_states_gb"][has_ep] + 1e-9)
    assert np.any(r2["model_states_gb"][has_ep] < 0.9 * r1["model_states_gb"][has_ep])


@pytest.mark.parametrize("executor", ["verl", "rlinf"])
def test_an_executor_trains_ep_on_its_megatron_backend(executor):
    p = problem("mixed-64", "qwen3-30b-a3b-grpo", executor=executor)
    X = _population(p, 2000, seed=7)
    f = p.layout.fields(X)
    ex = get(executor)
    ep = f["ep"] > 1
    assert ep.any(), "EP survives the executor's rules"
    mg = megatron(ex, f["tp"], f["pp"], p.layout.rule_ctx.ppo, f["ep"])
    assert np.all(mg[ep])
    allowed = [SHARDINGS.index(s) for s in ex.megatron_shardings]
    assert np.all(np.isin(f["sharding"][ep], allowed))
    v = violations(ex, p.layout, f, p.layout.rule_ctx)
    assert not v["ep"].any()


def test_ep_not_dividing_dp_tp_is_a_violation():
    p = problem("mixed-64", "qwen3-30b-a3b-grpo", executor="verl")
    f = p.layout.fields(_population(p, 200, seed=9))
    f["ep"] = np.full_like(f["ep"], 64)
    train = (f["train_gpus"] + f["shared_gpus"]).sum(axis=1)
    bad = (train // (f["tp"] * f["pp"]) * f["tp"]) % 64 != 0
    assert bad.any()
    assert np.array_equal(violations(get("verl"), p.layout, f, p.layout.rule_ctx)["ep"], bad)


def test_areal_fronts_keep_ep_1():
    """AReaL 1.0.4's allocation grammar has no named expert-parallel (attn|ffn) form."""
    from areal.api.alloc_mode import ModelAllocation

    with pytest.raises(Exception):
        ModelAllocation.from_str("megatron[actor]:(attn:d4p2t2|ffn:d2p2e4)")
    p = problem("mixed-64", "qwen3-30b-a3b-grpo", executor="areal")
    f = p.layout.fields(_population(p, 500, seed=11))
    assert np.all(f["ep"] == 1)
    f["ep"] = np.full_like(f["ep"], 2)
    assert violations(get("areal"), p.layout, f, p.layout.rule_ctx)["no_ep"].all()


def test_the_front_table_shows_ep(moe):
    from mosearch.report.terminal import layout_summary

    X = _population(moe, 200, seed=3)
    f = moe.layout.fields(X)
    plan = moe.decode(X[int(np.argmax(f["ep"]))], lifetime=False)
    assert f" EP{plan.train.ep} " in layout_summary(plan)
    dense = moe.decode(X[int(np.argmin(f["ep"]))], lifetime=False)
    assert dense.train.ep == 1 and "EP" not in layout_summary(dense)


def test_an_ep_group_across_regions_pays_the_region_link(moe):
    """EP 16 over two pools of 8: inside eu-west (A100 + L40S) the remote part crosses the node NIC; over
    us-east and eu-west (H100 + A100) it crosses the 12.5 GB/s region link as well, and takes longer."""
    L = moe.layout
    P = L.n_pools
    ids = [p.id for p in moe.cluster.pools]

    def plan(train_on):
        x = np.zeros(moe.n_var)
        x[L.g("mode")] = 1  # disaggregated
        x[ids.index("L40S@eu-west")] = 16  # rollout GPUs
        for pid in train_on:
            x[P + ids.index(pid)] = 8
        x[L.g("train_ep_idx")] = list(L.ep_options).index(16)
        x[L.g("kv_mem_frac")] = 0.9
        x = L.repair(x)
        f = L.fields(x)
        assert int(f["ep"][0]) == 16 and int((f["train_gpus"]).sum()) == 16
        return float(moe.evaluate_matrix(x)["ep_comm_s"][0])

    one_region = plan(["A100-80G@eu-west", "L40S@eu-west"])
    two_regions = plan(["H100@us-east", "A100-80G@eu-west"])
    assert two_regions > 1.5 * one_region > 0
