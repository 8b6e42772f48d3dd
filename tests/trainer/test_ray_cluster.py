"""`mosearch train` on a multi-node Ray cluster the user runs (RAY_ADDRESS), with token authentication.

The cluster: a head offering `gpu:H100` and `gpu:L4` (two GPU types in region us-east) and a second
node offering `gpu:A100-80G` (region eu-west) at address 127.0.0.2, as another machine would have
its own address, each a `ray start` process of its own, started once for this module. A mixed plan must land every engine and rank on a node of its pool's type and
region (reported from inside the actors), train 3 steps and leave the cluster as it found it; the
ways of failing to join end in one line naming RAY_ADDRESS, exit 2.
"""

import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from ray_nodes import ROOT, RayNodes, inspect

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HEAD = {"gpu:H100": 1, "gpu:L4": 1}
WORKER = {"gpu:A100-80G": 2}
WORKER_IP = "127.0.0.2"


@pytest.fixture(scope="module")
def cluster():
    nodes = RayNodes()
    try:
        nodes.start_head(HEAD, {"region": "us-east"})
        nodes.add_node(WORKER, {"region": "eu-west"}, ip=WORKER_IP)
        yield nodes
    finally:
        nodes.stop()
    assert nodes.ours() == []  # every process of the cluster is gone


def _pool(gpu, region, r, t):
    return {"pool": f"{gpu}@{region}", "gpu": gpu, "region": region, "rollout_gpus": r, "train_gpus": t,
            "shared_gpus": 0, "rollout_tp": 1}


def _plan(tmp_path, pools, name="plan.yaml"):
    dp = sum(p["train_gpus"] for p in pools)
    plan = {
        "schema_version": 1, "plan_id": "mixed-cluster",
        "cluster": {"name": "mixed-test", "path": "problems/clusters/mixed-8.yaml", "sha256": "0"},
        "workload": {"name": "tiny-arithmetic", "path": "problems/workloads/tiny-grpo.yaml", "sha256": "0"},
        "pools": pools,
        "rollout": {"kv_mem_frac": 0.5, "max_num_seqs": 64},
        "train": {"dp": dp, "tp": 1, "pp": 1, "sharding": "none", "micro_batch": 16},
        "execution": {"mode": "disaggregated", "staleness_bound": 0, "pipeline_chunks": 1},
        "weight_sync": {"route": "direct"},
        "predicted": {"throughput_samples_s": 1.0, "staleness": 0.0, "step_s": 1.0},
    }
    path = tmp_path / name
    path.write_text(yaml.safe_dump(plan))
    return path


# the A100 pool first: training rank 0 lands on the worker node, away from the head's address
MIXED = [_pool("A100-80G", "eu-west", 1, 1), _pool("H100", "us-east", 1, 0), _pool("L4", "us-east", 0, 1)]


def _train(cluster, plan, out, steps=3, **env):
    args = ["train", "--plan", str(plan), "--out", str(out), "--steps", str(steps), "--backend", "hf",
            "--prompts-per-step", "4", "--group-size", "2", "--max-new-tokens", "4", "--eval-size", "8",
            "--eval-every", "0", "--checkpoint-every", "0", "--no-progress"]
    e = cluster.env(RAY_ADDRESS=cluster.address, MOSEARCH_CACHE=os.environ["MOSEARCH_CACHE"], **env)
    return subprocess.run([sys.executable, "-m", "mosearch.cli", *args], env=e, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def _reservable(res: dict) -> dict:
    """What placement groups and actors take (CPUs, GPU types); not the memory figures, which move on their own."""
    return {k: v for k, v in res.items() if k == "CPU" or k.startswith("gpu:")}


def _wait_free(cluster, before, deadline_s=120):
    """Resources return to the cluster asynchronously (raylets report to the head): wait for it."""
    end = time.monotonic() + deadline_s
    while True:
        now = inspect(cluster)
        if _reservable(now["available"]) == _reservable(before["available"]) or time.monotonic() > end:
            return now
        time.sleep(1)


def test_mixed_plan_lands_on_its_gpu_types_and_regions(cluster, tiny_model, tmp_path):
    before = inspect(cluster)
    nodes = {n["id"]: n for n in before["nodes"]}
    assert len(nodes) == 2
    out = tmp_path / "run"
    # the token is found in RAY_AUTH_TOKEN_PATH; RAY_AUTH_MODE is left unset, as a new user would
    proc = _train(cluster, _plan(tmp_path, MIXED), out, RAY_AUTH_TOKEN_PATH=str(cluster.token_file))
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 3
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "time" in r] == [1, 2, 3]
    placed = summary["layout"]["placed"]
    assert sorted((p["role"], p["pool"]) for p in placed) == [
        ("engine", "A100-80G@eu-west"), ("engine", "H100@us-east"), ("rank", "A100-80G@eu-west"), ("rank", "L4@us-east")]
    for p in placed:  # reported from inside each actor
        gpu, region = p["pool"].split("@")
        node = nodes[p["node_id"]]
        assert node["resources"].get(f"gpu:{gpu}", 0) >= 1 and node["labels"]["region"] == region, p
        assert p["region"] == region and p["resources"].get(f"gpu:{gpu}") == 1.0, p
    # the ranks met at rank 0's node address, not at a loopback address of the driver's machine
    rank0 = nodes[next(p["node_id"] for p in placed if p["role"] == "rank" and p["index"] == 0)]
    assert rank0["address"] == WORKER_IP and summary["layout"]["rendezvous"] == WORKER_IP
    # the only note: the types are custom resources on nodes without GPUs (flagged, predicted for the CPU)
    assert summary["layout"]["device"] == "cpu" and summary["layout"]["notes"] == [
        "CPU run: the cluster's GPU types (A100-80G, H100, L4) are Ray custom resources on nodes without GPUs; "
        "all work runs on the CPU, and is predicted for this machine's CPU profile"]
    assert "CPU run (A100-80G, H100, L4 are Ray custom resources on nodes without GPUs)" in proc.stdout
    # as it found it: no placement group left, every resource free again
    assert _reservable(before["available"]) == {"CPU": 8, "gpu:H100": 1, "gpu:L4": 1, "gpu:A100-80G": 2}
    after = _wait_free(cluster, before)
    assert _reservable(after["available"]) == _reservable(before["available"])
    assert set(after["pgs"]) <= {"REMOVED"}


