"""`mosearch plan` on the real placement problem: the files of the contract, the report, the
partial-result path, the no-feasible-plan path and bad input."""

import csv
import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from mosearch.cli import main
from mosearch.decide import Limits
from mosearch.planner.run import plan_run
from mosearch.planner.search import HV_EVERY, SearchSettings
from mosearch.report.terminal import gpu_summary
from mosearch.results import FRONT_COLUMNS, load_run
from problems.placement.plan import load_plan

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = ROOT / "problems" / "clusters"
WORKLOADS = ROOT / "problems" / "workloads"
MIXED8 = str(CLUSTERS / "mixed-8.yaml")
QWEN7 = str(WORKLOADS / "qwen2.5-7b-grpo.yaml")


def sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_front_files_follow_the_contract(mixed8_run):
    with open(mixed8_run / "front.csv") as fh:
        rows = list(csv.DictReader(fh))
        header = rows and list(rows[0])
    assert tuple(header[: len(FRONT_COLUMNS)]) == FRONT_COLUMNS
    assert any(h.endswith(".shared_gpus") for h in header) and "execution.mode" in header
    data = json.loads((mixed8_run / "front.json").read_text())["plans"]
    assert [d["plan_id"] for d in data] == [r["plan_id"] for r in rows]
    with open(mixed8_run / "front_all.csv") as fh:
        every = list(csv.DictReader(fh))
    files = sorted(p.name for p in (mixed8_run / "plans").glob("*.yaml"))
    assert files == sorted(f"{r['plan_id']}.yaml" for r in every)  # every plan found can be trained
    assert {r["plan_id"] for r in rows} <= {r["plan_id"] for r in every}
    cols = ("throughput_samples_s", "cost_usd_h", "peak_mem_frac", "staleness")
    F = np.array([[float(r[c]) for c in cols] for r in rows])
    M = F * np.array([-1, 1, 1, 1])
    A = np.array([[float(r[c]) for c in cols] for r in every]) * np.array([-1, 1, 1, 1])
    # no plan found dominates a plan of the front, as a Pareto front must be
    for i in range(len(M)):
        dom = (A <= M[i]).all(axis=1) & (A < M[i]).any(axis=1)
        assert not dom.any(), rows[i]["plan_id"]
    # and every plan found has a plan on the front within the resolution in every objective
    r = np.array(list(yaml.safe_load((mixed8_run / "run.yaml").read_text())["resolution"].values()))
    E = np.array([[float(x[c]) for c in cols] for x in rows])
    for x, f in zip(every, A * np.array([-1, 1, 1, 1])):
        near = ((E[:, 0] * (1 + r[0]) >= f[0]) & (E[:, 1] <= f[1] * (1 + r[1])) & (E[:, 2] <= f[2] + r[2])
                & (E[:, 3] <= f[3] + r[3]))
        assert near.any(), x["plan_id"]
    assert len(rows) < len(every)  # the resolution does thin it
    assert (F[:, 2] <= 1.0).all()
    for r in rows:
        plan = load_plan(mixed8_run / "plans" / f"{r['plan_id']}.yaml")
        assert plan.plan_id == r["plan_id"]
        assert plan.predicted["throughput_samples_s"] == pytest.approx(float(r["throughput_samples_s"]))
        assert plan.cluster.sha256 == sha(MIXED8) and plan.workload.sha256 == sha(QWEN7)


def test_run_yaml_and_history(mixed8_run):
    info = yaml.safe_load((mixed8_run / "run.yaml").read_text())
    assert info["partial"] is False
    assert info["cluster"]["sha256"] == sha(MIXED8) and info["workload"]["sha256"] == sha(QWEN7)
    assert info["seed"] == 3 and info["algorithm"] == "maoea-cs"
    assert {"python", "numpy", "pymoo"} <= set(info["versions"])
    assert info["search_evaluations"] >= 1500
    assert set(info["corner_seeds"]) >= {"fastest", "cheapest", "least-memory"}
    with open(mixed8_run / "history.csv") as fh:
        hist = list(csv.DictReader(fh))
    hv = [float(h["hv"]) for h in hist if h["hv"]]  # every HV_EVERY-th generation and the last
    ev = [int(h["evaluations"]) for h in hist]
    assert ev == sorted(ev) and hv == sorted(hv)  # the archive never loses volume
    assert hist[-1]["hv"] and len(hv) >= len(hist) // HV_EVERY
    assert hv[-1] > 0 and hv[-1] == pytest.approx(info["hypervolume"])


