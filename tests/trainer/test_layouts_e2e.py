"""`mosearch train` runs tp 2, pp 2 and zero3 plans, and plans with rollout TP 2, as planned: 3 steps
with vLLM rollouts on the local cluster, and `summary.json` reports the layout that ran."""

import json

import pytest

from mosearch.cli import main

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SMALL = ["--prompts-per-step", "4", "--group-size", "4", "--eval-size", "8", "--no-progress", "--max-new-tokens", "4",
         "--eval-every", "0", "--checkpoint-every", "0"]
FULL = 537088  # parameters of the tiny model (tied lm_head once)
SHARED = {"pool": "cpu-local@local", "gpu": "cpu-local", "region": "local", "rollout_gpus": 0, "train_gpus": 0,
          "shared_gpus": 2, "rollout_tp": 1}
SPLIT = {"pool": "cpu-local@local", "gpu": "cpu-local", "region": "local", "rollout_gpus": 1, "train_gpus": 2,
         "shared_gpus": 0, "rollout_tp": 1}
# rollout TP 2: vLLM's CPU backend runs one engine as two TP worker processes, one core each
TP_ENGINE = {"pool": "cpu-local@local", "gpu": "cpu-local", "region": "local", "rollout_gpus": 2, "train_gpus": 2,
             "shared_gpus": 0, "rollout_tp": 2}
TP_SHARED = {**SHARED, "rollout_tp": 2}
COLOC = {"mode": "colocated", "staleness_bound": 0, "pipeline_chunks": 1}
DISAGG = {"mode": "disaggregated", "staleness_bound": 0, "pipeline_chunks": 2}


@pytest.mark.parametrize("name,pool,execution,train,stages", [
    ("tp2", SHARED, COLOC, {"dp": 1, "tp": 2, "pp": 1, "sharding": "none", "micro_batch": 4}, [2]),
    ("pp2", SPLIT, DISAGG, {"dp": 1, "tp": 1, "pp": 2, "sharding": "none", "micro_batch": 4}, [1, 1]),
    ("zero3", SHARED, COLOC, {"dp": 2, "tp": 1, "pp": 1, "sharding": "zero3", "micro_batch": 4}, [2]),
    ("rollout-tp2", TP_ENGINE, DISAGG, {"dp": 2, "tp": 1, "pp": 1, "sharding": "zero3", "micro_batch": 4}, [2]),
    ("coloc-rollout-tp2", TP_SHARED, COLOC, {"dp": 1, "tp": 1, "pp": 2, "sharding": "none", "micro_batch": 4},
     [1, 1]),
])
def test_train_runs_the_plans_layout(ray_local, plan_file, tmp_path, monkeypatch, capsys, name, pool, execution, train,
                                     stages):
    monkeypatch.setenv("MOSEARCH_LOCAL_DEVICES", str(max(3, pool["rollout_gpus"] + pool["train_gpus"] + pool["shared_gpus"])))
    plan = plan_file(f"{name}.yaml", pools=[pool], execution=execution, train=train)
    out = tmp_path / name
    assert main(["train", "--plan", str(plan), "--steps", "3", "--out", str(out), *SMALL]) == 0
    captured = capsys.readouterr()
    lines = [x for x in captured.err.splitlines() if x.strip()]
    assert lines[0].startswith("training model tiny"), captured.err[:2000]  # the first lines name what runs
    assert lines[1].startswith("rollout engine: vLLM; vLLM 0."), captured.err[:2000]
    summary = json.loads((out / "summary.json").read_text())
    lay = summary["layout"]
    assert summary["status"] == "finished" and summary["steps"] == 3
    assert (lay["dp"], lay["tp"], lay["pp"], lay["sharding"]) == (train["dp"], train["tp"], train["pp"], train["sharding"])
    assert lay["stages"] == stages and lay["notes"] == []
    # every engine runs the plan's rollout TP: that many processes hold its model
    assert lay["engine_tp"] == [pool["rollout_tp"]] * lay["engines"]
    assert len(lay["params_per_rank"]) == 2 and all(0.4 * FULL < n < 0.62 * FULL for n in lay["params_per_rank"])
    assert summary["versions"]["engine"] == "vLLM" and summary["versions"]["torch"].startswith("2.")
    assert f"tp={train['tp']} pp={train['pp']}" in captured.out
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "time" in r]
    assert [r["step"] for r in rows] == [1, 2, 3]
    # the engines got the gathered weights every step by broadcast: vLLM's log-probs equal the trainer's (fp32)
    assert lay["weight_sync"]["path"] == "broadcast" and summary["layout"]["weight_sync"]["fallbacks"] == 0
    assert all(r["sync"]["path"] == "broadcast" for r in rows)
    # colocated engines map the trainer's buckets (one host): no weight byte on the wire
    handover = execution["mode"] == "colocated"
    assert lay["weight_sync"]["transport"] == ("shared_memory" if handover else "bytes")
    assert all((r["sync"]["bytes_sent"] == 0) == handover and (r["sync"]["shared_bytes"] > 0) == handover for r in rows)
    assert all(r["behav_abs_diff_mean"] < 1e-5 for r in rows), [r["behav_abs_diff_mean"] for r in rows]
