"""A Ray node lost mid-run, on a real multi-node cluster on this machine (a head and two worker nodes,
each a `ray start` process of its own, as tests/trainer/test_ray_cluster.py starts them).

The loss is deterministic: MOSEARCH_INJECT_FAULTS=node@3:0 makes the driver SIGKILL, in step 3 while
the ranks compute gradients, the raylet of the node training rank 0 runs on (the actor process's
parent pid), and wait until Ray's node table has that node dead. Then, by --on-node-loss:
replace re-places the lost actors on the surviving node, replan plans for the surviving node and
continues with that plan, stop ends with one line naming the resume command (exit 3), which then
finishes the run. Every run must end with continuous steps and every sample trained exactly once.
"""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "trainer"))

from ray_nodes import RayNodes, inspect  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NODE = {"gpu:cpu-local": 2}  # each worker node: two devices (4 CPUs: two bundles of 2)
# The GCS declares a node dead after missing heartbeats (Ray's default: 5 checks 3 s apart); quicker
# here, so a test waits ~2 s on that condition instead of ~15.
HEALTH = {"RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "4"}
STEPS, SAMPLES = 4, 4 * 2  # steps per run; prompts x group size per step


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    nodes = RayNodes(**HEALTH)
    nodes.cache = os.environ.get("MOSEARCH_CACHE") or str(tmp_path_factory.mktemp("mosearch-cache"))
    try:
        nodes.start_head({}, {}, num_cpus=0)  # the head holds no actor: losing it is not survivable
        nodes.add_node(NODE, {})
        nodes.add_node(NODE, {})
        yield nodes
    finally:
        nodes.stop()
    assert nodes.ours() == []


def _two_nodes(cluster):
    """A node killed by an earlier test is replaced by a fresh one."""
    alive = [n for n in inspect(cluster)["nodes"] if n["resources"].get("gpu:cpu-local")]
    for _ in range(2 - len(alive)):
        cluster.add_node(NODE, {})


def _specs(tmp_path) -> tuple[Path, Path]:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({
        "name": "two-nodes", "regions": {"local": {"inter_node_gbs": 5}},
        "profiles": {"cpu-local": str(ROOT / "profiles" / "local.yaml")},
        "node_groups": [{"name": "nodes", "gpu": "cpu-local", "nodes": 2, "gpus_per_node": 2, "region": "local"}]}))
    return cluster, ROOT / "problems" / "workloads" / "tiny-grpo.yaml"


def _plan(tmp_path, engines: int, ranks: int) -> Path:
    cluster, workload = _specs(tmp_path)
    plan = {
        "schema_version": 1, "plan_id": f"e{engines}r{ranks}",
        "cluster": {"name": "two-nodes", "path": str(cluster), "sha256": "0"},
        "workload": {"name": "tiny-grpo", "path": str(workload), "sha256": "0"},
        "pools": [{"pool": "cpu-local@local", "gpu": "cpu-local", "region": "local", "rollout_gpus": engines,
                   "train_gpus": ranks, "shared_gpus": 0, "rollout_tp": 1}],
        "rollout": {"kv_mem_frac": 0.5, "max_num_seqs": 64},
        "train": {"dp": ranks, "tp": 1, "pp": 1, "sharding": "none", "micro_batch": 4},
        "execution": {"mode": "disaggregated", "staleness_bound": 0, "pipeline_chunks": 1},
        "weight_sync": {"route": "direct"},
        "predicted": {"throughput_samples_s": 1.0, "staleness": 0.0, "step_s": 1.0},
    }
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    return path


