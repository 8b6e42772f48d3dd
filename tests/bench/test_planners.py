"""`mosearch bench planners`: a tiny real run on mixed-8, the equal-budget recorder, generated clusters."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from mosearch.bench import planners, scale
from mosearch.bench import scenarios as sc
from problems.errors import InputError
from problems.placement.specs import load_cluster


@pytest.fixture(scope="module")
def mixed8():
    p = sc.load_problem("mixed-8", "qwen2.5-7b-grpo")
    return p, sc.reference(p)


@pytest.mark.parametrize("method", ["planner", "maoea-cs", "nsga3", "moead", "random"])
def test_every_method_stops_exactly_at_the_budget(mixed8, method):
    p, ref = mixed8
    r = sc.run_method(p, method, 250, 1, ref.scale)
    assert r["evaluations"] == 250
    evals = [c[0] for c in r["curve"]]
    assert evals == sorted(evals) and evals[-1] == 250
    hv = [c[2] for c in r["curve"]]
    assert all(b >= a - 1e-12 for a, b in zip(hv, hv[1:]))  # the archive never loses volume
    F = np.array(r["front"])
    assert len(F) > 0 and (F[:, 2] <= 1.0 + 1e-9).all()  # only feasible plans: memory fits
    assert r["hv"] == pytest.approx(ref.scale.hv(F), rel=1e-4)


def test_planner_method_counts_grid_maoea_and_local_search(mixed8, monkeypatch):
    """The product's pipeline on the equal budget: the corner grid (a fifth of it here), then
    MaOEA-CS, then Pareto local search, every evaluation through the one recorder."""
    from mosearch.planner import polish, seeding

    p, ref = mixed8
    batches, steps = [], []
    record = sc.BudgetProblem.record

    def spy(self, X, F, G):
        batches.append(len(X))
        record(self, X, F, G)

    step = polish.ParetoLocalSearch.step

    def spy_step(self):
        steps.append(len(self.rec.archive.X))
        step(self)

    monkeypatch.setattr(sc.BudgetProblem, "record", spy)
    monkeypatch.setattr(polish.ParetoLocalSearch, "step", spy_step)
    r = sc.run_method(p, "planner", 2000, 1, ref.scale)
    # the grid comes first and counts: its distinct plans of a fifth of the budget
    grid = seeding.Corners(p, seed=1, max_n=2000 // 5)
    assert batches[0] == len(grid.X) <= 2000 // 5
    assert len(np.unique(grid.X, axis=0)) == len(grid.X)
    # the batch that crosses the budget is cut (its rows past it are not recorded)
    assert r["evaluations"] == min(sum(batches), 2000) and sum(batches[:-1]) < 2000
    assert steps  # the local search ran on what MaOEA-CS left
    plain = sc.run_method(p, "maoea-cs", 2000, 1, ref.scale)
    assert r["front"] != plain["front"]


def test_penalty_problem_hides_constraints_but_archives_only_feasible(mixed8):
    p, ref = mixed8
    bp = sc.BudgetProblem(p, 100, ref.scale, penalty=True)
    X = np.random.default_rng(0).uniform(p.xl, p.xu, size=(100, p.n_var))
    out = bp.evaluate(X, return_as_dictionary=True)
    G = p.evaluate(X, return_values_of=["G"])
    bad = (G > 0).any(axis=1)
    assert bp.n_ieq_constr == 0 and bad.any()
    assert (out["F"][bad].min(axis=1) > 1e3).all()
    assert len(bp.archive.F) <= (~bad).sum()
    with pytest.raises(sc.BudgetReached):
        bp.evaluate(X[:1])


def test_generated_clusters_have_the_stated_size(tmp_path):
    paths = scale.write_clusters(tmp_path)
    for name, gpus, pools in scale.SIZE_SERIES + scale.POOL_SERIES:
        c = load_cluster(paths[name])
        assert c.total_gpus == gpus
        if pools is not None:
            assert len(c.pools) == pools
    with pytest.raises(ValueError):
        scale.cluster_yaml("bad", 100, 3)


def test_best_under():
    front = [[-5.0, 10.0, 0.5, 0.0], [-8.0, 20.0, 0.5, 0.0], [-3.0, 4.0, 0.5, 0.0]]
    assert planners.best_under(front, max_cost=12.0, min_thr=4.0) == (5.0, 10.0)
    assert planners.best_under(front, max_cost=1.0, min_thr=9.0) == (None, None)


def test_bad_options_name_the_flag():
    with pytest.raises(InputError, match="--scenarios"):
        planners.parse_scenarios("mixed-9")
    with pytest.raises(InputError, match="--methods"):
        planners.parse_methods("nsga2")
    assert planners.parse_scenarios("h100-64:qwen2.5-7b-grpo") == [("h100-64", "qwen2.5-7b-grpo")]


@pytest.mark.slow
def test_smoke_run_writes_every_method(tmp_path):
    from mosearch.cli import main

    out = tmp_path / "planners.md"
    args = ["bench", "planners", "--scenarios", "mixed-8", "--seeds", "1", "--evals", "200", "--scale", "none",
            "--no-exact", "--output", str(out)]
    assert main(args) == 0
    text = out.read_text()
    for label in sc.SEARCH_METHODS.values():
        assert label in text
    assert "verl-style colocated" in text and "best homogeneous" in text
    # 32B fits 8 GPUs only with ZeRO-3 and optimizer offload: the grid's memory-lean rows find such
    # plans, so the scenario has a reference and is measured, not skipped
    assert "Skipped" not in text and "| mixed-8 x qwen2.5-32b-grpo |" in text
    row = next(line for line in text.splitlines() if line.startswith("| mixed-8 x qwen2.5-7b-grpo |"))
    hvs = [float(x) for x in re.findall(r"(\d\.\d{4}) \[", row)]
    assert len(hvs) == len(sc.SEARCH_METHODS)
    assert all(0 < h <= 1.1 ** 4 for h in hvs)
    assert (tmp_path / "planners" / "mixed-8__qwen2.5-7b-grpo.png").stat().st_size > 1000
    cache = [json.loads(l) for l in (tmp_path / "planners_runs.jsonl").read_text().splitlines()]
    assert sum(r["kind"] == "run" for r in cache) == 3 * len(sc.SEARCH_METHODS)
    # a re-run with the same options measures nothing new
    assert main(args) == 0
    assert len((tmp_path / "planners_runs.jsonl").read_text().splitlines()) == len(cache)


def test_runs_scored_by_another_model_version_are_left_out():
    ref = {"kind": "reference", "scenario": "s", "feasible": True, "fingerprint": "new",
           "scale": {"throughput_samples_s": 10.0, "cost_usd_h": 10.0, "staleness": 1.0}}
    run = {"kind": "run", "scenario": "s", "method": "random", "evals": 200, "hv": 0.5, "curve": [], "front": []}
    runs = {("reference", "s", None, None, None): ref,
            ("run", "s", "random", 1, 200): {**run, "seed": 1, "fingerprint": "new"},
            ("run", "s", "random", 2, 200): {**run, "seed": 2, "fingerprint": "old"},
            ("run", "s", "random", 3, 200): {**run, "seed": 3}}  # written before fingerprints existed
    d = planners.scenario_data(runs, "s", ["random"], 3, 200)
    assert [r["seed"] for r in d["runs"]["random"]] == [1]


@pytest.mark.slow
def test_a_changed_model_measures_cached_runs_again(tmp_path):
    from mosearch.cli import main

    out = tmp_path / "planners.md"
    cache = tmp_path / "planners_runs.jsonl"
    args = ["bench", "planners", "--scenarios", "mixed-8:qwen2.5-7b-grpo", "--seeds", "1", "--evals", "200",
            "--methods", "random", "--scale", "none", "--no-exact", "--output", str(out)]
    assert main(args) == 0
    first = [json.loads(line) for line in cache.read_text().splitlines()]
    # pretend every cached item came from another version of the model
    cache.write_text("".join(json.dumps({**r, "fingerprint": "stale"}) + "\n" for r in first))
    assert main(args) == 0
    second = [json.loads(line) for line in cache.read_text().splitlines()][len(first):]
    assert sorted(r["kind"] for r in second) == ["baselines", "reference", "run"]
    assert all(r["fingerprint"] != "stale" for r in second)
