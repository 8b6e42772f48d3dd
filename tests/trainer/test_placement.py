"""A plan against the cluster found: refused for another cluster, scaled down with --emulate."""

import pytest

from problems.errors import InputError
from problems.placement.plan import load_plan
from trainer import placement as P


def _pool(gpu, region, r, t, s=0, tp=1):
    return {"pool": f"{gpu}@{region}", "gpu": gpu, "region": region, "rollout_gpus": r, "train_gpus": t,
            "shared_gpus": s, "rollout_tp": tp}


def test_local_plan_fits_this_machine(plan_file):
    plan = load_plan(plan_file())
    lay = P.layout(plan, P.Found({"cpu-local": 2}), emulate=False)
    assert len(lay.engines) == 1 and lay.dp == 1 and not lay.emulated and not lay.colocated
    b_r, b_t = P.bundles(lay, P.Found({"cpu-local": 2}))
    assert b_r == [{"CPU": 2, "gpu:cpu-local": 1}] and b_t == [{"CPU": 2, "gpu:cpu-local": 1}]


def test_plan_for_another_cluster_is_refused_then_emulated(plan_file, monkeypatch):
    monkeypatch.setattr(P, "cpu_cores", lambda: 1)  # one core: vLLM's CPU backend cannot run TP 2
    f = plan_file(pools=[_pool("H100", "us", 8, 0, tp=2), _pool("L40S", "eu", 0, 8)],
                  train={"dp": 8, "tp": 1, "pp": 1, "sharding": "zero3", "micro_batch": 4})
    plan = load_plan(f)
    with pytest.raises(InputError) as err:
        P.layout(plan, P.Found({"cpu-local": 2}), emulate=False, plan_file=str(f))
    line = err.value.line()
    assert "H100 x8 (found 0)" in line and "--emulate" in line and "\n" not in line
    lay = P.layout(plan, P.Found({"cpu-local": 2}), emulate=True)
    assert lay.emulated and len(lay.engines) == 2 and lay.dp == 2
    assert {e.gpu for e in lay.engines} == {"H100"} and all(e.tp == 1 for e in lay.engines)  # CPU: tp 1
    assert set(lay.train_pools) == {"L40S@eu"}
    assert any("tp=2 runs as tp=1: this machine has 1 CPU cores" in n for n in lay.notes)
    assert any("custom resources" in n for n in lay.notes)
    b_r, b_t = P.bundles(lay, P.Found({"cpu-local": 2}))
    assert all("gpu:H100" in b for b in b_r) and all("gpu:L40S" in b for b in b_t)


def test_gpu_names_match_ray_and_cuda_spellings():
    assert P._match("H100", {"NVIDIA H100 80GB HBM3": 8}) == "NVIDIA H100 80GB HBM3"
    assert P._match("A100", {"H100": 8}) is None


def test_colocated_shares_bundles(plan_file):
    f = plan_file(pools=[_pool("cpu-local", "local", 0, 0, s=2)], execution={"mode": "colocated"},
                  train={"dp": 2, "tp": 1, "pp": 1, "sharding": "none", "micro_batch": 4})
    lay = P.layout(load_plan(f), P.Found({"cpu-local": 2}), emulate=False)
    assert lay.colocated and len(lay.engines) == 2 and lay.dp == 2
    b_r, b_t = P.bundles(lay, P.Found({"cpu-local": 2}))
    assert b_t is None and len(b_r) == 2


def test_tp_pp_layout_gets_one_bundle_per_rank_and_notes_only_real_deviations(plan_file):
    from types import SimpleNamespace

    f = plan_file(pools=[_pool("cpu-local", "local", 1, 8)],
                  train={"dp": 2, "tp": 2, "pp": 2, "sharding": "zero1", "micro_batch": 4})
    lay = P.layout(load_plan(f), P.Found({"cpu-local": 9}), emulate=False)
    assert (lay.dp, lay.tp, lay.pp, lay.world) == (2, 2, 2, 8) and lay.notes == []
    assert len(P.bundles(lay, P.Found({"cpu-local": 9}))[1]) == 8  # one device per rank
    # a plan made for a larger model, run on one with 2 heads and 2 layers: cut, and each cut noted
    lay.tp, lay.pp = 4, 4
    P.fit_model(lay, SimpleNamespace(num_attention_heads=2, num_key_value_heads=2, intermediate_size=512,
                                     num_hidden_layers=2))
    assert (lay.tp, lay.pp) == (2, 2)
    assert lay.notes == ["train tp=4 runs as tp=2: the model has 2 attention heads / 2 kv heads",
                         "train pp=4 runs as pp=2: the model has 2 layers"]


def test_pipeline_plan_with_ppo_is_refused_in_one_line(plan_file, capsys):
    from mosearch.cli import main

    f = plan_file(pools=[_pool("cpu-local", "local", 0, 0, s=2)],
                  execution={"mode": "colocated", "staleness_bound": 0, "pipeline_chunks": 1},
                  train={"dp": 1, "tp": 1, "pp": 2, "sharding": "none", "micro_batch": 4})
    assert main(["train", "--plan", str(f), "--steps", "1", "--algo", "ppo", "--backend", "hf"]) == 2
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(err) == 1 and "train.pp" in err[0] and "ppo" in err[0]


def test_rollout_tp_runs_on_the_cpu_when_each_tp_worker_has_a_core(plan_file, monkeypatch):
    f = plan_file(pools=[_pool("H100", "us", 4, 0, tp=2), _pool("L40S", "eu", 0, 8)],
                  train={"dp": 8, "tp": 1, "pp": 1, "sharding": "zero3", "micro_batch": 4})
    monkeypatch.setattr(P, "cpu_cores", lambda: 2)
    lay = P.layout(load_plan(f), P.Found({"cpu-local": 2}), emulate=True)
    assert [e.tp for e in lay.engines] == [2, 2] and not any("tensor parallelism" in n for n in lay.notes)


def test_cpu_bind_splits_this_process_cores_into_disjoint_sets(monkeypatch):
    monkeypatch.setattr(P.os, "sched_getaffinity", lambda pid: {4, 5, 6, 7, 9}, raising=False)
    assert P.cpu_bind(2) == "4,5|6,7"
    assert P.cpu_bind(5) == "4|5|6|7|9"
    with pytest.raises(ValueError):
        P.cpu_bind(6)
