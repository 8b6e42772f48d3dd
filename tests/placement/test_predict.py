"""`predict_training` / `mosearch predict`: the model facts (precision, attention kind, MLP kind,
uneven stages, data split) against hand-computed figures, and the plan path against the planner's.

The hand-computed cases use a small model (2 or 4 layers, hidden 64, 1 head, ffn 128, vocab 100,
32-token sequences) on an H100 with mfu = 1, element-wise bandwidth share 1 and no floors, so each
time is FLOPs / peak + bytes / bandwidth with the numbers written out below.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from problems.placement.catalog import Architecture, gpu_catalog
from problems.placement.model.params import DEFAULTS
from problems.placement.predict import TrainingJob, predict_plan, predict_training

H100_HBM = 3.35e12  # bytes/s (catalog)
NVLINK = 900e9
UNIT = {"H100": {"mfu": 1.0, "elementwise_eff": 1.0, "layer_s": 0.0, "attn_eff": 1.0}}


def job(**kw) -> TrainingJob:
    model = dict(layers=2, hidden=64, heads=1, kv_heads=1, ffn=128, vocab=100, mlp="plain", tied_embeddings=True)
    model.update(kw.pop("model", {}))
    base = dict(model=model, gpu="H100", seq_len=32, global_batch=4, micro_batch=4, precision="fp32",
                efficiencies=UNIT)
    return TrainingJob(**(base | kw))


# per sample, one forward, one layer: 2 x (4 h^2 + 2 h ffn + 2 h) x 32 tokens + 4 x 64 x 16 (causal) x 32
ATTN_F = 4 * 64 * 16 * 32  # 131,072: QK^T and AV over half the keys (causal flash attention)
LAYER_F = 2 * (4 * 64 * 64 + 2 * 64 * 128 + 2 * 64) * 32 + ATTN_F  # 2,236,416
HEAD_F = 2 * 100 * 64 * 32  # 409,600
# forward + backward (2 forwards; flash attention's backward 2.5, as it recomputes the scores) of 4 samples
# through 2 layers and the head
TRAIN_LAYER_F = 3 * (LAYER_F - ATTN_F) + 3.5 * ATTN_F  # 6,774,784
STEP_F = 4 * (2 * TRAIN_LAYER_F + 3 * HEAD_F)  # 59,113,472
# the logits of each sample's forward and backward through the head, element-wise over the vocabulary
# (model/training.py LOGIT_BYTES_FWD 22 and _BWD 8 bytes per entry and token)
LOGIT_B = 32 * 100 * (22 + 8)  # 96,000


def test_hand_computed_flops():
    assert LAYER_F == 2_236_416 and TRAIN_LAYER_F == 6_774_784 and STEP_F == 59_113_472


def test_precision_selects_the_peak():
    cat = gpu_catalog()
    assert cat["H100"].peak("bf16") == 989 and cat["H100"].peak("tf32") == 494 and cat["H100"].peak("fp32") == 67
    assert cat["A100-80G"].peak("fp32") == 19.5 and cat["V100"].peak("fp16") == 125
    # tf32 and fp32 store 4 bytes: only the matmul peak differs, by the hand-computed FLOPs
    t32 = predict_training(job(precision="fp32"))["breakdown"]["train_compute_s"]
    tf = predict_training(job(precision="tf32"))["breakdown"]["train_compute_s"]
    assert t32 - tf == pytest.approx(STEP_F * (1 / 67e12 - 1 / 494e12), rel=1e-9)
    # and the whole fp32 time: FLOPs at 67 TFLOP/s + element-wise bytes (fp32, plain MLP) at 3.35 TB/s
    ew = 32 * (64 * (10 * 4 + 2) + 64 * (16 * 4 + 2) + 128 * 2 * 4 + 128 * 3 * 4)  # per sample and layer
    assert t32 == pytest.approx(STEP_F / 67e12 + (4 * 2 * ew + 4 * LOGIT_B) / H100_HBM, rel=1e-9)


def test_unfused_attention_costs_the_full_context_and_the_scores():
    flash = predict_training(job(attention="flash"))
    unfused = predict_training(job(attention="unfused"))
    # keys 32 instead of 16 per token, and a backward of 2 forwards (flash's is 2.5: it recomputes the scores)
    extra_f = 4 * 2 * (3 * 2 * ATTN_F - 3.5 * ATTN_F)
    extra_b = 4 * 2 * 32 * 32 * ((10 * 4 + 2) + (13 * 4 + 2))  # fp32 (unfused softmax) score passes
    delta = unfused["breakdown"]["train_compute_s"] - flash["breakdown"]["train_compute_s"]
    assert delta == pytest.approx(extra_f / 67e12 + extra_b / H100_HBM, rel=1e-9)
    # stored scores: s b h x a s / h elements (Korthikanti), each the softmax and dropout outputs in fp32 (4 + 4)
    # and a 1-byte dropout mask (PyTorch's native_dropout saves a bool mask): 9 bytes, 2 layers
    acts = (unfused["memory_gb"]["activations"] - flash["memory_gb"]["activations"]) * 1e9
    assert acts == pytest.approx(32 * 4 * 64 * (1 * 32 / 64) * 9 * 2, rel=1e-9)


def test_gated_mlp_has_three_matrices():
    plain = Architecture(layers=2, hidden=64, heads=1, kv_heads=1, ffn=128, vocab=100, mlp="plain")
    gated = Architecture(layers=2, hidden=64, heads=1, kv_heads=1, ffn=128, vocab=100)
    assert gated.params_per_layer - plain.params_per_layer == 64 * 128
    a = predict_training(job(model={"mlp": "plain"}))["breakdown"]["train_compute_s"]
    b = predict_training(job(model={"mlp": "gated"}))["breakdown"]["train_compute_s"]
    extra_f = 3 * 4 * 2 * (2 * 64 * 128 * 32)
    extra_b = 4 * 2 * 32 * 128 * (1 + 2) * 4  # SwiGLU: one more read forward, two more backward
    assert b - a == pytest.approx(extra_f / 67e12 + extra_b / H100_HBM, rel=1e-9)


def _layer_and_head_bf16():
    """One micro-batch (1 sample) through one layer and through the head, bf16, H100, unit efficiencies."""
    ew = 32 * (64 * (10 * 2 + 2) + 64 * (16 * 2 + 2) + 128 * 2 * 2 + 128 * 3 * 2)
    return TRAIN_LAYER_F / 989e12 + ew / H100_HBM, 3 * HEAD_F / 989e12 + LOGIT_B / H100_HBM


@pytest.mark.parametrize("stages", [[1, 3], [2, 2], [3, 1]])
def test_uneven_pipeline_stages(stages):
    L, H = _layer_and_head_bf16()
    # activations forward and gradients back, one micro-batch: bytes and one send latency each
    p2p = 2 * (32 * 64 * 2 / NVLINK + DEFAULTS["p2p_latency_s"])
    t = [n * L + p2p for n in stages]
    t[-1] += H
    got = predict_training(job(model={"layers": 4}, precision="bf16", micro_batch=1, pp=2, stage_layers=stages))
    m = 4  # micro-batches: 4 samples, micro-batch 1, dp 1
    assert got["breakdown"]["train_compute_s"] == pytest.approx(sum(t) + (m - 1) * max(t), rel=1e-9)
    assert got["breakdown"]["pipeline_bubble_s"] == pytest.approx(sum(t) - max(t), rel=1e-9)
    # memory: the peak stage, where stage i keeps pp - i micro-batches of its layers in flight and only the last
    # stage holds the head's logits
    # Korthikanti's tensors, bf16, no dropout: norm inputs and the QKV and up projections' inputs (4h), q, k, v
    # and the attention output (4h), the GeLU's input and the down projection's input (ffn each)
    per_layer = 32 * 1 * (4 * 64 + 4 * 64 + 2 * 128) * 2
    logits = 32 * 100 * (2 + 4)
    peak = max(stages[0] * 2 * per_layer, stages[1] * 1 * per_layer + logits)
    assert got["memory_gb"]["activations"] * 1e9 == pytest.approx(peak, rel=1e-9)


def test_even_pipeline_matches_the_planner_formula():
    """Without stage_layers a one-type job takes the planner's path; with the even partition given
    explicitly it takes the staged path: the same time."""
    a = predict_training(job(model={"layers": 4}, precision="bf16", micro_batch=1, pp=2))
    b = predict_training(job(model={"layers": 4}, precision="bf16", micro_batch=1, pp=2, stage_layers=[2, 2]))
    assert a["step_s"] == pytest.approx(b["step_s"], rel=1e-12)


def test_stage_gpu_types_slow_stage_sets_the_pace():
    # fp16: the precision both run (V100 has no BF16 units)
    fast = predict_training(job(model={"layers": 4}, precision="fp16", micro_batch=1, pp=2))
    mixed = predict_training(job(model={"layers": 4}, precision="fp16", micro_batch=1, pp=2,
                                 stage_gpus=["H100", "V100"]))
    assert mixed["breakdown"]["train_compute_s"] > fast["breakdown"]["train_compute_s"]
    assert mixed["layout"]["stage_gpus"] == ["H100", "V100"]


def test_interleaving_shrinks_the_bubble():
    a = predict_training(job(model={"layers": 4}, precision="bf16", micro_batch=1, pp=2))
    b = predict_training(job(model={"layers": 4}, precision="bf16", micro_batch=1, pp=2, interleave=2))
    assert b["breakdown"]["pipeline_bubble_s"] == pytest.approx(a["breakdown"]["pipeline_bubble_s"] / 2, rel=1e-9)


def test_even_data_split_waits_for_the_slow_replica(tmp_path):
    """Two replicas, one H100 and one A100: an even split (Megatron, DeepSpeed, verl; what `predict`
    assumes for a training job) gives each half the batch, so the step takes the A100's time for half
    the batch; the split by replica speed (mosearch's trainer, the planner's default) is faster."""
    from problems.placement.model import build_context
    from problems.placement.model.training import train_times
    from problems.placement.specs import load_cluster, load_workload
    from tests.placement.conftest import WORKLOADS, write_cluster

    wl = load_workload(WORKLOADS / "qwen2.5-7b-grpo.yaml")
    two = load_cluster(write_cluster(tmp_path, "two", [
        {"gpu": "H100", "nodes": 1, "gpus_per_node": 1, "region": "r"},
        {"gpu": "A100-80G", "nodes": 1, "gpus_per_node": 1, "region": "r"}]))
    one = load_cluster(write_cluster(tmp_path, "one", [{"gpu": "A100-80G", "nodes": 1, "gpus_per_node": 1,
                                                        "region": "r"}]))
    ones = lambda n: np.ones(1, dtype=np.int64)  # noqa: E731
    f = lambda P: {"tp": ones(1), "pp": ones(1), "micro_batch": ones(1), "train_gpus": np.ones((1, P), np.int64),  # noqa: E731
                   "shared_gpus": np.zeros((1, P), np.int64), "recompute": np.zeros(1, np.int64),
                   "sharding": np.zeros(1, np.int64), "optimizer_offload": np.zeros(1, np.int64)}
    ctx2 = build_context(two, wl)
    ctx2.even_split = True
    even = train_times(ctx2, f(2), np.ones(1))["train_compute_s"][0]
    ctx1 = build_context(one, wl)
    ctx1.samples = wl.samples_per_step // 2
    alone = train_times(ctx1, f(1), np.ones(1))["train_compute_s"][0]
    assert even == pytest.approx(alone, rel=1e-12)
    ctx2.even_split = False
    assert train_times(ctx2, f(2), np.ones(1))["train_compute_s"][0] < even


def test_predict_plan_is_the_planner_score(tmp_path):
    from tests.placement.conftest import problem

    prob = problem("mixed-8", "qwen2.5-7b-grpo")
    rng = np.random.default_rng(3)
    X = prob.layout.repair(prob.xl + rng.random((40, prob.n_var)) * (prob.xu - prob.xl))
    r = prob.evaluate_matrix(X)
    i = int(np.flatnonzero(r["feasible"] > 0)[0]) if (r["feasible"] > 0).any() else 0
    plan = prob.decode(X[i], lifetime=False)
    path = tmp_path / "plan.yaml"
    path.write_text(plan.to_yaml())
    got = predict_plan(path)
    want = prob.evaluate_plans([plan])
    assert got["step_s"] == pytest.approx(float(want["step_s"][0]), rel=1e-12)
    four = predict_plan(path, mini_batches=4)
    assert four["optimizer_s"] == pytest.approx(4 * got["optimizer_s"], rel=1e-9)
    assert four["dp_sync_s"] == pytest.approx(4 * got["dp_sync_s"], rel=1e-9)
    bigger = predict_plan(path, prompts_per_step=2 * prob.workload.prompts_per_step)
    assert bigger["samples_per_step"] == 2 * got["samples_per_step"] and bigger["rollout_bulk_s"] > got["rollout_bulk_s"]


def _cli(*argv):
    return subprocess.run([sys.executable, "-m", "mosearch.cli", "predict", *argv], capture_output=True, text=True)


def test_cli_predict_prints_the_breakdown_and_rejects_bad_layouts():
    ok = _cli("--model", "llama3.1-8b", "--gpu", "H100", "--dp", "2", "--pp", "4", "--stage-layers", "9,8,8,7",
              "--seq-len", "4096", "--global-batch", "64")
    assert ok.returncode == 0, ok.stderr
    assert "pipeline bubble" in ok.stdout and "optimizer" in ok.stdout and "assumptions" in ok.stdout
    bad = _cli("--model", "llama3.1-8b", "--pp", "2", "--stage-layers", "9,8", "--seq-len", "4096",
               "--global-batch", "64")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "stage_layers" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_cli_recompute_kinds_and_sequence_parallel_change_the_memory_prediction():
    base = ("--model", "llama3.1-8b", "--gpu", "H100", "--dp", "1", "--tp", "4", "--seq-len", "4096",
            "--global-batch", "8", "--micro-batch", "2", "--json")
    mem = {}
    for name, extra in (("none", ()), ("full", ("--recompute",)), ("op", ("--recompute", "selective-op")),
                        ("sp", ("--sequence-parallel",))):
        out = _cli(*base, *extra)
        assert out.returncode == 0, out.stderr
        mem[name] = json.loads(out.stdout)["memory_gb"]["activations"]
    # full recomputation keeps only layer inputs; selective op keeps some matmul outputs; SP shards the rest
    assert mem["full"] < mem["op"] < mem["none"] and mem["sp"] < mem["none"]
    bad = _cli(*base, "--recompute", "some")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_job_file_and_its_errors(tmp_path):
    good = tmp_path / "job.yaml"
    good.write_text("model: {layers: 4, hidden: 64, heads: 1, kv_heads: 1, ffn: 128, vocab: 100, mlp: plain}\n"
                    "gpu: A100\nseq_len: 32\nglobal_batch: 8\nmicro_batch: 2\ndp: 2\npp: 2\nstage_layers: [1, 3]\n"
                    "gpu_types: {A100: {bandwidth_tbs: 1.555, memory_gb: 40}}\n")
    ok = _cli("--job", str(good), "--json")
    assert ok.returncode == 0, ok.stderr
    import json

    p = json.loads(ok.stdout)
    assert p["layout"]["stage_layers"] == [1, 3]
    # the A100 80GB's share the runtime reports, scaled to the 40 GB variant: the A100-40G's own published
    # figure (39.56 GiB, data/gpus.yaml RUNTIME) within 0.1%
    assert p["memory_gb"]["capacity"] == pytest.approx(gpu_catalog()["A100-40G"].capacity_gb, rel=1e-3)
    bad = tmp_path / "bad.yaml"
    bad.write_text(good.read_text().replace("global_batch: 8", "global_batch: 7"))
    res = _cli("--job", str(bad))
    assert res.returncode == 2 and str(bad) in res.stderr and "global_batch" in res.stderr
    assert res.stderr.count("\n") == 1


def test_workload_precision_and_attention_reach_the_planner(tmp_path):
    import yaml

    from tests.placement.conftest import WORKLOADS

    base = yaml.safe_load((WORKLOADS / "qwen2.5-7b-grpo.yaml").read_text())
    paths = {}
    for tag, extra in {"fp32": {"precision": "fp32"}, "tf32": {"precision": "tf32"},
                       "unfused": {"precision": "tf32", "attention": "unfused"}}.items():
        paths[tag] = tmp_path / f"{tag}.yaml"
        paths[tag].write_text(yaml.safe_dump(base | extra))
    from problems.placement import PlacementProblem
    from tests.placement.conftest import CLUSTERS

    probs = {t: PlacementProblem.from_files(CLUSTERS / "h100-64.yaml", p) for t, p in paths.items()}
    X = probs["fp32"].layout.repair(probs["fp32"].xl + np.random.default_rng(0).random((50, probs["fp32"].n_var))
                                    * (probs["fp32"].xu - probs["fp32"].xl))
    t = {k: p.evaluate_matrix(X)["train_compute_s"] for k, p in probs.items()}
    assert np.all(t["fp32"] > t["tf32"]) and np.all(t["unfused"] > t["tf32"])
    assert probs["fp32"].ctx.flops[0] == 67e12 and probs["tf32"].ctx.flops[0] == 494e12


def test_replicas_of_different_gpu_types_split_the_batch_evenly():
    """dp 2 over an H100 and a V100 replica: each trains half the batch, the V100 sets the pace (the
    planner's even split), so the compute equals a V100 alone on half the batch (in fp16: V100 has no BF16)."""
    mixed = predict_training(job(precision="fp16", dp=2, micro_batch=1, replica_gpus=["H100", "V100"],
                                 efficiencies={}))
    alone = predict_training(job(precision="fp16", dp=1, micro_batch=1, global_batch=2, gpu="V100", efficiencies={}))
    assert mixed["breakdown"]["train_compute_s"] == pytest.approx(alone["breakdown"]["train_compute_s"], rel=1e-12)
    assert mixed["layout"]["replica_gpus"] == ["H100", "V100"]
    with pytest.raises(ValueError, match="replica_gpus"):
        job(dp=2, replica_gpus=["H100"])


def test_cli_plan_settings_must_be_positive_and_max_at_least_mean(tmp_path):
    """`predict --plan` with a zero or negative setting printed negative or NaN step times (exit 0);
    a --response-max below the mean was scored as given. Each is now one line naming the flag, exit 2."""
    from tests.placement.conftest import problem

    prob = problem("mixed-8", "qwen2.5-7b-grpo")
    x = prob.layout.repair(((prob.xl + prob.xu) / 2)[None, :])[0]
    path = tmp_path / "plan.yaml"
    path.write_text(prob.decode(x, lifetime=False).to_yaml())
    for flags, key in ((("--prompts-per-step", "-5"), "--prompts-per-step"), (("--group-size", "0"), "--group-size"),
                       (("--mini-batches", "0"), "--mini-batches"), (("--response-mean", "0"), "--response-mean"),
                       (("--response-mean", "5000", "--response-max", "100"), "--response-max"),
                       (("--response-max", "100"), "--response-max")):  # the workload's mean is 2048
        res = _cli("--plan", str(path), *flags)
        assert res.returncode == 2, (flags, res.stdout[:200])
        assert res.stderr.count("\n") == 1 and key in res.stderr and "Traceback" not in res.stderr, res.stderr
    ok = _cli("--plan", str(path), "--response-mean", "5000", "--json")  # the limit follows the mean
    assert ok.returncode in (0, 3), ok.stderr
    assert json.loads(ok.stdout)["step_s"] > 0


def test_cli_plan_using_more_gpus_than_its_cluster_has_is_refused(tmp_path):
    """A plan whose cluster file was edited since (fewer GPUs) was clipped to the cluster and another
    plan scored (0.05 samples/s for a 12.8 samples/s plan, exit 0); now one line naming the pool, exit 2."""
    import yaml

    from tests.placement.conftest import problem

    prob = problem("mixed-8", "qwen2.5-7b-grpo")
    rng = np.random.default_rng(3)
    X = prob.layout.repair(prob.xl + rng.random((200, prob.n_var)) * (prob.xu - prob.xl))
    plans = [prob.decode(x, lifetime=False) for x in X]
    plan = next(p for p in plans if any(q.used_gpus == 4 for q in p.pools))
    full = next(q for q in plan.pools if q.used_gpus == 4)
    small = tmp_path / "small.yaml"
    small.write_text("name: mixed-8\nregions:\n  us-east: {inter_node_gbs: 50}\nnode_groups:\n"
                     "  - {name: h100-box, gpu: H100, nodes: 1, gpus_per_node: 2, region: us-east}\n"
                     "  - {name: l40s-box, gpu: L40S, nodes: 1, gpus_per_node: 2, region: us-east}\n")
    data = yaml.safe_load(plan.to_yaml())
    data["cluster"]["path"] = str(small)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(data))
    res = _cli("--plan", str(path))
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stdout[:300]
    assert res.stderr.count("\n") == 1 and f"uses 4 GPUs of {full.pool}" in res.stderr, res.stderr


