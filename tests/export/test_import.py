"""`mosearch import`: verl / AReaL configs read back as plans; export then import gives the same plan
(up to what the target cannot tell apart); the shipped example configs import and score."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mosearch.cli import main
from mosearch.commands.import_config import import_plan
from mosearch.export import EXPORTERS, ExportContext
from mosearch.export import layout as L
from mosearch.export.read import apply_overrides
from problems.placement.problem import PlacementProblem
from problems.placement.specs import load_cluster, load_workload

ROOT = Path(__file__).resolve().parents[2]
H100 = ROOT / "problems/clusters/h100-64.yaml"
WORKLOADS = sorted((ROOT / "problems/workloads").glob("*.yaml"))
EXAMPLES = ROOT / "docs/examples"


def _fsdp_sharding(s: str) -> str:
    return {"none": "none", "zero1": "zero2", "zero2": "zero2", "zero3": "fsdp", "fsdp": "fsdp"}[s]


def canonical(plan, target: str, workload) -> dict:
    """The plan as far as `target`'s config can say it."""
    t = plan.train
    megatron = t.tp > 1 or t.pp > 1
    if target == "verl":
        sharding = ("zero1" if t.sharding != "none" else "none") if megatron else _fsdp_sharding(t.sharding)
        micro = t.micro_batch
    else:
        sharding = "zero1" if t.pp > 1 else "fsdp"
        per_rank = workload.samples_per_step / t.dp
        micro = max(1, math.ceil(per_rank / max(1, math.ceil(per_rank / t.micro_batch))))
    pools = sorted((p.pool, p.rollout_engines * p.rollout_tp if p.rollout_gpus else 0, p.train_gpus, p.shared_gpus,
                    p.rollout_tp if p.rollout_engines else 1) for p in plan.pools if p.used_gpus)
    mode = plan.execution.mode
    if mode == "async" and plan.execution.staleness_bound == 0:
        mode = "disaggregated"  # neither target tells async with bound 0 from synchronous
    return {"pools": pools, "rollout": plan.rollout.model_dump(), "mode": mode,
            "k": plan.execution.staleness_bound,
            "train": dict(t.model_dump(), sharding=sharding, micro_batch=micro,
                          tp=t.tp, pp=t.pp, dp=t.dp)}


def expressible(plan, target: str, ctx) -> bool:
    """Plans the target can hold: one rollout TP, whole engines, and (verl) even nodes per role."""
    _, same = L.rollout_tp(plan)
    whole = all(p.rollout_gpus % p.rollout_tp == 0 for p in plan.pools)
    if not (same and whole):
        return False
    if target == "verl":
        nodes = L.nodes(plan, ctx)
        roles = (L.SHARED,) if plan.execution.mode == "colocated" else (L.ROLLOUT, L.TRAIN)
        return all(L.uniform(L.per_node(nodes, r)) is not None for r in roles)
    return True


def _roundtrip(tmp_path, plan, target, cluster_path, workload_path, ctx):
    path = tmp_path / f"{target}.yaml"
    path.write_text(yaml.safe_dump(EXPORTERS[target](plan, ctx)))
    back, _ = import_plan(target, str(path), [], str(cluster_path), str(workload_path))
    return back


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.sampled_from(WORKLOADS), st.sampled_from(["verl", "areal"]),
       st.lists(st.floats(0, 1), min_size=48, max_size=48))
def test_export_then_import_gives_back_the_plan(tmp_path, workload_path, target, unit):
    cluster, workload = load_cluster(H100), load_workload(workload_path)
    pb = PlacementProblem(cluster, workload)
    u = np.resize(np.array(unit), pb.n_var)
    plan = pb.decode(pb.layout.repair((pb.xl + u * (pb.xu - pb.xl))[None])[0], lifetime=False)
    ctx = ExportContext.from_specs(cluster, workload)
    if not expressible(plan, target, ctx):
        return  # the exporter's notes say what is lost; nothing to give back
    back = _roundtrip(tmp_path, plan, target, H100, workload_path, ctx)
    assert canonical(back, target, workload) == canonical(plan, target, workload)
    # the imported plan is scored by the model: same layout, same prediction
    assert back.predicted["throughput_samples_s"] == pytest.approx(
        pb.evaluate_plans([back])["throughput_samples_s"][0])


