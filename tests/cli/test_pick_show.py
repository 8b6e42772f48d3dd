"""`mosearch pick` and `mosearch show` on a real run directory, and atomic result writes."""

import os

import numpy as np
import pytest

import problems.atomic
from problems.errors import InputError
from mosearch import decide
from mosearch.cli import main
from mosearch.results import load_run, objective_matrix, write_front
from problems.placement.plan import load_plan


def test_show_lists_the_front_sorted(mixed8_run, capsys):
    assert main(["show", str(mixed8_run), "--sort", "cost", "--limit", "3"]) == 0
    out = capsys.readouterr().out
    run = load_run(mixed8_run)
    cheapest = sorted(run.plans, key=lambda p: p.predicted["cost_usd_h"])[:3]
    pos = [out.index(p.plan_id) for p in cheapest]
    assert pos == sorted(pos)  # in cost order
    for planner in ("verl-colocated", "best-homogeneous", "hetrl-sh", "milp"):  # baselines beside the front
        assert f"baseline: {planner}" in out
    assert f"{len(run.plans)} distinct plans of {len(run.all_plans)} Pareto plans" in out


def test_show_missing_run_is_an_input_error(tmp_path, capsys):
    assert main(["show", str(tmp_path / "nothing")]) == 2
    assert "front.json" in capsys.readouterr().err


