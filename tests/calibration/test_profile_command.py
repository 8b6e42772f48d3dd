"""`mosearch profile` end to end on this machine (quick grid): real torch, gloo and vLLM runs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from problems.placement.profile import load_profile
from problems.placement.specs import load_cluster


@pytest.mark.slow
@pytest.mark.integration
def test_profile_quick_grid_writes_a_usable_profile(tmp_path, repo_root):
    out = tmp_path / "profiles" / "here.yaml"
    env = dict(os.environ, MOSEARCH_CACHE=str(repo_root / ".mosearch-cache"))
    proc = subprocess.run([sys.executable, "-m", "mosearch.cli", "profile", "--out", str(out), "--grid", "quick"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    profile = load_profile(out)
    assert profile.device_type == "cpu-local"
    for key in ("matmul", "memory_bandwidth", "train_step", "collective", "offload", "prefill", "decode", "weight_sync"):
        assert profile.measurements[key], key
    f = profile.fitted
    assert 0 < f.mfu <= 1 and 0 < f.decode_eff <= 1 and f.tflops > 0 and f.intra_gbs > 0
    # the collective grid: every op at every size, and the parallel wrappers' per-collective cost
    ops = {(r["op"], r.get("bytes")) for r in profile.measurements["collective"]}
    assert {("all_reduce", 4096), ("all_gather", 4096), ("broadcast", 4096)} <= ops
    assert {"tp_layer", "fsdp_units"} <= {op for op, _ in ops}
    assert f.collective_latency_s > 0 and f.p2p_latency_s > 0 and f.bcast_gbs > 0
    assert f.tp_op_s is not None and f.fsdp_op_s is not None
    # the grid spans 8x in tokens and timed every point (how the timings compare is a speed figure,
    # not a unit-test fact: it races the machine's load)
    steps = sorted(profile.measurements["train_step"], key=lambda r: r["tokens"])
    assert steps[-1]["tokens"] == 8 * steps[0]["tokens"]
    assert all(0 < r["fwd_bwd_seconds"] < float("inf") for r in steps), steps
    cluster = tmp_path / "c.yaml"
    cluster.write_text("name: c\nregions: {r: {inter_node_gbs: 5}}\nprofiles: {cpu-local: profiles/here.yaml}\n"
                       "node_groups:\n  - {gpu: cpu-local, nodes: 1, gpus_per_node: 2, region: r}\n")
    assert load_cluster(cluster).pools[0].gpu.tflops == f.tflops


@pytest.mark.slow
@pytest.mark.integration
def test_only_remeasures_the_named_step_and_keeps_the_rest(tmp_path, repo_root):
    import yaml

    out = tmp_path / "p.yaml"
    shipped = yaml.safe_load((repo_root / "profiles" / "local.yaml").read_text())
    shipped["measurements"]["collective"] = [{"bytes": 1 << 20, "world": 2, "backend": "gloo", "seconds": 1.0,
                                              "bus_gbs": 1e-3}]  # an old, slow row: must be replaced
    shipped["fitted"]["dp_microbatch_s"] = 0.123  # run-fitted: kept
    out.write_text(yaml.safe_dump(shipped))
    proc = subprocess.run([sys.executable, "-m", "mosearch.cli", "profile", "--out", str(out), "--only", "collective",
                           "--grid", "quick"], cwd=repo_root, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    new = load_profile(out)
    assert new.measurements["train_step"] == shipped["measurements"]["train_step"]
    assert {r.get("op") for r in new.measurements["collective"]} >= {"all_reduce", "broadcast", "tp_layer"}
    assert new.fitted.intra_gbs > 1e-3 and new.fitted.dp_microbatch_s == 0.123
    assert new.fitted.mfu == pytest.approx(shipped["fitted"]["mfu"])
    # re-measured here: the profile now records this machine (the shipped one records its Xeon)
    from problems.placement import machine

    assert machine.same_machine(new.machine, machine.detect()) and new.machine["threads"] >= 1


def test_only_without_a_profile_is_one_line(tmp_path, repo_root):
    proc = subprocess.run([sys.executable, "-m", "mosearch.cli", "profile", "--out", str(tmp_path / "none.yaml"),
                           "--only", "collective"], cwd=repo_root, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = (proc.stderr + proc.stdout).strip().splitlines()
    assert len(lines) == 1 and "none.yaml" in lines[0] and "not found" in lines[0], lines
