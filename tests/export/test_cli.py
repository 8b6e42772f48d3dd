"""`mosearch export` end to end: files in, YAML out, one-line errors."""

from __future__ import annotations

import pytest
import yaml

from mosearch.cli import main
from problems.placement.plan import file_sha256

from .conftest import ROOT, make_plan, pool


def _write(tmp_path, plan, name="plan.yaml"):
    path = tmp_path / name
    path.write_text(plan.to_yaml())
    return path


def _runnable(plan, **train):
    """The plan without what AReaL/RLinf have no key for (streamed chunks, staged sync, optimizer offload)."""
    return plan.model_copy(update={
        "execution": plan.execution.model_copy(update={"pipeline_chunks": 1}),
        "weight_sync": plan.weight_sync.model_copy(update={"route": "direct"}),
        "train": plan.train.model_copy(update={"optimizer_offload": False, **train})})


def test_export_to_file_reads_the_cluster_the_plan_names(tmp_path, hetero_disagg, capsys):
    out = tmp_path / "sub" / "areal.yaml"
    plan = _runnable(hetero_disagg, sharding="fsdp")
    assert main(["export", str(_write(tmp_path, plan)), "--to", "areal", "--out", str(out)]) == 0
    cfg = yaml.safe_load(out.read_text())
    assert cfg["allocation_mode"] == "vllm[rollout]:d16p1t2+fsdp[actor]:d8p1t2"
    assert cfg["train_dataset"]["batch_size"] == 128  # from the workload file the plan names
    assert capsys.readouterr().out == ""  # --out: nothing on stdout
    assert [p.name for p in out.parent.iterdir()] == ["areal.yaml"]  # no temp file left


def test_export_to_stdout(tmp_path, colocated, capsys):
    assert main(["export", str(_write(tmp_path, _runnable(colocated))), "--to", "rlinf"]) == 0
    cfg = yaml.safe_load(capsys.readouterr().out)
    assert cfg["cluster"]["component_placement"] == {"actor,rollout,reward": "all"}


