"""The memory the model counts for this project's trainer (`amp_autocast`: Hugging Face modules under
PyTorch autocast, PyTorch's AdamW, an fp32 log-softmax + entropy loss) against the tensors PyTorch
really keeps: every tensor autograd saves for backward in a Qwen2 decoder layer, counted with
`saved_tensors_hooks` on the CPU (the same modules and autocast rules run on a GPU; an H200's peak
allocated memory agreed within 1% median, results/bench/gpu_train.md)."""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import pytest
import torch

from problems.placement.predict import TrainingJob, predict_training

SEQ = 64
LAYER_WEIGHTS = 2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 352  # the small layer's q, o; k, v; gate, up, down


def _saved_bytes(layers: int, autocast: bool, hidden=128, ffn=352, heads=4, kv_heads=2, seq=SEQ,
                 dtype=torch.float32, padded=False, math_kernel=False) -> int:
    """Bytes of the distinct tensors (not parameters) autograd saves in one forward of a Qwen2 model, per
    sample. `padded`: two samples, the second right-padded by 3 tokens, with their attention mask, as the
    trainer's micro-batches of samples of different lengths run; `math_kernel`: PyTorch's math kernel
    forced (the composite implementation every device runs when no fused kernel takes the call)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=97, hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv_heads, tie_word_embeddings=True)
    model = Qwen2ForCausalLM(cfg).to(dtype)
    model.config._attn_implementation = "sdpa"
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            seen.setdefault(st.data_ptr(), st.nbytes())
        return t

    batch = 2 if padded else 1
    ids = torch.randint(0, 97, (batch, seq))
    mask = None
    if padded:
        mask = torch.ones(batch, seq, dtype=torch.long)
        mask[1, -3:] = 0
    kernel = sdpa_kernel([SDPBackend.MATH]) if math_kernel else contextlib.nullcontext()
    with kernel, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            model(input_ids=ids, attention_mask=mask)
    return sum(seen.values()) // batch


def _layer_bytes(autocast: bool, dtype, seq: int, **kw) -> int:
    """One decoder layer's saved bytes per sample at `seq` tokens: the model with two layers minus the
    model with one (the embedding, the final norm and the head's input cancel)."""
    two, one = (_saved_bytes(n, autocast, seq=seq, dtype=dtype, **kw) for n in (2, 1))
    return two - one


def _ctx(precision: str, amp: bool = True, model: str = "qwen2.5-0.5b"):
    from problems.placement.predict import _job_context

    job = TrainingJob(model=model, gpu="H100", precision=precision, seq_len=SEQ, global_batch=1,
                      elementwise_kernels="eager", amp_autocast=amp)
    ctx, _, _ = _job_context(job, None)
    return ctx


@pytest.mark.parametrize("precision,autocast,weights", [("bf16", True, torch.float32), ("fp32", False, torch.float32),
                                                      ("bf16", False, torch.bfloat16)])
def test_a_decoder_layer_saves_what_the_model_counts(precision, autocast, weights):
    """Autocast over fp32 weights (this project's trainer), fp32, and weights in bf16 (FSDP's mixed precision,
    as verl's and NeMo-RL's workers hold them)."""
    from problems.placement.model.memory import hf_layer_bytes_per_token

    # one layer's tensors (`_layer_bytes`); per token: at two lengths, less what does not grow with the
    # tokens (autocast's casts of the layer's weights, counted apart: `hf_step_extras`)
    layer = {n: _layer_bytes(autocast, weights, n) for n in (SEQ, 2 * SEQ)}
    measured = (layer[2 * SEQ] - layer[SEQ]) / SEQ
    casts = layer[SEQ] - measured * SEQ
    assert casts == pytest.approx(2 * LAYER_WEIGHTS if autocast else 0, abs=2 * (128 + 2 * 64))  # (+ q/k/v biases)
    ctx = dataclasses.replace(_ctx(precision, amp=autocast or weights == torch.float32), hidden=128, ffn=352,
                              heads=4, q_dim=128, kv_dim=64)
    assert float(hf_layer_bytes_per_token(ctx, np.array(1.0))) == pytest.approx(measured, rel=1e-9)


def test_the_trainers_memory_adds_casts_loss_copies_and_the_optimizer_step():
    base = dict(model="qwen2.5-1.5b", gpu="H200", seq_len=1024, global_batch=8, micro_batch=4,
                elementwise_kernels="eager")
    frame = predict_training(TrainingJob(**base))["memory_gb"]
    amp = predict_training(TrainingJob(**base, amp_autocast=True))["memory_gb"]
    params = 1.54e9
    # bf16 autocast keeps a bf16 cast of every weight from forward to backward: 2 bytes per parameter
    assert amp["weight_casts"] == pytest.approx(2 * params / 1e9, rel=0.02) and frame["weight_casts"] == 0
    # AdamW's foreach step: one fp32 temporary per parameter
    assert amp["optimizer_step_temporaries"] == pytest.approx(4 * params / 1e9, rel=0.02)
    assert amp["activations"] > frame["activations"] and amp["allocated"] > frame["allocated"]
    # under full recomputation the casts are made again layer by layer: none held
    rec = predict_training(TrainingJob(**base, amp_autocast=True, recompute=True))["memory_gb"]
    assert rec["weight_casts"] == 0 and rec["activations"] < amp["activations"]


def test_with_few_tokens_the_optimizer_step_sets_the_peak():
    """128 tokens: the activations are smaller than AdamW's temporaries, so the peak is the step's,
    20 bytes per parameter (weights, gradients, two moments, one temporary), as the H200 measured."""
    job = TrainingJob(model="qwen2.5-3b", gpu="H200", seq_len=128, global_batch=1, elementwise_kernels="eager",
                      amp_autocast=True)
    m = predict_training(job)["memory_gb"]
    assert m["allocated"] - m["runtime"] == pytest.approx(20 * 3.09e9 / 1e9, rel=0.02)


def test_the_memory_breakdown_adds_up_to_its_peak():
    """`predict`'s parts (`model.memory.train_memory`, which the planner scores too): the states, the
    larger of the dynamic memory and the optimizer step's temporaries, and the runtime make the allocated
    peak; the allocator's waste the rest of the reserved one."""
    for extra in ({}, {"amp_autocast": True}, {"recompute": True, "sharding": "zero3", "dp": 8},
                  {"recompute": "selective_op", "sharding": "zero2", "dp": 4}, {"sharding": "fsdp", "dp": 4, "pp": 2}):
        job = TrainingJob(model="qwen2.5-1.5b", gpu="H200", seq_len=2048, global_batch=16, micro_batch=2,
                          elementwise_kernels="eager", **extra)
        m = predict_training(job)["memory_gb"]
        states = m["weights"] + m["gradients"] + m["optimizer"]
        dynamic = m["activations"] + m["gathered_weights"] + m["unsharded_gradients"] + m["weight_casts"]
        assert m["allocated"] == pytest.approx(states + max(dynamic, m["optimizer_step_temporaries"]) + m["runtime"],
                                               rel=1e-9)
        assert m["reserved"] == pytest.approx(m["allocated"] + m["allocator_waste"], rel=1e-9)


def _small(ctx):
    return dataclasses.replace(ctx, hidden=128, ffn=352, heads=4, q_dim=128, kv_dim=64)


def test_an_fp32_grouped_query_attention_on_the_math_kernel_saves_what_the_model_counts():
    """Without padding transformers passes `enable_gqa`, which only flash attention takes, in 16-bit: fp32
    runs PyTorch's math kernel. It keeps the softmax (heads x length per token, fp32), and q, k and v with
    every query head, and no log-sum-exp; the model counts that per token at two lengths."""
    from problems.placement.model.memory import hf_layer_bytes_per_token

    ctx = _small(_ctx("fp32"))
    for seq in (SEQ, 2 * SEQ):
        measured = _layer_bytes(False, torch.float32, seq, math_kernel=True)
        per_token = float(hf_layer_bytes_per_token(ctx, np.array(1.0), True, True)) + 4.0 * ctx.heads * seq
        assert measured == pytest.approx(seq * per_token, rel=1e-9)


@pytest.mark.parametrize("precision,autocast,weights", [("bf16", True, torch.float32), ("fp32", False, torch.float32)])
def test_a_padded_micro_batch_saves_repeated_keys_and_the_mask_in_every_layer(precision, autocast, weights):
    """A padding mask: transformers repeats k and v to the query heads, and PyTorch converts the boolean
    mask to the query's dtype at every layer's call and keeps it for the backward (one row of the padded
    length per token); flash-type kernels keep their log-sum-exp. Autocast's bf16 casts of the layer's
    weights, one per forward (counted apart, `hf_step_extras`), are taken out of the two samples' bytes."""
    from problems.placement.model.memory import hf_layer_bytes_per_token

    ctx = _small(_ctx(precision, amp=True))
    for seq in (SEQ, 2 * SEQ):
        measured = _layer_bytes(autocast, weights, seq, padded=True) - (2 * LAYER_WEIGHTS // 2 if autocast else 0)
        per_token = float(hf_layer_bytes_per_token(ctx, np.array(1.0), True, False)) + ctx.bpe * seq
        assert measured == pytest.approx(seq * per_token, rel=1e-9)


def test_the_trainers_attention_path_follows_its_precision_and_padding():
    """`sdpa_paths`: a fixed-length training job runs unpadded (the math kernel in fp32 only); an RL
    workload's micro-batches of several samples of different lengths are padded, a one-sample one is not."""
    from problems.placement.model.memory import sdpa_paths

    mb = np.array([1, 4])
    padded, math = sdpa_paths(_ctx("fp32"), mb)
    assert not padded.any() and math.all()
    padded, math = sdpa_paths(_ctx("bf16"), mb)
    assert not padded.any() and not math.any()
    rl = dataclasses.replace(_ctx("bf16"), lengths_differ=True)
    padded, math = sdpa_paths(rl, mb)
    assert list(padded) == [False, True] and not math.any()
    padded, math = sdpa_paths(dataclasses.replace(rl, bpe=4), mb)
    assert list(padded) == [False, True] and list(math) == [True, False]
    # a framework's own kernels (no amp_autocast): neither
    padded, math = sdpa_paths(dataclasses.replace(rl, amp_autocast=False), mb)
    assert not padded.any() and not math.any()


def test_an_fp32_training_job_is_timed_and_sized_with_the_full_score_matrix():
    """The trainer's fp32 grouped-query attention runs PyTorch's math kernel: the same step and activations
    as Hugging Face's eager (unfused) attention, which keeps the same tensors in fp32 (q, k and v with every
    query head, the fp32 softmax), and the full score matrix (4 bytes x heads x length per token and layer)
    beyond what the flash attention of a framework's own kernels keeps."""
    base = dict(model="qwen2.5-1.5b", gpu="H200", precision="fp32", seq_len=2048, global_batch=2, micro_batch=2,
                elementwise_kernels="eager")
    math = predict_training(TrainingJob(amp_autocast=True, **base))
    eager = predict_training(TrainingJob(amp_autocast=True, attention="unfused", **base))
    assert math["step_s"] == pytest.approx(eager["step_s"], rel=1e-12)
    assert math["memory_gb"]["activations"] == pytest.approx(eager["memory_gb"]["activations"], rel=1e-12)
    flash = predict_training(TrainingJob(**base))
    ctx = _ctx("fp32", model="qwen2.5-1.5b")
    scores = 2 * 2048 * ctx.layers * 4.0 * ctx.heads * 2048 / 1e9  # GB, micro-batch 2
    assert math["memory_gb"]["activations"] - flash["memory_gb"]["activations"] > scores
    # and `predict` says so in one line
    assert sum("math kernel" in a for a in math["assumptions"]) == 1
    assert not any("math kernel" in a for a in flash["assumptions"] + eager["assumptions"])


def test_a_padded_training_job_adds_the_mask_and_the_repeated_keys_in_every_layer():
    """`padded`: the trainer's micro-batches of samples of different lengths, padded to seq_len. Each
    layer keeps k and v with every query head and a mask row of seq_len per token, in bf16 under autocast:
    layers x tokens x (2 bytes x 2 x (q_dim - kv_dim) + 2 bytes x seq_len) more activations."""
    base = dict(model="qwen2.5-1.5b", gpu="H200", seq_len=2048, global_batch=8, micro_batch=4,
                elementwise_kernels="eager", amp_autocast=True)
    plain = predict_training(TrainingJob(**base))["memory_gb"]["activations"]
    padded = predict_training(TrainingJob(padded=True, **base))["memory_gb"]["activations"]
    ctx = _ctx("bf16", model="qwen2.5-1.5b")
    extra = ctx.layers * 4 * 2048 * (2 * 2 * (ctx.q_dim - ctx.kv_dim) + 2 * 2048) / 1e9
    assert padded - plain == pytest.approx(extra, rel=1e-9)
    notes = predict_training(TrainingJob(padded=True, **base))["assumptions"]
    assert sum("padded micro-batches" in a for a in notes) == 1
    # a one-sample micro-batch is never padded
    one = dict(base, micro_batch=1)
    padded_one, plain_one = (predict_training(TrainingJob(**one, **kw))["memory_gb"] for kw in ({"padded": True}, {}))
    assert padded_one == plain_one


def test_an_rl_workloads_samples_differ_in_length_a_training_jobs_do_not():
    """`ModelContext.lengths_differ`, what `sdpa_paths` reads: true for an RL workload (its responses' mean is
    below their limit), false for a training job of seq_len-long sequences unless it says `padded`."""
    from problems.placement.model.params import build_context
    from problems.placement.predict import _job_context
    from problems.placement.specs import load_cluster, load_workload

    wl = load_workload("problems/workloads/qwen2.5-1.5b-grpo.yaml")
    assert wl.response_mean < wl.response_max
    assert build_context(load_cluster("problems/clusters/mixed-8.yaml"), wl).lengths_differ
    assert not _ctx("bf16").lengths_differ
    job = TrainingJob(model="qwen2.5-0.5b", gpu="H100", seq_len=SEQ, global_batch=2, micro_batch=2, padded=True)
    assert _job_context(job, None)[0].lengths_differ
