"""The training layouts against a single-rank reference: one step from the same weights and batch
gives the same loss, the same gradient norm and, after the update, the same full weights.

The step is plain SGD, linear in the gradient, so the weights' change is the gradient (scaled) and
rounding moves it by rounding: Adam's first step is about lr * sign(g), which turns a near-zero
gradient element that another CPU's SIMD path rounds to the other sign into a 2 lr difference.
Each tensor's change is compared to a tolerance relative to its own largest change: a gradient
summed twice, a missing shard or a wrong scale moves whole tensors by about that largest change.

Each layout runs as plain processes over gloo (no Ray): every rank builds a `TrainWorker` on its
dp share of the batch, takes one step and gathers the full state with `iter_full_state`.
"""

from __future__ import annotations

import os
import random
import socket

import pytest
import torch
import torch.multiprocessing as mp

from trainer import parallel as PL
from trainer.batch import Sample

ALGO = {"name": "grpo", "lr": 1.0, "optimizer": "sgd"}  # lr 1: the step is the (clipped) gradient
MICRO = 3


def _batch(n: int = 12, vocab: int = 60, seed: int = 0) -> list[Sample]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        P, C = rnd.randint(3, 7), rnd.randint(1, 9)
        out.append(Sample(i, [rnd.randrange(4, vocab) for _ in range(P)], [rnd.randrange(4, vocab) for _ in range(C)],
                          [-rnd.random() * 3 for _ in range(C)], 0.0, rnd.uniform(-1.5, 1.5), 0))
    return out


def checkpoint_round_trip(w, out: str) -> dict:
    """The rank's full state, gathered; then a checkpoint round trip of its layout (save, wipe the weights,
    load, gather again) that must give the same state."""
    state = {k: v for b in w.iter_full_state(1 << 16) for k, v in b}
    os.makedirs(f"{out}/ckpt", exist_ok=True)
    w.save(f"{out}/ckpt/state.pt")
    with torch.no_grad():
        for p in w.model.parameters():
            p.zero_()
    w.load(f"{out}/ckpt/state.pt")
    again = {k: v for b in w.iter_full_state(1 << 20) for k, v in b}
    assert all(torch.equal(again[k], v) for k, v in state.items())
    return state


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank, world, port, model, dp, tp, pp, sharding, recompute, out):
    torch.set_num_threads(1)
    from trainer.workers import TrainWorker

    w = TrainWorker(model, rank, world, port, ALGO, MICRO, sharding, tp=tp, pp=pp, recompute=recompute)
    batch = _batch()
    c = w.c
    w.accumulate(batch[c.dp_idx::dp], len(batch), n_micro=2, last=True)
    st = w.apply()
    state = checkpoint_round_trip(w, out)
    torch.save((rank, c.dp_idx, c.tp_idx, c.pp_idx, st["loss"], w.params_held, state if rank == 0 else None,
                st["grad_norm"]),
               f"{out}/rank{rank}.pt")
    w.shutdown()


