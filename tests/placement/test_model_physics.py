"""The model's physics: response lengths, the rollout drain, ZeRO-3 traffic per micro-batch, memory
allocated vs reserved, GPU generations, any gpus_per_node, and the one weight-sync function."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from problems.placement.model.lengths import build
from problems.placement.predict import TrainingJob, predict_training

REPO = __import__("pathlib").Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- lengths
@pytest.mark.parametrize("mean,cap,sigma", [(2048, 8192, 0.32), (900, 3946, 1.0), (14255, 27648, 0.32), (50, 60, 2.0)])
def test_cut_lengths_keep_the_workload_mean(mean, cap, sigma):
    L = build(mean, cap, sigma)
    assert L.alive.sum() == pytest.approx(mean, rel=1e-6)  # integral of the survival = the cut mean
    assert L.edges[0] == 0 and L.edges[-1] == cap and np.all(np.diff(L.edges) >= 0)
    assert np.mean(L.sample(200_000, seed=1)) == pytest.approx(mean, rel=0.02)
    longest = L.longest_of(np.array([1.0, 8.0, 64.0, 4096.0]))
    assert np.all(np.diff(longest) >= 0) and longest[0] >= mean - 1e-9 and longest[-1] <= cap


def test_zero_sigma_is_fixed_length_generation():
    L = build(256, 256, 0.0)
    assert list(L.steps) == [256.0] and L.alive[0] == 256.0 and L.longest_of(np.array([1000.0]))[0] == 256.0


def test_longest_of_reads_its_table_as_the_exact_quantile():
    L = build(2048, 8192, 0.5)
    m = np.array([3.0, 37.0, 500.0])
    assert np.allclose(L.longest_of(m), L._longest(m), rtol=0.02)


# ---------------------------------------------------------------- rollout
def _problem(tmp_path, mean=1024, cap=16384, sigma=0.32, gpu="H100", prompts=64, group=8):
    import yaml

    from problems.placement.problem import PlacementProblem

    c, w = tmp_path / "c.yaml", tmp_path / "w.yaml"
    c.write_text(yaml.safe_dump({"name": "c", "regions": {"r": {"inter_node_gbs": 50}},
                                 "node_groups": [{"gpu": gpu, "nodes": 1, "gpus_per_node": 8, "region": "r"}]}))
    w.write_text(yaml.safe_dump({"name": "w", "model": "qwen2.5-7b", "algorithm": "grpo", "prompts_per_step": prompts,
                                 "samples_per_prompt": group, "prompt_len": 256,
                                 "response_len": {"mean": mean, "max": cap, "sigma": sigma}, "max_staleness": 2}))
    return PlacementProblem.from_files(c, w)


def _fields(prob, kv=0.8, seqs=256, mode=0, k=0):
    lay = prob.layout
    x = np.zeros(prob.n_var)
    x[0], x[1] = 8, 8
    x[lay.g("kv_mem_frac")], x[lay.g("log2_max_num_seqs")] = kv, np.log2(seqs)
    x[lay.g("mode")], x[lay.g("staleness_bound")] = mode, k
    return prob.layout.fields(prob.layout.repair(x))


def test_the_drain_lies_between_the_steady_batch_and_the_longest_response_at_full_batch(tmp_path):
    from problems.placement.model.rollout import EngineCosts, rollout_times

    prob = _problem(tmp_path)
    f = _fields(prob)
    ro = rollout_times(prob.ctx, f)
    L, p = prob.ctx.lengths, prob.ctx.prompt_len
    share = prob.ctx.samples / 8  # 8 engines of TP 1, one pool
    c = EngineCosts(prob.ctx, f["rollout_tp"])
    # the old bound: every step of the longest response at the full running batch
    longest = float(L.longest_of(np.array([share]))[0])
    bound = longest * float(c.step(share, share * (p + longest / 2))[0, 0])
    assert ro["rollout_bulk_s"][0] < ro["rollout_s"][0] < bound
    assert ro["rollout_tail_s"][0] == pytest.approx(ro["rollout_s"][0] - ro["rollout_bulk_s"][0])


def test_a_wider_length_spread_lengthens_the_synchronous_drain_only(tmp_path):
    from problems.placement.model.rollout import rollout_times

    # cap: as long as qwen2.5-7b's context takes (131072 tokens less the 256-token prompt), nearly uncapped
    narrow, wide = _problem(tmp_path, sigma=0.2, cap=130816), _problem(tmp_path, sigma=1.0, cap=130816)
    a, b = rollout_times(narrow.ctx, _fields(narrow)), rollout_times(wide.ctx, _fields(wide))
    assert b["rollout_tail_s"][0] > 2 * a["rollout_tail_s"][0]
    # the steady (asynchronous) rate depends on the mean age of running sequences, not on the longest one
    assert b["rollout_bulk_s"][0] < 1.5 * a["rollout_bulk_s"][0]


def test_a_kv_cache_too_small_for_the_cohort_preempts_and_slows_the_rollout(tmp_path):
    from problems.placement.model.rollout import rollout_times

    prob = _problem(tmp_path, mean=6000, cap=16384, prompts=256, group=8)
    roomy = rollout_times(prob.ctx, _fields(prob, kv=0.95, seqs=512))
    tight = rollout_times(prob.ctx, _fields(prob, kv=0.35, seqs=512))
    assert roomy["preempted"][0] == 0 and tight["preempted"][0] > 0
    assert tight["rollout_s"][0] > roomy["rollout_s"][0]


def test_asynchronous_mode_generates_at_the_steady_rate(tmp_path):
    prob = _problem(tmp_path)
    sync = prob.evaluate_matrix(prob.layout.repair(_vec(prob, mode=1)))
    asy = prob.evaluate_matrix(prob.layout.repair(_vec(prob, mode=2, k=2)))
    assert asy["step_s"][0] < sync["step_s"][0]
    assert asy["rollout_bulk_s"][0] == pytest.approx(sync["rollout_bulk_s"][0])


def _vec(prob, mode, k=0):
    lay = prob.layout
    x = np.zeros(prob.n_var)
    x[0], x[1] = 4, 4
    x[lay.g("kv_mem_frac")], x[lay.g("log2_max_num_seqs")] = 0.8, 8
    x[lay.g("mode")], x[lay.g("staleness_bound")] = mode, k
    return x


def test_fixed_batch_generation_is_the_sum_of_its_decode_steps(tmp_path):
    from problems.placement.model.rollout import EngineCosts, fixed_batch_s

    prob = _problem(tmp_path)
    ctx = prob.ctx
    c = EngineCosts(ctx, np.array([[1]]))
    got = fixed_batch_s(ctx, 1, 4, 10, 3)
    steps = sum(float(c.step(np.array([[4.0]]), np.array([[4.0 * (10 + s)]]))[0, 0]) for s in range(3))
    prefill = float(c.prefill(np.array([[40.0]]), 5.0)[0, 0])
    assert got == pytest.approx(prefill + steps, rel=1e-12)


# ---------------------------------------------------------------- ZeRO-3 / FSDP traffic, memory
def _job(**kw):
    base = dict(model="llama3.1-8b", gpu="RTX-4090", seq_len=2048, global_batch=256, micro_batch=1, dp=16,
                gpus_per_node=8, sharding="zero3", recompute=True)
    return TrainingJob(**(base | kw))


def test_zero3_moves_the_weights_every_micro_batch_over_the_slowest_link():
    fast = predict_training(_job(inter_node_gbs=400))["breakdown"]["dp_sync_s"]
    slow = predict_training(_job(inter_node_gbs=1.25))["breakdown"]["dp_sync_s"]  # 10 GbE desktops
    assert slow > 50 * fast
    # twice the micro-batches (half the micro-batch size), twice the gathers and scatters
    half = predict_training(_job(inter_node_gbs=1.25, global_batch=512))["breakdown"]["dp_sync_s"]
    assert half == pytest.approx(2 * slow, rel=0.05)
    # ZeRO-1 moves one all-reduce's volume per step instead
    z1 = predict_training(_job(inter_node_gbs=1.25, sharding="zero1"))["breakdown"]["dp_sync_s"]
    assert z1 < slow / 10


def test_keeping_units_unsharded_after_forward_saves_a_gather_and_costs_memory():
    a = predict_training(_job(inter_node_gbs=1.25))
    b = predict_training(_job(inter_node_gbs=1.25, reshard_after_forward=False))
    assert b["breakdown"]["dp_sync_s"] < a["breakdown"]["dp_sync_s"]
    assert b["memory_gb"]["gathered_weights"] > 5 * a["memory_gb"]["gathered_weights"] > 0


def test_reserved_exceeds_allocated_by_more_with_recomputation():
    plain = predict_training(_job(sharding="none", recompute=False, gpu="H200", dp=8))["memory_gb"]
    rec = predict_training(_job(sharding="none", recompute=True, gpu="H200", dp=8))["memory_gb"]
    assert plain["reserved"] > plain["allocated"]
    share = lambda m: m["allocator_waste"] / m["activations"]  # noqa: E731
    assert share(rec) > share(plain)


# ---------------------------------------------------------------- predict command
def _predict(*args):
    return subprocess.run([sys.executable, "-m", "mosearch.cli", "predict", *args], capture_output=True, text=True,
                          cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def test_predict_refuses_tp_that_does_not_shard_the_kv_heads_in_one_line():
    r = _predict("--model", "llama3.1-8b", "--tp", "16", "--gpus-per-node", "16", "--seq-len", "2048",
                 "--global-batch", "16")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "mosearch: command line: tp: 8 KV heads of llama3.1-8b are not divisible by TP 16 (a divisor of the "
        "attention and KV heads)"]


def test_a_layout_that_does_not_fit_exits_3_and_says_so_in_the_json():
    r = _predict("--model", "llama3.1-70b", "--gpu", "RTX-4090", "--seq-len", "2048", "--global-batch", "8", "--json")
    assert r.returncode == 3 and json.loads(r.stdout)["fits"] is False
    ok = _predict("--model", "qwen2.5-1.5b", "--gpu", "H100", "--seq-len", "2048", "--global-batch", "8", "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["fits"] is True


def test_replicas_with_their_own_stage_types_are_paced_by_the_slowest():
    kw = dict(model="qwen2.5-7b", seq_len=2048, global_batch=32, dp=2, pp=2, sharding="zero1", gpu="H100")
    mixed = predict_training(TrainingJob(**kw, replica_stage_gpus=[["H100", "H100"], ["H100", "L40S"]]))
    slow = predict_training(TrainingJob(**kw, stage_gpus=["H100", "L40S"]))
    fast = predict_training(TrainingJob(**kw))
    assert mixed["step_s"] == slow["step_s"] > fast["step_s"]


def test_a_network_per_gpu_type():
    kw = dict(model="llama3.1-8b", seq_len=2048, global_batch=64, dp=4, tp=8, sharding="zero1",
              replica_gpus=["H100", "H100", "L40S", "L40S"])
    both = predict_training(TrainingJob(**kw, inter_node_gbs=400))
    slow_l40s = predict_training(TrainingJob(**kw, inter_node_gbs={"H100": 400, "L40S": 1.25}))
    assert slow_l40s["breakdown"]["dp_sync_s"] > 10 * both["breakdown"]["dp_sync_s"]


# ---------------------------------------------------------------- generations, node sizes, sync
def test_a_six_gpu_server_plans_with_tp_three(tmp_path):
    import yaml

    from problems.placement.problem import PlacementProblem

    c, w = tmp_path / "c.yaml", tmp_path / "w.yaml"
    c.write_text(yaml.safe_dump({"name": "c", "regions": {"r": {"inter_node_gbs": 12.5}},
                                 "node_groups": [{"gpu": "RTX-4090", "nodes": 2, "gpus_per_node": 6, "region": "r"}]}))
    w.write_text(yaml.safe_dump({"name": "w", "model": {"layers": 8, "hidden": 768, "heads": 12, "kv_heads": 6,
                                                        "ffn": 2048, "vocab": 1000},
                                 "algorithm": "grpo", "prompts_per_step": 8, "samples_per_prompt": 4, "prompt_len": 64,
                                 "response_len": {"mean": 64, "max": 128}, "max_staleness": 1}))
    prob = PlacementProblem.from_files(c, w)
    assert 3 in prob.layout.tp_options and 6 in prob.layout.tp_options
    rng = np.random.default_rng(0)
    r = prob.evaluate_matrix(prob.xl + rng.random((500, prob.n_var)) * (prob.xu - prob.xl))
    assert (r["structure"] == 0).all() and np.isfinite(r["step_s"]).all()


def test_one_sync_function_scores_a_plan_and_a_run_layout_alike(tmp_path):
    from problems.placement.model.sync import layout_sync_s

    prob = _problem(tmp_path)
    x = prob.layout.repair(_vec(prob, mode=1))
    got = prob.evaluate_matrix(x)["sync_s"][0]
    f = {k: v[0] for k, v in prob.layout.fields(x).items()}
    engines = int((f["rollout_gpus"] + f["shared_gpus"]).sum() // f["rollout_tp"][0])
    from problems.placement.names import SHARDINGS

    train = {"tp": int(f["tp"]), "pp": int(f["pp"]), "dp": int(f["train_gpus"].sum() // (f["tp"] * f["pp"])),
             "sharding": SHARDINGS[int(f["sharding"])]}
    cl = prob.cluster
    want = layout_sync_s(cl, prob.ctx.weight_bytes, ["r"] * engines, [cl.pools[0].gpu.name] * engines, "r", False,
                         False, prob.workload.model, train)
    assert got == pytest.approx(want, rel=1e-12)


# ---------------------------------------------------------------- engine host work, sampler, eager, attention
def _ctx(tmp_path, **eff):
    prob = _problem(tmp_path)
    if eff:
        from problems.placement.model import build_context

        prob.ctx = build_context(prob.cluster, prob.workload, {"H100": eff})
    return prob


def test_each_running_sequence_adds_its_host_work_and_sampler_passes_to_a_decode_step(tmp_path):
    from problems.placement.model.rollout import SAMPLER_BYTES_PER_VOCAB, EngineCosts

    prob = _ctx(tmp_path)
    ctx = prob.ctx
    c = EngineCosts(ctx, np.array([[1]]))
    sampler = ctx.vocab * SAMPLER_BYTES_PER_VOCAB / (ctx.hbm[0] * ctx.eff["decode_eff"][0])
    # the host time per sequence and step: the fitted one (model/fitted.py) where published runs gave it, else 21.5 us
    host = float(ctx.eff["decode_seq_s"][0])
    assert host > 0
    assert float(c.per_seq[0, 0]) == pytest.approx(host + sampler, rel=1e-12)  # TP 1: no all-reduce share
    # bandwidth-bound steps (weights dominate): one more sequence costs its per-sequence term and its KV read
    b, kv = 8.0, 8 * 2000.0
    extra = float(c.step(b + 1, kv + 2000)[0, 0] - c.step(b, kv)[0, 0])
    assert extra == pytest.approx(float(c.per_seq[0, 0]) + 2000 * float(c.kv_read[0, 0]), rel=1e-9)


def test_host_work_lengthens_a_drain_by_its_sequence_steps(tmp_path):
    """A cohort that fits at once: the host term adds m x mean x decode_seq_s per engine, nothing else."""
    from problems.placement.model.rollout import rollout_times

    with_host, without = _ctx(tmp_path), _ctx(tmp_path, decode_seq_s=0.0)
    f = _fields(with_host)
    a, b = rollout_times(with_host.ctx, f), rollout_times(without.ctx, f)
    m = with_host.ctx.samples / 8  # 8 engines of TP 1 share the 512 samples; 64 each fit at once
    host = float(with_host.ctx.eff["decode_seq_s"][0])
    assert a["rollout_s"][0] - b["rollout_s"][0] == pytest.approx(m * with_host.ctx.lengths.mean * host, rel=1e-6)


def test_an_eager_engine_pays_its_launches_every_step(tmp_path):
    from problems.placement.model.params import EAGER_DECODE_LAYER_S
    from problems.placement.model.rollout import fixed_batch_s

    graphs, eager = _ctx(tmp_path), _ctx(tmp_path, decode_layer_s=EAGER_DECODE_LAYER_S)
    t0, t1 = fixed_batch_s(graphs.ctx, 1, 8, 32, 128), fixed_batch_s(eager.ctx, 1, 8, 32, 128)
    assert t1 - t0 == pytest.approx(128 * graphs.ctx.layers * EAGER_DECODE_LAYER_S, rel=1e-9)


def test_cpu_devices_keep_the_host_work_in_their_fitted_per_sample_cost(tmp_path):
    from problems.placement.problem import PlacementProblem

    prob = PlacementProblem.from_files(REPO / "problems/clusters/local.yaml", REPO / "problems/workloads/tiny-grpo.yaml")
    assert np.all(prob.ctx.eff["decode_seq_s"] == 0.0)


def test_flash_attention_runs_at_its_own_efficiency_never_above_mfu():
    from problems.placement.catalog import gpu_catalog

    base = dict(model="llama3.1-8b", gpu="H100", seq_len=8192, global_batch=8, micro_batch=1, precision="bf16")
    assert gpu_catalog()["H100"].attn_eff == 0.35 and "FlashAttention" in gpu_catalog()["H100"].sources["attn_eff"]
    t = {a: predict_training(TrainingJob(**base, efficiencies={"H100": {"attn_eff": a}}))["breakdown"]["train_compute_s"]
         for a in (0.35, 0.57, 0.9)}
    assert t[0.35] > t[0.57]
    assert t[0.9] == pytest.approx(t[0.57], rel=1e-12)  # capped at the catalog's mfu 0.57
    # the attention part alone scales with 1 / attn_eff: (t(0.35) - t(0.57)) = A (1/0.35 - 1/0.57) x 0.57 ...
    t_half = predict_training(TrainingJob(**base, efficiencies={"H100": {"attn_eff": 0.285}}))["breakdown"]["train_compute_s"]
    assert (t_half - t[0.57]) == pytest.approx((t[0.35] - t[0.57]) * (1 / 0.285 - 1 / 0.57) / (1 / 0.35 - 1 / 0.57), rel=1e-6)


def test_training_attention_grows_with_the_spread_of_lengths_at_the_same_mean(tmp_path):
    """A sequence's causal attention costs its length squared: at one mean, a wider spread of response lengths
    means more attention work (E[(p + L)^2]), the weight matmuls stay the same."""
    from problems.placement.model.training import train_times

    L = build(6000, 27648, 0.6)
    draws = 256 + L.sample(400_000, seed=3)
    assert L.mean_square(256) == pytest.approx(np.mean(draws ** 2), rel=0.02)
    assert build(6000, 6000, 0.0).mean_square(256) == pytest.approx(6256.0 ** 2)
    fixed, wide = _problem(tmp_path, mean=6000, cap=27648, sigma=0.0), _problem(tmp_path, mean=6000, cap=27648, sigma=0.6)
    one = np.ones(1)
    a, b = train_times(fixed.ctx, _fields(fixed), one), train_times(wide.ctx, _fields(wide), one)
    assert b["train_compute_s"][0] > a["train_compute_s"][0]
    # the extra work is the attention's share only: the spread's variance over the mean's square, at most
    assert b["train_compute_s"][0] < a["train_compute_s"][0] * wide.ctx.lengths.mean_square(256) / 6256.0 ** 2


def test_eager_modules_move_more_element_wise_bytes_than_fused_kernels():
    """PyTorch eager RMSNorm / RoPE / SwiGLU (Hugging Face layers, torchtitan without compile) run several
    kernels each: the step's element-wise time grows by exactly their extra bytes over the HBM share, the
    matmuls stay; torchtitan's fused_rmsnorm keeps the norms' part out."""
    from problems.placement.catalog import gpu_catalog
    from problems.placement.model.training import eager_elementwise_bytes

    base = dict(model="llama3.1-8b", gpu="H100", seq_len=4096, global_batch=8, micro_batch=1, precision="bf16")
    t = {k: predict_training(TrainingJob(**base, elementwise_kernels=k))["breakdown"]["train_compute_s"]
         for k in ("fused", "eager-activation", "eager-fused-norm", "eager")}
    assert t["fused"] < t["eager-activation"] < t["eager-fused-norm"] < t["eager"]
    h, q, kv, ffn = 4096, 4096, 1024, 14336
    xf, xb = eager_elementwise_bytes(h, q + kv, ffn, 2)
    assert xf > 2 * 28 * h and xb > xf  # both norms' fp32 chains, backward through them costs more
    g = gpu_catalog()["H100"]
    rate = g.bandwidth_tbs * 1e12 * g.train_fit["elementwise_eff"]
    # one forward and one backward of 8 sequences of 4096 tokens on 32 layers (no recomputation)
    assert t["eager"] - t["fused"] == pytest.approx(8 * 4096 * 32 * (xf + xb) / rate, rel=1e-6)
    nf, nb = eager_elementwise_bytes(h, q + kv, ffn, 2, rope=False, act=False)
    assert t["eager"] - t["eager-fused-norm"] == pytest.approx(8 * 4096 * 32 * (nf + nb) / rate, rel=1e-6)


def test_a_workload_names_its_element_wise_kernels_and_a_wrong_name_is_one_line(tmp_path):
    import yaml

    from problems.errors import InputError
    from problems.placement.specs import load_workload

    w = {"name": "w", "model": "qwen2.5-7b", "algorithm": "grpo", "prompts_per_step": 8, "samples_per_prompt": 4,
         "prompt_len": 256, "response_len": {"mean": 512, "max": 1024}, "max_staleness": 0}
    ok, bad = tmp_path / "ok.yaml", tmp_path / "bad.yaml"
    ok.write_text(yaml.safe_dump(w | {"elementwise_kernels": "eager"}))
    bad.write_text(yaml.safe_dump(w | {"elementwise_kernels": "compiled"}))
    assert load_workload(ok).elementwise_kernels == "eager"
    with pytest.raises(InputError) as err:
        load_workload(bad)
    assert "elementwise_kernels" in str(err.value) and "\n" not in str(err.value).strip()
