"""mosearch/bench/moe_validation.py: its rows carry their sources, and each is predicted at its own layout."""

from __future__ import annotations

import numpy as np

from mosearch.bench import moe_validation as mv


def test_rows_have_sources_and_known_models():
    from problems.placement.catalog import gpu_catalog, model_presets

    rows = mv.load_rows()
    assert len(rows) >= 5
    for r in rows:
        assert r["source"] and r["url"].startswith("https://")
        assert r["model"] in model_presets() and model_presets()[r["model"]].is_moe
        assert r["gpu"] in gpu_catalog()
        assert (int(r["gpus"]) // (int(r["tp"]) * int(r["pp"])) * int(r["tp"])) % int(r["ep"]) == 0


def test_each_row_is_predicted_with_its_expert_parallelism_and_balance():
    rows = mv.load_rows()
    res = mv.evaluate(rows)
    assert all(np.isfinite(x["err"]) for x in res)
    for x in res:
        r, job = x["row"], mv.job_of(x["row"])
        assert job.ep == int(r["ep"]) and job.ep > 1
        assert (job.moe_imbalance == 1.0) == (r["balanced"] == "1")
        assert x["pred"]["breakdown"]["ep_comm_s"] > 0
    # an unbalanced router is slower than a forced balance at the same layout
    r = next(r for r in rows if r["balanced"] == "1")
    from problems.placement.predict import predict_training

    balanced = predict_training(mv.job_of(r))["step_s"]
    skewed = predict_training(mv.job_of(r).model_copy(update={"moe_imbalance": 1.5}))["step_s"]
    assert skewed > balanced
    text = mv.report(res)
    assert text.count("\n| ") == len(rows) + 1  # header + one line per row
