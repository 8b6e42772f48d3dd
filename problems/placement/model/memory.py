"""Memory per GPU: model states by sharding, activations, KV cache, runtime and allocator overhead.

Sources (shared reference systems.md):
- mixed-precision Adam = 16 bytes/param (2 weights + 2 grads + 12 fp32 master, m, v), divided
  across data-parallel ranks by ZeRO stage (Rajbhandari et al., ZeRO); in fp32 training the same 16
  (4 weights + 4 grads + 8 moments).
- activations per layer (Korthikanti et al. 2022): s*b*h*(10 + 24/t + 5*a*s/(h*t)) bytes with TP t;
  flash attention never materialises the a*s*s score tensors, so the 5as/(ht) term is dropped
  (kept for unfused attention);
  with full recomputation only the layer input, 2*s*b*h, is kept (plus one layer re-materialised).
- KV cache bytes = 2 * layers * kv_heads * head_dim * tokens * bytes_per_elem.
All arrays are (N, P): plans x pools.
"""

from __future__ import annotations

import numpy as np

from problems.placement.model.params import ModelContext

# vLLM profiles activations with one batch of max_num_batched_tokens (chunked prefill budget);
# 2048 is its long-standing default for chunked prefill (assumed)
ENGINE_BATCHED_TOKENS = 2048
SHARD_NONE, SHARD_Z1, SHARD_Z2, SHARD_Z3, SHARD_FSDP = range(5)


def state_bytes_per_param(bpe: int) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per parameter for Adam; they sum to 16."""
    if bpe == 2:
        return 2.0, 2.0, 12.0  # bf16/fp16 weights and grads; fp32 master + m + v
    return 4.0, 4.0, 8.0  # fp32 weights and grads; m + v


def stage_params(ctx: ModelContext, pp: np.ndarray) -> np.ndarray:
    """Parameters on the most loaded pipeline stage: its share of layers plus one embedding matrix."""
    layers = np.ceil(ctx.layers / pp) if ctx.stage_layers is None else float(ctx.stage_layers.max())
    embed = np.where(pp > 1, ctx.vocab * ctx.hidden, ctx.embedding_params)
    return layers * ctx.params_per_layer + embed + ctx.hidden


def model_state_bytes(ctx: ModelContext, tp, pp, dp, sharding, offload) -> np.ndarray:
    """Weights, gradients and optimizer of the actor (+ critic for PPO, + frozen reference) per GPU."""
    w, g, o = state_bytes_per_param(ctx.bpe)
    psh = stage_params(ctx, pp) / tp
    dpf = np.maximum(dp, 1).astype(float)
    z3 = (sharding == SHARD_Z3) | (sharding == SHARD_FSDP)
    w_div = np.where(z3, dpf, 1.0)
    g_div = np.where(z3 | (sharding == SHARD_Z2), dpf, 1.0)
    o_div = np.where(sharding == SHARD_NONE, 1.0, dpf)
    opt = np.where(offload.astype(bool), 0.0, o / o_div)
    trained = psh * (w / w_div + g / g_div + opt)
    copies = 1.0 + ctx.has_critic
    ref = ctx.has_reference * psh * w / w_div
    return trained * copies + ref


def activation_bytes(ctx: ModelContext, tp, pp, mb, recompute, n_micro) -> np.ndarray:
    """Activations held at the peak of a 1F1B schedule on the first stage, plus the loss logits."""
    s = ctx.prompt_len + ctx.resp_max  # the longest sample sets the peak
    scale = ctx.bpe / 2  # Korthikanti's coefficients count 16-bit elements
    sbh = s * mb * ctx.hidden
    # unfused attention also keeps the scores, softmax output and dropout mask: 5as/(ht) per element
    scores = 0.0 if ctx.flash else 5 * ctx.heads * s / (ctx.hidden * tp)
    per_layer_full = sbh * (10 + 24 / tp + scores) * scale
    per_layer_kept = np.where(recompute.astype(bool), 2 * sbh * scale, per_layer_full)
    n = np.maximum(n_micro, 1)
    if ctx.stage_layers is None:
        layers = np.ceil(ctx.layers / pp)
        kept = layers * np.minimum(pp, n)  # 1F1B keeps pp micro-batches on stage 1
    else:  # stage i keeps pp - i micro-batches in flight; the peak is the stage with most layers x that
        k = len(ctx.stage_layers)
        kept = np.max(np.stack([ctx.stage_layers[i] * np.minimum(k - i, n) for i in range(k)]), axis=0)
    acts = kept * per_layer_kept + np.where(recompute.astype(bool), per_layer_full, 0)
    # logits of one micro-batch in the working precision plus fp32 for the softmax/loss
    logits = s * mb * ctx.vocab / tp * (ctx.bpe + 4)
    return acts + logits


def rollout_fixed_bytes(ctx: ModelContext, rtp, max_num_seqs) -> np.ndarray:
    """Per GPU of an engine: its weight shard and the activation/sampling workspace vLLM reserves."""
    weights = ctx.weight_bytes / rtp
    h, f, q = ctx.hidden, ctx.ffn, ctx.q_dim
    act = ENGINE_BATCHED_TOKENS * (2 * h + (2 * f + 3 * q) / rtp) * ctx.bpe
    sampling = max_num_seqs * ctx.vocab * 4 / rtp  # fp32 logits per running sequence
    return weights + act + sampling


def kv_budget_bytes(ctx: ModelContext, rtp, kv_frac, max_num_seqs) -> np.ndarray:
    """KV-cache bytes per engine: what is left of kv_frac of each GPU after weights and workspace."""
    per_gpu = kv_frac[:, None] * ctx.mem - ctx.eff["runtime_gb"] * 1e9 - rollout_fixed_bytes(ctx, rtp, max_num_seqs[:, None])
    return np.maximum(per_gpu, 0.0) * rtp


def train_peak_bytes(states, acts, ctx: ModelContext) -> tuple[np.ndarray, np.ndarray]:
    """(allocated peak, caching-allocator estimate) per training GPU, runtime included."""
    runtime = ctx.eff["runtime_gb"] * 1e9
    allocated = states + acts + runtime
    reserved = states + acts * (1 + ctx.eff["alloc_waste"]) + runtime
    return allocated, reserved
