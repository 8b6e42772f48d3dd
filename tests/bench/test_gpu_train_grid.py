"""The GPU bench's grid on the CPU: its padded rows build micro-batches that carry padding, and are predicted
as padded (the measurement itself needs a CUDA machine)."""

from __future__ import annotations

from mosearch.bench import gpu_train


def test_a_padded_grid_row_builds_padded_micro_batches_and_is_predicted_so():
    from trainer.batch import collate

    samples = gpu_train._batch(4, 64, 100, 0, padded=True)
    lengths = [len(s.prompt) + len(s.completion) for s in samples]
    assert lengths == [64, 48, 64, 48]
    for mb in (samples[:2], samples[2:]):  # two-sample micro-batches: each padded to the longest
        attn = collate(mb, 0)["attention_mask"]
        assert attn.shape == (2, 64) and int(attn.sum()) == 64 + 48
    assert [len(s.prompt) + len(s.completion) for s in gpu_train._batch(4, 64, 100, 0)] == [64] * 4

    rows = [gpu_train._case(g) | {"status": "ok"} for g in gpu_train.HOLDOUT_GRID if len(g) > 6]
    assert rows and all(r["padded"] for r in rows)
    plain = [dict(r, padded=False) for r in rows]
    for (_, p), (_, q) in zip(gpu_train.predicted(rows), gpu_train.predicted(plain)):
        assert p["memory_gb"]["activations"] != q["memory_gb"]["activations"]
