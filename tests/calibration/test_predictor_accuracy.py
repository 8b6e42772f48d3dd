"""The accuracy script's own arithmetic: run-fitted overheads, ranking checks, per-step throughput."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def pa():
    from mosearch.bench import predictor_accuracy

    return predictor_accuracy


def test_step_throughputs_skip_the_first_step_and_eval_rows(pa, tmp_path):
    rows = [{"samples": 100, "time": {"wall": 10.0}}, {"eval_only": True, "reward_heldout": 0.5},
            {"samples": 100, "time": {"wall": 0.5}}, {"samples": 50, "time": {"wall": 0.5}}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert pa.step_throughputs(tmp_path) == [200.0, 100.0]


def test_only_measurably_different_pairs_count_against_the_ranking(pa):
    def row(plan, pred, steps):
        return {"plan": plan, "pred_sps": pred, "meas_sps": sum(steps) / len(steps), "step_sps": steps}

    fast = row("fast", 300.0, [300.0, 310.0, 305.0, 295.0, 302.0])
    tied = row("tied", 299.0, [301.0, 309.0, 306.0, 297.0, 304.0])  # measured a hair faster
    slow = row("slow", 310.0, [150.0, 155.0, 149.0, 152.0, 151.0])  # predicted fastest: clearly wrong
    out = pa.discordant_pairs([fast, tied, slow])
    by_pair = {(a, b): p for a, b, p, _ in out}
    assert set(by_pair) == {("fast", "tied"), ("fast", "slow"), ("tied", "slow")}
    assert by_pair[("fast", "tied")] > 0.05
    assert by_pair[("fast", "slow")] < 0.05 and by_pair[("tied", "slow")] < 0.05
    assert pa.kendall_tau([1, 2, 3], [1, 2, 3]) == 1.0 and pa.kendall_tau([1, 2, 3], [3, 2, 1]) == -1.0


def test_overheads_are_median_residuals_per_phase(pa):
    base = {"pred0_rollout_s": 0.1, "pred0_train_s": 0.2, "chunks": 1, "rank_micro_batches": 4, "engine_samples": 128}
    rows = [{**base, "mode": "disaggregated", "dp": 1, "meas_rollout_s": 0.18, "meas_train_s": 0.25},
            {**base, "mode": "colocated", "dp": 1, "meas_rollout_s": 0.2, "meas_train_s": 0.23},
            # async: its training runs beside rollout on shared cores, which is no per-step constant
            {**base, "mode": "async", "dp": 1, "meas_rollout_s": 0.0, "meas_train_s": 0.44},
            {**base, "mode": "colocated", "dp": 2, "meas_rollout_s": 0.16, "meas_train_s": 0.31}]
    over = pa.fit_overheads(rows)
    # async rows do not wait for rollout; one share size: the residual is all per call
    assert over["rollout_call_s"] == pytest.approx(0.08) and over["rollout_sample_s"] == 0.0
    assert over["train_call_s"] == pytest.approx(0.04)  # the two synchronous single-rank rows only
    assert over["dp_microbatch_s"] == pytest.approx((0.31 - 0.2 - 0.04) / 4)
    assert over["microbatch_loop_s"] == 0.0  # one micro-batch count: all of it is per step


def test_single_rank_residual_splits_into_step_and_micro_batch_costs(pa):
    # residual = 30 ms per step + 5 ms per micro-batch of the loop; a dp 2 rank adds 2 ms per micro-batch
    def row(mbs, dp=1, mode="colocated"):
        return {"mode": mode, "dp": dp, "chunks": 1, "rank_micro_batches": mbs, "engine_samples": 128,
                "pred0_rollout_s": 0.1, "meas_rollout_s": 0.1, "pred0_train_s": 0.2,
                "meas_train_s": 0.2 + 0.03 + mbs * (0.005 + (0.002 if dp > 1 else 0.0))}
    over = pa.fit_overheads([row(64), row(1024), row(256, mode="disaggregated"), row(32, dp=2),
                             {**row(512, mode="async"), "meas_train_s": 9.0}])
    assert over["train_call_s"] == pytest.approx(0.03) and over["microbatch_loop_s"] == pytest.approx(0.005)
    assert over["dp_microbatch_s"] == pytest.approx(0.002)


def test_rollout_overhead_splits_into_calls_and_engine_shares(pa):
    # residual = chunks * 20 ms + samples per engine * 0.25 ms; one row from another layout (tp 2)
    # must not enter the fit
    def row(chunks, share, mode="colocated", plain=True):
        return {"mode": mode, "plain": plain, "dp": 2, "chunks": chunks, "engine_samples": share,
                "rank_micro_batches": 4, "pred0_rollout_s": 0.05, "pred0_train_s": 0.2, "meas_train_s": 0.2,
                "meas_rollout_s": 0.05 + chunks * 0.02 + share * 0.25e-3}
    rows = [row(1, 128), row(1, 64), row(4, 128, "disaggregated"), row(2, 64, "disaggregated"),
            {**row(1, 128, plain=False), "meas_rollout_s": 9.0}, {**row(1, 64, "async"), "meas_rollout_s": 0.0}]
    over = pa.fit_overheads(rows)
    assert over["rollout_call_s"] == pytest.approx(0.02) and over["rollout_sample_s"] == pytest.approx(0.25e-3)


def test_per_sample_rollout_overhead_is_charged_on_each_engines_share(pa):
    from problems.placement import PlacementProblem

    root = Path(__file__).resolve().parents[2]
    base = PlacementProblem.from_files(root / "problems" / "clusters" / "local.yaml",
                                       root / "problems" / "workloads" / "tiny-grpo.yaml")
    samples = base.workload.prompts_per_step * base.workload.samples_per_prompt

    def rollout_s(sample_s, engines):
        p = PlacementProblem(base.cluster, base.workload, efficiencies={"cpu-local": {"rollout_sample_s": sample_s}})
        x = pa.plan_vector(p, "colocated", engines, 0, 2, 0, 0)
        return p.decode(x, plan_id="x", lifetime=False).predicted["rollout_s"]

    for engines in (1, 2):
        assert rollout_s(1e-3, engines) - rollout_s(0.0, engines) == pytest.approx(samples / engines * 1e-3)


def test_run_fitted_figures_go_into_the_profile_with_its_comments_kept(pa):
    text = "# head\nmeasurements:\n  # a comment\n  x: 1\nfitted:\n  tflops: 0.2\n  rollout_call_s: 0.1\nother: 3\n"
    out = pa.set_fitted(text, {"rollout_call_s": 0.02, "rollout_sample_s": 0.0002})
    assert "# head" in out and "  # a comment" in out
    import yaml

    data = yaml.safe_load(out)
    assert data["fitted"] == {"tflops": 0.2, "rollout_call_s": 0.02, "rollout_sample_s": 0.0002} and data["other"] == 3