def _mosearch(cluster, argv, fault: str | None = "node@3:0"):
    env = cluster.env(RAY_ADDRESS=cluster.address, RAY_AUTH_TOKEN_PATH=str(cluster.token_file),
                      MOSEARCH_CACHE=cluster.cache, **({"MOSEARCH_INJECT_FAULTS": fault} if fault else {}))
    return subprocess.run([sys.executable, "-m", "mosearch.cli", *argv], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def _train(cluster, plan, out, policy, fault="node@3:0", *more):
    return _mosearch(cluster, ["train", "--plan", str(plan), "--out", str(out), "--steps", str(STEPS),
                               "--backend", "hf", "--prompts-per-step", "4", "--group-size", "2",
                               "--max-new-tokens", "4", "--eval-size", "8", "--eval-every", "0",
                               "--checkpoint-every", "2", "--no-progress", "--on-node-loss", policy, *more], fault)


def _steps(out: Path) -> list[dict]:
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if not r.get("eval_only")]


def _each_sample_once(out: Path) -> list[dict]:
    rows = _steps(out)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert [i for r in rows for i in r["sample_ids"]] == list(range(STEPS * SAMPLES))
    return rows


def _node_event(rows, action):
    events = [f for r in rows for f in r.get("faults", []) if f.get("lost") == "node"]
    assert len(events) == 1 and events[0]["action"] == action and events[0]["failed_step"] == 3, events
    assert events[0]["restored_step"] == 2  # the checkpoint before the loss
    return events[0]


def test_stop_says_how_to_resume_in_one_line_and_the_resume_finishes(cluster, tmp_path):
    _two_nodes(cluster)
    plan, out = _plan(tmp_path, 1, 1), tmp_path / "run"
    proc = _train(cluster, plan, out, "stop")
    assert proc.returncode == 3 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("mosearch: node ") and " lost in step 3; stopped at step 2, resume with: " in last, last
    command = shlex.split(last.split("resume with: ", 1)[1])
    assert command[:2] == ["mosearch", "train"] and command[-1] == "--resume" and "--on-node-loss" in command
    assert json.loads((out / "summary.json").read_text())["status"] == "stopped"
    # the surviving node holds this plan: the resume command finishes the run
    proc = _mosearch(cluster, command[1:], fault=None)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _each_sample_once(out)


def test_replace_re_places_the_lost_actors_on_the_surviving_node(cluster, tmp_path):
    _two_nodes(cluster)
    out = tmp_path / "run"
    proc = _train(cluster, _plan(tmp_path, 1, 1), out, "replace")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    event = _node_event(_each_sample_once(out), "replace")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["nodes_lost"][0]["nodes"] == event["nodes"]
    alive = {n["id"] for n in inspect(cluster)["nodes"]}
    assert event["nodes"][0] not in alive  # the node really is gone
    placed = summary["layout"]["placed"]  # as each actor reports it, after the recovery
    assert len(placed) == 2 and all(p["node_id"] in alive for p in placed), placed


def test_replan_plans_for_the_surviving_node_and_continues(cluster, tmp_path):
    _two_nodes(cluster)
    out = tmp_path / "run"
    # 2 engines + 2 ranks: both nodes full, so the survivor cannot hold this plan
    proc = _train(cluster, _plan(tmp_path, 2, 2), out, "replan", "node@3:0", "--replan-evals", "1000")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    event = _node_event(_each_sample_once(out), "replan")
    summary = json.loads((out / "summary.json").read_text())
    new = yaml.safe_load(Path(summary["plan_file"]).read_text())
    assert Path(summary["plan_file"]) == out / "replans" / "1" / "plan.yaml" and event["plan_to"] == new["plan_id"]
    assert sum(p["rollout_gpus"] + p["train_gpus"] + p["shared_gpus"] for p in new["pools"]) <= 2
    left = yaml.safe_load((out / "replans" / "1" / "cluster.yaml").read_text())
    assert [(g["nodes"], g["gpus_per_node"]) for g in left["node_groups"]] == [(1, 2)]
    lay = summary["layout"]
    engines = sum((p["rollout_gpus"] + p["shared_gpus"]) // p["rollout_tp"] for p in new["pools"])
    assert (lay["engines"], lay["dp"]) == (engines, new["train"]["dp"])
    assert summary["plan_id"] == new["plan_id"] and summary["measured_from_step"] == 3
