"""mosearch/bench/rl_validation.py: which rows the targets score, and that a row's published engine settings reach
the model."""

from __future__ import annotations

import pytest

from mosearch.bench import rl_validation as rv


def test_the_training_set_leaves_out_held_out_rows_and_steps_that_hinge_on_an_assumed_mean_length():
    from mosearch.bench import rl_fit

    rows = rv.load_steps()
    train, val = rl_fit.training_rows(rows), rl_fit.validation_rows(rows)
    assert train and set(map(id, train)) <= set(map(id, val))
    assert all(r["held_out"] != "1" for r in val)
    assert any(r["held_out"] == "1" for r in rows)  # NeMo-RL's row: a check, never fitted
    for r in train:
        # a step time needs its mean length published or derived; a throughput in tokens grows with the length
        assert "resp_mean" not in r["assumed"] or r["tokens_gpu_s"]
    # a row publishing only tokens per GPU and second gets the step those tokens take with its lengths
    r = next(r for r in rows if r["step_derived"])
    gpus = int(r["nodes"]) * int(r["gpus_per_node"])
    assert float(r["step_s"]) * float(r["tokens_gpu_s"]) * gpus == \
        pytest.approx(int(r["samples"]) * (float(r["prompt_len"]) + float(r["resp_mean"])))
    # several pairs per row, each with its role
    multi = next(r for r in rows if ";" in r["pair"])
    assert len(rv.row_pairs(multi)) == len(multi["pair"].split(";")) > 1


def test_an_eager_row_pays_the_launch_cost(tmp_path):
    row = next(r for r in rv.load(rv.RL_DATA) if r["eager"] == "1" and rv.published(r))
    eager = rv.predict_step(row, tmp_path)
    graphs = rv.predict_step(dict(row, eager="0"), tmp_path)
    assert eager["rollout_s"] > graphs["rollout_s"] and eager["train_s"] == pytest.approx(graphs["train_s"])


def test_a_token_budget_cuts_the_update_into_as_many_micro_batches_as_its_tokens_fill(tmp_path):
    # EasyR1 v0.3.2's dynamic batching: budget = update micro-batch x padded input length (rl_published.csv)
    row = next(r for r in rv.load(rv.RL_DATA) if r["id"] == "easyr1-v032-qwen25vl-7b-h100-amp-mb1")
    budget = float(row["micro_batch_tokens"])
    prob, x = rv.build_problem(row, tmp_path)
    assert prob.ctx.micro_batch_tokens == budget
    from problems.placement.model.training import train_times

    f = prob.layout.fields(x[None, :])
    tr = train_times(prob.ctx, f, f["pipeline_chunks"])
    gpus = int(row["nodes"]) * int(row["gpus_per_node"])
    per_rank = int(row["samples"]) / int(row["updates"]) / gpus
    tokens = per_rank * (float(row["prompt_len"]) + float(row["resp_mean"]))
    assert tr["micro_batches"].max() == -(-tokens // budget)  # ceil: every budget filled but the last
    assert tr["micro_batch_eff"][0] == pytest.approx(per_rank / -(-tokens // budget))
    # four times the budget: fewer micro-batches, a faster step, as the published pair (145 s -> 120 s)
    big = rv.predict_step(dict(row, micro_batch_tokens=str(4 * budget), micro_batch="4"), tmp_path)
    assert big["step_s"] < rv.predict_step(row, tmp_path)["step_s"]
    # and its memory holds the budget's samples, not the micro_batch column's
    from problems.placement.model.memory import train_memory

    acts = train_memory(prob.ctx, f, tr["dp"], tr["micro_batches"])["activations"]
    prob.ctx.micro_batch_tokens = 4 * budget
    assert (train_memory(prob.ctx, f, tr["dp"], tr["micro_batches"])["activations"] > acts).all()


def test_a_published_actor_mfu_reads_back_as_the_update_phase_seconds(tmp_path):
    from mosearch.bench.rl_rows import build_problem, predict_step, predict_update_s, published_update_s

    row = next(r for r in rv.load_steps() if r["id"] == "easyr1-v032-qwen25vl-7b-h100-amp-mb1")
    # EasyR1's dense count from Qwen2.5-7B's published config (hidden 3584, intermediate 18944, 28 layers, 28
    # heads, 4 KV heads, vocabulary 152064): 6 x N x tokens over MFU x 989 TFLOP/s x 8 GPUs, attention on top
    n = 28 * (3584 * 18944 * 3 + 3584 * (3584 + 512 + 512 + 3584)) + 2 * 152064 * 3584
    dense_only = 6 * n * 2560 * (256 + 469) / (0.160 * 989e12 * 8)
    prob, _ = build_problem(row, tmp_path)
    pub = published_update_s(row, prob.ctx)
    assert dense_only < pub < 1.05 * dense_only
    assert published_update_s(dict(row, actor_mfu=""), prob.ctx) is None
    pred, pub2 = predict_update_s(row, tmp_path)
    assert pub2 == pytest.approx(pub)
    step = predict_step(row, tmp_path)
    assert 0 < pred < step["train_s"]  # the forward-only passes and the executor's seconds are taken out
