"""SIGKILL `mosearch plan` at random moments over a run directory that already holds a
complete result: whatever is left must be one whole result (the previous one or the new
one), every file complete and the files agreeing with each other; leftovers of the killed
run are hidden and never inside the run directory's results."""

import csv
import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from mosearch import results
from mosearch.planner import checkpoint as ckpt

ROOT = Path(__file__).resolve().parents[2]
MIXED8 = ROOT / "problems" / "clusters" / "mixed-8.yaml"
QWEN7 = ROOT / "problems" / "workloads" / "qwen2.5-7b-grpo.yaml"
KILLS = 3
PNG_SIG = b"\x89PNG\r\n\x1a\n"
PNG_END = b"IEND\xaeB`\x82"  # the IEND chunk type and its CRC end every PNG


def launch(out: Path, seed: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "mosearch.cli", "plan", "--cluster", str(MIXED8), "--workload", str(QWEN7),
           "--out", str(out), "--evals", "1500", "--pop-size", "40", "--seed", str(seed), "--quiet",
           "--checkpoint-every", "2"]
    return subprocess.Popen(cmd, cwd=out.parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def csv_rows(path: Path) -> list[dict]:
    text = path.read_text()
    assert text.endswith("\n"), path
    rows = list(csv.DictReader(text.splitlines()))
    width = len(text.splitlines()[0].split(","))
    assert all(None not in r and len(r) == width for r in rows), path
    return rows


def check_whole(out: Path) -> None:
    """Assert the directory holds one complete, self-consistent result."""
    front = json.loads((out / "front.json").read_text())["plans"]
    ids = [p["plan_id"] for p in front]
    assert [r["plan_id"] for r in csv_rows(out / "front.csv")] == ids
    every = [p["plan_id"] for p in json.loads((out / "front_all.json").read_text())["plans"]]
    assert [r["plan_id"] for r in csv_rows(out / "front_all.csv")] == every
    assert set(ids) <= set(every)
    assert sorted(p.name for p in (out / "plans").iterdir()) == sorted(f"{i}.yaml" for i in every)
    for i in every:
        assert yaml.safe_load((out / "plans" / f"{i}.yaml").read_text())["plan_id"] == i
    info = yaml.safe_load((out / "run.yaml").read_text())
    assert info["front_size"] == len(ids) and info["archive_size"] == len(every)
    hist = csv_rows(out / "history.csv")
    assert int(hist[-1]["evaluations"]) == info["search_evaluations"]
    base = json.loads((out / "baselines.json").read_text())["plans"]
    assert [r["baseline"] for r in csv_rows(out / "baselines.csv")] == [b["baseline"] for b in base]
    pngs = list(out.glob("*.png"))
    assert pngs
    for png in pngs:
        data = png.read_bytes()
        assert data.startswith(PNG_SIG) and data.endswith(PNG_END), png
    html = (out / "report.html").read_text()
    assert html.rstrip().endswith("</html>") and str(len(ids)) in html


def check_checkpoint(out: Path) -> None:
    d = out / "checkpoint"
    if not (d / ckpt.RUN_FILE).exists():
        return
    run = ckpt.read_run(d)
    if (d / ckpt.STATE_FILE).exists():
        with np.load(d / ckpt.STATE_FILE, allow_pickle=False) as z:
            assert "__meta__" in z.files
            meta = json.loads(z["__meta__"].tobytes())
        assert meta["run_id"] == run["run_id"] or run.get("complete")


def check_no_visible_leftovers(out: Path) -> None:
    for p in out.rglob("*"):
        assert ".staging-" not in p.name and not (p.name.endswith(".tmp") and not p.name.startswith(".")), p
    for p in out.parent.iterdir():
        assert p == out or p.name.startswith("."), p  # staging directories beside the run are hidden


@pytest.mark.slow  # ~35 s on an idle 2-core machine: four real runs in subprocesses
def test_sigkill_at_random_moments_never_leaves_a_torn_result(tmp_path):
    out = tmp_path / "run"
    t0 = time.monotonic()
    assert launch(out, seed=1).wait(timeout=300) == 0
    full = time.monotonic() - t0
    check_whole(out)
    rng = random.Random(20240611)
    for k in range(KILLS):
        proc = launch(out, seed=2 + k)
        # the search and the writes fill the last part of a run; imports the first
        time.sleep(rng.uniform(0.45, 1.05) * full)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        check_whole(out)
        check_checkpoint(out)
        check_no_visible_leftovers(out)
    # what the next run does first: clear the hidden leftovers of killed ones
    results.remove_stale_stages(out)
    assert [p for p in tmp_path.iterdir() if p != out] == []
