from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = ROOT / "problems" / "clusters"
WORKLOADS = ROOT / "problems" / "workloads"


@pytest.fixture(scope="session")
def mixed8_run(tmp_path_factory):
    """One small real search on mixed-8 x qwen2.5-7b-grpo through the CLI, shared by the read-only tests."""
    from mosearch.cli import main

    out = tmp_path_factory.mktemp("runs") / "mixed8"
    code = main(["plan", "--cluster", str(CLUSTERS / "mixed-8.yaml"), "--workload", str(WORKLOADS / "qwen2.5-7b-grpo.yaml"),
                 "--out", str(out), "--evals", "1500", "--pop-size", "40", "--seed", "3", "--quiet"])
    assert code == 0
    return out
