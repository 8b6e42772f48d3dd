"""Hand-computed checks of three model facts: torchtitan's selective op checkpointing (time and
memory), FP8 runs keeping attention and the LM head at the BF16 peak, and sequence parallelism."""

import pytest

from problems.placement.model.memory import selective_op_split
from problems.placement.predict import TrainingJob, predict_training

ARCH = dict(layers=4, hidden=1024, heads=8, kv_heads=2, ffn=4096, vocab=32000, mlp="gated", tied_embeddings=False)
EFF = {"H100": {"mfu": 0.5, "elementwise_eff": 0.5, "layer_s": 0.0}}


def job(**kw):
    base = dict(model=ARCH, gpu="H100", seq_len=1024, global_batch=4, micro_batch=1, dp=1, efficiencies=EFF)
    return TrainingJob(**(base | kw))


def test_selective_op_split_by_hand():
    # gated, h 8, q 8, kv 4, ffn 16: matmuls q(64) k(32) v(32) o(64) w1(128) w3(128) w2(128);
    # the 2nd, 4th, 6th are recomputed: 32 + 64 + 128; kept outputs: q 8, v 4, w1 16 (TP-sharded), w2 8
    assert selective_op_split(8, 8, 4, 16, gated=True) == (224.0, 28.0, 8.0)
    # plain: q k v o up down -> recomputed k, o, down = 32 + 64 + 128; kept q, v, up
    assert selective_op_split(8, 8, 4, 16, gated=False) == (224.0, 28.0, 0.0)


def test_selective_op_adds_recomputed_matmuls_and_elementwise_forward():
    none, sel = predict_training(job()), predict_training(job(recompute="selective_op"))
    h, f, kv, s = 1024, 4096, 256, 1024
    recomputed = h * kv + h * h + h * f  # wk, wo, w3
    flops = 2.0 * recomputed * s  # per sequence and layer
    ew_fwd = s * (h * (10 * 2 + 2) + f * 3 * 2)  # forward element-wise bytes, bf16, gated
    per_seq_layer = flops / (989e12 * 0.5) + ew_fwd / (3.35e12 * 0.5)
    expected = 4 * 4 * per_seq_layer  # 4 sequences x 4 layers, one GPU
    assert sel["step_s"] - none["step_s"] == pytest.approx(expected, rel=1e-6)
    # model FLOPs (what MFU counts) exclude the recomputation
    assert sel["model_tflops_per_gpu"] * sel["step_s"] == pytest.approx(none["model_tflops_per_gpu"] * none["step_s"])


def test_selective_op_memory_by_hand():
    none, sel = predict_training(job()), predict_training(job(recompute="selective_op"))
    h, q, kv, f, s, heads = 1024, 1024, 256, 4096, 1024, 8
    # Korthikanti's tensors, bf16, tp 1, no dropout: two norm inputs and the QKV and first MLP inputs (h each), q, k, v,
    # the attention output, the SwiGLU's input (gate and up) and the down projection's input
    full_layer = s * (4 * h + (q + 2 * kv) + q + 2 * f + f) * 2
    kept_layer = s * ((h + h) + (q + kv + f) + q) * 2 + s * heads * 4  # input, w2 out; q, v, w1 out; attention out; lse
    logits = s * 32000 * (2 + 4)
    assert none["memory_gb"]["activations"] == pytest.approx((4 * full_layer + logits) / 1e9, rel=1e-9)
    assert sel["memory_gb"]["activations"] == pytest.approx((4 * kept_layer + full_layer + logits) / 1e9, rel=1e-9)


def test_fp8_runs_only_the_layer_linears_at_the_fp8_peak():
    bf, f8 = predict_training(job()), predict_training(job(precision="fp8"))
    s, layers = 1024, 4
    weight_f = 3 * 2 * s * layers * (1024 * 1024 * 2 + 2 * 1024 * 256 + 3 * 1024 * 4096 + 2 * 1024)  # fwd + bwd, norms incl.
    saved = weight_f * (1 / (989e12 * 0.5) - 1 / (1979e12 * 0.5))
    assert bf["step_s"] - f8["step_s"] == pytest.approx(4 * saved, rel=1e-6)  # 4 sequences