def test_plots_and_offline_report(mixed8_run):
    for name in ("scatter_matrix.png", "throughput_cost.png", "parallel_coordinates.png", "hv_history.png"):
        assert (mixed8_run / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    html = (mixed8_run / "report.html").read_text()
    assert "<script src=" not in html and "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    run = load_run(mixed8_run)
    assert all(p.plan_id in html for p in run.plans)
    assert html.count('class="pt"') == len(run.plans)  # one point per plan of the front shown
    assert 'id="f-cost"' in html and "mouseover" in html
    for mode in {p.execution.mode for p in run.plans}:  # a legend entry per mode drawn
        assert f">{mode}</text>" in html
    for p in run.plans:  # GPU types per plan for the table
        assert json.dumps(gpu_summary(p)) in html
    assert "kv_shortfall" not in html.split("const STEP =")[1].split(";")[0]  # only plain-language step parts


def test_report_axes_turn_logarithmic_past_a_tenfold_cost_range():
    from mosearch.report import html, plots

    assert html._Axes(np.array([1.0, 50.0]), np.array([1.0, 2.0])).log
    assert not html._Axes(np.array([1.0, 5.0]), np.array([1.0, 2.0])).log
    assert plots._log_cost(np.array([0.5, 20.0])) and not plots._log_cost(np.array([2.0, 15.0]))


def test_highs_banner_stays_off_stdout():
    code = ("from problems.placement.baselines.milp import _highs\n"
            "_highs(); _highs(); print('only this')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "only this\n"


def test_partial_result_on_interrupt(tmp_path):
    """A real SIGINT during the search: the run stops after that batch and writes what it found."""
    out = tmp_path / "partial"
    before = signal.getsignal(signal.SIGINT)

    def interrupt(row, stop):
        if row["generation"] == 4:
            os.kill(os.getpid(), signal.SIGINT)

    outcome = plan_run(MIXED8, QWEN7, out, SearchSettings(evals=50_000, pop_size=40, progress=False),
                       on_generation=interrupt)
    assert outcome.result.partial and outcome.result.stop_reason == "interrupted"
    assert outcome.result.evaluations < 50_000
    run = load_run(out)
    assert run.partial and run.info["stop_reason"] == "interrupted"
    assert len(run.all_plans) == len(outcome.plans) > 0
    assert "PARTIAL" in (out / "report.html").read_text()
    # the handler was restored: SIGINT is handled as before the run (Python's default, or
    # ignored when the tests run as a background job)
    assert signal.getsignal(signal.SIGINT) is before


def test_second_interrupt_stops_at_once(tmp_path):
    def interrupt_twice(row, stop):
        if row["generation"] == 3:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)  # raises KeyboardInterrupt inside the search

    outcome = plan_run(MIXED8, QWEN7, tmp_path / "p2", SearchSettings(evals=50_000, pop_size=40, progress=False),
                       on_generation=interrupt_twice, report=False)
    assert outcome.result.partial and load_run(tmp_path / "p2").partial


def test_time_limit_is_not_partial(tmp_path):
    outcome = plan_run(MIXED8, QWEN7, tmp_path / "t", SearchSettings(evals=None, time_s=1.0, pop_size=40, progress=False),
                       report=False)
    r = outcome.result
    assert r.stop_reason == "time" and not r.partial
    # it stops at the first batch boundary past the limit, not later
    assert r.history[-1]["wall_s"] >= 1.0 and all(h["wall_s"] < 1.0 for h in r.history[:-1])


def test_no_feasible_plan_exits_1_with_the_reason(tmp_path, capsys):
    tiny = tmp_path / "tiny.yaml"
    tiny.write_text("name: tiny\nregions:\n  r: {inter_node_gbs: 25}\n"
                    "node_groups:\n  - {gpu: L4, nodes: 1, gpus_per_node: 4, region: r}\n")
    out = tmp_path / "none"
    code = main(["plan", "--cluster", str(tiny), "--workload", str(WORKLOADS / "llama3.1-70b-ppo.yaml"),
                 "--out", str(out), "--evals", "500", "--quiet"])
    err = capsys.readouterr().err
    assert code == 1
    assert "llama3.1-70b" in err and "L4" in err
    assert not (out / "front.csv").exists()


def test_limits_nothing_meets_them(tmp_path, capsys):
    code = main(["plan", "--cluster", MIXED8, "--workload", QWEN7, "--out", str(tmp_path / "x"), "--evals", "400",
                 "--pop-size", "20", "--max-cost", "0.5", "--quiet"])
    err = capsys.readouterr().err
    # proven before the search: the budget is the bad input
    assert code == 2 and err.startswith("mosearch: --max-cost 0.5: proven infeasible: the cheapest plan")


def test_limits_are_respected_by_the_front(tmp_path):
    out = plan_run(MIXED8, QWEN7, tmp_path / "lim", SearchSettings(evals=800, pop_size=20, progress=False),
                   Limits(max_cost=10.0, max_staleness=0.0), report=False)
    F = load_run(tmp_path / "lim").F
    assert len(F) and (F[:, 1] <= 10.0).all() and (F[:, 3] <= 0.0).all()
    assert out.result.evaluations >= 800


@pytest.mark.parametrize("algorithm", ["random", "nsga3"])
def test_baseline_algorithms_by_name(tmp_path, algorithm):
    code = main(["plan", "--cluster", MIXED8, "--workload", QWEN7, "--out", str(tmp_path / algorithm),
                 "--algorithm", algorithm, "--evals", "600", "--quiet", "--no-report"])
    assert code == 0
    run = load_run(tmp_path / algorithm)
    assert run.info["algorithm"] == algorithm and len(run.plans) > 0


@pytest.mark.parametrize("argv, key", [
    (["--evals", "0"], "--evals"),
    (["--algorithm", "simulated-annealing"], "--algorithm"),
    (["--max-mem-frac", "1.5"], "--max-mem-frac"),
    (["--jobs", "0"], "--jobs"),
    (["--out", __file__], "--out"),  # a file: was FileExistsError with a traceback
    (["--out", __file__ + "/run"], "--out"),  # under a file: NotADirectoryError
    (["--seed", "-1"], "--seed"),  # was NumPy's ValueError with a traceback, after reading the specs
    (["--seed", str(2 ** 32)], "--seed"),
])
def test_bad_options_exit_2(tmp_path, capsys, argv, key):
    code = main(["plan", "--cluster", MIXED8, "--workload", QWEN7, "--out", str(tmp_path / "bad"), *argv])
    assert code == 2 and key in capsys.readouterr().err


def test_summary_line_times_every_evaluation_it_counts(tmp_path, capsys, monkeypatch):
    """The last line counts the structured stage's and the seeds' evaluations too (215,041 of them for
    3,000 searched), so its time must be theirs as well: it gave the evolutionary search's alone
    ('215041 evaluations in 0.4 s' for a 2.8 s planning). A clock that advances 10 s per reading
    shows which time is printed; and --no-report names no report.html."""
    import types

    import mosearch.commands.plan as plan_cmd

    ticks = iter(range(0, 10 ** 6, 10))
    monkeypatch.setattr(plan_cmd, "time", types.SimpleNamespace(perf_counter=lambda: float(next(ticks))))
    assert main(["plan", "--cluster", MIXED8, "--workload", QWEN7, "--out", str(tmp_path / "run"),
                 "--evals", "300", "--quiet", "--no-report"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the console wraps the line
    last = out[out.rindex("hypervolume") - 80:]
    info = yaml.safe_load((tmp_path / "run" / "run.yaml").read_text())
    assert f"{info['evaluations']} evaluations in 10.0 s" in last, last
    assert "report.html" not in last and not (tmp_path / "run" / "report.html").exists()


OLD_AND_NEW = """\
name: old-and-new
regions:
  dc: {inter_node_gbs: 12.5}
node_groups:
  - {name: v100, gpu: V100, nodes: 1, gpus_per_node: 8, region: dc}
  - {name: t4, gpu: T4, nodes: 2, gpus_per_node: 4, region: dc}
  - {name: a100, gpu: A100, nodes: 1, gpus_per_node: 8, region: dc}
"""
QWEN15 = WORKLOADS / "qwen2.5-1.5b-grpo.yaml"  # bf16


def test_pools_that_cannot_run_the_precision_are_left_out(tmp_path, capsys):
    """A bf16 workload was planned with V100 training and T4 rollouts (neither has BF16 units; vLLM refuses
    bf16 below compute capability 8.0). Now the search leaves those pools out and says so in one line;
    with no pool left, one line naming the pools and the precision, exit 2."""
    cluster = tmp_path / "c.yaml"
    cluster.write_text(OLD_AND_NEW)
    out = tmp_path / "run"
    assert main(["plan", "--cluster", str(cluster), "--workload", str(QWEN15), "--out", str(out), "--evals", "300",
                 "--quiet", "--no-report"]) == 0
    note = ("pools left out: V100@dc (8 GPUs), T4@dc (8 GPUs) cannot run bf16 (no bf16 figure in peak_tflops)")
    assert [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("note:")] == [f"note: {note}"]
    assert yaml.safe_load((out / "run.yaml").read_text())["notes"] == [note]
    plans = [load_plan(p) for p in (out / "plans").glob("*.yaml")]
    assert plans and all({p.pool for p in plan.pools} == {"A100-80G@dc"} for plan in plans)

    cluster.write_text(OLD_AND_NEW.split("  - {name: a100")[0])
    assert main(["plan", "--cluster", str(cluster), "--workload", str(QWEN15), "--out", str(tmp_path / "none"),
                 "--evals", "300", "--quiet", "--no-report"]) == 2
    captured = capsys.readouterr()
    assert captured.err == (f"mosearch: {QWEN15}: precision: bf16 runs on no pool of cluster 'old-and-new': V100@dc "
                            "(8 GPUs), T4@dc (8 GPUs) (no bf16 figure in peak_tflops) (a precision every pool runs "
                            "(fp16, tf32, fp32), or GPUs that run bf16)\n")


def test_a_plan_on_gpus_that_cannot_run_its_precision_is_refused(tmp_path, capsys):
    """`predict --plan` and `export` of a plan whose GPUs cannot run the workload's precision (a plan made
    before the search left such pools out): one line naming the plan's pool, exit 2."""
    from problems.placement.problem import PlacementProblem

    cluster = tmp_path / "c.yaml"
    cluster.write_text(OLD_AND_NEW)
    fp16 = tmp_path / "fp16.yaml"
    fp16.write_text(QWEN15.read_text().replace("precision: bf16", "precision: fp16"))
    prob = PlacementProblem.from_files(cluster, fp16)
    X = prob.layout.repair(prob.xl + np.random.default_rng(0).random((200, prob.n_var)) * (prob.xu - prob.xl))
    plan = next(p for p in (prob.decode(x, lifetime=False) for x in X) if p.pools[0].used_gpus)
    assert plan.pools[0].pool == "V100@dc"
    data = yaml.safe_load(plan.to_yaml())
    data["workload"] = {"name": "bf16", "path": str(QWEN15), "sha256": sha(QWEN15)}
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(data))
    for argv in (["predict", "--plan", str(path)], ["export", str(path), "--to", "verl"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err == (f"mosearch: {path}: pools[0].pool: V100 cannot run bf16: its peak_tflops has no bf16 figure "
                       "(a plan without V100@dc: `mosearch plan` leaves out the pools that cannot run the workload's "
                       "bf16)\n"), err


def test_an_infinite_limit_is_refused_in_one_line(tmp_path, capsys):
    """--max-cost inf ran the search, warned from NumPy and then said no plan met the limits."""
    from mosearch.cli import main

    for flag in ("--max-cost", "--min-throughput"):
        code = main(["plan", "--cluster", "problems/clusters/mixed-8.yaml", "--workload",
                     "problems/workloads/qwen2.5-1.5b-grpo.yaml", "--out", str(tmp_path / "run"), flag, "inf"])
        assert code == 2
        assert capsys.readouterr().err == f"mosearch: {flag}: got inf (a finite number >= 0 (leave the flag out for no limit))\n"
