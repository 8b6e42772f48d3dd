"""`mosearch bench algorithms`: runs, caches, renders atomically, rejects bad input."""

import json

from mosearch.bench.algorithms import parse_problems
from mosearch.cli import main


def test_small_run_writes_table_and_cache(tmp_path, capsys):
    out = tmp_path / "maf.md"
    args = ["bench", "algorithms", "--problems", "MaF1,MaF8", "--m", "5", "--seeds", "2", "--evals", "600",
            "--algorithms", "maoea-cs,nsga3,random", "--full-problems", "none", "--output", str(out)]
    assert main(args) == 0
    cache = tmp_path / "maf_runs.jsonl"
    runs = [json.loads(line) for line in cache.read_text().splitlines()]
    assert len(runs) == 2 * 2 * 3
    assert all(r["budget"] == 600 and r["igd"] > 0 for r in runs)
    text = out.read_text()
    assert "| MaF1 | 0.1226 |" in text and "MaOEA-CS (ours)" in text and "600 evaluations" in text
    assert "**" in text  # a best cell is marked
    assert f"`mosearch bench algorithms --evals 600 --output {out}`" in text  # regenerates this very table
    assert not list(tmp_path.glob(".*.tmp"))  # no temp file left behind

    # a second call finds everything cached and only re-renders
    capsys.readouterr()
    assert main(args) == 0
    assert "12 runs cached, 0 to do" in capsys.readouterr().out
    assert len(cache.read_text().splitlines()) == 12


def test_bad_input_is_one_line_exit_2(tmp_path, capsys):
    assert main(["bench", "algorithms", "--problems", "MaF99", "--output", str(tmp_path / "x.md")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--problems" in err
    assert main(["bench", "algorithms", "--algorithms", "cmaes", "--output", str(tmp_path / "x.md")]) == 2
    assert main(["bench", "algorithms", "--m", "two", "--output", str(tmp_path / "x.md")]) == 2


def test_problem_ranges():
    assert parse_problems("MaF3-MaF5,maf1") == ["MaF3", "MaF4", "MaF5", "MaF1"]
    assert len(parse_problems("all")) == 15 and parse_problems("none") == []


def test_a_variant_of_ours_is_scored_against_the_baselines_only():
    import numpy as np

    from mosearch.bench.algorithms import _mark_best, _variant_cell

    samples = {"maoea-cs": np.array([0.10, 0.11, 0.10, 0.12, 0.10]),  # ours beats everyone
               "nsga3": np.array([0.30, 0.31, 0.29, 0.30, 0.32]),
               "random": np.array([0.01, 0.01, 0.01, 0.01, 0.01])}  # a floor: never the bar
    text, win = _variant_cell(np.array([0.29, 0.30, 0.31, 0.30, 0.28]), samples)
    assert win and text.endswith("✓")  # tied with NSGA-III, the best baseline; ours is not its bar
    text, win = _variant_cell(np.array([0.50, 0.52, 0.51, 0.50, 0.53]), samples)
    assert not win and "✓" not in text
    assert _mark_best(samples, list(samples))["maoea-cs"].startswith("**")