def test_sequence_parallel_divides_elementwise_and_activations_by_tp():
    a = predict_training(job(tp=2))
    b = predict_training(job(tp=2, sequence_parallel=True))
    s, h, f = 1024, 1024, 4096
    ew = s * h * ((10 * 2 + 2) + (16 * 2 + 2))  # hidden-sized kernels, forward + backward, bf16
    # tp 2: those kernels run on half the tokens; ffn kernels are already sharded
    assert a["step_s"] - b["step_s"] == pytest.approx(4 * layers_() * ew / 2 / (3.35e12 * 0.5), rel=1e-6)
    # sequence parallelism splits what TP leaves whole: two norm inputs and the QKV and first MLP inputs, bf16
    diff = 4 * s * (4 * h * 2) / 2
    assert a["memory_gb"]["activations"] - b["memory_gb"]["activations"] == pytest.approx(diff / 1e9, rel=1e-9)


def layers_():
    return ARCH["layers"]


def test_korthikanti_gpt_layer_and_what_the_architecture_changes():
    """A 16-bit GPT layer (k and v as wide as q, a plain MLP of 4h, dropout) keeps Korthikanti et al.'s s b h
    (10 + 24/t) bytes, 34/t with sequence parallelism; grouped-query attention, no dropout and FP8 inputs
    of the linear layers each take their tensors' bytes off."""
    gpt = dict(layers=4, hidden=1024, heads=8, kv_heads=8, ffn=4096, vocab=32000, mlp="plain", tied_embeddings=False,
               hidden_dropout=0.1)
    s, h, logits = 1024, 1024, 1024 * 32000 * (2 + 4) / 2

    def acts(model=gpt, **kw):
        return predict_training(job(model=model, tp=2, **kw))["memory_gb"]["activations"] * 1e9

    assert acts() == pytest.approx(4 * s * h * (10 + 24 / 2) + logits, rel=1e-9)
    assert acts(sequence_parallel=True) == pytest.approx(4 * s * h * 34 / 2 + logits, rel=1e-9)
    # no dropout: the two 1-byte masks go
    assert acts() - acts(gpt | {"hidden_dropout": 0.0}) == pytest.approx(4 * s * 2 * h, rel=1e-9)
    # 2 KV heads of 8: k and v are a quarter as wide, 2 bytes each, split over tp 2
    assert acts() - acts(gpt | {"kv_heads": 2}) == pytest.approx(4 * s * 2 * (h - h / 4) * 2 / 2, rel=1e-9)
    # FP8: the QKV and first MLP inputs (whole) and the down projection's input (4h, split) at 1 byte instead of 2;
    # the output projection keeps an FP8 copy of the attention output (split) besides attention's own
    fp8 = 4 * s * (2 * h * 1 + (4 * h * 1 - h * 1) / 2)
    assert acts() - acts(precision="fp8") == pytest.approx(fp8, rel=1e-9)


@pytest.mark.parametrize("v", [2, 4])
def test_interleaved_schedule_keeps_more_micro_batches_in_flight(v):
    """Megatron's interleaved 1F1B warms up with 2 (p - 1) + (v - 1) p chunks of 1/v of a stage: the first stage
    holds p + (p - 1) / v micro-batches' activations where plain 1F1B holds p (Korthikanti et al. 2022, 4.2.3).
    The first stage is the peak here: the last keeps about one micro-batch of its 4 layers plus the head's logits
    (1024 x 32000 x 6 bytes, under 6 layers' worth), the first 4 layers x 4 micro-batches or more."""
    model = ARCH | {"layers": 16}

    def peak(**kw):
        return predict_training(job(model=model, pp=4, global_batch=8, **kw))["memory_gb"]["activations"]

    assert peak(interleave=v) / peak() == pytest.approx((4 + 3 / v) / 4, rel=1e-9)
