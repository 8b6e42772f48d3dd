"""The executor's step work, the fitted published-run parameters, their bands, and memory as runs allocate it."""

import dataclasses

import numpy as np
import pytest
import yaml

from problems.errors import InputError
from problems.placement.model import fitted as F
from problems.placement.model.executor_costs import STEP_COSTS, step_costs
from problems.placement.model.memory import activation_bytes, state_bytes_per_param
from problems.placement.specs import load_workload

from tests.placement.conftest import WORKLOADS, problem


def _plans(prob, n=200, seed=3):
    raw = prob.xl + np.random.default_rng(seed).random((n, prob.n_var)) * (prob.xu - prob.xl)
    return prob.layout.repair(raw)


def test_the_old_log_prob_pass_follows_the_executor():
    prob = problem("mixed-8", "qwen2.5-7b-grpo")
    X = _plans(prob)
    with_pass = prob.evaluate_matrix(X)["train_compute_s"]
    prob.ctx.steps = step_costs("areal", "1.0.4")  # recompute_logprob False: the engine's log-probs are used
    without = prob.evaluate_matrix(X)["train_compute_s"]
    assert not step_costs("areal").old_logprob_pass and step_costs("verl").old_logprob_pass
    assert np.all(without < with_pass)


def test_fixed_and_per_sample_terms_land_on_their_stages():
    prob = problem("mixed-8", "qwen2.5-7b-grpo")
    X = _plans(prob)
    a = prob.evaluate_matrix(X)
    prob.ctx.fitted_steps = {"step_s": 7.0, "sample_s": 0.01}
    b = prob.evaluate_matrix(X)
    assert b["train_s"] - a["train_s"] == pytest.approx(np.full(len(X), 7.0))
    assert b["rollout_s"] - a["rollout_s"] == pytest.approx(np.full(len(X), 0.01 * prob.ctx.samples))
    assert np.all(b["step_s"] >= a["step_s"] - 1e-9)


def test_a_reward_scored_during_the_log_prob_passes_hides_behind_them():
    prob = problem("mixed-8", "qwen2.5-7b-grpo")
    X = _plans(prob)
    prob.ctx.fitted_steps = {"sample_s": 0.01}
    reward = 0.01 * prob.ctx.samples
    a = prob.evaluate_matrix(X)
    prob.ctx.steps = dataclasses.replace(prob.ctx.steps, reward_overlaps_experience=True)
    b = prob.evaluate_matrix(X)
    saved = a["rollout_s"] - b["rollout_s"]
    assert np.all(saved > 0) and np.all(saved <= reward + 1e-9)
    assert np.all(saved < a["train_compute_s"])  # the forward-only passes are part of the training compute
    # no forward-only pass to hide behind (the engine's log-probs, no reference): the reward is paid in full
    prob.ctx.steps = dataclasses.replace(step_costs("areal", "1.0.4"), reward_overlaps_experience=True)
    prob.ctx.has_reference = False
    c = prob.evaluate_matrix(X)
    prob.ctx.steps = step_costs("areal", "1.0.4")
    d = prob.evaluate_matrix(X)
    assert c["rollout_s"] == pytest.approx(d["rollout_s"])


def test_easyr1_scores_the_reward_off_the_driver_from_0_3_1():
    assert not step_costs("easyr1", "0.3.0").reward_overlaps_experience
    assert step_costs("easyr1", "0.3.2").reward_overlaps_experience and step_costs("easyr1").version == "0.3.2"
    assert not step_costs("verl").reward_overlaps_experience


def test_states_kept_on_the_gpu_switch_faster():
    prob = problem("mixed-8", "qwen2.5-7b-grpo")
    X = _plans(prob)
    a = prob.evaluate_matrix(X)
    prob.ctx.steps = dataclasses.replace(step_costs(None), states_offloaded=False)
    b = prob.evaluate_matrix(X)
    colo = a["switch_s"] > 0
    assert colo.any() and np.all(b["switch_s"][colo] < a["switch_s"][colo])


def test_versions_are_keys_where_a_default_changes():
    # verl's rollout ran eagerly up to 0.5 and with CUDA graphs from 0.6 on
    assert not STEP_COSTS[("verl", "0.3")].cuda_graphs and not STEP_COSTS[("verl", "0.5")].cuda_graphs
    assert STEP_COSTS[("verl", "0.9.1")].cuda_graphs and step_costs("verl").version == "0.9.1"
    assert step_costs("easyr1").family == "verl"
    with pytest.raises(KeyError):
        step_costs("nosuch")


def test_fitted_figures_move_only_the_generations_they_were_fitted_for():
    with F.disabled():
        base = problem("mixed-64", "qwen2.5-7b-grpo")
    prob = problem("mixed-64", "qwen2.5-7b-grpo")
    scales = F.load()["params"]["decode_eff_scale"]
    for i, pool in enumerate(prob.cluster.pools):
        ratio = prob.ctx.eff["decode_eff"][i] / base.ctx.eff["decode_eff"][i]
        gen = pool.gpu.generation
        assert ratio == pytest.approx(min(scales.get(gen, 1.0), 1.0 / base.ctx.eff["decode_eff"][i]))
        # training's element-wise kernels keep the catalog's share
        assert prob.ctx.eff["elementwise_eff"][i] == base.ctx.eff["elementwise_eff"][i]


