"""What a GPU rank of a bf16 workload keeps: autocast over fp32 master weights, a bf16 reference, and the loss
head's log-softmax and entropy a chunk of positions at a time (the same log-probs, entropy and gradient as
over all positions at once, in less than half the memory: PyTorch's profiler counts every allocation and
free of the forward and backward; the unchunked head's 14 bytes per bf16 logit is what an H200 measured,
results/bench/gpu_probe.md)."""

from __future__ import annotations

import random

import pytest
import torch

import trainer.workers as TW
from trainer import algorithms as A
from trainer.batch import Sample, collate

VOCAB = 4000


def _samples(n: int, rows: int, vocab: int = VOCAB) -> list[Sample]:
    rnd = random.Random(n)
    p, c = n // 4, n - n // 4
    return [Sample(i, [rnd.randrange(4, vocab) for _ in range(p)], [rnd.randrange(4, vocab) for _ in range(c)],
                   [-rnd.random() for _ in range(c)], 1.0, rnd.uniform(-1, 1), 0) for i in range(rows)]


def _tensors(n: int = 300, rows: int = 2) -> dict:
    return collate(_samples(n, rows), 0)


def _head(t: dict, logits: torch.Tensor):
    logp, ent = TW.TrainWorker._token_logp(logits, t)
    loss, _ = A.objective(A.AlgoConfig()).loss(logp, None, t, None)
    loss.backward()
    return logp.detach(), ent, logits.grad


def _peak_bytes(fn) -> int:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    cur = peak = 0
    for _, d in sorted((e.time_range.start, e.self_cpu_memory_usage) for e in prof.events() if e.self_cpu_memory_usage):
        cur += d
        peak = max(peak, cur)
    return peak


def test_chunks_give_the_same_log_probs_entropy_and_gradient(monkeypatch):
    t = _tensors()
    base = torch.randn(2, 300, VOCAB, dtype=torch.bfloat16)
    whole = _head(t, base.clone().requires_grad_())
    monkeypatch.setattr(TW, "LOSS_CHUNK_LOGITS", 2 * VOCAB * 16)  # 16 positions per chunk: 19 chunks
    parts = _head(t, base.clone().requires_grad_())
    assert torch.equal(whole[0], parts[0]) and torch.equal(whole[2], parts[2])
    assert parts[1] == pytest.approx(whole[1], rel=1e-6)


def test_chunks_hold_less_than_half_the_memory(monkeypatch):
    n = 512
    t = _tensors(n, rows=1)
    logits = lambda: torch.randn(1, n, VOCAB, dtype=torch.bfloat16, requires_grad=True)  # noqa: E731
    per_logit = lambda: _peak_bytes(lambda: _head(t, logits())) / (n * VOCAB)  # noqa: E731
    monkeypatch.setattr(TW, "LOSS_CHUNK_LOGITS", 1 << 40)  # one chunk: all positions at once
    whole = per_logit()
    monkeypatch.setattr(TW, "LOSS_CHUNK_LOGITS", 32 * VOCAB)  # 32 positions per chunk
    chunked = per_logit()
    # at once: the bf16 logits, the fp32 log-softmax and the entropy's two fp32 temporaries (14 bytes); in
    # chunks the logits and the log-softmax autograd keeps (6), plus one chunk's temporaries
    assert whole == pytest.approx(14.0, abs=0.3)
    assert chunked < 7.5


def test_a_bf16_rank_trains_under_autocast_over_fp32_weights_with_a_bf16_reference(tiny_model, monkeypatch):
    """What a GPU rank of a bf16 workload runs (here on the CPU, whose autocast has the same rules): fp32
    master weights and gradients, bf16 logits, the frozen KL reference stored in bf16 (2 bytes per
    parameter, as the model counts it)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(TW, "run_precision", lambda requested, device: ("bf16", None))
    w = TW.TrainWorker(str(tiny_model), 0, 1, port, {"name": "grpo", "lr": 1e-3, "kl_coef": 0.05}, 2)
    assert w.precision == "bf16" and {p.dtype for p in w.ref.parameters()} == {torch.bfloat16}
    t = w._tensors(_samples(24, 4, vocab=80))
    with w.amp():
        assert w.model(input_ids=t["input_ids"]).logits.dtype == torch.bfloat16
    w.accumulate(_samples(24, 4, vocab=80), 4, n_micro=2, last=True)
    assert {p.grad.dtype for p in w.model.parameters() if p.grad is not None} == {torch.float32}
    out = w.apply()
    assert torch.isfinite(torch.tensor(out["grad_norm"])) and out["grad_norm"] > 0
    assert {p.dtype for p in w.model.parameters()} == {torch.float32}