def test_pick_knee_writes_a_loadable_plan(mixed8_run, tmp_path, capsys):
    out = tmp_path / "plan.yaml"
    assert main(["pick", str(mixed8_run), "--keep-when-tied", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    run = load_run(mixed8_run)
    knee = run.all_plans[decide.knee(objective_matrix(run.all_plans), run.resolution)]
    plan = load_plan(out)
    assert plan.plan_id == knee.plan_id == run.info["knee"]
    assert knee.plan_id in {p.plan_id for p in run.plans}  # the knee is on the front shown
    assert "who does what" in text and "front best" in text
    for p in plan.pools:
        assert (p.pool in text) == (p.used_gpus > 0)  # idle pools get no row


def test_pick_default_output_is_in_the_run(mixed8_run):
    assert main(["pick", str(mixed8_run), "--knee"]) == 0
    assert load_plan(mixed8_run / "plan.yaml").plan_id


def test_pick_with_limits_and_weights(mixed8_run, tmp_path):
    run = load_run(mixed8_run)
    F = objective_matrix(run.all_plans)
    budget = float(np.median(F[:, 1]))
    out = tmp_path / "w.yaml"
    # the rule's own choice: a tie with a cheaper neighbour (decided by the fitted bands) is its own test
    assert main(["pick", str(mixed8_run), "--max-cost", str(budget), "--weights", "throughput=1", "--keep-when-tied",
                 "--out", str(out)]) == 0
    plan = load_plan(out)
    ok = F[:, 1] <= budget
    assert plan.predicted["cost_usd_h"] <= budget
    assert plan.predicted["throughput_samples_s"] == pytest.approx(F[ok, 0].max())


def test_pick_nothing_meets_the_limits(mixed8_run, tmp_path, capsys):
    out = tmp_path / "none.yaml"
    code = main(["pick", str(mixed8_run), "--max-cost", "0.01", "--min-throughput", "1e6", "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 1 and not out.exists()
    assert "No plan" in text and "closest" in text


@pytest.mark.parametrize("argv, flag", [(["--max-cost", "-3"], "--max-cost"), (["--max-mem-frac", "0"], "--max-mem-frac"),
                                        (["--max-staleness", "-1"], "--max-staleness"),
                                        (["--min-throughput", "nan"], "--min-throughput")])
def test_pick_limit_no_plan_can_meet_is_bad_input(mixed8_run, tmp_path, capsys, argv, flag):
    """As `plan` refuses them: '--max-cost -3' was answered 'No plan of the N found meets cost <= -3 $/h'
    with the closest plans, exit 1."""
    out = tmp_path / "p.yaml"
    assert main(["pick", str(mixed8_run), *argv, "--out", str(out)]) == 2 and not out.exists()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flag in err


def test_pick_bad_weights(mixed8_run, capsys):
    assert main(["pick", str(mixed8_run), "--weights", "speed=2"]) == 2
    assert "--weights" in capsys.readouterr().err


def test_atomic_front_write_keeps_the_old_files_on_failure(mixed8_run, tmp_path, monkeypatch):
    run = load_run(mixed8_run)
    target = tmp_path / "run"
    write_front(target, run.plans[:2])
    before = (target / "front.csv").read_text()

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(problems.atomic.os, "replace", broken_replace)
    with pytest.raises(InputError, match="disk full"):  # one line naming the file, not a traceback
        write_front(target, run.plans)
    monkeypatch.undo()
    assert (target / "front.csv").read_text() == before  # never half a file
    assert not [f for f in os.listdir(target) if f.endswith(".tmp")]  # no temporary left behind
    write_front(target, run.plans)
    assert load_run(mixed8_run).F.shape == run.F.shape
    assert sorted(p.name for p in (target / "plans").glob("*.yaml")) == sorted(f"{p.plan_id}.yaml" for p in run.plans)


def _scan(F, res, budget=None, floor=None):
    """`pick`'s documented rules as a plain scan of every plan found."""
    ok = [i for i in range(len(F)) if (budget is None or F[i, 1] <= budget) and (floor is None or F[i, 0] >= floor)]
    order = (0, 1, 2, 3) if budget is not None else (1, 0, 2, 3)
    sign = [-1, 1, 1, 1]
    for j in order:  # within the resolution of the best in each objective in turn
        if j == 0:
            top = max(F[i, 0] for i in ok)
            ok = [i for i in ok if F[i, 0] * (1 + res[0]) >= top]
        elif j == 1:
            low = min(F[i, 1] for i in ok)
            ok = [i for i in ok if F[i, 1] <= low * (1 + res[1])]
        else:
            low = min(F[i, j] for i in ok)
            ok = [i for i in ok if F[i, j] <= low + res[j]]
    return min(ok, key=lambda i: (*(sign[j] * F[i, j] for j in order), i))


@pytest.mark.parametrize("q", [0.0, 0.3, 0.6, 1.0])
def test_pick_budget_and_floor_match_a_scan_of_every_plan(mixed8_run, tmp_path, capsys, q):
    run = load_run(mixed8_run)
    F = objective_matrix(run.all_plans)
    res = run.resolution
    budget, floor = float(np.quantile(F[:, 1], q)), float(np.quantile(F[:, 0], q))
    out = tmp_path / "b.yaml"
    # the rule itself (--keep-when-tied: no move to a neighbour the model cannot tell from the choice)
    assert main(["pick", str(mixed8_run), "--max-cost", repr(budget), "--keep-when-tied", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    got = load_plan(out).predicted
    assert load_plan(out).plan_id == run.all_plans[_scan(F, res, budget=budget)].plan_id
    assert "fastest of" in text and "Next to it on the front" in text
    # in plain terms: within the budget, and nothing within it is faster by more than the resolution
    assert got["cost_usd_h"] <= budget
    assert got["throughput_samples_s"] * (1 + res[0]) >= F[F[:, 1] <= budget, 0].max()
    # by default a tied cheaper neighbour within the budget is taken, and the output says so
    assert main(["pick", str(mixed8_run), "--max-cost", repr(budget), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    moved = load_plan(out)
    if moved.plan_id != run.all_plans[_scan(F, res, budget=budget)].plan_id:
        assert f"taking {moved.plan_id}" in text and moved.predicted["cost_usd_h"] <= budget
    assert main(["pick", str(mixed8_run), "--min-throughput", repr(floor), "--keep-when-tied", "--out", str(out)]) == 0
    got = load_plan(out).predicted
    assert load_plan(out).plan_id == run.all_plans[_scan(F, res, floor=floor)].plan_id
    assert got["throughput_samples_s"] >= floor
    assert got["cost_usd_h"] <= F[F[:, 0] >= floor, 1].min() * (1 + res[1])


def test_show_all_lists_every_plan_found(mixed8_run, capsys):
    run = load_run(mixed8_run)
    assert main(["show", str(mixed8_run), "--all"]) == 0
    out = capsys.readouterr().out
    assert f"{len(run.all_plans)} Pareto plans" in out
    assert len(run.plans) <= len(run.all_plans)


@pytest.mark.parametrize("cmd", ["pick", "plan"])
def test_bad_resolution_is_an_input_error(mixed8_run, tmp_path, capsys, cmd):
    argv = ["pick", str(mixed8_run)] if cmd == "pick" else [
        "plan", "--cluster", "problems/clusters/mixed-8.yaml", "--workload", "problems/workloads/qwen2.5-7b-grpo.yaml",
        "--out", str(tmp_path / "x")]
    assert main([*argv, "--resolution", "memory=-1"]) == 2
    err = capsys.readouterr().err
    assert "--resolution" in err and len(err.strip().splitlines()) == 1


def test_pool_roles_name_what_each_used_pool_does(mixed8_run):
    from mosearch.report.terminal import pool_roles

    plan = load_run(mixed8_run).plans[0]
    base = plan.pools[0]
    pools = [base.model_copy(update={"pool": "H100@east", "gpu": "H100", "rollout_gpus": 0, "train_gpus": 0, "shared_gpus": 4}),
             base.model_copy(update={"pool": "L40S@east", "gpu": "L40S", "rollout_gpus": 2, "train_gpus": 0, "shared_gpus": 0}),
             base.model_copy(update={"pool": "L40S@west", "gpu": "L40S", "rollout_gpus": 1, "train_gpus": 3, "shared_gpus": 0}),
             base.model_copy(update={"pool": "A10G@west", "gpu": "A10G", "rollout_gpus": 0, "train_gpus": 0, "shared_gpus": 0}),
             base.model_copy(update={"pool": "T4@west", "gpu": "T4", "rollout_gpus": 0, "train_gpus": 8, "shared_gpus": 0})]
    got = pool_roles(plan.model_copy(update={"pools": pools}))
    # idle pools left out; a type used in two pools named by pool
    assert got == "4 H100 both, 2 L40S@east gen, 4 L40S@west (1 gen, 3 train), 8 T4 train"


def test_show_gives_each_plans_pool_roles(mixed8_run, capsys, monkeypatch):
    from mosearch.report.terminal import pool_roles

    import mosearch.report.terminal

    monkeypatch.setattr(mosearch.report.terminal, "PIPE_WIDTH", 400)  # one table line per plan
    run = load_run(mixed8_run)
    assert main(["show", str(mixed8_run), "--limit", "5"]) == 0
    out = capsys.readouterr().out
    assert "GPUs and roles" in out and "gen = generates (rollout)" in out
    rows = {line.split("│")[1].split()[0]: line for line in out.splitlines() if line.startswith("│ p")}
    assert len(rows) == 5
    for p in run.plans:
        if p.plan_id in rows:
            assert pool_roles(p) in rows[p.plan_id]
            assert any(w in pool_roles(p) for w in ("gen", "both"))  # every plan generates somewhere


def test_front_all_holds_no_plan_beaten_beyond_the_resolution_in_throughput_and_cost(mixed8_run):
    run = load_run(mixed8_run)
    F = objective_matrix(run.all_plans)
    r = decide.RESOLUTION
    for b in F:  # no plan found is faster and cheaper by more than the resolution without being worse beyond it
        beaten = ((F[:, 0] > b[0] * (1 + r[0])) & (F[:, 1] * (1 + r[1]) < b[1]) & (F[:, 2] <= b[2] + r[2])
                  & (F[:, 3] <= b[3] + r[3]))
        assert not beaten.any()
    ids = [p.plan_id for p in run.all_plans]
    assert ids == [f"p{i:03d}" for i in range(len(ids))]  # named after the filter: no gaps


def test_show_with_a_bad_plan_file_prints_no_table(mixed8_run, tmp_path, capsys):
    """`show RUN --with FILE` printed the whole front table, then the one-line refusal of FILE."""
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert main(["show", str(mixed8_run), "--with", str(empty)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and str(empty) in out.err


def test_pick_out_naming_a_folder_or_under_a_file_is_one_line(mixed8_run, tmp_path, capsys):
    """`pick --out DIR` ended in IsADirectoryError from the atomic rename, `--out FILE/x.yaml` in
    FileExistsError, both with a traceback (import --out and export --out alike: problems/atomic.py)."""
    a_file = tmp_path / "f.yaml"
    a_file.write_text("x: 1\n")
    for out in (tmp_path, a_file / "plan.yaml"):
        assert main(["pick", str(mixed8_run), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(out) in err
    assert a_file.read_text() == "x: 1\n" and not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize("fails", ["mkdir", "mkstemp", "fsync"])
def test_a_result_that_cannot_be_written_is_one_line_and_no_partial_file(mixed8_run, tmp_path, capsys,
                                                                        monkeypatch, fails):
    """A read-only folder, a place that cannot hold files (/proc) or a full disk ended in a traceback
    (OSError from mkdir, tempfile.mkstemp or the write): now the path and the OS's reason, one line."""
    import errno

    def refuse(*args, **kwargs):
        code = errno.ENOSPC if fails == "fsync" else errno.EACCES
        raise OSError(code, os.strerror(code))

    target = {"mkdir": problems.atomic.Path, "mkstemp": problems.atomic.tempfile, "fsync": problems.atomic.os}[fails]
    monkeypatch.setattr(target, fails, refuse)
    out = tmp_path / "sub" / "plan.yaml" if fails == "mkdir" else tmp_path / "plan.yaml"
    assert main(["pick", str(mixed8_run), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    reason = "No space left on device" if fails == "fsync" else "Permission denied"
    assert err == f"mosearch: {out}: cannot write it: {reason} (a writable path with free space)\n"
    assert not out.exists() and not list(tmp_path.rglob(".*.tmp"))  # nothing half written


def test_a_result_path_that_is_a_pipe_is_refused_not_replaced(mixed8_run, tmp_path, capsys):
    """The rename put a regular file in place of a device or pipe named with --out (as root: /dev/full)."""
    import stat

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    assert main(["pick", str(mixed8_run), "--out", str(pipe)]) == 2
    assert capsys.readouterr().err == f"mosearch: {pipe}: is not a regular file (a file path to write)\n"
    assert stat.S_ISFIFO(os.stat(pipe).st_mode)


def test_pick_prints_the_band_and_takes_a_tied_cheaper_neighbour_unless_asked_to_keep(mixed8_run, tmp_path, capsys):
    from mosearch.report.terminal import throughput_band, tie_test

    run = load_run(mixed8_run)
    F = objective_matrix(run.all_plans)
    budget = float(np.median(F[:, 1]))
    kept, taken = tmp_path / "a.yaml", tmp_path / "b.yaml"
    assert main(["pick", str(mixed8_run), "--max-cost", str(budget), "--keep-when-tied", "--out", str(kept)]) == 0
    text = capsys.readouterr().out
    first = load_plan(kept)
    lo, hi = throughput_band(first)
    assert lo < first.predicted["throughput_samples_s"] < hi and "band" in text
    assert "taking" not in text
    assert main(["pick", str(mixed8_run), "--max-cost", str(budget), "--out", str(taken)]) == 0
    text2 = capsys.readouterr().out
    other = load_plan(taken)
    if "keeping " + first.plan_id + " as --keep-when-tied asks" in text:
        # the tied neighbour is taken by default: cheaper (or as cheap and less stale), within the budget
        assert other.plan_id != first.plan_id and f"taking {other.plan_id}" in text2
        assert other.predicted["cost_usd_h"] <= budget
        assert (other.predicted["cost_usd_h"] < first.predicted["cost_usd_h"]
                or other.predicted.get("staleness", 0) < first.predicted.get("staleness", 0))
        assert tie_test(first, other)[0]
    else:
        assert other.plan_id == first.plan_id and "taking" not in text2


def test_a_tie_on_the_same_hardware_moves_to_the_cheaper_plan_and_a_clear_gap_does_not(mixed8_run, capsys):
    """The tie rule itself, on a plan of the run and copies of it whose predictions differ by a known ratio."""
    from mosearch.commands.pick import _settle_ties
    from mosearch.decide import Limits
    from mosearch.report.terminal import console
    from problems.placement.model import fitted

    run = load_run(mixed8_run)
    a = run.plans[0]
    lo, hi, _ = fitted.load()["bands"]["same_hardware"]
    width = max(abs(lo), abs(hi))
    thr, cost = a.predicted["throughput_samples_s"], a.predicted["cost_usd_h"]

    def copy(ratio):  # the same pools and executor, predicted `ratio` x the samples/s at 80% of the cost
        return a.model_copy(update={"plan_id": "pcopy", "predicted": {**a.predicted, "throughput_samples_s": thr * ratio,
                                                                      "cost_usd_h": cost * 0.8}})
    con = console()
    near, far = copy(float(np.exp(-0.5 * width))), copy(float(np.exp(-2.0 * width)))
    chosen, _, _ = _settle_ties(con, a, [a, near], None, 1, Limits(), run.resolution, keep=False)
    out = capsys.readouterr().out
    assert chosen is near and "taking pcopy, the cheaper" in out and "same-hardware pairs" in out
    chosen, _, _ = _settle_ties(con, a, [a, near], None, 1, Limits(), run.resolution, keep=True)
    assert chosen is a and "keeping " + a.plan_id + " as --keep-when-tied asks" in capsys.readouterr().out
    chosen, _, _ = _settle_ties(con, a, [a, far], None, 1, Limits(), run.resolution, keep=False)
    assert chosen is a and "tied" not in capsys.readouterr().out
    # over the budget: tied, but kept, and it says why
    chosen, _, _ = _settle_ties(con, a, [a, near], None, 1, Limits(max_cost=cost * 0.5), run.resolution, keep=False)
    assert chosen is a and "outside the limits" in capsys.readouterr().out


def test_a_mixture_of_experts_plan_has_a_wider_band_and_says_why(mixed8_run):
    from mosearch.report.terminal import band_note, throughput_band

    dense = load_run(mixed8_run).all_plans[0]
    assert dense.predicted["moe_layers"] == 0 and "mixture of experts" not in band_note(dense)
    moe = dense.model_copy(update={"predicted": dense.predicted | {"moe_layers": 48.0}})
    (dlo, dhi), (mlo, mhi) = throughput_band(dense), throughput_band(moe)
    assert mlo < dlo and mhi == pytest.approx(dhi)
    note = band_note(moe)
    assert "mixture of experts" in note and "results/bench/moe_validation.md" in note
