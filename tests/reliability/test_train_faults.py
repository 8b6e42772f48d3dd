"""Training under faults, on one local Ray: lost rollout engine, lost training rank, SIGKILLed
driver resumed over a corrupted checkpoint, and a plan for another cluster refused before start.

Backends: the engine-loss test runs vLLM; the others use the transformers backend (`hf`), whose
actors start in seconds instead of ~30 s, because what they test is the driver's recovery.
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mosearch.cli import main
from problems.errors import InputError
from trainer import checkpoint as ckpt

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
SHAPE = dict(prompts_per_step=8, group_size=4, max_new_tokens=4, eval_size=16, progress=False)
N = 8 * 4  # samples per step


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """One local Ray (loopback, no dashboard) with 4 emulated devices; a running one is reused.
    Yields its address so a subprocess driver can join it as another job."""
    import ray

    old_cache = os.environ.get("MOSEARCH_CACHE")
    cache = os.environ.setdefault("MOSEARCH_CACHE", str(tmp_path_factory.mktemp("mosearch-cache")))
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=8, resources={"gpu:cpu-local": 4}, include_dashboard=False, log_to_driver=False,
                 configure_logging=False, _node_ip_address="127.0.0.1")
    yield {"address": ray.get_runtime_context().gcs_address, "cache": cache}
    if started:
        ray.shutdown()
    if old_cache is None:
        os.environ.pop("MOSEARCH_CACHE", None)


def _plan(tmp_path, name="plan.yaml", rollout=1, train=1, gpu="cpu-local", mode="disaggregated", k=0, chunks=2,
          shared=0, dp=None):
    plan = {
        "schema_version": 1, "plan_id": name.split(".")[0],
        "cluster": {"name": "local", "path": "problems/clusters/local.yaml", "sha256": "0"},
        "workload": {"name": "tiny-arithmetic", "path": "problems/workloads/tiny-grpo.yaml", "sha256": "0"},
        "pools": [{"pool": f"{gpu}@local", "gpu": gpu, "region": "local", "rollout_gpus": rollout,
                   "train_gpus": train, "shared_gpus": shared, "rollout_tp": 1}],
        "rollout": {"kv_mem_frac": 0.5, "max_num_seqs": 64},
        "train": {"dp": dp or train, "tp": 1, "pp": 1, "sharding": "none", "micro_batch": 16},
        "execution": {"mode": mode, "staleness_bound": k, "pipeline_chunks": chunks},
        "weight_sync": {"route": "direct"},
        "predicted": {"throughput_samples_s": 1.0, "staleness": 0.0, "step_s": 1.0},
    }
    path = tmp_path / name
    path.write_text(yaml.safe_dump(plan))
    return path


def _rows(out: Path, name="metrics.jsonl") -> list[dict]:
    f = out / name
    return [json.loads(x) for x in f.read_text().splitlines()] if f.is_file() else []


def _steps(out: Path) -> list[dict]:
    return [r for r in _rows(out) if not r.get("eval_only")]


def _assert_each_batch_once(rows: list[dict], steps: int) -> None:
    """Continuous steps 1..steps; every sample id of the run exactly once, in order."""
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    assert [i for r in rows for i in r["sample_ids"]] == list(range(steps * N))


@pytest.mark.slow
def test_lost_vllm_engine_is_restarted_with_current_weights_and_only_its_chunk_redone(ray_cluster, tmp_path, monkeypatch):
    from trainer.driver import RunConfig, run

    # One engine, two chunks per step: the fault fires once chunk 1 is back and chunk 2 is generating.
    monkeypatch.setenv("MOSEARCH_INJECT_FAULTS", "engine@2:0")
    monkeypatch.setenv("RAY_ADDRESS", ray_cluster["address"])
    out = tmp_path / "engine"
    cfg = RunConfig(plan=str(_plan(tmp_path)), out=str(out), steps=3, eval_every=0, checkpoint_every=0,
                    backend="vllm", lr=1e-2, **SHAPE)
    logs = []
    summary = run(cfg, log=logs.append)
    rows = _steps(out)
    assert summary["status"] == "finished"
    _assert_each_batch_once(rows, 3)
    assert any("rollout engine 0 lost" in m for m in logs)
    assert rows[1]["faults"] == [{"lost": "engine", "index": 0, "version": 1}]
    assert rows[1]["redone_chunks"] == 1  # the finished chunk was kept, only the lost one was redone
    assert "faults" not in rows[0] and "faults" not in rows[2]
    # The restarted engine generated with the trainer's weights of that step (lr 1e-2 so each step
    # moves them): behaviour log-probs match the trainer's, no sample is stale.
    for r in rows:
        assert r["staleness_max"] == 0 and r["behav_abs_diff_mean"] < 1e-3, r["behav_abs_diff_mean"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["disaggregated", "colocated"])
def test_lost_training_rank_restores_every_rank_from_the_checkpoint(ray_cluster, tmp_path, monkeypatch, mode):
    from trainer.driver import RunConfig, run

    # Checkpoints at steps 2 and 4; rank 1 of 2 dies in step 4, after step 3's row was written.
    # Colocated: it dies while the engines sleep, and the redone step must wake them to generate.
    monkeypatch.setenv("MOSEARCH_INJECT_FAULTS", "worker@4:1")
    monkeypatch.setenv("RAY_ADDRESS", ray_cluster["address"])  # the cluster's 4 devices, not this machine's 2
    out = tmp_path / "worker"
    plan = (_plan(tmp_path, train=2) if mode == "disaggregated" else
            _plan(tmp_path, rollout=0, train=0, shared=2, dp=2, mode="colocated", chunks=1))
    cfg = RunConfig(plan=str(plan), out=str(out), steps=5, eval_every=0, checkpoint_every=2, backend="hf", **SHAPE)
    logs = []
    summary = run(cfg, log=logs.append)
    rows = _steps(out)
    assert summary["status"] == "finished"
    _assert_each_batch_once(rows, 5)
    assert any("every rank restored to step 2" in m for m in logs)
    assert rows[2]["faults"] == [{"lost": "worker", "index": 1, "failed_step": 4, "restored_step": 2}]
    # Step 3 ran twice (the first time after the checkpoint, lost with the rank): its first row moved
    # to metrics.superseded.jsonl, and the redo trained exactly the same prompts and sample ids.
    gone = _rows(out, "metrics.superseded.jsonl")
    assert [r["step"] for r in gone] == [3] and gone[0]["superseded_by_restore_to"] == 2
    assert gone[0]["sample_ids"] == rows[2]["sample_ids"] and gone[0]["prompt_ids"] == rows[2]["prompt_ids"]
    assert all(r["behav_abs_diff_mean"] < 1e-3 for r in rows)  # engines got the restored weights


@pytest.mark.slow
@pytest.mark.parametrize("point, where", [(0, "while the ranks compute step 5's gradients"),
                                          (1, "while step 5's checkpoint is written")])
def test_sigkilled_run_resumes_over_a_corrupt_checkpoint(ray_cluster, tmp_path, monkeypatch, capsys, point, where):
    """Async k=1 (batches drawn ahead of the checkpoint), SIGKILLed in step 5 at a fixed point (the
    driver kills itself there, so the kill lands mid-run on any machine speed); the newest checkpoint
    is then corrupted, so --resume falls back to the one before."""
    out = tmp_path / "killed"
    plan = _plan(tmp_path, mode="async", k=1, chunks=1)
    steps, killed_in = 8, 5
    args = ["train", "--plan", str(plan), "--out", str(out), "--steps", str(steps), "--checkpoint-every", "1",
            "--eval-every", "0", "--backend", "hf", "--prompts-per-step", "8", "--group-size", "4",
            "--max-new-tokens", "4", "--eval-size", "16", "--no-progress"]
    env = {**os.environ, "RAY_ADDRESS": ray_cluster["address"], "MOSEARCH_CACHE": ray_cluster["cache"],
           "PYTHONPATH": str(ROOT), "MOSEARCH_INJECT_FAULTS": f"driver@{killed_in}:{point}"}
    proc = subprocess.run([sys.executable, "-c", "import sys; from mosearch.cli import main; sys.exit(main(sys.argv[1:]))",
                           *args], env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    assert [r["step"] for r in _steps(out)] == list(range(1, killed_in)), where
    staged = out / "checkpoints" / f".step_{killed_in:06d}.tmp"
    assert staged.is_dir() == (point == 1), where  # a torn checkpoint is left only by a kill inside it
    done_before = ckpt.steps(out / "checkpoints")
    assert [st for st, _ in done_before] == [killed_in - 1, killed_in - 2]  # the two kept, newest first
    newest = done_before[0][1]
    blob = bytearray((newest / "state.pt").read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    (newest / "state.pt").write_bytes(bytes(blob))

    monkeypatch.setenv("RAY_ADDRESS", ray_cluster["address"])
    monkeypatch.delenv("MOSEARCH_INJECT_FAULTS", raising=False)
    assert main([*args, "--resume"]) == 0, where
    err = capsys.readouterr().err
    warn = [line for line in err.splitlines() if "skipping checkpoint" in line]
    assert len(warn) == 1 and str(newest / "state.pt") in warn[0] and "corrupt" in warn[0]
    assert f"resumed from step_{killed_in - 2:06d}" in err
    rows = _steps(out)
    _assert_each_batch_once(rows, steps)
    assert all(r["staleness_max"] <= 1 for r in rows)
    assert json.loads((out / "summary.json").read_text())["status"] == "finished"


def test_fault_specs_parse_and_bad_ones_are_refused():
    from trainer.driver import parse_faults

    faults = parse_faults("engine@2, worker@4:1,driver@5:1, driver@6")
    assert [(f.kind, f.step, f.index, f.point) for f in faults] == [
        ("engine", 2, 0, "chunk"), ("worker", 4, 1, "gradients"), ("driver", 5, 1, "checkpoint"),
        ("driver", 6, 0, "gradients")]
    for bad in ("driver@5:2", "rank@3", "engine@x"):
        with pytest.raises(InputError):
            parse_faults(bad)


def test_checkpoint_choice_skips_corrupt_and_refuses_when_none_verifies(tmp_path):
    root = tmp_path / "checkpoints"
    for s in (2, 4):
        t = ckpt.staging_dir(root, s)
        (t / "state.pt").write_bytes(b"weights %d" % s)
        ckpt.commit(root, t, s, {"step": s})
    warnings = []
    assert ckpt.load_newest_valid(root, warn=warnings.append)[1] == {"step": 4}
    assert ckpt.load_newest_valid(root, max_step=3, warn=warnings.append)[1] == {"step": 2}
    (root / "step_000004" / "state.pt").write_bytes(b"weights 5")  # a flipped byte
    path, state = ckpt.load_newest_valid(root, warn=warnings.append)
    assert path.name == "step_000002" and state == {"step": 2}
    assert len(warnings) == 1 and "step_000004/state.pt" in warnings[0]
    (root / "step_000002" / "driver.json").write_text('{"step": 3}')
    with pytest.raises(InputError) as err:
        ckpt.load_newest_valid(root, warn=warnings.append)
    assert "step_000004/state.pt" in err.value.line() and "\n" not in err.value.line()
    assert ckpt.load_newest_valid(tmp_path / "none") == (None, None)


@pytest.mark.parametrize("gpu, n, expect", [
    ("H100", 8, "needs H100 x16 (found 0) for 8 rollout + 8 train in H100@local; the Ray cluster at RAY_ADDRESS="),
    ("cpu-local", 3, "needs cpu-local x6 (found 4) for 3 rollout + 3 train in cpu-local@local"),
])
def test_plan_for_another_cluster_is_refused_before_anything_starts(ray_cluster, tmp_path, monkeypatch, capsys,
                                                                    gpu, n, expect):
    import ray
    from ray.util import placement_group_table

    from trainer import placement as P

    monkeypatch.setenv("RAY_ADDRESS", ray_cluster["address"])
    started = []
    monkeypatch.setattr(P, "start_ray", lambda *a: started.append("start_ray"))
    monkeypatch.setattr(P, "placement_groups", lambda *a: started.append("placement_groups"))
    groups = len(placement_group_table())
    actors = len(ray._private.state.actors())
    plan = _plan(tmp_path, rollout=n, train=n, gpu=gpu)
    assert main(["train", "--plan", str(plan), "--steps", "1", "--out", str(tmp_path / "r"), "--backend", "hf"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expect in err[0] and f"RAY_ADDRESS={ray_cluster['address']} has cpu-local x4" in err[0], err
    assert started == [] and len(placement_group_table()) == groups and len(ray._private.state.actors()) == actors
    assert not (tmp_path / "r").exists()
