"""A plan's TP must shard the workload model's attention heads and KV heads and fit a node."""

from __future__ import annotations

from pathlib import Path

import pytest

from mosearch.cli import main
from problems.errors import InputError
from problems.placement.catalog import Architecture
from problems.placement.plan import Plan, file_sha256
from problems.placement.plancheck import check_plan
from problems.placement.problem import PlacementProblem
from problems.placement.specs import load_cluster, load_workload

ROOT = Path(__file__).resolve().parents[2]
MIXED8 = ROOT / "problems/clusters/mixed-8.yaml"
Q32 = ROOT / "problems/workloads/qwen2.5-32b-grpo.yaml"  # 40 heads, 8 KV heads


def test_tp_rule_of_the_architecture():
    m = Architecture(name="m", layers=2, hidden=1536, heads=12, kv_heads=2, ffn=64, vocab=10)
    assert m.tp_problem(2, kv_replicas=False) is None
    assert "attention heads" in m.tp_problem(8, kv_replicas=True)  # 12 % 8
    assert m.tp_problem(4, kv_replicas=True) is None  # vLLM replicates the 2 KV heads
    assert "KV heads" in m.tp_problem(4, kv_replicas=False)  # Megatron cannot


def _plan(tmp_path, rollout_tp=1, train_tp=1, dp=4) -> Path:
    cluster = load_cluster(MIXED8)
    pool = cluster.pools[0]
    plan = Plan.model_validate({
        "plan_id": "hand", "cluster": {"name": "mixed-8", "path": str(MIXED8), "sha256": file_sha256(MIXED8)},
        "workload": {"name": "q32", "path": str(Q32), "sha256": file_sha256(Q32)},
        "pools": [{"pool": pool.id, "gpu": pool.gpu.name, "region": pool.region, "rollout_gpus": rollout_tp,
                   "train_gpus": dp * train_tp, "shared_gpus": 0, "rollout_tp": rollout_tp}],
        "rollout": {"kv_mem_frac": 0.8, "max_num_seqs": 64},
        "train": {"dp": dp, "tp": train_tp, "pp": 1, "micro_batch": 1},
        "execution": {"mode": "disaggregated", "staleness_bound": 0, "pipeline_chunks": 1},
        "weight_sync": {"route": "direct"}})
    path = tmp_path / "plan.yaml"
    path.write_text(plan.to_yaml())
    return path


@pytest.mark.parametrize("rollout_tp,train_tp,key,words", [
    (1, 3, "train.tp", "40 attention heads"), (3, 1, "pools[0].rollout_tp", "40 attention heads")])
def test_export_refuses_tp_that_does_not_divide_the_heads(tmp_path, capsys, rollout_tp, train_tp, key, words):
    path = _plan(tmp_path, rollout_tp=rollout_tp, train_tp=train_tp, dp=1)
    assert main(["export", str(path), "--to", "verl"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert f"{path}: {key}: {words}" in err


def test_check_plan_accepts_a_valid_plan_and_refuses_a_tp_wider_than_a_node(tmp_path):
    from problems.placement.plan import load_plan
    cluster, workload = load_cluster(MIXED8), load_workload(Q32)
    check_plan(load_plan(_plan(tmp_path, rollout_tp=2, train_tp=2, dp=1)), workload, cluster)
    wide = load_plan(_plan(tmp_path, rollout_tp=1, train_tp=8, dp=1))
    if cluster.pools[0].gpus_per_node < 8:
        with pytest.raises(InputError, match="does not tile a training node of 4 GPUs"):
            check_plan(wide, workload, cluster)


@pytest.mark.parametrize("workload", sorted((ROOT / "problems/workloads").glob("*.yaml")), ids=lambda p: p.stem)
def test_the_search_only_decodes_plans_the_check_accepts(workload):
    import numpy as np
    cluster = load_cluster(ROOT / "problems/clusters/mixed-64.yaml")
    w = load_workload(workload)
    pb = PlacementProblem(cluster, w)
    X = pb.layout.repair(pb.xl + np.random.default_rng(1).random((40, pb.n_var)) * (pb.xu - pb.xl))
    for x in X:
        check_plan(pb.decode(x, lifetime=False), w, cluster)


def test_train_refuses_tp_that_does_not_divide_the_heads_before_starting(tmp_path, capsys):
    path = _plan(tmp_path, rollout_tp=1, train_tp=3, dp=1)
    assert main(["train", "--plan", str(path), "--steps", "1", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{path}: train.tp: 40 attention heads" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()  # nothing started


def test_a_rollout_tp_that_splits_no_kv_heads_is_named_so(tmp_path):
    """TP 5 divides the 40 attention heads but neither divides nor is a multiple of the 8 KV heads: the
    line said '(a divisor of the attention heads (vLLM))', which 5 is. It now gives the rule and the TPs
    that fit the pool's nodes."""
    from problems.placement.plan import load_plan

    plan = load_plan(_plan(tmp_path, rollout_tp=5, train_tp=1, dp=1))
    with pytest.raises(InputError) as err:
        check_plan(plan, load_workload(Q32), load_cluster(MIXED8), "plan.yaml")
    assert err.value.line() == ("plan.yaml: pools[0].rollout_tp: 8 KV heads of qwen2.5-32b are not divisible by TP 5 "
                                "(a divisor of the 40 attention heads that divides the 8 KV heads or is a multiple of "
                                "them (vLLM); on H100@us-east: 1, 2, 4)")


def test_predict_names_the_plan_key_outside_the_search_space_in_plain_numbers(tmp_path, capsys):
    """A train.pp the search never tries was reported at key `pools` as '[np.int64(1), np.int64(2), ...]'."""
    import yaml

    path = _plan(tmp_path, rollout_tp=1, train_tp=1, dp=1)
    data = yaml.safe_load(path.read_text())
    data["train"]["pp"], data["pools"][0]["train_gpus"] = 3, 3
    path.write_text(yaml.safe_dump(data))
    assert main(["predict", "--plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mosearch: {path}: train.pp: train.pp 3 is not one of 1, 2, 4") and "np." not in err, err
    path = _plan(tmp_path, rollout_tp=3, train_tp=1, dp=1)  # predict --plan checks the plan as export does
    assert main(["predict", "--plan", str(path)]) == 2
    assert capsys.readouterr().err.startswith(f"mosearch: {path}: pools[0].rollout_tp: 40 attention heads of "
                                              "qwen2.5-32b are not divisible by TP 3 (")
