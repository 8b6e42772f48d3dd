"""`mosearch profile` end to end on this machine (quick grid): real torch, gloo and vLLM runs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from problems.placement.calibration import load_profile
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
    # the grid spans 8x in tokens and timed every point (how the timings compare is a speed figure,
    # not a unit-test fact: it races the machine's load)
    steps = sorted(profile.measurements["train_step"], key=lambda r: r["tokens"])
    assert steps[-1]["tokens"] == 8 * steps[0]["tokens"]
    assert all(0 < r["fwd_bwd_seconds"] < float("inf") for r in steps), steps
    cluster = tmp_path / "c.yaml"
    cluster.write_text("name: c\nregions: {r: {inter_node_gbs: 5}}\nprofiles: {cpu-local: profiles/here.yaml}\n"
                       "node_groups:\n  - {gpu: cpu-local, nodes: 1, gpus_per_node: 2, region: r}\n")
    assert load_cluster(cluster).pools[0].gpu.tflops == f.tflops
