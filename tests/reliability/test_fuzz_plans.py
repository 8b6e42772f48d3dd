"""Generated plan files, valid and broken: loading them never raises a traceback.

`mosearch export` reads a plan the way `mosearch train` does (schema validation, then checks
against the cluster it names); every generated file either exports or exits 2 with one line that
names the plan file and a key.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mosearch.cli import main
from problems.placement import PlacementProblem

junk = st.one_of(st.none(), st.booleans(), st.integers(-5, 100), st.floats(-2, 2), st.text(max_size=5),
                 st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


TARGETS = ("verl", "areal", "rlinf")


@pytest.fixture(scope="module")
def valid_plans(repo_root, tmp_path_factory):
    """Real plans decoded from mixed-64 for each export target (repaired to its rules, and kept only
    where its rules hold, as `mosearch plan --executor` would), with spec paths that resolve from any
    directory."""
    out = {}
    for target in TARGETS:
        problem = PlacementProblem.from_files(repo_root / "problems/clusters/mixed-64.yaml",
                                              repo_root / "problems/workloads/qwen2.5-7b-grpo.yaml", executor=target)
        rng = np.random.default_rng(0)
        plans = [problem.decode(x) for x in rng.uniform(problem.xl, problem.xu, (60, problem.n_var))]
        out[target] = [p.model_dump(mode="json") for p in plans if problem.executor_problem(p) is None][:6]
        assert len(out[target]) >= 3, target
    return out


def _paths(d: dict) -> list[list]:
    """Every key path in a nested dict/list."""
    out = []
    for k, v in (d.items() if isinstance(d, dict) else enumerate(d)):
        out.append([k])
        if isinstance(v, (dict, list)) and v:
            out += [[k, *rest] for rest in _paths(v)]
    return out


OUTCOMES: dict[int, int] = {}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_generated_plans_export_or_fail_in_one_line(tmp_path, capsys, valid_plans, data):
    target = data.draw(st.sampled_from(TARGETS))
    plan = copy.deepcopy(data.draw(st.sampled_from(valid_plans[target])))
    for _ in range(data.draw(st.integers(0, 3))):  # 0 mutations: the plan must export
        path = data.draw(st.sampled_from(_paths(plan)))
        parent = plan
        for k in path[:-1]:
            parent = parent[k]
        if data.draw(st.booleans()):
            parent[path[-1]] = data.draw(junk)
        elif isinstance(parent, dict):
            del parent[path[-1]]
    raw = data.draw(st.sampled_from([None, "", "[", "plan: {", "- 1\n- 2"]))
    file = tmp_path / "plan.yaml"
    file.write_text(yaml.safe_dump(plan) if raw is None else raw)
    code = main(["export", str(file), "--to", target])
    out, err = capsys.readouterr()
    OUTCOMES[code] = OUTCOMES.get(code, 0) + 1
    assert code in (0, 2)
    if code == 2:
        lines = [ln for ln in err.splitlines() if not ln.startswith("mosearch export:")]  # warnings aside
        assert len(lines) == 1 and str(file) in lines[0] and "Traceback" not in err, err
        assert out == ""


def test_generated_plans_cover_both_outcomes():
    # runs after the property test (file order): both working and refused plans were generated
    assert OUTCOMES.get(0, 0) >= 5 and OUTCOMES.get(2, 0) >= 5, OUTCOMES


@pytest.mark.parametrize("target", TARGETS)
def test_unmodified_plans_export(tmp_path, capsys, valid_plans, target):
    for i, plan in enumerate(valid_plans[target]):
        file = tmp_path / f"p{i}.yaml"
        file.write_text(yaml.safe_dump(plan))
        assert main(["export", str(file), "--to", target]) == 0, capsys.readouterr().err
    if target == "verl":
        assert "use_v1: true" in capsys.readouterr().out  # verl 0.9.1 v1 trainer config


@pytest.mark.parametrize("text,key", [
    ("schema_version: 1\n", "plan_id"),
    ("[1, 2", "<root>"),
])
def test_train_refuses_a_broken_plan_before_starting_anything(tmp_path, capsys, text, key):
    file = tmp_path / "plan.yaml"
    file.write_text(text)
    assert main(["train", "--plan", str(file), "--steps", "1", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{file}: {key}" in err[0]
    assert not (tmp_path / "run").exists()
