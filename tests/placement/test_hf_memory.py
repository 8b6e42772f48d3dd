"""The memory the model counts for this project's trainer (`amp_autocast`: Hugging Face modules under
PyTorch autocast, PyTorch's AdamW, an fp32 log-softmax + entropy loss) against the tensors PyTorch
really keeps: every tensor autograd saves for backward in a Qwen2 decoder layer, counted with
`saved_tensors_hooks` on the CPU (the same modules and autocast rules run on a GPU; an H200's peak
allocated memory agreed within 1% median, results/bench/gpu_train.md)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from problems.placement.predict import TrainingJob, predict_training

SEQ = 64


def _saved_bytes(layers: int, autocast: bool, hidden=128, ffn=352, heads=4, kv_heads=2, seq=SEQ,
                 dtype=torch.float32) -> int:
    """Bytes of the distinct tensors (not parameters) autograd saves in one forward of a Qwen2 model."""
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

    ids = torch.randint(0, 97, (1, seq))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            model(input_ids=ids)
    return sum(seen.values())


def _ctx(precision: str, amp: bool = True):
    from problems.placement.predict import _job_context

    job = TrainingJob(model="qwen2.5-0.5b", gpu="H100", precision=precision, seq_len=SEQ, global_batch=1,
                      elementwise_kernels="eager", amp_autocast=amp)
    ctx, _, _ = _job_context(job, None)
    return ctx


@pytest.mark.parametrize("precision,autocast,weights", [("bf16", True, torch.float32), ("fp32", False, torch.float32),
                                                      ("bf16", False, torch.bfloat16)])
def test_a_decoder_layer_saves_what_the_model_counts(precision, autocast, weights):
    """Autocast over fp32 weights (this project's trainer), fp32, and weights in bf16 (FSDP's mixed precision,
    as verl's and NeMo-RL's workers hold them)."""
    from problems.placement.model.memory import hf_layer_bytes_per_token

    # one layer's tensors: the model with two layers minus the model with one (the embedding, the final
    # norm and the head's input cancel); per token: at two lengths, less what does not grow with the
    # tokens (autocast's casts of the layer's weights, counted apart: `hf_step_extras`)
    layer = {n: _saved_bytes(2, autocast, seq=n, dtype=weights) - _saved_bytes(1, autocast, seq=n, dtype=weights)
             for n in (SEQ, 2 * SEQ)}
    measured = (layer[2 * SEQ] - layer[SEQ]) / SEQ
    casts = layer[SEQ] - measured * SEQ
    weights = 2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 352  # q, o; k, v; gate, up, down
    assert casts == pytest.approx(2 * weights if autocast else 0, abs=2 * (128 + 2 * 64))  # (+ q/k/v biases)
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
                  {"recompute": "selective_op", "sharding": "zero2", "dp": 4}):
        job = TrainingJob(model="qwen2.5-1.5b", gpu="H200", seq_len=2048, global_batch=16, micro_batch=2,
                          elementwise_kernels="eager", **extra)
        m = predict_training(job)["memory_gb"]
        states = m["weights"] + m["gradients"] + m["optimizer"]
        dynamic = m["activations"] + m["gathered_weights"] + m["weight_casts"]
        assert m["allocated"] == pytest.approx(states + max(dynamic, m["optimizer_step_temporaries"]) + m["runtime"],
                                               rel=1e-9)
        assert m["reserved"] == pytest.approx(m["allocated"] + m["allocator_waste"], rel=1e-9)
