"""A baseline run is a function of its seed: the planner bench compares medians over seeds, so a
rival whose front moves between two runs of one seed makes the comparison unrepeatable."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mosearch.algorithms.baselines import REGISTRY

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def problem():
    from mosearch.bench.scenarios import BudgetProblem, reference
    from problems.placement.problem import PlacementProblem

    # many plans on this cluster do not fit the 32B model: tournaments between equally infeasible plans
    p = PlacementProblem.from_files(ROOT / "problems" / "clusters" / "mixed-8.yaml",
                                    ROOT / "problems" / "workloads" / "qwen2.5-32b-grpo.yaml")
    scale = reference(p).scale
    return lambda: BudgetProblem(p, 10**9, scale)


@pytest.mark.parametrize("name", ["nsga3", "deap-nsga3"])
def test_the_same_seed_gives_the_same_front(problem, name):
    run = REGISTRY[name].run
    a, b, other = run(problem(), 900, 3), run(problem(), 900, 3), run(problem(), 900, 4)
    assert a.shape == b.shape and np.array_equal(np.sort(a, axis=0), np.sort(b, axis=0))
    assert not (a.shape == other.shape and np.array_equal(np.sort(a, axis=0), np.sort(other, axis=0)))
