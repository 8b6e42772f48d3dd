"""End to end on this machine: `mosearch train` with vLLM on Ray, resume, async bound, colocated DDP."""

import json

import pytest

from mosearch.cli import main

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SMALL = ["--prompts-per-step", "8", "--group-size", "4", "--eval-size", "16", "--no-progress", "--max-new-tokens", "4"]


def _rows(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_train_cli_vllm_checkpoint_resume(ray_local, plan_file, tmp_path, capsys):
    out = tmp_path / "run"
    plan = plan_file()  # disaggregated, 1 engine + 1 rank, 2 pipeline chunks
    assert main(["train", "--plan", str(plan), "--steps", "2", "--out", str(out), "--eval-every", "2",
                 "--checkpoint-every", "1", *SMALL]) == 0
    printed = capsys.readouterr().out
    assert "throughput_samples_s" in printed and "predicted" in printed
    rows = _rows(out)
    steps = [r for r in rows if "time" in r]
    assert [r["step"] for r in steps] == [1, 2] and rows[0]["eval_only"]
    for r in steps:
        assert set(r["time"]) >= {"rollout", "reward", "train", "weight_sync", "idle", "wall"}
        assert r["samples"] == 32 and r["staleness_max"] == 0 and r["tokens_per_s"] > 0
        assert r["behav_abs_diff_mean"] < 1e-3  # vLLM's behaviour log-probs = the trainer's (synced every step)
    assert "reward_heldout" in steps[-1]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["predicted"]["throughput_samples_s"] == 50.0
    assert (out / "checkpoints" / "latest").read_text() == "step_000002"

    assert main(["train", "--plan", str(plan), "--steps", "3", "--out", str(out), "--resume", "--eval-every", "0",
                 "--checkpoint-every", "5", *SMALL]) == 0
    rows = [r for r in _rows(out) if "time" in r]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[2]["sample_ids"][0] == 2 * 8 * 4  # the prompt stream continues where it stopped
    assert len({i for r in rows for i in r["sample_ids"]}) == 3 * 32


def test_async_never_trains_on_data_older_than_k(ray_local, plan_file, tmp_path):
    from trainer.driver import RunConfig, run

    k = 1
    plan = plan_file(execution={"mode": "async", "staleness_bound": k, "pipeline_chunks": 1})
    out = tmp_path / "async"
    cfg = RunConfig(plan=str(plan), out=str(out), steps=5, prompts_per_step=8, group_size=4, max_new_tokens=4,
                    eval_every=0, checkpoint_every=0, backend="hf", progress=False)
    before = _placement_groups()
    summary = run(cfg)
    rows = [r for r in _rows(out) if "time" in r]
    assert summary["status"] == "finished" and len(rows) == 5
    assert all(r["staleness_max"] <= k for r in rows)
    assert any(r["staleness_max"] == k for r in rows)  # it really ran ahead
    assert sum(r["stale_dropped"] for r in rows) == 0
    # the untrained tiny model: the run says when its rewards give GRPO nothing to learn from
    silent = all(r["signal_groups"] == 0 for r in rows[:3])
    assert bool(summary["warnings"]) == silent
    if silent:
        assert len(summary["warnings"]) == 1 and "--warm-start-steps" in summary["warnings"][0]
    assert summary["versions"]["engine"].startswith("transformers") and summary["versions"]["ray"]
    _bundles_given_back(before, 2)


def test_signal_groups_count_groups_whose_rewards_differ():
    from trainer.batch import Sample
    from trainer.driver import _signal_groups

    def s(i, r):
        return Sample(i, [1], [2], [0.0], r, 0.0, 0)

    batch = [s(0, 0.0), s(1, 0.0), s(2, 1.0), s(3, 0.0), s(4, 1.0), s(5, 1.0)]
    assert _signal_groups(batch, 2) == 1  # groups (0,1) (2,3) (4,5): only the middle one differs
    assert _signal_groups(batch, None) == 1  # PPO: the batch as one group
    assert _signal_groups(batch[:2], None) == 0


def test_colocated_ddp_two_ranks(ray_local, plan_file, tmp_path):
    from trainer.driver import RunConfig, run

    pool = {"pool": "cpu-local@local", "gpu": "cpu-local", "region": "local", "rollout_gpus": 0, "train_gpus": 0,
            "shared_gpus": 2, "rollout_tp": 1}
    plan = plan_file(pools=[pool], execution={"mode": "colocated", "staleness_bound": 0, "pipeline_chunks": 1},
                     train={"dp": 2, "tp": 1, "pp": 1, "sharding": "none", "micro_batch": 3})
    out = tmp_path / "coloc"
    cfg = RunConfig(plan=str(plan), out=str(out), steps=2, prompts_per_step=6, group_size=4, max_new_tokens=4,
                    eval_every=0, checkpoint_every=0, backend="hf", progress=False, algo="ppo")
    before = _placement_groups()
    summary = run(cfg)
    rows = [r for r in _rows(out) if "time" in r]
    lay = summary["layout"]
    placed = lay.pop("placed")
    assert lay.pop("weight_sync")["path"] == "broadcast"
    assert lay.pop("rendezvous") == "127.0.0.1"  # a local Ray: the ranks meet on loopback
    assert lay == {"engines": 2, "dp": 2, "tp": 1, "pp": 1, "sharding": "none", "stages": [2], "emulated": False, "device": "cpu",
                   "precision": "fp32", "notes": [], "params_per_rank": [lay["params_per_rank"][0]] * 2, "engine_tp": [1, 1],
                   "ep": 1, "experts": 0}  # a dense model: no expert parallelism
    assert sorted((p["role"], p["index"]) for p in placed) == [("engine", 0), ("engine", 1), ("rank", 0), ("rank", 1)]
    assert all(r["time"]["switch"] > 0 for r in rows) and all("value_loss" in r for r in rows)
    assert all(r["behav_abs_diff_mean"] < 1e-3 for r in rows)  # both ranks stayed in sync with the engines
    _bundles_given_back(before, 1)


def _placement_groups() -> dict:
    from ray.util import placement_group_table

    return placement_group_table()


def _bundles_given_back(before: dict, n: int):
    """The `n` placement groups the run reserved were removed by the worker groups that owned them
    (one shared group when colocated, else one per role)."""
    new = {k: v for k, v in _placement_groups().items() if k not in before}
    assert len(new) == n and {pg["state"] for pg in new.values()} == {"REMOVED"}, new


def test_plan_for_another_cluster_is_refused_by_the_cli(plan_file, capsys):
    plan = plan_file(pools=[{"pool": "H100@us", "gpu": "H100", "region": "us", "rollout_gpus": 4, "train_gpus": 4,
                             "shared_gpus": 0, "rollout_tp": 1}],
                     train={"dp": 4, "tp": 1, "pp": 1, "sharding": "none", "micro_batch": 4})
    assert main(["train", "--plan", str(plan), "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "H100 x8" in err[0] and "--emulate" in err[0]


def test_mini_batches_take_that_many_optimizer_updates_per_step(ray_local, plan_file, tmp_path):
    """`mini_batches=3`: three Adam updates per step on whole groups, the ratio taken to the rollout policy."""
    import torch

    from trainer.driver import RunConfig, run

    plan = plan_file()
    out = tmp_path / "mb"
    cfg = RunConfig(plan=str(plan), out=str(out), steps=2, prompts_per_step=6, group_size=4, max_new_tokens=4,
                    eval_every=0, checkpoint_every=2, backend="hf", progress=False, mini_batches=3,
                    lr=1e-3, lr_schedule="linear", lr_final_ratio=0.5)
    summary = run(cfg)
    rows = [r for r in _rows(out) if "time" in r]
    assert summary["status"] == "finished" and [r["samples"] for r in rows] == [24, 24]
    assert [r["lr"] for r in rows] == pytest.approx([1e-3, 5e-4])
    ckpt = out / "checkpoints" / "step_000002" / "state.pt"
    state = torch.load(ckpt, weights_only=False)["optimizer"]["state"]
    assert {int(v["step"]) for v in state.values()} == {6}  # 2 steps x 3 updates
