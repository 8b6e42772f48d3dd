from pathlib import Path

import pytest

from problems.placement import PlacementProblem

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = ROOT / "problems" / "clusters"
WORKLOADS = ROOT / "problems" / "workloads"
# every shipped cluster with a workload it can plausibly run
CASES = [("mixed-8", "qwen2.5-7b-grpo"), ("mixed-64", "qwen2.5-32b-grpo"), ("h100-64", "llama3.1-70b-ppo"),
         ("hetero-1024", "qwen2.5-7b-grpo"), ("local", "tiny-grpo")]


def problem(cluster: str, workload: str, **kw) -> PlacementProblem:
    return PlacementProblem.from_files(CLUSTERS / f"{cluster}.yaml", WORKLOADS / f"{workload}.yaml", **kw)


@pytest.fixture(scope="session")
def problems_by_case():
    return {c: problem(*c) for c in CASES}


def write_cluster(tmp_path, name: str, groups: list[dict], regions=None) -> Path:
    import yaml

    spec = {"name": name, "regions": regions or {"r": {"inter_node_gbs": 50}}, "node_groups": groups}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path
