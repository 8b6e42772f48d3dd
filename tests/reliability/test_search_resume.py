"""Checkpoint and resume of `mosearch plan`: a run killed (SIGKILL) or interrupted (Ctrl-C)
and resumed ends with exactly the front of a run never stopped; changed inputs and foreign
checkpoints are refused in one line."""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mosearch.cli import main
from mosearch.decide import Limits
from mosearch.planner import checkpoint as ckpt
from mosearch.planner.run import plan_run, resume_run
from mosearch.planner.search import SearchSettings

ROOT = Path(__file__).resolve().parents[2]
MIXED8 = ROOT / "problems" / "clusters" / "mixed-8.yaml"
QWEN7 = ROOT / "problems" / "workloads" / "qwen2.5-7b-grpo.yaml"
# enough that the local search (the last quarter) takes several batches
EVALS = "8000"
ARGS = ["--evals", EVALS, "--pop-size", "40", "--seed", "5", "--quiet", "--no-report", "--checkpoint-every", "5"]


def plan_args(out, cluster=MIXED8, workload=QWEN7):
    return ["plan", "--cluster", str(cluster), "--workload", str(workload), "--out", str(out), *ARGS]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "run"
    assert main(plan_args(out)) == 0
    return out


def objectives(run: Path) -> np.ndarray:
    plans = json.loads((run / "front.json").read_text())["plans"]
    cols = ("throughput_samples_s", "cost_usd_h", "peak_mem_frac", "staleness")
    return np.array([[p[c] for c in cols] for p in plans])


def test_sigkill_then_resume_gives_the_uninterrupted_front(reference, tmp_path):
    out = tmp_path / "run"
    state = out / "checkpoint" / ckpt.STATE_FILE
    # the search kills itself (SIGKILL) right after its third checkpoint: mid-run on any machine speed
    env = {**os.environ, ckpt.KILL_ENV: "3"}
    proc = subprocess.run([sys.executable, "-m", "mosearch.cli", *plan_args(out)], cwd=tmp_path, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    assert proc.returncode == -signal.SIGKILL
    assert state.exists() and not (out / "front.json").exists()
    meta, _ = ckpt.read_state(out / "checkpoint", ckpt.read_run(out / "checkpoint")["run_id"])
    assert meta["n_evals"] < int(EVALS)

    assert main(["plan", "--resume", str(out), "--quiet", "--no-report"]) == 0
    assert (out / "front.csv").read_text() == (reference / "front.csv").read_text()
    np.testing.assert_array_equal(objectives(out), objectives(reference))
    assert json.loads((out / "checkpoint" / ckpt.RUN_FILE).read_text())["complete"] is True
    assert main(["plan", "--resume", str(out), "--quiet"]) == 2  # nothing left to resume


# MaOEA-CS spends three quarters of the budget, then it alternates with the local search ("mix":
# generations and local-search batches of about a population, 40)
@pytest.mark.parametrize("every,phase,when", [(5, "maoea", "early"), (1, "maoea", "late"), (1, "mix", "early"),
                                               (1, "mix", "late")])
def test_ctrl_c_then_resume_gives_the_uninterrupted_front(reference, tmp_path, every, phase, when):
    out = tmp_path / "run"
    settings = SearchSettings(evals=int(EVALS), seed=5, pop_size=40, progress=False)
    window = int(int(EVALS) * (1 - settings.polish))  # the local search's first batch starts here
    before, after = [0], [0]

    def interrupt(row, stop):
        after[0] += before[0] >= window
        before[0] = row["evaluations"]
        # MaOEA-CS: after a dozen generations; alternation: at its second batch (the first is
        # checkpointed), or near the end of the budget
        # (late MaOEA-CS: in the generations whose archive entries set its first yield for the alternation)
        if ((phase == "maoea" and when == "early" and row["generation"] >= 12)
                or (phase == "maoea" and when == "late" and row["evaluations"] >= window - 60)
                or (phase == "mix" and when == "early" and after[0] >= 2)
                or (phase == "mix" and when == "late" and row["evaluations"] >= 0.97 * int(EVALS))):
            stop.set()

    first = plan_run(str(MIXED8), str(QWEN7), out, settings, Limits(), on_generation=interrupt, report=False,
                     checkpoint_every=every)
    assert first.result.partial and first.result.evaluations < int(EVALS)
    meta, _ = ckpt.read_state(out / "checkpoint", ckpt.read_run(out / "checkpoint")["run_id"])
    assert meta["phase"] == phase
    again = resume_run(out, progress=False, report=False)
    assert not again.result.partial
    np.testing.assert_array_equal(objectives(out), objectives(reference))


def test_resume_refuses_changed_specs_and_foreign_state(tmp_path, capsys):
    cluster = tmp_path / "cluster.yaml"
    shutil.copy(MIXED8, cluster)
    out = tmp_path / "run"
    settings = SearchSettings(evals=int(EVALS), seed=5, pop_size=40, progress=False)

    def interrupt(row, stop):
        if row["generation"] >= 8:
            stop.set()

    plan_run(str(cluster), str(QWEN7), out, settings, on_generation=interrupt, report=False, checkpoint_every=5)
    cluster.write_text(cluster.read_text() + "\n# edited\n")
    assert main(["plan", "--resume", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "cluster.yaml" in err and "changed" in err and len(err.splitlines()) == 1

    shutil.copy(MIXED8, cluster)
    run = json.loads((out / "checkpoint" / ckpt.RUN_FILE).read_text())
    (out / "checkpoint" / ckpt.RUN_FILE).write_text(json.dumps({**run, "run_id": "another"}))
    assert main(["plan", "--resume", str(out)]) == 2
    assert "state of another run" in capsys.readouterr().err

    assert main(["plan", "--resume", str(tmp_path / "nowhere")]) == 2
    assert main(["plan", "--resume", str(out), "--seed", "2"]) == 2
    assert "--seed" in capsys.readouterr().err


def test_state_loads_without_pickle(tmp_path):
    """A state.npz holding a pickled object array is refused, not unpickled."""
    run_dir = tmp_path / "checkpoint"
    run_dir.mkdir()
    meta = np.frombuffer(json.dumps({"run_id": "r"}).encode(), dtype=np.uint8)
    np.savez(run_dir / ckpt.STATE_FILE, __meta__=meta, evil=np.array([object()], dtype=object))
    from problems.errors import InputError

    with pytest.raises(InputError, match="unreadable checkpoint state"):
        ckpt.read_state(run_dir, "r")