def test_a_plan_the_target_cannot_run_is_refused_with_the_nearest_it_can(tmp_path, hetero_disagg, colocated, capsys):
    from mosearch.results import write_front

    front = tmp_path / "run"
    ok = _runnable(colocated).model_copy(update={"plan_id": "p007", "predicted": {
        "throughput_samples_s": 9.0, "cost_usd_h": 30.0, "peak_mem_frac": 0.5, "staleness": 0.0}})
    write_front(front, [ok])
    plan = hetero_disagg.model_copy(update={"predicted": {"throughput_samples_s": 10.0, "cost_usd_h": 40.0}})
    assert main(["export", str(_write(tmp_path, plan)), "--to", "rlinf", "--front", str(front)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"mosearch: {tmp_path / 'plan.yaml'}: executor: RLinf 0.3.0")
    assert "needs one of its modes: colocated (the plan is disaggregated" in err
    assert f"the nearest plan of {front} it can run: p007, 9 samples/s at $30.00/h" in err


@pytest.mark.parametrize("gone", ["cluster", "workload"])
def test_missing_spec_is_one_line_exit_2(tmp_path, colocated, capsys, gone):
    # the TP / head divisibility check needs the workload, node sizes the cluster: never skipped silently
    spec = getattr(colocated, gone)
    plan = colocated.model_copy(update={gone: spec.model_copy(update={"path": f"gone/{gone}.yaml"})})
    assert main(["export", str(_write(tmp_path, plan)), "--to", "verl"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert captured.out == "" and "\n" not in err
    assert err.startswith(f"mosearch: {tmp_path / 'plan.yaml'}: {gone}.path: gone/{gone}.yaml: no such file")
    assert f"--{gone}" in err


def test_bad_plan_is_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("plan_id: x\npools: 3\n")
    assert main(["export", str(bad), "--to", "verl"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mosearch: ") and str(bad) in err and "\n" not in err


def test_pool_missing_from_cluster_is_refused(tmp_path, hetero_disagg, capsys):
    other = tmp_path / "cluster.yaml"
    other.write_text("name: small\nregions: {us-east: {inter_node_gbs: 50}}\n"
                     "node_groups: [{gpu: H100, nodes: 2, gpus_per_node: 8, region: us-east}]\n")
    rc = main(["export", str(_write(tmp_path, hetero_disagg)), "--to", "rlinf", "--cluster", str(other)])
    assert rc == 2
    err = capsys.readouterr().err
    assert "pools[2].pool" in err and "'L40S@eu-west' is not in cluster" in err


def test_plan_using_more_gpus_than_the_cluster_has_is_refused(tmp_path, colocated, capsys):
    small = tmp_path / "cluster.yaml"
    small.write_text("name: small\nregions: {eu-west: {inter_node_gbs: 25}}\n"
                     "node_groups: [{gpu: A100-80G, nodes: 1, gpus_per_node: 8, region: eu-west}]\n")
    assert main(["export", str(_write(tmp_path, colocated)), "--to", "areal", "--cluster", str(small)]) == 2
    assert "uses 16 GPUs of A100-80G@eu-west" in capsys.readouterr().err


@pytest.mark.parametrize("other", ["qwen2.5-1.5b-grpo", "llama3.1-70b-ppo", None])
def test_another_workload_is_said_checked_and_named_in_the_header(tmp_path, capsys, other):
    """--workload OTHER exported another workload into the plan with no word (the header named the plan's
    workload, nothing checked it fits): now as --cluster, a line that it differs, the model's fit, and
    the header names the workload exported."""
    plan = make_plan("coloc", [pool("A100-80G@eu-west", shared=16, tp=4)],
                     {"dp": 16, "tp": 1, "pp": 1, "sharding": "fsdp", "micro_batch": 1, "recompute": True},
                     "colocated", kv=0.5, seqs=128)  # fits its own workload, qwen2.5-7b-grpo
    wpath = ROOT / f"problems/workloads/{other}.yaml" if other else ROOT / "problems/workloads/qwen2.5-7b-grpo.yaml"
    assert main(["export", str(_write(tmp_path, plan)), "--to", "verl", "--workload", str(wpath)]) == 0
    captured = capsys.readouterr()
    name = other or "qwen2.5-7b-grpo"
    assert captured.out.splitlines()[1].startswith(
        f"# cluster mixed-64 (sha256 {plan.cluster.sha256[:12]}), workload {name} (sha256 {file_sha256(wpath)[:12]}),")
    said = [f"mosearch export: {wpath} differs from the workload the plan was made for (sha256)"] if other else []
    if other == "llama3.1-70b-ppo":  # 70B on the 7B's layout: the model's peak far above the A100s' 80 GB
        said.append(captured.err.splitlines()[-1])
        assert said[-1].startswith("mosearch export: the model predicts plan coloc does not fit workload "
                                   "llama3.1-70b-ppo on cluster mixed-64: peak memory ")
    assert captured.err.splitlines() == said
    assert yaml.safe_load(captured.out)["data"]["train_batch_size"] == yaml.safe_load(wpath.read_text())["prompts_per_step"]


@pytest.mark.parametrize("target", ["areal", "verl"])
def test_a_staleness_bound_above_the_workloads_is_refused(tmp_path, async_plan, capsys, target):
    """A plan edited to staleness_bound 7 (workload max_staleness 4) was exported (`max_head_offpolicyness: 7`)."""
    plan = async_plan.model_copy(update={"execution": async_plan.execution.model_copy(update={"staleness_bound": 7})})
    out = tmp_path / "cfg.yaml"
    assert main(["export", str(_write(tmp_path, plan)), "--to", target, "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"mosearch: {tmp_path / 'plan.yaml'}: execution.staleness_bound: 7 is above the workload's max_staleness 4 "
        f"(at most 4, the max_staleness of {plan.workload.path})\n")
    assert not out.exists()