def test_cli_plan_staleness_above_the_workloads_is_refused(tmp_path, capsys):
    """A plan edited to a staleness bound above the workload's max_staleness was scored (exit 0), clipped to
    the workload's bound by the encoding: another plan's figures. Now one line naming the plan's key, exit 2."""
    from mosearch.cli import main
    from tests.placement.conftest import problem

    prob = problem("mixed-8", "qwen2.5-7b-grpo")
    x = prob.layout.repair(((prob.xl + prob.xu) / 2)[None, :])[0]
    plan = prob.decode(x, lifetime=False)
    k = prob.workload.max_staleness + 3
    plan = plan.model_copy(update={"execution": plan.execution.model_copy(update={"mode": "async",
                                                                                  "staleness_bound": k})})
    path = tmp_path / "plan.yaml"
    path.write_text(plan.to_yaml())
    assert main(["predict", "--plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == (f"mosearch: {path}: execution.staleness_bound: {k} is above the workload's max_staleness "
                   f"{prob.workload.max_staleness} (at most {prob.workload.max_staleness}, the max_staleness of "
                   f"{plan.workload.path})\n")


def test_cli_flags_of_the_other_prediction_are_refused(tmp_path):
    """`--prompts-per-step` on a training job, `--dp` with --plan or with --job were silently ignored
    (figures printed without them, exit 0); now one line naming the flag, exit 2."""
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3.1-8b\ngpu: H100\nseq_len: 1024\nglobal_batch: 8\n")
    base = ("--model", "llama3.1-8b", "--gpu", "H100", "--dp", "4", "--seq-len", "4096", "--global-batch", "64")
    for argv, flag in (((*base, "--prompts-per-step", "4"), "--prompts-per-step"),
                       ((*base, "--mini-batches", "2"), "--mini-batches"),
                       (("--job", str(job), "--dp", "4"), "--dp"),
                       (("--plan", str(job), "--recompute"), "--recompute")):
        res = _cli(*argv)
        assert res.returncode == 2 and res.stderr.count("\n") == 1 and flag in res.stderr, (argv, res.stderr)
        assert "not used" in res.stderr and res.stdout == ""
    assert _cli(*base).returncode in (0, 3) and _cli("--job", str(job)).returncode in (0, 3)  # 3: does not fit


def test_cli_a_job_in_a_precision_its_gpus_cannot_run_is_refused(tmp_path):
    """bf16 on a V100 printed 'BF16 tensor-core matmuls; peak V100 125 TFLOP/s' and 78% MFU, fp8 on an
    A100 an FP8 peak of 312 (the A100 has no FP8 tensor cores); now one line naming the key, exit 2."""
    job = tmp_path / "job.yaml"
    for gpu, precision, runs in (("V100", "bf16", "fp16, tf32, fp32"), ("A100", "fp8", "bf16, fp16, tf32, fp32")):
        job.write_text(f"model: qwen2.5-7b\ngpu: {gpu}\ndp: 8\nseq_len: 4096\nglobal_batch: 64\nprecision: {precision}\n")
        res = _cli("--job", str(job))
        assert res.returncode == 2 and res.stdout == "" and res.stderr.count("\n") == 1, res.stderr
        assert res.stderr.startswith(f"mosearch: {job}: precision: ") and f"cannot run {precision}" in res.stderr
        assert f"({'a precision'} {'A100-80G' if gpu == 'A100' else gpu} runs: {runs})" in res.stderr, res.stderr
    flags = _cli("--model", "qwen2.5-7b", "--stage-gpus", "H100,V100", "--pp", "2", "--seq-len", "1024",
                 "--global-batch", "8")  # bf16, the default: the V100 stage cannot
    assert flags.returncode == 2 and "V100 cannot run bf16" in flags.stderr and flags.stderr.count("\n") == 1
    assert _cli("--model", "qwen2.5-7b", "--stage-gpus", "H100,V100", "--pp", "2", "--seq-len", "1024",
                "--global-batch", "8", "--precision", "fp16").returncode in (0, 3)


def test_cli_interleave_and_sequence_parallel_need_a_layout_they_split():
    """--interleave 3 with pp 1, 8 virtual stages over 7-layer stages, and --sequence-parallel with tp 1 were
    scored (the last silently ignored); now one line naming the key, exit 2. Virtual stages of uneven layers
    (3 over 7) are scored, with a line saying so: torchtitan runs them, and a validation row has them."""
    base = ("--model", "qwen2.5-7b", "--gpu", "H100", "--seq-len", "1024", "--global-batch", "8")  # 28 layers
    for flags, line in ((("--interleave", "3", "--pp", "1"),
                         "interleave: 3 virtual stages per rank without a pipeline (pp 1) (1, or pp > 1)"),
                        (("--interleave", "8", "--pp", "4"),
                         "interleave: 8 virtual stages per rank for the 7 layer(s) of pipeline stage 0 (28 layers over "
                         "pp 4) (at most the layers of every stage: a virtual stage holds at least one layer)"),
                        (("--sequence-parallel", "--tp", "1"),
                         "sequence_parallel: sequence parallelism with tp 1 (tp > 1 (it splits the layer norms' and "
                         "dropout's tokens over the tensor-parallel ranks), or no sequence parallelism)")):
        res = _cli(*base, *flags)
        assert res.returncode == 2 and res.stdout == "" and res.stderr == f"mosearch: command line: {line}\n", res.stderr
    assert _cli(*base, "--interleave", "7", "--pp", "4").returncode in (0, 3)
    uneven = _cli(*base, "--interleave", "3", "--pp", "4", "--json")
    assert uneven.returncode in (0, 3), uneven.stderr
    assert any(a.startswith("interleave 3: virtual stages of uneven layers (a 7-layer stage as 3, 2, 2)")
               for a in json.loads(uneven.stdout)["assumptions"])
    assert _cli(*base, "--sequence-parallel", "--tp", "2").returncode in (0, 3)


def test_job_file_takes_the_recompute_names_the_command_line_takes(tmp_path):
    """`--recompute full` worked on the command line, `recompute: full` in a job file was refused."""
    base = ("--model", "llama3.1-8b", "--gpu", "H100", "--seq-len", "4096", "--global-batch", "8", "--json")
    job = tmp_path / "job.yaml"
    for name in ("full", "selective-op", "selective_op"):
        job.write_text(f"model: llama3.1-8b\ngpu: H100\nseq_len: 4096\nglobal_batch: 8\nrecompute: {name}\n")
        from_file, from_flag = _cli("--job", str(job), "--json"), _cli(*base, "--recompute", name)
        assert from_file.returncode in (0, 3) and from_flag.returncode in (0, 3), (name, from_file.stderr, from_flag.stderr)
        assert json.loads(from_file.stdout)["memory_gb"] == json.loads(from_flag.stdout)["memory_gb"]


def test_the_fsdp_assumption_is_listed_only_where_parameters_are_sharded():
    def listed(**kw):
        return any(a.startswith("ZeRO-3 / FSDP") for a in predict_training(job(**kw))["assumptions"])

    assert not listed(sharding="none") and not listed(sharding="zero1", dp=2, micro_batch=2)
    assert not listed(sharding="zero3", dp=1)  # one replica gathers nothing
    assert listed(sharding="zero3", dp=2, micro_batch=2) and listed(sharding="fsdp", dp=2, micro_batch=2)


def test_cli_an_rl_step_flag_given_as_zero_without_a_plan_is_refused(capsys):
    """`--mini-batches 0` without --plan was taken as not given (0 == False) and the job predicted."""
    from mosearch.cli import main

    for flag in ("--mini-batches", "--group-size", "--response-max"):
        assert main(["predict", "--seq-len", "4096", "--global-batch", "16", "--model", "qwen2.5-0.5b", "--gpu", "H100",
                     flag, "0"]) == 2
        assert capsys.readouterr().err.startswith(f"mosearch: command line: {flag}: not used without --plan")


def test_cli_a_sequence_beyond_the_models_context_is_refused(capsys):
    """--seq-len 999999 for Qwen2.5-7B was predicted (and called out of memory, exit 3): it is bad input."""
    from mosearch.cli import main

    assert main(["predict", "--model", "qwen2.5-7b", "--gpu", "H100", "--seq-len", "999999", "--global-batch", "8"]) == 2
    assert "beyond the 131072 of qwen2.5-7b's context" in capsys.readouterr().err


def test_a_job_whose_allocated_peak_fits_is_not_refused_for_the_allocators_assumed_fragments():
    """The verdict is the allocated peak's (what the job must hold): a reserved estimate over capacity makes it
    tight, not refused (published runs reserve less than the 30% fragments assumed where activations dominate);
    an allocated peak over capacity is refused."""
    h100 = gpu_catalog()["H100"]

    def at(mem_gb):  # the same job on an H100 variant whose runtime reports `mem_gb`
        eff = {"H100": dict(UNIT["H100"])}
        out = predict_training(job(seq_len=2048, micro_batch=4, global_batch=4, efficiencies=eff,
                                   gpu_types={"H100": {"memory_gb": mem_gb * h100.memory_gb / h100.capacity_gb}}))
        assert out["memory_gb"]["capacity"] == pytest.approx(mem_gb, rel=1e-9)
        return out

    m = at(80.0)["memory_gb"]
    alloc, reserved = m["allocated"], m["reserved"]
    assert reserved > alloc
    between = at((alloc + reserved) / 2)
    assert between["fits"] and between["tight"]
    assert not at(alloc * 0.9)["fits"]
    roomy = at(reserved * 1.1)
    assert roomy["fits"] and not roomy["tight"]


@pytest.mark.parametrize("precision, w, g", [
    ("fp32", 4, 4),  # fp32 weights, fp32 gradients
    ("bf16", 2, 4),  # bf16 weights; FSDP2 upcasts an accumulated unsharded gradient to its fp32 reduce dtype
])
def test_pipeline_stages_keep_fsdp_weights_and_gradients_unsharded(precision, w, g):
    """Under torch.distributed.pipelining a stage's FSDP units stay gathered from their first backward to the
    step's end and their gradients accumulate unsharded (`memory.pipelined_unsharded`): the whole stage's
    weights and gradients beyond the rank's shard, where without pipeline stages two units are gathered."""
    # a stage of the 4-layer model over pp 2: 2 layers of 4 h^2 + 2 h ffn + 2 h parameters, one embedding
    # matrix (vocab x hidden) and the final norm (hidden)
    stage = 2 * (4 * 64 * 64 + 2 * 64 * 128 + 2 * 64) + 100 * 64 + 64
    kw = dict(model={"layers": 4}, precision=precision, dp=4, global_batch=16, micro_batch=1, sharding="fsdp")
    got = predict_training(job(pp=2, **kw))["memory_gb"]
    assert got["gathered_weights"] * 1e9 == pytest.approx(stage * w * 3 / 4, rel=1e-9)
    assert got["unsharded_gradients"] * 1e9 == pytest.approx(stage * g * 3 / 4, rel=1e-9)
    # without pipeline stages: the unit computing and the one prefetched, weights only (5 units: 4 layers + root)
    flat = predict_training(job(**kw))["memory_gb"]
    whole = 4 * (4 * 64 * 64 + 2 * 64 * 128 + 2 * 64) + 100 * 64 + 64  # tied embeddings: one matrix
    assert flat["gathered_weights"] * 1e9 == pytest.approx(2 * whole / 5 * w * 3 / 4, rel=1e-9)
    assert flat["unsharded_gradients"] == 0.0
    # ZeRO-1 shards no weights: nothing gathered, pipelined or not
    z1 = predict_training(job(pp=2, **(kw | {"sharding": "zero1"})))["memory_gb"]
    assert z1["gathered_weights"] == z1["unsharded_gradients"] == 0.0
    # and the prediction says so where it applies
    said = lambda **k: any("pipeline stages (torch.distributed.pipelining)" in a  # noqa: E731
                           for a in predict_training(job(**(kw | k)))["assumptions"])
    assert said(pp=2) and not said() and not said(pp=2, sharding="zero1")
