"""Rollout (generation) time by roofline, per engine and over unequal engines.

Sources (shared reference systems.md): decode is memory-bandwidth bound (each step reads the
weights and the KV cache of every running sequence), prefill is compute bound; roofline time =
max(ops / achieved FLOP/s, bytes / achieved bandwidth) (LLM-Viewer); per-GPU-type efficiencies
(achieved share of peak) are fitted from measured operator times (Vidur-style profiles).
Attention FLOPs per token and layer: 4 * q_dim * context (QK^T and AV, Narayanan et al.).
Tensor parallelism adds two all-reduces of the hidden state per layer (Megatron-LM).
A synchronous step ends when its longest sample ends: the max-length response needs
`response_max` sequential decode steps (the long tail).
"""

from __future__ import annotations

import numpy as np

from problems.placement.model.comm import ring_allreduce_s
from problems.placement.model.memory import kv_budget_bytes
from problems.placement.model.params import ModelContext
from problems.placement.model.reduce import pmax, pmin, psum


# ---------------------------------------------------------------- operator level (also validated)
def linear_op_s(tokens, k, n, tp, flops, hbm, prefill_eff, decode_eff, bpe=2):
    """One GEMM [tokens x k] @ [k x n/tp] on one GPU: roofline of FLOPs vs bytes moved."""
    n_shard = n / tp
    compute = 2.0 * tokens * k * n_shard / (flops * prefill_eff)
    traffic = (k * n_shard + tokens * (k + n_shard)) * bpe / (hbm * decode_eff)
    return np.maximum(compute, traffic)


def attn_decode_op_s(batch, kv_len, kv_heads, head_dim, heads, tp, flops, hbm, prefill_eff, decode_eff, bpe=2):
    """One layer's decode attention on one GPU: read the KV of every sequence (bandwidth bound)."""
    kv_bytes = 2.0 * batch * kv_len * (kv_heads / tp) * head_dim * bpe
    compute = 4.0 * batch * kv_len * (heads / tp) * head_dim / (flops * prefill_eff)
    return np.maximum(kv_bytes / (hbm * decode_eff), compute)


def attn_prefill_op_s(chunk, kv_len, kv_heads, head_dim, heads, tp, flops, hbm, prefill_eff, decode_eff, bpe=2):
    """One layer's causal prefill attention for `chunk` new tokens after `kv_len` cached ones."""
    ctx_mean = kv_len + chunk / 2.0
    compute = 4.0 * chunk * ctx_mean * (heads / tp) * head_dim / (flops * prefill_eff)
    kv_bytes = 2.0 * (kv_len + chunk) * (kv_heads / tp) * head_dim * bpe
    return np.maximum(compute, kv_bytes / (hbm * decode_eff))


# ---------------------------------------------------------------- engine level, (N, P) arrays
def attn_flops_per_token(ctx: ModelContext, context) -> np.ndarray:
    return 4.0 * ctx.layers * ctx.q_dim * context


def decode_step_s(ctx: ModelContext, rtp, batch, context):
    """One decode step of an engine of `rtp` GPUs running `batch` sequences of mean `context` tokens."""
    e = ctx.eff
    bw = rtp * ctx.hbm * e["decode_eff"]
    fl = rtp * ctx.flops * e["prefill_eff"]
    memory = (ctx.weight_bytes + batch * context * ctx.kv_bytes_per_token) / bw
    compute = batch * (2.0 * ctx.params + attn_flops_per_token(ctx, context)) / fl
    tp_comm = np.where(rtp > 1, 2 * ctx.layers * ring_allreduce_s(batch * ctx.hidden * ctx.bpe, rtp, ctx.intra,
                                                                   e["collective_latency_s"]), 0.0)
    return np.maximum(memory, compute) + tp_comm + e["decode_step_s"]


def rollout_times(ctx: ModelContext, f: dict) -> dict[str, np.ndarray]:
    """Rollout of one step's samples over all engines, load balanced by engine speed."""
    rtp = f["rollout_tp"]
    engines = (f["rollout_gpus"] + f["shared_gpus"]) // rtp  # (N, P)
    n_eng = np.maximum(psum(engines), 1)
    kv_frac, mns = f["kv_mem_frac"], f["max_num_seqs"]
    kv_tokens = kv_budget_bytes(ctx, rtp, kv_frac, mns) / ctx.kv_bytes_per_token
    footprint = ctx.prompt_len + ctx.resp_mean  # tokens a sequence holds near its end
    per_engine_share = np.ceil(ctx.samples / n_eng)[:, None]
    conc = np.minimum(np.minimum(mns[:, None], np.floor(kv_tokens / footprint)), per_engine_share)
    conc = np.maximum(conc, 1.0)
    mean_ctx = ctx.prompt_len + ctx.resp_mean / 2.0
    step = decode_step_s(ctx, rtp, conc, mean_ctx)
    dec_rate = np.where(engines > 0, engines * conc / step, 0.0)  # tokens/s per pool
    fl = rtp * ctx.flops * ctx.eff["prefill_eff"]
    pre_rate = np.where(engines > 0, engines * fl / (2.0 * ctx.params + attn_flops_per_token(ctx, ctx.prompt_len / 2.0)), 0.0)
    dec_total = np.maximum(psum(dec_rate), 1e-30)
    pre_total = np.maximum(psum(pre_rate), 1e-30)
    # balanced split: every engine finishes its share of tokens at the same time
    bulk = ctx.samples * (ctx.resp_mean / dec_total + ctx.prompt_len / pre_total)
    # the longest sample: response_max sequential steps at the engine's running batch; the
    # slowest engine that holds samples bounds the step (lengths are unknown when assigning)
    tail_ctx = ctx.prompt_len + ctx.resp_max / 2.0
    tail_step = decode_step_s(ctx, rtp, conc, tail_ctx)
    tail = pmax(np.where(engines > 0, ctx.resp_max * tail_step, 0.0))
    return {
        "rollout_engines": psum(engines),
        "rollout_bulk_s": bulk,
        "rollout_tail_s": tail,
        "rollout_s": np.maximum(bulk, tail),
        "decode_tokens_s": dec_total,
        "kv_tokens_min": pmin(np.where(engines > 0, kv_tokens, np.inf)),
        "concurrency": conc,
        "kv_tokens": kv_tokens,
        "engines": engines,
    }
