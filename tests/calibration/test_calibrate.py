"""`mosearch calibrate`: step timings from verl / AReaL / RLinf logs (excerpts written here in their
documented formats) and this trainer's runs; corrections fitted, written beside the cluster, used by plan."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from mosearch.calibrate_logs import phases
from problems.errors import InputError
from mosearch.cli import main
from problems.placement.predict import predict_run
from problems.placement.problem import PlacementProblem
from problems.placement.specs import load_cluster

REPO = Path(__file__).resolve().parents[2]

# verl 0.9.1: LocalLogger prints concat_dict_to_str(data, step): "step:N - key:value - ..."
VERL_CONSOLE = "\n".join(
    f"(TaskRunner pid=1) step:{s} - actor/entropy:0.61 - timing_s/gen:{g} - timing_s/reward:0.4 - "
    f"timing_s/old_log_prob:{o} - timing_s/ref:{r} - timing_s/adv:0.02 - timing_s/update_actor:{u} - "
    f"timing_s/update_weights:1.5 - timing_s/step:{st} - perf/throughput:812.5 - response_length/mean:{rl}"
    for s, g, o, r, u, st, rl in [(1, 90.0, 9.0, 8.0, 30.0, 150.0, 500.0), (2, 40.0, 5.0, 4.0, 20.0, 71.0, 400.0),
                                  (3, 42.0, 5.0, 4.0, 22.0, 75.0, 420.0)])

# AReaL 1.0.4: StatsLogger.commit logs "Train step i/n done." then tabulate_stats (fancy_grid, name | value pairs)
AREAL_CONSOLE = """\
20251128-10:00:01 StatsLogger INFO: Epoch 1/1 Step 1/10 Train step 1/10 done.
20251128-10:00:01 StatsLogger INFO: Stats (1/1):
╒═══════════════════════════╤════════════╤═══════════════════════╤════════════╕
│ timeperf/rollout          │ 6.0000e+01 │ timeperf/train_step   │ 3.0000e+01 │
├───────────────────────────┼────────────┼───────────────────────┼────────────┤
│ timeperf/recompute_logp   │ 5.0000e+00 │ timeperf/update_weights │ 2.0000e+00 │
╘═══════════════════════════╧════════════╧═══════════════════════╧════════════╛
20251128-10:01:41 StatsLogger INFO: Epoch 1/1 Step 2/10 Train step 2/10 done.
20251128-10:01:41 StatsLogger INFO: Stats (1/1):
╒═══════════════════════════╤════════════╤═══════════════════════╤════════════╕
│ timeperf/rollout          │ 5.0000e+01 │ timeperf/train_step   │ 2.0000e+01 │
├───────────────────────────┼────────────┼───────────────────────┼────────────┤
│ timeperf/recompute_logp   │ 4.0000e+00 │ timeperf/update_weights │ 1.0000e+00 │
╘═══════════════════════════╧════════════╧═══════════════════════╧════════════╛
"""


def test_verl_console_and_jsonl(tmp_path):
    log = tmp_path / "verl.log"
    log.write_text("Creating file logger\n" + VERL_CONSOLE + "\n")
    got, lengths, steps = phases("verl", log)
    assert steps == 3
    assert got["rollout_s"] == pytest.approx(41.0)  # steps 2-3 (the first is dropped): their median
    assert got["train_s"] == pytest.approx((5 + 4 + 0.02 + 20 + 5 + 4 + 0.02 + 22) / 2)
    assert got["sync_s"] == pytest.approx(1.5) and got["step_s"] == pytest.approx(73.0)
    assert lengths["response_mean"] == pytest.approx(410.0)
    # verl's file logger: {"step": N, "data": {...}}
    jl = tmp_path / "verl.jsonl"
    jl.write_text("\n".join(json.dumps({"step": s, "data": {"timing_s/gen": g, "timing_s/update_actor": u,
                                                            "timing_s/step": g + u + 1}})
                            for s, g, u in [(1, 9.0, 9.0), (2, 4.0, 2.0), (3, 6.0, 2.0)]))
    got, _, _ = phases("verl", jl)
    assert got == {"rollout_s": pytest.approx(5.0), "train_s": pytest.approx(2.0), "step_s": pytest.approx(8.0)}


def test_areal_console_table(tmp_path):
    log = tmp_path / "areal.log"
    log.write_text(AREAL_CONSOLE)
    got, _, steps = phases("areal", log)
    assert steps == 2
    assert got["rollout_s"] == pytest.approx(50.0) and got["train_s"] == pytest.approx(24.0)
    assert got["sync_s"] == pytest.approx(1.0)


def test_rlinf_tensorboard_directory(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    # RLinf 0.3.0 reasoning runner: time/{step, sync_weights, rollout, actor/training, actor/inference}
    w = SummaryWriter(str(tmp_path / "tb"))
    for s, (roll, train) in enumerate([(30.0, 20.0), (10.0, 8.0), (12.0, 6.0)]):
        for tag, v in {"time/rollout": roll, "time/actor/training": train, "time/actor/inference": 1.0,
                       "time/sync_weights": 0.5, "time/step": roll + train + 2}.items():
            w.add_scalar(tag, v, s)
    w.close()
    got, _, steps = phases("rlinf", tmp_path / "tb")
    assert steps == 3 and got["rollout_s"] == pytest.approx(11.0) and got["train_s"] == pytest.approx(8.0)
    assert got["step_s"] == pytest.approx(20.0)


def _wait_for_exit_record(path: Path, timeout_s: float = 120.0) -> None:
    """`run.finish()` can return before wandb's writer process has flushed the file's last records; the run's
    exit record is written after every history record, so the file is complete once it holds one."""
    import time

    from wandb.proto import wandb_internal_pb2

    from mosearch.calibrate_logs import _wandb_records

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for raw in _wandb_records(path):
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(raw)
            if rec.HasField("exit"):
                return
        time.sleep(0.05)
    raise AssertionError(f"{path}: no exit record after {timeout_s:g} s")


def test_verl_wandb_offline_run(tmp_path):
    """An offline run written by the wandb package itself (verl's `wandb` logger without a network), long enough
    that records cross the file's 32 KiB blocks (first / middle / last pieces)."""
    import wandb

    run = wandb.init(project="verl", dir=str(tmp_path), mode="offline",
                     settings=wandb.Settings(console="off", silent=True))
    pad = {f"actor/extra_{i}": float(i) for i in range(60)}  # verl logs ~100 metrics a step
    for s in range(1, 301):
        gen = 30.0 if s == 1 else 10.0 + (s % 3)
        run.log({"timing_s/gen": gen, "timing_s/old_log_prob": 2.0, "timing_s/update_actor": 6.0,
                 "timing_s/update_weights": 0.5, "timing_s/step": gen + 9.0, "response_length/mean": 400.0,
                 **pad, "note": "text is skipped"}, step=s)
    run.finish()
    files = list(tmp_path.rglob("run-*.wandb"))
    assert len(files) == 1
    _wait_for_exit_record(files[0])
    assert files[0].stat().st_size > 2 * 32768
    got, lengths, steps = phases("verl", tmp_path / "wandb")
    assert steps == 300
    assert got == {"rollout_s": pytest.approx(11.0), "train_s": pytest.approx(8.0), "sync_s": pytest.approx(0.5),
                   "step_s": pytest.approx(20.0)}
    assert lengths["response_mean"] == pytest.approx(400.0)
    assert phases("verl", files[0])[2] == 300  # the file itself
    bad = tmp_path / "run-x.wandb"
    bad.write_bytes(b"not a wandb file")
    with pytest.raises(InputError, match="no :W&B header"):
        phases("verl", bad)


def test_log_without_timings_and_missing_phase_are_one_line(tmp_path, capsys, local_plan):
    plain = tmp_path / "plain.log"
    plain.write_text("INFO starting\nstep:1 - actor/entropy:0.5\n")
    cluster = local_cluster(tmp_path)
    code = main(["calibrate", "--cluster", str(cluster), "--from", "verl", "--log", str(plain), "--plan", str(local_plan)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and "plain.log" in err[0] and "no step timings" in err[0]
    nogen = tmp_path / "nogen.log"
    nogen.write_text("step:1 - timing_s/update_actor:3.0 - timing_s/step:4.0\nstep:2 - timing_s/update_actor:3.0 - "
                     "timing_s/step:4.0\n")
    code = main(["calibrate", "--cluster", str(cluster), "--from", "verl", "--log", str(nogen), "--plan", str(local_plan)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and "timing_s/gen" in err[0] and "missing" in err[0]


def test_plan_of_another_cluster_is_one_line(tmp_path, capsys):
    prob = PlacementProblem.from_files(REPO / "problems/clusters/mixed-8.yaml", REPO / "problems/workloads/qwen2.5-7b-grpo.yaml")
    X = prob.layout.repair(prob.xl + np.random.default_rng(0).random((4, prob.n_var)) * (prob.xu - prob.xl))
    other = tmp_path / "other.yaml"
    other.write_text(prob.decode(X[0], lifetime=False).to_yaml())
    log = tmp_path / "verl.log"
    log.write_text(VERL_CONSOLE)
    code = main(["calibrate", "--cluster", str(local_cluster(tmp_path)), "--from", "verl", "--log", str(log),
                 "--plan", str(other)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and "mixed-8" in err[0] and "cluster.name" in err[0]


def local_cluster(tmp_path: Path) -> Path:
    spec = yaml.safe_load((REPO / "problems/clusters/local.yaml").read_text())
    spec["profiles"] = {"cpu-local": str(REPO / "profiles/local.yaml")}
    path = tmp_path / "local.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture
def local_plan(tmp_path):
    prob = PlacementProblem.from_files(REPO / "problems/clusters/local.yaml", REPO / "problems/workloads/tiny-grpo.yaml")
    X = prob.layout.repair(prob.xl + np.random.default_rng(0).random((40, prob.n_var)) * (prob.xu - prob.xl))
    plan = next(p for p in (prob.decode(x, lifetime=False) for x in X) if p.execution.mode == "colocated")
    path = tmp_path / "plan.yaml"
    path.write_text(plan.to_yaml())
    return path


def test_calibrate_on_this_trainers_run_moves_predictions_to_the_measurement(tmp_path, local_plan, capsys):
    """A run directory as `mosearch train` writes it (summary.json, metrics.jsonl) whose training took
    1.4x and rollout 0.7x the model's: calibrated, both phases come closer, the cluster names the file,
    and `plan` says it uses it."""
    run = tmp_path / "run"
    run.mkdir()
    summary = {"run": {"model": "tiny", "algo": "grpo", "prompts_per_step": 16, "group_size": 8, "mini_batches": 1,
                       "max_new_tokens": 12},
               "layout": {"engines": 1, "dp": 1, "notes": [], "device": "cpu"}, "mode": "colocated", "steps": 4,
               "measured": {"prompt_tokens_mean": 6.0, "response_tokens_mean": 11.0}}
    pred, _ = predict_run(local_plan, summary, local_cluster=None)
    meas = {"rollout": 0.7 * pred["rollout_s"], "train": 1.4 * pred["train_s"], "weight_sync": pred["sync_s"]}
    meas["wall"] = sum(meas.values())
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "metrics.jsonl").write_text("\n".join(json.dumps({"step": s, "time": meas}) for s in range(4)))
    cluster = local_cluster(tmp_path)
    capsys.readouterr()
    assert main(["calibrate", "--cluster", str(cluster), "--from", "mosearch", "--log", str(run),
                 "--plan", str(local_plan)]) == 0
    out = capsys.readouterr().out
    assert "before" in out and "calibrated" in out and "rollout_s" in out
    cal_file = tmp_path / "local.calibration.yaml"
    assert yaml.safe_load(cluster.read_text())["calibration"] == "local.calibration.yaml"
    cal = yaml.safe_load(cal_file.read_text())
    row = cal["report"]["runs"][0]
    for phase in ("rollout_s", "train_s"):
        m = row[phase]["measured"]
        assert abs(row[phase]["after"] / m - 1) < 0.5 * abs(row[phase]["before"] / m - 1), phase
    c = cal["gpu_types"]["cpu-local"]
    assert 0.25 <= c["mfu"] <= 4 and 0.25 <= c["decode_eff"] <= 4
    # the cluster now predicts with them
    loaded = load_cluster(cluster)
    assert loaded.calibration == str(cal_file) and loaded.corrections["cpu-local"]["mfu"] == pytest.approx(c["mfu"])
    code = main(["plan", "--cluster", str(cluster), "--workload", str(REPO / "problems/workloads/tiny-grpo.yaml"),
                 "--out", str(tmp_path / "front"), "--evals", "200", "--quiet"])
    got = capsys.readouterr()
    assert code == 0 and "calibrated: predictions use" in got.err
    # the front holds plans of other modes than the one calibrated run: they are marked, in the report too
    assert "extrapolated:" in got.out and "of the front are far from the 1 calibrated run(s)" in got.out
    far = got.out.split("run(s) (another mode, layout or GPU type, or over 2x their engines or ranks): ")[1].split(";")[0]
    page = (tmp_path / "front" / "report.html").read_text()
    plans = json.loads(re.search(r"const PLANS = (\[.*?\]);\n", page, re.S).group(1))
    marks = {p["plan_id"] for p in plans if (p["extrapolated"] or "").startswith("extrapolated: far from")}
    listed = {p.strip(" .") for p in far.split(",")}
    assert marks and (marks <= listed or "..." in listed)


def test_calibration_of_another_cluster_is_refused(tmp_path):
    from problems.errors import InputError

    cluster = local_cluster(tmp_path)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"cluster": "mixed-8", "gpu_types": {"cpu-local": {"mfu": 1.2}}}))
    with cluster.open("a") as f:
        f.write("calibration: c.yaml\n")
    with pytest.raises(InputError, match="fitted on cluster 'mixed-8'"):
        load_cluster(cluster)


def test_plans_far_from_the_calibrated_runs_are_marked(local_plan):
    from problems.placement.corrections import extrapolation, layout_features
    from problems.placement.plan import load_plan

    plan = load_plan(local_plan)
    measured = [layout_features(plan)]
    assert extrapolation(plan, measured) is None and extrapolation(plan, []) is None
    t = plan.train
    other = plan.model_copy(update={"execution": plan.execution.model_copy(update={"mode": "disaggregated"})})
    line = extrapolation(other, measured)
    assert line.startswith("extrapolated:") and "mode disaggregated (measured colocated)" in line
    wider = plan.model_copy(update={"train": t.model_copy(update={"dp": t.dp * 4})})
    assert "ranks" in extrapolation(wider, measured)


def test_verl_config_of_another_cluster_is_one_line(tmp_path, capsys):
    """The run's verl settings (as `mosearch import` reads them) ask for more GPUs per node than the
    calibrated cluster's nodes hold: one line naming the key."""
    log = tmp_path / "verl.log"
    log.write_text(VERL_CONSOLE)
    code = main(["calibrate", "--cluster", str(local_cluster(tmp_path)), "--from", "verl", "--log", str(log),
                 "--workload", str(REPO / "problems/workloads/tiny-grpo.yaml"),
                 "trainer.n_gpus_per_node=8", "trainer.nnodes=1", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "n_gpus_per_node" in err[0] and "local" in err[0]
