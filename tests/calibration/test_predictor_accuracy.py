"""The accuracy script's own arithmetic: run-fitted overheads, ranking checks, per-step throughput."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "predictor_accuracy.py"


@pytest.fixture(scope="module")
def pa():
    spec = importlib.util.spec_from_file_location("predictor_accuracy", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
    base = {"pred0_rollout_s": 0.1, "pred0_train_s": 0.2, "chunks": 1, "rank_micro_batches": 4}
    rows = [{**base, "mode": "disaggregated", "dp": 1, "meas_rollout_s": 0.18, "meas_train_s": 0.25},
            {**base, "mode": "colocated", "dp": 1, "meas_rollout_s": 0.2, "meas_train_s": 0.23},
            {**base, "mode": "async", "dp": 1, "meas_rollout_s": 0.0, "meas_train_s": 0.24},
            {**base, "mode": "colocated", "dp": 2, "meas_rollout_s": 0.16, "meas_train_s": 0.31}]
    over = pa.fit_overheads(rows)
    assert over["rollout_call_s"] == pytest.approx(0.08)  # async rows do not wait for rollout
    assert over["train_call_s"] == pytest.approx(0.04)
    assert over["dp_microbatch_s"] == pytest.approx((0.31 - 0.2 - 0.04) / 4)
