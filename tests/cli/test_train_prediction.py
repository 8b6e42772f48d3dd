"""`mosearch train`'s predicted-vs-measured: re-predicted with the run's actual settings (no Ray here:
the run's summary is written by hand, as the driver writes it)."""

from __future__ import annotations

import numpy as np
import pytest

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
