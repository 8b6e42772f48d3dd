"""`mosearch train`'s predicted-vs-measured: re-predicted with the run's actual settings (no Ray here:
the run's summary is written by hand, as the driver writes it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from mosearch.commands.train import comparison_table, print_comparison
from problems.placement.predict import LOCAL_CLUSTER, predict_plan, predict_run
from problems.placement.problem import PlacementProblem

ROOT = LOCAL_CLUSTER.parents[2]


def _plan(tmp_path, cluster, workload, seed=0):
    prob = PlacementProblem.from_files(ROOT / "problems/clusters" / cluster, ROOT / "problems/workloads" / workload)
    X = prob.layout.repair(prob.xl + np.random.default_rng(seed).random((20, prob.n_var)) * (prob.xu - prob.xl))
    plan = prob.decode(X[0], lifetime=False)
    path = tmp_path / "plan.yaml"
    path.write_text(plan.to_yaml())
    return prob, plan, path


def _summary(emulated=False, engines=1, dp=1):
    return {"run": {"model": "tiny", "algo": "grpo", "prompts_per_step": 64, "group_size": 16, "mini_batches": 4,
                    "max_new_tokens": 4},
            "layout": {"engines": engines, "dp": dp, "emulated": emulated, "notes": []},
            "measured": {"step_s": 2.0, "throughput_samples_s": 512.0, "prompt_tokens_mean": 9.6,
                         "response_tokens_mean": 2.4, "peak_train_rss_gb": 1.1, "peak_rss_gb": 1.3},
            "predicted": {"step_s": 0.5}}


def test_run_is_predicted_with_its_own_settings(tmp_path):
    prob, plan, path = _plan(tmp_path, "local.yaml", "tiny-grpo.yaml")
    got, notes = predict_run(path, _summary())
    want = predict_plan(path, prompts_per_step=64, group_size=16, prompt_len=10, response_mean=2,
                        response_max=4, mini_batches=4)
    assert got["step_s"] == pytest.approx(want["step_s"]) and got["samples_per_step"] == 64 * 16
    # not the plan's own workload (16 x 8 samples, one update)
    plain = prob.evaluate_plans([plan])
    assert got["samples_per_step"] != prob.workload.samples_per_step
    assert got["optimizer_s"] == pytest.approx(4 * float(plain["optimizer_s"][0]))
    assert notes == []


def test_emulated_run_is_predicted_for_what_ran_here(tmp_path):
    _, _, path = _plan(tmp_path, "mixed-8.yaml", "qwen2.5-7b-grpo.yaml")
    got, notes = predict_run(path, _summary(emulated=True))
    gpu = predict_plan(path)
    assert any("emulated" in n for n in notes) and any("tiny" in n for n in notes)
    # the tiny model on one CPU device: nothing like the plan's GPU figures
    assert got["model_states_gb"] < 0.1 and got["decode_tokens_s"] != pytest.approx(gpu["decode_tokens_s"])


def test_gpu_run_of_this_trainer_is_predicted_with_eager_kernels(tmp_path):
    """On GPUs the trainer runs Hugging Face's eager modules: a plan made with fused element-wise
    kernels (the workload's default) is predicted for what runs, and says so."""
    _, _, path = _plan(tmp_path, "mixed-8.yaml", "qwen2.5-7b-grpo.yaml")
    summary = _summary()
    summary["run"]["model"] = "qwen2.5-7b"
    plain, plain_notes = predict_run(path, summary)
    summary["layout"]["device"] = "cuda"
    got, notes = predict_run(path, summary)
    assert not any("elementwise_kernels" in n for n in plain_notes)
    assert [n for n in notes if "elementwise_kernels eager" in n and "assumed fused" in n]
    assert got["train_s"] > plain["train_s"] * 1.001 and got["rollout_s"] == pytest.approx(plain["rollout_s"])


def test_comparison_table_and_printout(tmp_path, capsys):
    _, _, path = _plan(tmp_path, "local.yaml", "tiny-grpo.yaml")
    summary = _summary()
    pred, _ = predict_run(path, summary)
    rows = {r[0]: r for r in comparison_table(summary, pred)}
    assert rows["step_s"][2] == "2" and rows["step_s"][3] == f"{(pred['step_s'] / 2.0 - 1) * 100:+.0f}%"
    assert rows["train_peak_gb (RSS)"][1] == f"{pred['peak_mem_gb_train']:.4g}"
    print_comparison(summary, str(path), tmp_path)
    out = capsys.readouterr().out
    assert "64 prompts x 16 samples, 4 update(s)" in out and "throughput_samples_s" in out
    assert (tmp_path / "predicted_for_run.json").is_file()


def test_emulated_run_says_what_it_replaces_first(tmp_path):
    from mosearch.commands.train import emulation_line

    _, plan, path = _plan(tmp_path, "mixed-8.yaml", "qwen2.5-7b-grpo.yaml")
    line = emulation_line(plan, str(path))
    assert line.startswith("EMULATED run: plan for cluster 'mixed-8'")
    assert all(p.gpu in line for p in plan.pools if p.used_gpus) and "not for the plan's GPUs" in line


def _ran(summary, **layout):
    summary["layout"].update(layout)
    return summary


def test_emulated_run_is_predicted_for_exactly_the_layout_that_ran(tmp_path, monkeypatch):
    """2 engines and dp 2 with ZeRO-3 ran: the prediction is for that (it was for 1 engine and dp 1,
    repaired to the 2 devices of the local cluster), on as many devices as ran, time-sharing the cores."""
    import problems.placement.predict as PR

    _, _, path = _plan(tmp_path, "mixed-8.yaml", "qwen2.5-7b-grpo.yaml")
    summary = _ran(_summary(emulated=True), engines=2, dp=2, tp=1, pp=1, sharding="zero3", engine_tp=[1, 1])
    monkeypatch.setattr(PR, "_cores", lambda: 64)  # cores enough: a device each
    alone, notes = predict_run(path, summary)
    assert alone["layout"] == {"engines": 2, "engine_tp": 1, "dp": 2, "tp": 1, "pp": 1, "sharding": "zero3"}
    assert not alone["repaired"] and any("2 engine(s) at TP 1, train dp=2" in n for n in notes)
    # disaggregated: one phase at a time, its 2 devices on 2 cores (the other's wait): full speed; on 1 core, half
    monkeypatch.setattr(PR, "_cores", lambda: 2)
    assert predict_run(path, summary)[0]["step_s"] == pytest.approx(alone["step_s"])
    monkeypatch.setattr(PR, "_cores", lambda: 1)
    shared, notes = predict_run(path, summary)
    assert shared["layout"] == alone["layout"] and any("each at 0.5 of a device's speed" in n for n in notes)
    for k in ("rollout_s", "train_s"):
        assert 1.5 < shared[k] / alone[k] <= 2.0 + 1e-9, k  # compute and per-call times at half the speed


def test_a_cpu_run_on_custom_resources_is_predicted_for_the_cpu(tmp_path):
    """GPU types offered as Ray custom resources by nodes without GPUs: the work ran on the CPU, so the
    prediction is this machine's CPU profile for the layout that ran, not the plan's H100s."""
    _, _, path = _plan(tmp_path, "mixed-8.yaml", "qwen2.5-7b-grpo.yaml")
    summary = _ran(_summary(), device="cpu", engines=1, dp=1, tp=1, pp=1, sharding="none", engine_tp=[1])
    got, notes = predict_run(path, summary)
    assert any(n.startswith("CPU run (") and "Ray custom resources" in n for n in notes)
    emulated, _ = predict_run(path, _ran(_summary(emulated=True), engines=1, dp=1, tp=1, pp=1, sharding="none",
                                         engine_tp=[1]))
    assert got["step_s"] == pytest.approx(emulated["step_s"])  # the CPU profile, as an emulated run is predicted
    real = _ran(_summary(), device="cuda")
    real["run"]["model"] = "qwen2.5-7b"  # a GPU run trains the workload's model
    on_gpu, notes = predict_run(path, real)
    assert not any("CPU run" in n for n in notes) and on_gpu["step_s"] != pytest.approx(got["step_s"])


def test_lengths_are_the_generated_ones(tmp_path):
    """The longest response generated, not the one allowed (a workload's 8k limit the tiny model never nears)."""
    _, _, path = _plan(tmp_path, "local.yaml", "tiny-grpo.yaml")
    summary = _summary()
    summary["run"]["max_new_tokens"] = 8192
    summary["measured"]["response_tokens_max"] = 5
    got, notes = predict_run(path, summary)
    want = predict_plan(path, prompts_per_step=64, group_size=16, prompt_len=10, response_mean=2, response_max=5,
                        mini_batches=4)
    assert got["rollout_s"] == pytest.approx(want["rollout_s"]) and any("longest 5 tokens (allowed 8192)" in n for n in notes)


def test_async_compares_generation_with_generation_and_columns_never_touch():
    from mosearch.commands.train import format_table

    summary = {"mode": "async", "measured": {"rollout_s": 0.01, "rollout_gen_s": 1.5, "sync_s": 0.001,
                                             "sync_gather_s": 0.01, "sync_transfer_s": 0.05, "sync_load_s": 0.04}}
    rows = {r[0]: r for r in comparison_table(summary, {"rollout_s": 1.2, "sync_s": 0.1, "throughput_tokens_s": 5807.0,
                                                        "step_s": 1e9})}
    assert rows["rollout_s (generation)"][2] == "1.5" and rows["sync_s (gather+send+load)"][2] == "0.1"
    summary["measured"]["throughput_tokens_s"] = 2.08
    lines = format_table(("figure", "predicted", "measured", "error"),
                         comparison_table(summary, {"throughput_tokens_s": 5807.0}))
    row = next(x for x in lines if x.startswith("throughput_tokens_s"))
    assert row.split() == ["throughput_tokens_s", "5807", "2.08", "+279083%"]  # each cell its own column
    assert len({len(x) for x in lines}) == 1 or all("  " in x for x in lines)


def test_async_emulation_shares_the_cores_by_the_steps_work(tmp_path, monkeypatch):
    """Async: generation and training overlap, and a device waiting for the other uses no core, so the
    cores serve the step's work together: at least a fair share each, and no slower than the work allows."""
    import problems.placement.predict as PR

    _, _, path = _plan(tmp_path, "mixed-8.yaml", "qwen2.5-7b-grpo.yaml")
    data = yaml.safe_load(Path(path).read_text())
    data["execution"].update(mode="async", staleness_bound=1, pipeline_chunks=1)
    Path(path).write_text(yaml.safe_dump(data, sort_keys=False))
    summary = _ran(_summary(emulated=True), engines=2, dp=1, tp=1, pp=1, sharding="none", engine_tp=[1, 1])
    monkeypatch.setattr(PR, "_cores", lambda: 64)
    alone, _ = predict_run(path, summary)
    work = 2 * alone["rollout_s"] + alone["train_s"]
    for cores in (1, 2):
        monkeypatch.setattr(PR, "_cores", lambda: cores)
        shared, notes = predict_run(path, summary)
        share = min(1.0, max(cores / 3, cores * alone["step_s"] / work))
        assert shared["step_s"] >= alone["step_s"] * (1 - 1e-9)
        assert shared["step_s"] <= alone["step_s"] * 3 / cores * (1 + 1e-9)  # never below a fair share
        if share < 1:
            assert any(f"each at {share:.2g} of a device's speed (the cores shared by the step's work)" in n
                       for n in notes)


def test_a_gpu_run_is_predicted_in_the_precision_and_memory_of_the_trainer(tmp_path):
    """A CUDA run of the trainer: predicted with its Hugging Face modules' memory (autocast casts, AdamW's
    temporaries, the loss's fp32 copies: `amp_autocast`) and in the precision its ranks ran, said in a note."""
    _, _, path = _plan(tmp_path, "mixed-8.yaml", "qwen2.5-7b-grpo.yaml")
    real = _ran(_summary(), device="cuda")
    real["run"]["model"] = "qwen2.5-7b"
    bf16, notes = predict_run(path, real)
    assert not any(n.startswith("predicted in ") for n in notes)
    tf32, notes = predict_run(path, dict(real, layout=dict(real["layout"], precision="tf32")))
    assert "predicted in tf32, the precision the training ranks ran (the workload names bf16)" in notes
    assert tf32["train_s"] > bf16["train_s"]  # TF32 tensor cores run at half the BF16 peak


def test_a_gpu_runs_memory_is_compared_as_pytorchs_counters_see_it():
    """PyTorch's peaks (allocated, reserved) leave out the CUDA context and libraries: the model's figures are
    set beside them without its runtime share."""
    from mosearch.commands.train import comparison_table

    summary = {"measured": {"peak_train_gpu_gb": 30.0, "peak_train_gpu_reserved_gb": 33.0}}
    predicted = {"train_allocated_gb": 32.0, "train_reserved_gb": 35.3, "train_runtime_gb": 2.0}
    rows = {r[0]: r[1:] for r in comparison_table(summary, predicted)}
    assert rows["train_peak_gb (allocated)"] == ("30", "30", "+0%")
    assert rows["train_peak_gb (reserved)"] == ("33.3", "33", "+1%")


def test_a_ppo_run_is_predicted_with_the_trainers_value_head_and_its_own_reference(tmp_path):
    """The trainer's PPO critic is a value head on the policy (no second model, no passes of its own), and it
    runs a reference model only with kl_coef > 0: the prediction counts what ran, and says so."""
    _, _, path = _plan(tmp_path, "h100-64.yaml", "llama3.1-70b-ppo.yaml")
    real = _ran(_summary(), device="cuda")
    real["run"].update(model="llama3.1-70b", algo="ppo", kl_coef=0.0)
    no_kl, notes = predict_run(path, real)
    assert "PPO's critic is the trainer's value head on the policy: no second model or passes" in notes
    assert "without a reference model's forward, as the run had (kl_coef 0)" in notes
    real["run"]["kl_coef"] = 0.05
    with_kl, notes = predict_run(path, real)
    assert not any("reference model's forward" in n for n in notes)  # the workload's PPO has one already
    assert with_kl["train_s"] > no_kl["train_s"] and with_kl["model_states_gb"] > no_kl["model_states_gb"]
    plain = predict_plan(path)  # the plan's own figures: a critic model of the policy's size, a reference
    assert plain["model_states_gb"] > with_kl["model_states_gb"]


def test_a_workloads_kl_reference_trains_with_a_kl_term(tmp_path):
    """A GRPO workload that names a KL reference runs with one (verl's default coefficient) unless --kl-coef
    says otherwise; without it, none."""
    import dataclasses

    from mosearch.commands.train import WORKLOAD_KL_COEF, workload_defaults
    from problems.placement.specs import load_workload

    wl = load_workload(ROOT / "problems/workloads/qwen2.5-7b-grpo.yaml")
    assert "kl_coef" not in workload_defaults(wl)
    assert workload_defaults(dataclasses.replace(wl, has_reference=True))["kl_coef"] == WORKLOAD_KL_COEF == 0.001