def _one_line(proc) -> str:
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


def test_missing_token_is_one_line(cluster, tmp_path):
    # no token anywhere: no variables, and a home without ~/.ray/auth_token
    proc = _train(cluster, _plan(tmp_path, MIXED), tmp_path / "run", HOME=str(tmp_path))
    assert _one_line(proc) == (
        f"mosearch: RAY_ADDRESS: the Ray cluster at {cluster.address} requires a token and none was found "
        "(set RAY_AUTH_TOKEN to it, or RAY_AUTH_TOKEN_PATH to a file holding it, or put it in ~/.ray/auth_token; "
        "`ray get-auth-token` prints it, run with the RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN the head was started "
        "with)")


def test_wrong_token_and_disabled_auth_are_one_line(cluster, monkeypatch):
    # the same check as the CLI's (test_missing_token_is_one_line runs it end to end), in-process
    from problems.errors import InputError
    from trainer.cluster import check

    for var in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN", "not-the-token")
    with pytest.raises(InputError) as err:
        check(cluster.address)
    assert err.value.line() == (
        f"RAY_ADDRESS: the Ray cluster at {cluster.address} refused the token from RAY_AUTH_TOKEN "
        "(use that cluster's token: `ray get-auth-token` prints it, run with the RAY_AUTH_TOKEN_PATH or "
        "RAY_AUTH_TOKEN the head was started with)")
    monkeypatch.delenv("RAY_AUTH_TOKEN")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(cluster.token_file))
    assert check(cluster.address) is True  # the right token: the cluster wants it, and takes it
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    with pytest.raises(InputError) as err:
        check(cluster.address)
    assert err.value.line() == (
        f"RAY_ADDRESS: the Ray cluster at {cluster.address} requires a token but RAY_AUTH_MODE=disabled "
        "(unset RAY_AUTH_MODE and set RAY_AUTH_TOKEN to it, or RAY_AUTH_TOKEN_PATH to a file holding it, or put it "
        "in ~/.ray/auth_token; `ray get-auth-token` prints it, run with the RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN "
        "the head was started with)")


def test_gpu_types_absent_is_one_line(cluster, tmp_path):
    # L40S exists nowhere; H100 exists, but not in eu-west
    plan = _plan(tmp_path, [_pool("L40S", "us-east", 1, 0), _pool("H100", "eu-west", 0, 1)])
    proc = _train(cluster, plan, tmp_path / "run", RAY_AUTH_TOKEN_PATH=str(cluster.token_file))
    assert _one_line(proc) == (
        f"mosearch: {plan}: pools: plan for cluster 'mixed-test' needs L40S x1 in region us-east (found 0) for "
        "1 rollout in L40S@us-east; H100 x1 in region eu-west (found 0) for 1 train in H100@eu-west; the Ray cluster "
        f"at RAY_ADDRESS={cluster.address} has A100-80G x2 in eu-west, H100 x1 in us-east, L4 x1 in us-east "
        "(start nodes offering each GPU type as `--resources '{\"gpu:TYPE\": N}'` (or GPU nodes Ray labels "
        "accelerator_type:TYPE) with `--labels region=REGION`, or use a plan made for this cluster)")


NO_ROOM = """
import json, sys
from problems.errors import InputError
from ray.util import placement_group_table
from trainer import placement as P
P.PG_WAIT_S = 3.0
found = P.detect()
two = [P.EngineSpec("H100@us-east", "H100", 1, False)] * 2  # the cluster has one H100: never placeable
lay = P.Layout(two, [], colocated=False, emulated=False, pool_regions={"H100@us-east": "us-east"})
try:
    P.placement_groups(lay, found)
except InputError as e:
    print(json.dumps({"line": e.line(), "pgs": [p["state"] for p in placement_group_table().values()]}))
"""


def test_no_room_for_the_placement_groups_is_one_line(cluster):
    env = cluster.env(RAY_ADDRESS=cluster.address, RAY_AUTH_TOKEN_PATH=str(cluster.token_file))
    out = subprocess.run([sys.executable, "-c", NO_ROOM], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip(), out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["line"] == (
        f"RAY_ADDRESS: the Ray cluster at {cluster.address} did not place the plan's 2 bundles within 3 s "
        "(free: CPU 8, gpu:H100 1) (free its nodes, or give each engine and rank 2 CPUs on a node of its GPU type)")
    assert set(got["pgs"]) <= {"REMOVED"}  # the pending group is not left behind