def test_a_type_without_published_rows_says_so():
    from problems.placement.specs import gpu_catalog

    cat = gpu_catalog()
    assert "no published run" in F.efficiency_note(cat["A100-80G"])
    assert "fitted on published runs" in F.efficiency_note(cat["MI300X"])


def test_bands_and_ties():
    lo, hi = F.plan_band("verl", ["H100"])
    assert lo < 0 < hi
    low, high = F.throughput_band(10.0, "verl", ["hopper"])  # generations, as plan_band reads them off the types
    assert low == pytest.approx(10.0 * np.exp(lo)) and high == pytest.approx(10.0 * np.exp(hi))



def test_a_mixture_of_experts_band_adds_the_published_moe_training_error():
    from mosearch.bench.moe_validation import load_rows, log_residuals

    lo_m, hi_m, n = F.moe_training_band()
    # the stored percentiles are of the MoE validation rows as the model predicts them now (a refit writes them)
    res = log_residuals()
    assert n == len(res) == len(load_rows())
    assert (lo_m, hi_m) == pytest.approx((np.percentile(res, 10), np.percentile(res, 90)), rel=1e-6, abs=1e-9)
    lo, hi = F.plan_band("verl", ["H100"])
    assert F.plan_band("verl", ["H100"], moe_train_share=0.0) == pytest.approx((lo, hi))
    # a step that is all training errs as the training does; a share of it by -log(1 + share (exp(-r) - 1))
    assert F.plan_band("verl", ["H100"], moe_train_share=1.0)[0] == pytest.approx(lo + min(lo_m, 0.0))
    half = F.plan_band("verl", ["H100"], moe_train_share=0.5)
    assert lo_m < 0 and half[0] == pytest.approx(lo - np.log1p(0.5 * np.expm1(-lo_m)))
    assert lo + min(lo_m, 0.0) <= half[0] <= lo
    # the published MoE iterations were all predicted too fast: the band never narrows above
    assert half[1] >= hi


def test_ties_are_judged_by_the_published_pairs_error(monkeypatch):
    bands = F.load()["bands"]
    for key, (a, b) in {"same_hardware": (("verl", ["H100"]), ("verl", ["H200"])),  # both Hopper
                        "other_hardware": (("verl", ["H100"]), ("verl", ["L40S"]))}.items():
        lo, hi, n = bands[key]
        assert n >= 3
        width = max(abs(lo), abs(hi))
        tie, why = F.tied(10.0, *a, 10.0 / np.exp(0.9 * width), *b)
        assert tie and key.replace("_", "-") in why
        assert F.tied(10.0 / np.exp(0.9 * width), *a, 10.0, *b)[0]  # symmetric
        assert not F.tied(10.0, *a, 10.0 / np.exp(1.1 * width), *b)[0]
    # another executor family on the same GPUs is not the same hardware for the model's error
    assert "other-hardware" in F.tied(10.0, "verl", ["H100"], 10.0, "areal", ["H100"])[1]
    # without published pairs: the plans' own bands, tied exactly when they overlap
    monkeypatch.setattr(F, "load", lambda: {"bands": {k: v for k, v in bands.items() if "hardware" not in k}})
    la, _ = F.plan_band("verl", ["H100"])
    _, hb = F.plan_band("verl", ["L40S"])
    edge = 10.0 * np.exp(la) / np.exp(hb)  # the L40S plan's top meets the H100 plan's bottom
    tie, why = F.tied(10.0, "verl", ["H100"], edge * 1.01, "verl", ["L40S"])
    assert tie and "bands overlap" in why
    assert not F.tied(10.0, "verl", ["H100"], edge * 0.99, "verl", ["L40S"])[0]

def test_fp32_unfused_scores_and_bf16_states_are_counted_as_allocated():
    assert sum(state_bytes_per_param(2)) == 16 and sum(state_bytes_per_param(2, True)) == 8
    assert sum(state_bytes_per_param(4, True)) == 16  # fp32 weights hold no master copy to drop
    prob = problem("mixed-8", "qwen2.5-7b-grpo")
    ctx = prob.ctx
    one = np.array([1])
    args = (one, one, one, np.array([0]), one)

    def acts(bpe, flash):
        c = dataclasses.replace(ctx, bpe=bpe, flash=flash, packing=False)
        return float(np.ravel(activation_bytes(c, *args))[0])

    s = ctx.prompt_len + ctx.resp_max
    score_elems = ctx.heads * s * s * ctx.layers  # one sequence, tp 1, every layer kept
    # softmax and dropout outputs in the working precision, a 1-byte mask: 5 bytes in bf16, 9 in fp32
    assert acts(2, False) - acts(2, True) == pytest.approx(5 * score_elems, rel=1e-9)
    assert acts(4, False) - acts(4, True) == pytest.approx(9 * score_elems, rel=1e-9)


def test_bf16_optimizer_states_need_16_bit_weights(tmp_path):
    spec = yaml.safe_load((WORKLOADS / "qwen2.5-7b-grpo.yaml").read_text())
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(dict(spec, optimizer_states="bf16")))
    assert load_workload(path).optimizer_states == "bf16"
    path.write_text(yaml.safe_dump(dict(spec, optimizer_states="bf16", precision="tf32")))
    with pytest.raises(InputError, match="optimizer_states"):
        load_workload(path)
