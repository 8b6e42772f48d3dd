"""A checkpoint carried to another training layout (trainer/reshard.py), as a re-plan after a node
loss does: a tensor-parallel layout takes a step and writes its full weights; a ZeRO-3 (FSDP) layout
built from the initial model loads them and must hold exactly the trained weights (DTensor shards
gathered on one side, distributed on the other). Each layout runs as plain processes over gloo (no
Ray), like tests/trainer/test_parallel.py."""

from __future__ import annotations

import os
import random
import socket

import pytest
import torch
import torch.multiprocessing as mp

from trainer import reshard
from trainer.batch import Sample

pytestmark = [pytest.mark.slow]

ALGO = {"name": "grpo", "lr": 1.0, "optimizer": "sgd"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    os.environ.setdefault("MOSEARCH_CACHE", str(tmp_path_factory.mktemp("mosearch-cache")))
    from trainer.models.tiny import resolve_model

    return str(resolve_model("tiny"))


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _batch(n: int = 8, seed: int = 0) -> list[Sample]:
    rnd = random.Random(seed)
    return [Sample(i, [rnd.randrange(4, 60) for _ in range(5)], [rnd.randrange(4, 60) for _ in range(4)],
                   [-1.0] * 4, 0.0, rnd.uniform(-1.5, 1.5), 0) for i in range(n)]


def _rank(rank, world, port, model, dp, tp, pp, sharding, out, load, ep=1):
    torch.set_num_threads(1)
    from trainer.workers import TrainWorker

    w = TrainWorker(model, rank, world, port, ALGO, 2, sharding, tp=tp, pp=pp, ep=ep)
    if load:
        reshard.load_weights(w, f"{out}/weights.pt")
    else:  # one step so the weights differ from the initial model's, then the checkpoint's full weights
        batch = _batch()
        w.accumulate(batch[w.c.dp_idx::dp], len(batch), n_micro=2, last=True)
        w.apply()
        reshard.save_weights(w, f"{out}/weights.pt")
    state = {k: v for b in w.iter_full_state(1 << 20) for k, v in b}
    if rank == 0:
        torch.save(state, f"{out}/{'loaded' if load else 'trained'}-{dp}-{tp}-{pp}-{sharding}-{ep}.pt")
    w.shutdown()


def _run(model, dp, tp, pp, sharding, out, load, ep=1) -> dict:
    world = dp * tp * pp
    ctx, port = mp.get_context("spawn"), _port()
    procs = [ctx.Process(target=_rank, args=(r, world, port, model, dp, tp, pp, sharding, str(out), load, ep))
             for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(600)
    for p in procs:
        if p.exitcode is None:
            p.kill()
    assert [p.exitcode for p in procs] == [0] * world
    return torch.load(out / f"{'loaded' if load else 'trained'}-{dp}-{tp}-{pp}-{sharding}-{ep}.pt", weights_only=True)


def test_weights_move_between_layouts(tiny, tmp_path):
    from transformers import AutoModelForCausalLM

    trained = _run(tiny, 1, 2, 1, "none", tmp_path, load=False)  # tensor parallel: DTensor shards gathered
    initial = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32).state_dict()
    assert sum(not torch.equal(trained[k], initial[k]) for k in trained) > len(trained) // 2  # the step moved them
    assert set(torch.load(tmp_path / "weights.pt", weights_only=True)) == set(trained)  # HF names, tied head too
    got = _run(tiny, 2, 1, 1, "zero3", tmp_path, load=True)
    assert set(got) == set(trained)
    for k, v in trained.items():
        assert torch.equal(got[k], v), k  # copies, not arithmetic: exact


def test_expert_parallel_weights_move_to_and_from_ep(tiny, tmp_path):  # tiny: the model cache is set
    """An EP 2 layout's full weights (its experts gathered) load into one rank holding every expert and
    into EP 2 ranks, each taking its experts' slice."""
    from trainer.models.tiny import resolve_model

    moe = str(resolve_model("tiny-moe"))
    trained = _run(moe, 2, 1, 1, "none", tmp_path, load=False, ep=2)
    for dp, ep in ((1, 1), (2, 2)):
        got = _run(moe, dp, 1, 1, "none", tmp_path, load=True, ep=ep)
        assert set(got) == set(trained) and all(torch.equal(got[k], v) for k, v in trained.items()), (dp, ep)


def test_which_layouts_read_each_others_state_files():
    key = lambda dp, tp, pp, sh: {"dp": dp, "tp": tp, "pp": pp, "sharding": sh}  # noqa: E731
    assert reshard.loads_directly(key(2, 1, 1, "none"), key(1, 1, 1, "none"))  # rank 0's file is whole
    assert reshard.loads_directly(key(1, 1, 1, "zero3"), key(4, 1, 1, "none"))  # zero3 with dp 1 shards nothing
    assert reshard.loads_directly(key(2, 2, 1, "zero1"), key(2, 2, 1, "zero1"))  # the same layout
    assert not reshard.loads_directly(key(1, 2, 1, "none"), key(1, 1, 1, "none"))  # TP cut
    assert not reshard.loads_directly(key(2, 1, 1, "zero1"), key(1, 1, 1, "none"))  # optimizer state sharded
    assert not reshard.loads_directly(key(1, 1, 1, "none"), key(2, 1, 1, "zero2"))  # ranks > 0 want files of their own
    # expert parallelism: each rank's file holds its experts only
    assert reshard.loads_directly(key(2, 1, 1, "none") | {"ep": 2}, key(2, 1, 1, "none") | {"ep": 2})
    assert not reshard.loads_directly(key(2, 1, 1, "none") | {"ep": 2}, key(2, 1, 1, "none") | {"ep": 1})
    assert not reshard.loads_directly(key(2, 1, 1, "none") | {"ep": 1}, key(2, 1, 1, "none") | {"ep": 2})
    assert reshard.loads_directly(key(2, 1, 1, "none"), key(2, 1, 1, "none") | {"ep": 1})  # written before EP