def test_hydra_overrides_apply_as_on_the_command_line():
    cfg = {"trainer": {"nnodes": 1}}
    out = apply_overrides(cfg, ["trainer.nnodes=2", "+trainer.v1.trainer_mode=separate_async",
                                "actor_rollout_ref.rollout.gpu_memory_utilization=0.6"], "f")
    assert out["trainer"] == {"nnodes": 2, "v1": {"trainer_mode": "separate_async"}}
    assert out["actor_rollout_ref"]["rollout"]["gpu_memory_utilization"] == 0.6


@pytest.mark.parametrize("source,config,overrides,mode", [
    ("verl", "verl-gsm8k-grpo.yaml", [], "colocated"),
    ("verl", "verl-gsm8k-grpo.yaml", ["trainer.v1.trainer_mode=separate_async", "actor_rollout_ref.hybrid_engine=false",
                                      "actor_rollout_ref.rollout.nnodes=1", "actor_rollout_ref.rollout.n_gpus_per_node=8",
                                      "trainer.v1.sampler.max_off_policy_threshold=3"], "async"),
    ("areal", "areal-gsm8k-grpo.yaml", [], "async"),
])
def test_shipped_example_configs_import_and_score(source, config, overrides, mode, capsys):
    workload = str(EXAMPLES / config.replace(".yaml", "-workload.yaml"))
    run = ["import", "--from", source, str(EXAMPLES / config), *overrides, "--cluster", str(H100), "--workload", workload]
    assert main(run) == 0
    out = capsys.readouterr().out
    assert out.startswith("your config: ") and "samples/s at $" in out
    plan, warnings = import_plan(source, str(EXAMPLES / config), overrides, str(H100), workload)
    assert plan.execution.mode == mode
    assert plan.predicted["throughput_samples_s"] > 0 and plan.predicted["peak_mem_frac"] <= 1
    assert not any("batch is" in w for w in warnings)  # the example's own workload
    if mode == "async":
        assert plan.execution.staleness_bound == 2


def test_import_is_set_against_a_front(tmp_path, capsys):
    cluster, workload = load_cluster(H100), load_workload(ROOT / "problems/workloads/qwen2.5-7b-grpo.yaml")
    pb = PlacementProblem(cluster, workload)
    X = pb.layout.repair(pb.xl + np.random.default_rng(0).random((30, pb.n_var)) * (pb.xu - pb.xl))
    from mosearch.results import write_front
    plans = [pb.decode(x, lifetime=False) for x in X]
    write_front(tmp_path, plans)
    assert main(["import", "--from", "areal", str(EXAMPLES / "areal-gsm8k-grpo.yaml"), "--cluster", str(H100),
                 "--workload", str(ROOT / "problems/workloads/qwen2.5-7b-grpo.yaml"), "--front", str(tmp_path),
                 "--out", str(tmp_path / "mine.yaml")]) == 0
    out = capsys.readouterr().out.splitlines()
    mine = yaml.safe_load((tmp_path / "mine.yaml").read_text())["predicted"]
    same_cost = [p for p in plans if p.predicted["cost_usd_h"] <= mine["cost_usd_h"] + 1e-9]
    best = max(same_cost, key=lambda p: p.predicted["throughput_samples_s"])
    assert f"the front has {best.predicted['throughput_samples_s']:.3g} samples/s" in out[-1]
    # the same comparison under the front's table
    assert main(["show", str(tmp_path), "--with", str(tmp_path / "mine.yaml"), "--limit", "3"]) == 0
    shown = capsys.readouterr().out
    assert out[0] in shown and out[-1] in shown


def test_bad_config_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("rollout: {backend: 'vllm:d2x4'}\nactor: {backend: 'fsdp:d4'}\n")
    assert main(["import", "--from", "areal", str(bad), "--cluster", str(H100),
                 "--workload", str(ROOT / "problems/workloads/qwen2.5-7b-grpo.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"mosearch: {bad}: rollout.backend: cannot read 'vllm:d2x4' (an AReaL backend string such as vllm:d2t4 or fsdp:d4t1)"