def spawn_ranks(target, world: int, args, out, weights_only: bool = True) -> list:
    """Run `target(*args(rank, port))` in `world` spawned processes sharing one rendezvous port; every rank
    must exit 0. Returns the ranks' `out/rank{r}.pt` results, sorted."""
    ctx = mp.get_context("spawn")
    port = _port()
    procs = [ctx.Process(target=target, args=args(r, port)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(600)
    codes = [p.exitcode for p in procs]
    for p in procs:
        if p.exitcode is None:
            p.kill()
    assert codes == [0] * world, codes
    return sorted(torch.load(out / f"rank{r}.pt", weights_only=weights_only) for r in range(world))


def run_layout(model: str, dp: int, tp: int, pp: int, sharding: str, out, recompute: bool = False) -> dict:
    world = dp * tp * pp
    got = spawn_ranks(_rank, world, lambda r, port: (r, world, port, model, dp, tp, pp, sharding, recompute, str(out)),
                      out)
    # every rank reports the global batch's loss (its replica's share summed over dp; pp: the last stage's)
    return {"loss": [g[4] for g in got], "params": [g[5] for g in got], "state": got[0][6], "grad_norm": [g[7] for g in got]}


@pytest.fixture(scope="module")
def reference(tiny_model):
    from trainer.workers import TrainWorker

    w = TrainWorker(str(tiny_model), 0, 1, _port(), ALGO, MICRO)
    before = {k: v.clone() for k, v in w.state_items()}
    batch = _batch()
    w.accumulate(batch, len(batch), n_micro=4, last=True)
    st = w.apply()
    return {"loss": st["loss"], "state": dict(w.state_items()), "before": before, "params": w.params_held,
            "grad_norm": st["grad_norm"]}


@pytest.mark.parametrize("dp,tp,pp,sharding,recompute", [
    (1, 2, 1, "none", False), (1, 1, 2, "none", False), (2, 1, 1, "zero3", False),
    (2, 2, 1, "zero2", False), (2, 1, 2, "zero1", True)])  # the last two: mixed layouts
def test_layout_matches_single_rank(reference, tiny_model, tmp_path, dp, tp, pp, sharding, recompute):
    got = run_layout(str(tiny_model), dp, tp, pp, sharding, tmp_path, recompute)
    ref = reference["state"]
    assert set(got["state"]) == set(ref)  # HF naming, tied lm_head included
    assert got["loss"] == pytest.approx([reference["loss"]] * len(got["loss"]), rel=1e-5, abs=1e-6)
    # the full gradient's norm on every rank: a gradient summed twice, scaled or missing a shard shows here
    assert got["grad_norm"] == pytest.approx([reference["grad_norm"]] * len(got["grad_norm"]), rel=1e-5)
    moved = 0
    before = reference["before"]
    for k, v in ref.items():
        step_ref = v - before[k]
        scale = float(step_ref.abs().max())
        step_got = got["state"][k] - before[k]
        # fp32 rounding of the gradient is ~1e-6 of its largest element; of the stored weight, an ulp
        tol = 1e-4 * scale + 4 * torch.finfo(torch.float32).eps * float(v.abs().max())
        torch.testing.assert_close(step_got, step_ref, rtol=0, atol=tol, msg=lambda m, k=k: f"{k}: {m}")
        moved += scale > 0
    assert moved > len(ref) // 2  # the update changed the weights, so agreeing is not trivial
    if (dp, tp, pp, sharding) in ((1, 1, 2, "none"), (2, 1, 1, "zero3")):
        # `mosearch export-model` merges this layout's rank files (its ranks again, over gloo) to the same state
        from trainer.export_model import merged_state, read_layout

        layout = read_layout(tmp_path / "ckpt")
        assert layout["files"] == dp * tp * pp
        merged = merged_state(tmp_path / "ckpt", layout, tmp_path)
        assert set(merged) == set(got["state"]) and all(torch.equal(merged[k], v) for k, v in got["state"].items())
    full = reference["params"]
    if tp * pp > 1 or sharding == "zero3":  # each rank holds about half of the model
        assert all(0.4 * full < n < 0.62 * full for n in got["params"]), (got["params"], full)
    else:
        assert got["params"] == [full] * (dp * tp * pp)


def test_stage_bounds():
    assert PL.stage_bounds(2, 2) == [(0, 1), (1, 2)]
    assert PL.stage_bounds(5, 2) == [(0, 3), (3, 5)]
    assert PL.stage_bounds(4, 1) == [(0, 4)]
    with pytest.raises(ValueError):
        PL.stage_bounds(2, 3)


def test_coords_order_tp_innermost():
    # rank = (pp * dp + dp_idx) * tp + tp_idx
    c = PL.Coords.of(5, dp=2, tp=2, pp=2)
    assert (c.pp_idx, c.dp_idx, c.tp_idx) == (1, 0, 1)
    assert c.rank(pp_idx=0) == 1 and c.rank(dp_idx=1) == 7
