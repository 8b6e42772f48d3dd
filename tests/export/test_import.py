"""`mosearch import`: verl / AReaL configs read back as plans; export then import gives the same plan
(up to what the target cannot tell apart); the shipped example configs import and score."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import yaml

from mosearch.cli import main
from mosearch.commands.import_config import import_plan
from mosearch.export import ExportContext, render
from mosearch.export.read import apply_overrides
from problems.placement.plan import file_sha256
from problems.placement.problem import PlacementProblem
from problems.placement.specs import load_cluster, load_workload

from .conftest import front_paths

ROOT = Path(__file__).resolve().parents[2]
H100 = ROOT / "problems/clusters/h100-64.yaml"
EXAMPLES = ROOT / "docs/examples"


# The executors' own example configs live beside the repository (shared/data/executor-examples), not in
# it. A clone elsewhere skips these tests, saying why; CI sets REQUIRE_EXAMPLES so that their absence
# fails the run instead of passing it with the tests skipped.
EXAMPLES_SHARED = Path(__file__).resolve().parents[3] / "shared/data/executor-examples"
REQUIRE_EXAMPLES = "MOSEARCH_REQUIRE_EXECUTOR_EXAMPLES"


@pytest.fixture
def executor_examples() -> Path:
    if EXAMPLES_SHARED.is_dir():
        return EXAMPLES_SHARED
    missing = f"the executors' example configs are not at {EXAMPLES_SHARED}"
    if os.environ.get(REQUIRE_EXAMPLES) == "1":
        pytest.fail(f"{missing}, and {REQUIRE_EXAMPLES}=1 requires them", pytrace=False)
    pytest.skip(f"{missing} (set {REQUIRE_EXAMPLES}=1 to make this a failure)")


needs_examples = pytest.mark.usefixtures("executor_examples")


def placement(plan) -> dict:
    """What an export says of a plan: GPUs per pool and role, engine TP of the generating pools, layout,
    mode (zero3 and fsdp are one level in the model: written zero3)."""
    t = plan.train
    return {"pools": sorted((p.pool, p.rollout_gpus, p.train_gpus, p.shared_gpus, p.rollout_tp if p.rollout_engines else 1)
                            for p in plan.pools if p.used_gpus),
            "rollout": plan.rollout.model_dump(), "mode": plan.execution.mode, "k": plan.execution.staleness_bound,
            "chunks": plan.execution.pipeline_chunks, "route": plan.weight_sync.route,
            "train": dict(t.model_dump(), sharding="zero3" if t.sharding == "fsdp" else t.sharding)}


ROUND_TRIP = [("verl", c, w) for c, w in (("mixed-64", "qwen2.5-7b-grpo"), ("h100-64", "llama3.1-70b-ppo"),
                                          ("mixed-64", "llama3.1-70b-ppo"), ("mixed-8", "qwen2.5-1.5b-grpo"))]
ROUND_TRIP += [("areal", c, w) for c, w in (("mixed-64", "qwen2.5-7b-grpo"), ("h100-64", "llama3.1-70b-ppo"),
                                           ("mixed-8", "qwen2.5-1.5b-grpo"))]


@pytest.mark.slow
@pytest.mark.parametrize("target,cluster,workload", ROUND_TRIP, ids=[f"{t}-{c}-{w}" for t, c, w in ROUND_TRIP])
def test_export_then_import_gives_back_every_front_plan(fronts, tmp_path, target, cluster, workload):
    """Every plan of a front searched for the target: its export (as `mosearch export` writes it, header
    and all) read back by `mosearch import` is the same placement, knob for knob."""
    plans, c, w = fronts(target, cluster, workload)
    ctx = ExportContext.from_specs(c, w)
    cpath, wpath = front_paths(cluster, workload)
    for i, plan in enumerate(plans):
        path = tmp_path / f"{target}-{i}.yaml"
        path.write_text(render(target, plan, ctx))
        back, _ = import_plan(target, str(path), [], str(cpath), str(wpath))
        assert placement(back) == placement(plan), plan.plan_id
    assert plans


def test_hydra_overrides_apply_as_on_the_command_line():
    cfg = {"trainer": {"nnodes": 1}}
    out = apply_overrides(cfg, ["trainer.nnodes=2", "+trainer.v1.trainer_mode=separate_async",
                                "actor_rollout_ref.rollout.gpu_memory_utilization=0.6"], "f")
    assert out["trainer"] == {"nnodes": 2, "v1": {"trainer_mode": "separate_async"}}
    assert out["actor_rollout_ref"]["rollout"]["gpu_memory_utilization"] == 0.6


@pytest.mark.parametrize("source,config,overrides,mode", [
    ("verl", "verl-gsm8k-grpo.yaml", [], "colocated"),
    ("verl", "verl-gsm8k-grpo.yaml", ["trainer.v1.trainer_mode=separate_async", "actor_rollout_ref.hybrid_engine=false",
                                      "actor_rollout_ref.rollout.nnodes=1", "actor_rollout_ref.rollout.n_gpus_per_node=8",
                                      "trainer.v1.sampler.max_off_policy_threshold=3"], "async"),
    ("areal", "areal-gsm8k-grpo.yaml", [], "async"),
])
def test_shipped_example_configs_import_and_score(source, config, overrides, mode, capsys):
    workload = str(EXAMPLES / config.replace(".yaml", "-workload.yaml"))
    run = ["import", "--from", source, str(EXAMPLES / config), *overrides, "--cluster", str(H100), "--workload", workload]
    assert main(run) == 0
    out = capsys.readouterr().out
    assert out.startswith("your config: ") and "samples/s at $" in out
    plan, warnings = import_plan(source, str(EXAMPLES / config), overrides, str(H100), workload)
    assert plan.execution.mode == mode
    assert plan.predicted["throughput_samples_s"] > 0 and plan.predicted["peak_mem_frac"] <= 1
    # its own workload: no value differs, but the staleness the overrides give the synchronous example
    stale = (["trainer.v1.sampler.max_off_policy_threshold=3 (staleness 2): above the workload's max_staleness 0: "
              "scored as the config runs."] if overrides else [])
    assert [w for w in warnings if "the workload's" in w] == stale
    if mode == "async":
        assert plan.execution.staleness_bound == 2


# The executors' own dense GRPO/PPO examples (verl scripts reduced to their arguments, AReaL YAMLs): what
# each must read as, from its files: (GPUs rollout, train, shared), (dp, tp, pp), engine TP, mode and
# staleness, memory share, micro-batch (use_dynamic_bsz: ppo_max_token_len_per_gpu, default 16384, over the
# longest sample). Workloads only score them (a preset of the example's size whose heads the TPs divide).
W7, W32, W15 = "qwen2.5-7b-grpo", "qwen2.5-32b-grpo", "qwen2.5-1.5b-grpo"
VERL_EXAMPLES = {
    "verl-v0.7.0/grpo_run_qwen2-7b_math.args": (W7, (0, 0, 8), (8, 1, 1), 2, "colocated", 0, 0.6, 16),
    "verl-v0.7.0/grpo_run_qwen2-7b_math_megatron.args": (W7, (0, 0, 8), (2, 2, 2), 2, "colocated", 0, 0.6, 4),
    "verl-v0.7.0/grpo_run_qwen2-7b_seq_balance.args": (W7, (0, 0, 8), (8, 1, 1), 2, "colocated", 0, 0.6, 15),
    "verl-v0.9.0/grpo_run_mistral_nemo_12b_skyworkrm_fsdp.args": (W7, (0, 0, 8), (8, 1, 1), 4, "colocated", 0, 0.7, 10),
    "verl-v0.9.0/grpo_run_qwen2-7b_math_megatron_fsdp.args": (W7, (0, 0, 8), (2, 4, 1), 4, "colocated", 0, 0.4, 2),
    "verl-v0.9.0/grpo_run_qwen2_5_32b_fsdp.args": (W32, (0, 0, 16), (16, 1, 1), 8, "colocated", 0, 0.4, 2),
    "verl-v0.9.0/grpo_run_qwen3_4b_fsdp.args": (W7, (0, 0, 8), (8, 1, 1), 2, "colocated", 0, 0.6, 1),
    "verl-v0.9.0/grpo_run_qwen3_8b_fsdp.args": (W7, (0, 0, 8), (8, 1, 1), 2, "colocated", 0, 0.6, 8),
    "verl-v0.9.0/grpo_run_qwen3_8b_megatron.args": (W7, (0, 0, 8), (2, 2, 2), 2, "colocated", 0, 0.6, 8),
    "verl-v0.9.0/grpo_run_seed_oss_36b_fsdp.args": (W32, (0, 0, 8), (8, 1, 1), 2, "colocated", 0, 0.6, 10),
    "verl-v0.9.0/ppo_run_qwen3_8b_fsdp.args": (W7, (0, 0, 8), (8, 1, 1), 2, "colocated", 0, 0.6, 8),
    "verl-v0.9.0/ppo_run_qwen3_8b_megatron.args": (W7, (0, 0, 8), (2, 2, 2), 2, "colocated", 0, 0.6, 8),
}
AREAL_EXAMPLES = {
    "areal-v1.0.4/gsm8k_grpo.yaml": (W15, (4, 4, 0), (4, 1, 1), 1, "async", 2, 0.8),
    "areal-v1.0.4/gsm8k_grpo_megatron.yaml": (W15, (4, 4, 0), (4, 1, 1), 1, "async", 2, 0.8),
    "areal-v1.0.4/gsm8k_ppo.yaml": (W15, (4, 4, 0), (4, 1, 1), 1, "async", 2, 0.8),
    "areal-v1.0.4/gsm8k_ppo_megatron.yaml": (W15, (4, 4, 0), (4, 1, 1), 1, "async", 2, 0.8),
}
REFUSED = {
    "areal-v1.0.4/gsm8k_grpo_lora.yaml": "rollout.use_lora: LoRA trains adapters",
    "areal-v1.0.4/gsm8k_grpo_megatron_lora.yaml": "rollout.use_lora: LoRA trains adapters",
    "areal-v1.0.4/gsm8k_grpo_megatron_lora_moe.yaml": "rollout.use_lora: LoRA trains adapters",
    "areal-v1.0.4/gsm8k_grpo_npu.yaml": "actor.scheduling_spec.env_vars: runs on Ascend NPUs",
    "areal-v1.0.4/gsm8k_grpo_cpu.yaml": "cluster.n_gpus_per_node: 0: a CPU-only template",
}


def _shape(plan):
    roles = tuple(sum(getattr(p, f"{r}_gpus") for p in plan.pools) for r in ("rollout", "train", "shared"))
    rtp = {p.rollout_tp for p in plan.pools if p.rollout_engines}
    return roles, (plan.train.dp, plan.train.tp, plan.train.pp), rtp


@needs_examples
def test_every_example_is_read_or_refused_in_one_line():
    listed = {f"{d.name}/{f.name}" for d in EXAMPLES_SHARED.iterdir() if d.is_dir() for f in d.iterdir()}
    assert listed == set(VERL_EXAMPLES) | set(AREAL_EXAMPLES) | set(REFUSED)


@needs_examples
@pytest.mark.parametrize("name", sorted(VERL_EXAMPLES))
def test_verl_examples_import_as_they_run(name, capsys):
    """Run as the script runs main_ppo: its arguments from the file (`@FILE`), --config-name included."""
    wl, roles, layout, rtp, mode, k, kv, micro = VERL_EXAMPLES[name]
    workload = ROOT / f"problems/workloads/{wl}.yaml"
    rc = main(["import", "--from", "verl", f"@{EXAMPLES_SHARED / name}", "--cluster", str(H100),
               "--workload", str(workload)])
    assert rc == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("your config: ")
    args = [a for a in (EXAMPLES_SHARED / name).read_text().splitlines() if a]
    name_arg = next((a.split("=", 1)[1] for a in args if a.startswith("--config-name=")), None)
    overrides = [a for a in args if not a.startswith("--")]
    plan, warnings = import_plan("verl", None, overrides, str(H100), str(workload), config_name=name_arg)
    assert _shape(plan) == (roles, layout, {rtp})
    assert (plan.execution.mode, plan.execution.staleness_bound) == (mode, k)
    assert plan.rollout.kv_mem_frac == kv
    # the micro-batch per GPU (dynamic batch size: its token cap over the longest sample)
    assert plan.train.micro_batch == micro


@needs_examples
@pytest.mark.parametrize("name", sorted(AREAL_EXAMPLES))
def test_areal_examples_import_as_they_run(name):
    wl, roles, layout, rtp, mode, k, kv = AREAL_EXAMPLES[name]
    plan, warnings = import_plan("areal", str(EXAMPLES_SHARED / name), [], str(H100),
                                 str(ROOT / f"problems/workloads/{wl}.yaml"))
    assert _shape(plan) == (roles, layout, {rtp})
    assert (plan.execution.mode, plan.execution.staleness_bound) == (mode, k)
    assert plan.rollout.kv_mem_frac == kv  # SGLang's mem_fraction_static, not vLLM's 0.9
    assert any("SGLang" in w for w in warnings)


@needs_examples
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_variants_the_plans_cannot_express_are_refused_in_one_line(name, capsys):
    rc = main(["import", "--from", "areal", str(EXAMPLES_SHARED / name), "--cluster", str(H100),
               "--workload", str(ROOT / f"problems/workloads/{W15}.yaml")])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"mosearch: {EXAMPLES_SHARED / name}: {REFUSED[name]}")


def test_a_front_of_another_workload_is_refused(tmp_path, capsys):
    cluster, workload = load_cluster(H100), load_workload(ROOT / "problems/workloads/qwen2.5-7b-grpo.yaml")
    pb = PlacementProblem(cluster, workload)
    X = pb.layout.repair(pb.xl + np.random.default_rng(0).random((10, pb.n_var)) * (pb.xu - pb.xl))
    from mosearch.results import write_front, write_run_info

    write_front(tmp_path, [pb.decode(x, lifetime=False) for x in X])
    write_run_info(tmp_path, {"cluster": {"path": str(H100), "sha256": file_sha256(H100)},
                              "workload": {"path": "problems/workloads/qwen2.5-7b-grpo.yaml",
                                           "sha256": file_sha256(ROOT / "problems/workloads/qwen2.5-7b-grpo.yaml")}})
    other = ROOT / "problems/workloads/qwen2.5-1.5b-grpo.yaml"
    rc = main(["import", "--from", "areal", str(EXAMPLES / "areal-gsm8k-grpo.yaml"), "--cluster", str(H100),
               "--workload", str(other), "--front", str(tmp_path), "--out", str(tmp_path / "mine.yaml")])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and ": workload: qwen2.5-1.5b-grpo" in err and "is not the workload of the front" in err
    # the same plan shown against that front: refused the same way
    assert main(["import", "--from", "areal", str(EXAMPLES / "areal-gsm8k-grpo.yaml"), "--cluster", str(H100),
                 "--workload", str(other), "--out", str(tmp_path / "mine.yaml")]) == 0
    capsys.readouterr()
    assert main(["show", str(tmp_path), "--with", str(tmp_path / "mine.yaml")]) == 2
    assert "is not the workload of the front" in capsys.readouterr().err


def test_import_is_set_against_a_front(tmp_path, capsys):
    cluster, workload = load_cluster(H100), load_workload(ROOT / "problems/workloads/qwen2.5-7b-grpo.yaml")
    pb = PlacementProblem(cluster, workload)
    X = pb.layout.repair(pb.xl + np.random.default_rng(0).random((30, pb.n_var)) * (pb.xu - pb.xl))
    from mosearch.results import write_front
    plans = [pb.decode(x, lifetime=False) for x in X]
    write_front(tmp_path, plans)
    assert main(["import", "--from", "areal", str(EXAMPLES / "areal-gsm8k-grpo.yaml"), "--cluster", str(H100),
                 "--workload", str(ROOT / "problems/workloads/qwen2.5-7b-grpo.yaml"), "--front", str(tmp_path),
                 "--out", str(tmp_path / "mine.yaml")]) == 0
    out = capsys.readouterr().out.splitlines()
    mine = yaml.safe_load((tmp_path / "mine.yaml").read_text())["predicted"]
    same_cost = [p for p in plans if p.predicted["cost_usd_h"] <= mine["cost_usd_h"] + 1e-9]
    best = max(same_cost, key=lambda p: p.predicted["throughput_samples_s"])
    assert f"the front has {best.predicted['throughput_samples_s']:.3g} samples/s" in out[-1]
    # the same comparison under the front's table
    assert main(["show", str(tmp_path), "--with", str(tmp_path / "mine.yaml"), "--limit", "3"]) == 0
    shown = capsys.readouterr().out
    assert out[0] in shown and out[-1] in shown


def test_bad_config_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("rollout: {backend: 'vllm:d2x4'}\nactor: {backend: 'fsdp:d4'}\n")
    assert main(["import", "--from", "areal", str(bad), "--cluster", str(H100),
                 "--workload", str(ROOT / "problems/workloads/qwen2.5-7b-grpo.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"mosearch: {bad}: rollout.backend: cannot read 'vllm:d2x4' (an AReaL backend string such as vllm:d2t4 or fsdp:d4t1)"


def test_a_one_gpu_node_is_named_as_one_gpu_and_read_back():
    """The header names a node of one GPU `GPU 3` (not `GPUs 3-3`), and the import reads it as one GPU."""
    from mosearch.export.read import layout_from_header

    header = "# node 0: L4@eu, GPUs 0-1: rollout 2\n# node 1: H100@us, GPU 2: train 1\n"
    assert layout_from_header(header) == {"L4@eu": {"rollout_gpus": 2, "train_gpus": 0, "shared_gpus": 0},
                                          "H100@us": {"rollout_gpus": 0, "train_gpus": 1, "shared_gpus": 0}}


@pytest.mark.parametrize("source,key", [("verl", "trainer.n_gpus_per_node"), ("areal", "cluster.n_gpus_per_node")])
def test_more_gpus_per_node_than_the_clusters_nodes_hold_is_one_line(tmp_path, capsys, source, key):
    cfg = tmp_path / "big-nodes.yaml"
    cfg.write_text("rollout: {backend: 'vllm:d2t4'}\nactor: {backend: 'fsdp:d8'}\ncluster: {n_gpus_per_node: 16}\n"
                   if source == "areal" else "trainer: {n_gpus_per_node: 16, nnodes: 1}\n"
                   "actor_rollout_ref: {actor: {ppo_micro_batch_size_per_gpu: 2}}\n")
    assert main(["import", "--from", source, str(cfg), "--cluster", str(H100),
                 "--workload", str(ROOT / "problems/workloads/qwen2.5-7b-grpo.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"mosearch: {cfg}: {key}: 16 GPUs per node, but the nodes of cluster") and "\n" not in err


GRPO_NO_KL = ("name: q15\nmodel: qwen2.5-1.5b\nalgorithm: grpo\nprompts_per_step: 64\nsamples_per_prompt: 8\n"
              "prompt_len: 512\nresponse_len: {mean: 1024, max: 4096}\nmax_staleness: 2\nkl_reference: false\n")
VERL_ARGS = ["algorithm.adv_estimator=grpo", "data.train_batch_size=64", "data.max_prompt_length=512",
             "data.max_response_length=4096", "actor_rollout_ref.actor.ppo_mini_batch_size=64",
             "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", "actor_rollout_ref.rollout.n=8",
             "actor_rollout_ref.rollout.tensor_model_parallel_size=2", "actor_rollout_ref.model.use_liger=True",
             "trainer.n_gpus_per_node=8", "trainer.nnodes=1"]


def _import(tmp_path, source, inputs, workload=GRPO_NO_KL):
    wl = tmp_path / "workload.yaml"
    wl.write_text(workload)
    return main(["import", "--from", source, *inputs, "--cluster", str(H100), "--workload", str(wl)])


def test_every_config_value_other_than_the_workloads_is_said(tmp_path, capsys):
    """A verl GRPO script's samples, response cap, estimator and KL loss were scored as the workload's with no
    word (only the prompt count was said): one line each, the config's key and value, the workload's."""
    args = tmp_path / "run.args"
    args.write_text("\n".join(VERL_ARGS) + "\n")
    assert _import(tmp_path, "verl", [f"@{args}"]) == 0
    assert capsys.readouterr().err == ""  # the script's own workload: nothing to say
    assert _import(tmp_path, "verl", [f"@{args}", "actor_rollout_ref.rollout.n=16", "data.max_response_length=16384",
                                      "algorithm.adv_estimator=gae", "actor_rollout_ref.actor.use_kl_loss=True"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "mosearch import: actor_rollout_ref.rollout.n=16: the workload's samples_per_prompt is 8: scored with the "
        "workload's.",
        "mosearch import: data.max_response_length=16384: the workload's response_len.max is 4096: scored with the "
        "workload's.",
        "mosearch import: algorithm.adv_estimator=gae (PPO with a critic): the workload's algorithm is grpo: scored "
        "with the workload's.",
        "mosearch import: actor_rollout_ref.actor.use_kl_loss=True (a reference model): the workload's kl_reference "
        "is false: scored with the workload's."]


def test_areal_values_other_than_the_workloads_are_said_and_its_staleness_scored(tmp_path, capsys):
    cfg = tmp_path / "areal.yaml"
    cfg.write_text("rollout: {backend: 'vllm:d4p1t1', max_head_offpolicyness: 4}\nactor: {backend: 'fsdp:d4p1t1', "
                   "ppo_n_minibatches: 1, mb_spec: {max_tokens_per_mb: 10240}}\ntrain_dataset: {batch_size: 64, max_length: 1024}\n"
                   "gconfig: {n_samples: 8, max_new_tokens: 4096}\ncritic: {backend: '${actor.backend}'}\n"
                   "ref: {backend: '${actor.backend}'}\n")
    assert _import(tmp_path, "areal", [str(cfg), "--out", str(tmp_path / "plan.yaml")]) == 0
    said = [w for w in capsys.readouterr().err.splitlines() if "elementwise_kernels" not in w]
    assert said == [
        "mosearch import: critic.backend=fsdp:d4p1t1 (PPO with a critic): the workload's algorithm is grpo: scored "
        "with the workload's.",
        "mosearch import: actor.kl_ctl=0.1 (AReaL's default) (a reference model): the workload's kl_reference is "
        "false: scored with the workload's.",
        "mosearch import: train_dataset.max_length=1024: the workload's prompt_len is 512: scored with the workload's.",
        "mosearch import: rollout.max_head_offpolicyness=4: above the workload's max_staleness 2: scored as the "
        "config runs."]
    # scored at the staleness the config runs, not clipped to the workload's bound as "the nearest plan"; the
    # predicted lag is the flow's at bound 4 (AReaL takes the engine's log-probs, so training is no bottleneck here
    # and rollout runs about one version ahead)
    plan = yaml.safe_load((tmp_path / "plan.yaml").read_text())
    assert plan["execution"]["staleness_bound"] == 4 and 1.0 <= plan["predicted"]["staleness"] <= 4.0


@pytest.mark.parametrize("given,refused", [
    ([], None),  # verl's defaults: 1024 prompts a step, mini-batches of 256: 4 optimizer steps (not 64 / 256)
    (["actor_rollout_ref.actor.ppo_mini_batch_size=2048"], "2048 prompts, more than data.train_batch_size 1024 "
                                                           "(verl's default)"),
    (["data.train_batch_size=32"], "256 prompts, more than data.train_batch_size 32"),
])
def test_verl_batch_defaults_and_a_mini_batch_verl_refuses(tmp_path, capsys, given, refused):
    """A config leaving data.train_batch_size out was read with the workload's batch: `0.125 optimizer steps per
    step` for 32 prompts and verl's mini-batch of 256, a config verl itself refuses."""
    args = [a for a in VERL_ARGS if not a.startswith(("data.train_batch_size", "actor_rollout_ref.actor.ppo_mini"))]
    rc = _import(tmp_path, "verl", [*args, *given], GRPO_NO_KL.replace("prompts_per_step: 64", "prompts_per_step: 32"))
    err = capsys.readouterr().err
    if refused is None:
        assert rc == 0
        assert ("mosearch import: data.train_batch_size=1024 (verl's default): the workload's prompts_per_step is 32: "
                "scored with the workload's.") in err.splitlines()
        assert "the config takes 4 optimizer steps per step;" in err
    else:
        assert rc == 2 and err == (f"mosearch: command line: actor_rollout_ref.actor.ppo_mini_batch_size: {refused}: "
                                   "verl refuses it (at most data.train_batch_size)\n")


def test_a_bad_value_names_the_key_written_and_where(tmp_path, capsys):
    """`imp/v1.yaml: rollout.kv_mem_frac: got 1.7` for gpu_memory_utilization=1.7 on the command line: the plan's
    key, and the file blamed. Now the key the user wrote, in the file, on the command line or in an @FILE."""
    cfg = tmp_path / "v1.yaml"
    cfg.write_text("actor_rollout_ref: {actor: {ppo_micro_batch_size_per_gpu: 4}, rollout: {gpu_memory_utilization: "
                   "0.6}}\ntrainer: {n_gpus_per_node: 8, nnodes: 1}\n")
    args = tmp_path / "more.args"
    args.write_text("actor_rollout_ref.rollout.gpu_memory_utilization=1.5\n")
    key, expected = "actor_rollout_ref.rollout.gpu_memory_utilization", "(a share of GPU memory above 0 and at most 0.98)"
    for inputs, where, got in (([f"{key}=1.7"], "command line", "1.7"), ([f"@{args}"], str(args), "1.5"),
                               ([f"@{args}", f"{key}=0.99"], "command line", "0.99")):
        assert _import(tmp_path, "verl", [str(cfg), *inputs]) == 2
        assert capsys.readouterr().err == f"mosearch: {where}: {key}: got {got} {expected}\n"
    cfg.write_text(cfg.read_text().replace("0.6", "1.7"))
    assert _import(tmp_path, "verl", [str(cfg)]) == 2
    assert capsys.readouterr().err == f"mosearch: {cfg}: {key}: got 1.7 {expected}\n"
    # a TP the model's heads refuse: the config's key, not the plan's pools[0].rollout_tp
    assert _import(tmp_path, "verl", [str(cfg), f"{key}=0.6", "actor_rollout_ref.rollout.tensor_model_parallel_size=8"]) == 2
    assert capsys.readouterr().err.startswith(
        "mosearch: command line: actor_rollout_ref.rollout.tensor_model_parallel_size: 12 attention heads")


def test_a_missing_argument_file_is_one_line(tmp_path, capsys):
    """A missing @FILE printed argparse's usage and a raw errno."""
    gone = tmp_path / "gone.args"
    assert _import(tmp_path, "verl", [f"@{gone}"]) == 2
    assert capsys.readouterr().err == (f"mosearch: {gone}: cannot read it: No such file or directory "
                                       "(a file of arguments, one per line)\n")


def test_overrides_may_follow_the_options_and_a_usage_error_is_one_line(tmp_path, capsys):
    """`mosearch import --from verl CONFIG --cluster C --workload W a.b=v`, as verl's scripts put overrides
    last: the trailing override counts as one given before the options (argparse refused it in several
    lines); an option nobody knows is one line."""
    cfg = tmp_path / "v1.yaml"
    cfg.write_text("actor_rollout_ref: {actor: {ppo_micro_batch_size_per_gpu: 4}, rollout: {gpu_memory_utilization: "
                   "0.6}}\ntrainer: {n_gpus_per_node: 8, nnodes: 1}\n")
    wl = tmp_path / "workload.yaml"
    wl.write_text(GRPO_NO_KL)
    key = "actor_rollout_ref.rollout.gpu_memory_utilization"
    before = main(["import", "--from", "verl", str(cfg), f"{key}=1.7", "--cluster", str(H100), "--workload", str(wl)])
    err_before = capsys.readouterr().err
    after = main(["import", "--from", "verl", str(cfg), "--cluster", str(H100), "--workload", str(wl), f"{key}=1.7"])
    assert (before, after) == (2, 2) and capsys.readouterr().err == err_before
    assert main(["import", "--from", "verl", str(cfg), "--cluster", str(H100), "--workload", str(wl), "--bogus"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unrecognized arguments: --bogus" in err
