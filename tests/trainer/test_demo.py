"""`mosearch demo` end to end, scaled down: plan the local cluster, pick the knee, train on it."""

import json

import pytest
import yaml

from mosearch.cli import main

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_demo_plans_picks_the_knee_and_trains_on_it(ray_local, tmp_path, capsys):
    out = tmp_path / "demo"
    code = main(["demo", "--out", str(out), "--evals", "400", "--steps", "2", "--warm-start-steps", "5",
                 "--prompts-per-step", "4", "--group-size", "4"])
    assert code == 0, capsys.readouterr().err[-2000:]
    plan = yaml.safe_load((out / "plan.yaml").read_text())
    run = json.loads((out / "run" / "summary.json").read_text())
    assert (out / "front" / "report.html").is_file()
    assert run["status"] == "finished" and run["steps"] == 2
    assert run["plan_id"] == plan["plan_id"] and run["mode"] == plan["execution"]["mode"]
    # the shipped local cluster plans with the measured profile, and the run says so
    profiles = yaml.safe_load((out / "front" / "run.yaml").read_text())["cluster"]["profiles"]
    assert profiles["cpu-local"]["path"].endswith("profiles/local.yaml")
    rows = [json.loads(x) for x in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "time" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert steps[0]["lr"] > steps[1]["lr"]  # the demo's cosine schedule decays over its steps
