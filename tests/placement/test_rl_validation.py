"""mosearch/bench/rl_validation.py: which rows the targets score, and that a row's published engine settings reach
the model."""

from __future__ import annotations

import pytest

from mosearch.bench import rl_validation as rv


def test_only_rows_with_published_samples_and_lengths_are_scored():
    rows = rv.load(rv.RL_DATA)
    head = [r for r in rows if rv.published(r)]
    assert head and len(head) < len(rows)
    for r in rows:
        starred = {k for k in ("samples", "resp_mean", "resp_max") if k in r["assumed"]}
        assert rv.published(r) == (not starred)
    # a pair is scored only when both of its rows are
    ids = {r["id"] for r in head}
    for r in rows:
        if r["pair"] and r["id"] in ids:
            other = next(o for o in rows if o["pair"] == r["pair"] and o is not r)
            assert rv.published(other) or other["id"] not in ids


def test_an_eager_row_pays_the_launch_cost(tmp_path):
    row = next(r for r in rv.load(rv.RL_DATA) if r["eager"] == "1" and rv.published(r))
    eager = rv.predict_step(row, tmp_path)
    graphs = rv.predict_step(dict(row, eager="0"), tmp_path)
    assert eager["rollout_s"] > graphs["rollout_s"] and eager["train_s"] == pytest.approx(graphs["train_s"])
