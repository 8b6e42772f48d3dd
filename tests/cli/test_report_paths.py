"""report.html carries no path of the machine it was made on: spec files are named relative to the
run directory (both under the working directory) or by file name."""

from __future__ import annotations

import json
import re
import shutil

from mosearch.cli import main
from tests.cli.conftest import CLUSTERS, WORKLOADS


def _plans(page: str) -> list[dict]:
    return json.loads(re.search(r"const PLANS = (\[.*?\]);\n", page, re.S).group(1))


def _plan(argv: list[str]) -> None:
    assert main(["plan", *argv, "--evals", "600", "--pop-size", "20", "--quiet"]) == 0


def test_report_names_specs_by_file_name_outside_the_working_directory(tmp_path, monkeypatch):
    spec_dir, cwd = tmp_path / "specs", tmp_path / "elsewhere"
    spec_dir.mkdir()
    cwd.mkdir()
    shutil.copy(CLUSTERS / "mixed-8.yaml", spec_dir)
    shutil.copy(WORKLOADS / "qwen2.5-7b-grpo.yaml", spec_dir)
    monkeypatch.chdir(cwd)
    out = tmp_path / "run"
    _plan(["--cluster", str(spec_dir / "mixed-8.yaml"), "--workload", str(spec_dir / "qwen2.5-7b-grpo.yaml"),
           "--out", str(out)])
    page = (out / "report.html").read_text()
    assert str(tmp_path) not in page
    assert not re.search(r"""["'(=\s](/[A-Za-z0-9_.-]+){2,}""", page)  # no absolute path of any folder
    plans = _plans(page)
    assert plans and {p["cluster"]["path"] for p in plans} == {"mixed-8.yaml"}
    assert {p["workload"]["path"] for p in plans} == {"qwen2.5-7b-grpo.yaml"}
    # the plan files keep a path that finds the spec
    assert (out / "plans" / f"{plans[0]['plan_id']}.yaml").read_text().count(str(spec_dir)) == 2


def test_report_names_specs_relative_to_the_run_directory(tmp_path, monkeypatch):
    (tmp_path / "specs").mkdir()
    shutil.copy(CLUSTERS / "mixed-8.yaml", tmp_path / "specs")
    shutil.copy(WORKLOADS / "qwen2.5-7b-grpo.yaml", tmp_path / "specs")
    monkeypatch.chdir(tmp_path)
    _plan(["--cluster", "specs/mixed-8.yaml", "--workload", str(tmp_path / "specs" / "qwen2.5-7b-grpo.yaml"),
           "--out", "runs/r1"])
    page = (tmp_path / "runs" / "r1" / "report.html").read_text()
    assert str(tmp_path) not in page
    plans = _plans(page)
    assert {p["cluster"]["path"] for p in plans} == {"../../specs/mixed-8.yaml"}
    assert {p["workload"]["path"] for p in plans} == {"../../specs/qwen2.5-7b-grpo.yaml"}
