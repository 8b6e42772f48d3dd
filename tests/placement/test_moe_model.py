"""The performance model of mixtures of experts: compute on active parameters, expert states sharded by
expert parallelism, the all-to-alls over the links the EP group spans, the experts a decode step reads."""

from __future__ import annotations

import numpy as np
import pytest

from problems.placement.catalog import model_presets
from problems.placement.predict import TrainingJob, predict_training


def job(**kw):
    base = dict(model="qwen3-30b-a3b", seq_len=4096, global_batch=64, micro_batch=1, dp=8, tp=1, pp=1,
                gpu="H100", sharding="zero1", recompute=True)
    return predict_training(TrainingJob(**{**base, **kw}))


def test_ep_2_halves_the_expert_states():
    m = model_presets()["qwen3-30b-a3b"]
    one, two = job(ep=1, sharding="none")["memory_gb"], job(ep=2, sharding="none")["memory_gb"]
    expert_weights_gb = m.routed_expert_params * 2 / 1e9
    # unsharded: every GPU held all experts' bf16 weights; with ep 2 half of them
    assert one["weights"] - two["weights"] == pytest.approx(expert_weights_gb / 2, rel=1e-6)
    assert one["gradients"] - two["gradients"] == pytest.approx(expert_weights_gb / 2, rel=1e-6)
    assert one["optimizer"] - two["optimizer"] == pytest.approx(expert_weights_gb * 6 / 2, rel=1e-6)


def test_zero_shards_the_experts_over_the_expert_data_parallel_ranks():
    """ZeRO-1 over dp 8: with ep 8 each GPU holds 1/8 of the experts, whose optimizer states then shard over
    dp*tp/ep = 1 rank; the optimizer share per GPU of the experts is the same either way."""
    a, b = job(ep=1)["memory_gb"], job(ep=8)["memory_gb"]
    assert a["optimizer"] == pytest.approx(b["optimizer"], rel=1e-9)
    assert b["weights"] < a["weights"] / 4


def test_all_to_all_grows_when_the_ep_group_leaves_the_node():
    inside = job(dp=16, ep=8)["breakdown"]["ep_comm_s"]
    across = job(dp=16, ep=16)["breakdown"]["ep_comm_s"]
    assert inside > 0
    # 16 ranks over two 8-GPU nodes: half the traffic through the node's NIC (400 GB/s for 8 GPUs) instead of NVLink
    assert across > 3 * inside
    assert job(dp=16, ep=1)["breakdown"]["ep_comm_s"] == 0.0


def test_a_dense_model_has_no_expert_terms_and_refuses_ep():
    from problems.errors import InputError

    p = predict_training(TrainingJob(model="qwen2.5-7b", seq_len=4096, global_batch=64, micro_batch=1, dp=8))
    assert "ep_comm_s" not in p["breakdown"]
    with pytest.raises(InputError, match="a dense model"):
        predict_training(TrainingJob(model="qwen2.5-7b", seq_len=4096, global_batch=64, micro_batch=1, dp=8, ep=2))
    with pytest.raises(InputError, match="divisor of the routed experts"):
        job(dp=12, ep=12, global_batch=96)  # 128 experts


def test_training_flops_follow_the_active_parameters():
    m = model_presets()["qwen3-30b-a3b"]
    p = job(recompute=False)
    tokens = 64 * 4096
    flops = p["model_tflops_per_gpu"] * 1e12 * p["step_s"] * p["gpus"]
    matmul = m.active_params - m.vocab * m.hidden
    assert 6 * matmul * tokens < flops < 6 * matmul * tokens * 1.5  # + attention, far below the total's 6 x 30.5B
    assert flops < 6 * m.params * tokens / 5


def _ctx(model):
    from problems.placement.model import build_context
    from problems.placement.specs import load_cluster, load_workload

    import tempfile
    from pathlib import Path

    d = Path(tempfile.mkdtemp())
    w = d / "w.yaml"
    w.write_text(f"name: w\nmodel: {model}\nalgorithm: grpo\nprompts_per_step: 64\nsamples_per_prompt: 8\n"
                 "prompt_len: 512\nresponse_len: {mean: 1024, max: 4096}\nmax_staleness: 1\n")
    return build_context(load_cluster("problems/clusters/h100-64.yaml"), load_workload(w))


def test_a_decode_step_reads_the_experts_its_batch_routes_to():
    from problems.placement.model.moe import expected_distinct_experts
    from problems.placement.model.rollout import EngineCosts

    ctx = _ctx("qwen3-30b-a3b")
    d = expected_distinct_experts(ctx, np.array([1.0, 8.0, 64.0, 1024.0]))
    assert d[0] == pytest.approx(8.0) and np.all(np.diff(d) > 0) and d[-1] == pytest.approx(128.0, rel=1e-6)
    c = EngineCosts(ctx, np.array([1.0]))
    one, full = float(np.ravel(c.weights_for(1.0))[0]), float(np.ravel(c.weights_for(1024.0))[0])
    m = model_presets()["qwen3-30b-a3b"]
    # one sequence reads about the active weights, a large batch about all of them
    assert one / full == pytest.approx((m.params - m.routed_expert_params + m.moe_layers * 8 * m.expert_params_each)
                                       / m.params, rel=1e-6)
    assert full == pytest.approx(float(np.ravel(ctx.unit_costs["weights"] + 128 * ctx.unit_costs["expert_weights"])[0]))


def test_mla_caches_its_latent_on_every_tp_rank():
    from problems.placement.model.rollout import EngineCosts

    ctx = _ctx("deepseek-v3")
    assert not ctx.kv_tp_split
    c1, c8 = EngineCosts(ctx, np.array([1.0])), EngineCosts(ctx, np.array([8.0]))
    assert np.ravel(c8.kv_read)[0] == pytest.approx(np.ravel(c1.kv_read)[0])  # not split by TP
    dense = _ctx("qwen2.5-7b")
    assert np.ravel(EngineCosts(dense, np.array([8.0])).kv_read)[0] == pytest.approx(
        np.ravel(EngineCosts(dense, np.array([1.0])).kv_read)[0] / 8)


def test_predict_says_what_a_moe_figure_assumes():
    moe = job(ep=8)["assumptions"]
    assert any(a.startswith("mixture of experts:") and "1.2 x the mean" in a for a in moe)
    assert any("1 x the mean" in a for a in job(ep=8, moe_imbalance=1.0)["assumptions"])
    dense = predict_training(TrainingJob(model="qwen2.5-7b", seq_len=4096, global_batch=64, micro_batch=1, dp=8))
    assert not any(a.startswith("mixture of experts") for a in dense["assumptions"])
