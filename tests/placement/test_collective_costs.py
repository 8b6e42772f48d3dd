"""Per-collective costs: the counts a layout issues per micro-batch, the latencies the profile fits,
and the model charging count x (latency + per-op cost) exactly where the layout issues them."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from problems.placement import PlacementProblem
from problems.placement.calibration import collective_latencies
from problems.placement.model.comm import fsdp_collectives, tp_collectives
from problems.placement.model.training import pass_counts


def test_tp_all_reduces_per_layer_fused_and_split():
    # one forward, one backward: 2 row-parallel outputs forward; backward 2 fused column blocks (Megatron)
    assert tp_collectives(1.0, 1.0, True, False) == 4.0
    # the trainer's DTensor layout: q, k, v, gate, up each reduce their input gradient (measured: 14 per
    # micro-batch of the 2-layer tiny model, results/bench/layout_collectives.md)
    assert tp_collectives(1.0, 1.0, True, True) == 7.0
    assert tp_collectives(1.0, 1.0, False, True) == 6.0  # plain MLP: one up projection
    # an extra forward-only pass (old log-probs) adds its 2 forward all-reduces
    assert tp_collectives(2.0, 1.0, True, True) == 9.0
    assert np.array_equal(tp_collectives(np.array([1.0, 2.0]), 1.0, True, np.array([True, False])), [7.0, 6.0])


def test_fsdp_gathers_and_reduce_scatters_per_micro_batch():
    # 2 decoder layers + the root: forward gathers 3, backward re-gathers the 2 layers, reduce-scatters 3
    assert fsdp_collectives(3, 1.0, 1.0) == (5.0, 3.0)
    # recompute (a second forward) gathers every unit once more
    assert fsdp_collectives(3, 2.0, 1.0) == (8.0, 3.0)


def _rows():
    return [
        {"op": "all_reduce", "bytes": 4096, "world": 2, "seconds": 400e-6},
        {"op": "all_reduce", "bytes": 65536, "world": 2, "seconds": 200e-6},
        {"op": "all_reduce", "bytes": 1 << 20, "world": 2, "seconds": 1e-3},
        {"op": "all_gather", "bytes": 4096, "world": 2, "seconds": 500e-6},
        {"op": "broadcast", "bytes": 4096, "world": 2, "seconds": 60e-6},
        {"op": "broadcast", "bytes": 1 << 20, "world": 2, "seconds": 30e-6},  # large: not a latency row
        {"op": "tp_layer", "seconds": 3e-3, "plain_seconds": 1e-3, "collectives": 2, "bytes": 65536, "world": 2},
        {"op": "fsdp_units", "seconds": 13e-3, "plain_seconds": 1e-3, "collectives": 6, "bytes": 1, "world": 2},
    ]


def test_latencies_from_the_small_messages_and_per_op_costs_beyond_the_bare_collective():
    lat = collective_latencies(_rows())
    # fastest small all-reduce 200 us over 2 ring steps (n = 2)
    assert lat["collective_latency_s"] == pytest.approx(100e-6)
    assert lat["p2p_latency_s"] == pytest.approx(60e-6)
    # (3 - 1) ms / 2 collectives - the bare all-reduce at 64 KiB (200 us)
    assert lat["tp_op_s"] == pytest.approx(0.8e-3)
    # (13 - 1) ms / 6 collectives - the small all-gather (500 us)
    assert lat["fsdp_op_s"] == pytest.approx(1.5e-3)


def test_rows_without_a_grid_give_no_latencies():
    # an old profile's collective rows: large all-reduces only, no op key
    assert collective_latencies([{"bytes": 1 << 20, "world": 2, "seconds": 1e-3, "bus_gbs": 1.0}]) == {}


def _problem(repo_root, tmp_path, over=None):
    data = yaml.safe_load((repo_root / "problems" / "clusters" / "local.yaml").read_text())
    data.pop("profiles", None)
    path = tmp_path / "local.yaml"
    path.write_text(yaml.safe_dump(data))
    base = PlacementProblem.from_files(path, repo_root / "problems" / "workloads" / "tiny-grpo.yaml")
    return PlacementProblem(base.cluster, base.workload, efficiencies={"cpu-local": over or {}})


def _plans(p, seed):
    X = p.repair()._do(p, np.random.default_rng(seed).uniform(p.xl, p.xu, (600, p.n_var)))
    plans = [p.decode(x, lifetime=False) for x in X]
    return X, plans


def _rank_micro_batches(p, X, plans):
    chunks = np.where(X[:, p.layout.g("mode")] == 0, 1, 2 ** X[:, p.layout.g("log2_pipeline_chunks")])
    dp = np.array([q.train.dp for q in plans])
    mb = np.array([q.train.micro_batch for q in plans])
    samples = p.workload.prompts_per_step * p.workload.samples_per_prompt
    return chunks * np.ceil(samples / dp / chunks / mb)


def test_tp_op_cost_is_charged_per_all_reduce_of_each_layer_and_micro_batch(repo_root, tmp_path):
    a = _problem(repo_root, tmp_path)
    b = _problem(repo_root, tmp_path, {"tp_op_s": 0.002, "tp_split_projections": 1.0})
    c = _problem(repo_root, tmp_path, {"tp_split_projections": 1.0})
    X, plans = _plans(a, 3)
    tp = np.array([q.train.tp for q in plans])
    pp = np.array([q.train.pp for q in plans])
    rec = np.array([q.train.recompute for q in plans])
    assert (tp > 1).any() and (tp == 1).any()
    ra, rb, rc = a.evaluate_matrix(X), b.evaluate_matrix(X), c.evaluate_matrix(X)
    assert np.allclose(ra["tp_comm_s"][tp == 1], 0.0) and np.allclose(rb["tp_comm_s"][tp == 1], 0.0)
    sel = (tp > 1) & (pp == 1)
    assert sel.any()
    n_fwd, n_bwd = pass_counts(a.ctx, rec)
    n_ar = tp_collectives(n_fwd, n_bwd, a.ctx.gated, True)
    m = _rank_micro_batches(a, X, plans)
    extra = rb["tp_comm_s"] - rc["tp_comm_s"]
    assert np.allclose(extra[sel], (0.002 * n_ar * a.ctx.layers * m)[sel])
    # split projections issue more all-reduces than Megatron's fused blocks
    assert np.all(rc["tp_comm_s"][tp > 1] > ra["tp_comm_s"][tp > 1])


def test_fsdp_op_cost_is_charged_per_unit_collective_of_each_micro_batch_only_for_zero3(repo_root, tmp_path):
    a = _problem(repo_root, tmp_path)
    b = _problem(repo_root, tmp_path, {"fsdp_op_s": 0.003})
    X, plans = _plans(a, 4)
    dp = np.array([q.train.dp for q in plans])
    pp = np.array([q.train.pp for q in plans])
    rec = np.array([q.train.recompute for q in plans])
    z3 = np.array([q.train.sharding in ("zero3", "fsdp") for q in plans]) & (dp > 1)
    assert z3.any() and (~z3).any()
    extra = b.evaluate_matrix(X)["dp_sync_s"] - a.evaluate_matrix(X)["dp_sync_s"]
    assert np.allclose(extra[~z3], 0.0)
    n_fwd, n_bwd = pass_counts(a.ctx, rec)
    ag, rs = fsdp_collectives(np.ceil(a.ctx.layers / pp) + 1, n_fwd, n_bwd)
    m = _rank_micro_batches(a, X, plans)
    assert np.allclose(extra[z3], (0.003 * (ag + rs) * m)[z3])
