"""Rollout (generation) time by roofline, integrated over the response-length distribution.

Sources (shared reference systems.md): decode is memory-bandwidth bound (each step reads the
weights and the KV cache of every running sequence), prefill is compute bound; roofline time =
max(ops / achieved FLOP/s, bytes / achieved bandwidth) (LLM-Viewer); per-GPU-type efficiencies
(achieved share of peak) are fitted from measured operator times (Vidur-style profiles).
Attention FLOPs per token and layer: 4 * q_dim * context (QK^T and AV, Narayanan et al.).
Tensor parallelism adds two all-reduces of the hidden state per layer (Megatron-LM).

An engine (vLLM's continuous batching, V1 scheduler) holds up to `max_num_seqs` sequences, fewer when
its KV cache cannot hold them; it admits a queued sequence as soon as a slot frees, and preempts
(recomputes later) sequences whose KV blocks run out. Its share of a step's samples runs as
- a bulk: while sequences wait, the running batch stays full, at the steady mix of ages (the mean
  age of a renewal process, E[L^2] / 2E[L]);
- a drain: the last cohort (all the share when it fits at once, as in most RL steps) decodes one
  token per step, its batch shrinking as responses end (`lengths.Lengths`: the survival of the
  length distribution), until its longest response ends: the tail a synchronous step waits for,
  where each step costs about one read of the weights however few sequences remain.
Prefill runs once per prompt group (prefix caching: a group's samples share the prompt, vLLM's
default) in chunks of `ENGINE_BATCHED_TOKENS`, each chunk at least one read of the weights;
preempted sequences prefill again what they had.
An asynchronous rollout keeps the batch full across steps: its generation time is the bulk rate
over all the step's tokens (`rollout_bulk_s`); `rollout_tail_s` is what a synchronous drain adds.
"""

from __future__ import annotations

import numpy as np

from problems.placement.model.memory import ENGINE_BATCHED_TOKENS, kv_budget_bytes
from problems.placement.model.params import ModelContext
from problems.placement.model.reduce import pmax, pmin, psum

# kernels of one decode step per layer whose floor the operator fit measured (mosearch/bench/model_validation.py:
# the q/k/v, output, MLP up and down projections and attention)
DECODE_KERNELS_PER_LAYER = 5
# HBM bytes per vocabulary entry the sampler moves for each running sequence and step, read off vLLM V1's
# sampler (v1/sample/sampler.py) at RL's sampling settings (top-k and top-p off, temperature set): the LM
# head writes the bf16 logits (2) and the sampler reads them (2), casts to fp32 (write 4), divides by the
# temperature in place (read and write 8), takes the softmax (8), draws exponential noise (write 4),
# divides the probabilities by it (read 8, write 4) and takes the argmax (read 4)
SAMPLER_BYTES_PER_VOCAB = 44.0


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
UNIT_COSTS = ("weights", "kv_read", "flop_seq", "flop_kv")  # ModelContext.unit_costs


class EngineCosts:
    """Per pool (arrays broadcasting to (N, P)): seconds of one decode step of an engine of `rtp` GPUs as
    step(b, kv) = max(weights + kv * kv_read, b * flop_seq + kv * flop_kv) + fixed + b * per_seq
    for b running sequences holding kv KV tokens in all. `per_seq` is what each running sequence adds to a
    step beyond the matmuls: its share of the TP all-reduces, the sampler's passes over its logits, and the
    engine's host work for it (`decode_seq_s`); `fixed` holds the all-reduce latencies, the kernels' floors,
    a fixed host cost per step and, for an engine run eagerly (no CUDA graphs), the launch cost per layer."""

    def __init__(self, ctx: ModelContext, rtp):
        e = ctx.eff
        r = np.asarray(rtp, dtype=float)
        u = ctx.unit_costs
        self.weights, self.kv_read, self.flop_seq, self.flop_kv = (u[k] / r for k in UNIT_COSTS)
        self._moe = ctx if ctx.moe else None
        if ctx.moe:  # the routed experts a step reads depend on its batch (model/moe.py decode_weight_s)
            self.expert_w = u["expert_weights"] / r
        if not ctx.kv_tp_split:  # MLA: every TP rank reads the whole latent cache
            self.kv_read = u["kv_read"] * np.ones_like(r)
        # two all-reduces of each sequence's hidden state per layer: the bytes of a ring, and per all-reduce
        # two latencies (a decode step's messages are small: one-shot all-reduces, vLLM's custom all-reduce
        # or NCCL's low-latency protocol, write to the peers and read theirs, whatever the TP degree)
        tp = r > 1
        self.comm_seq = np.where(tp, 2 * ctx.layers * 2.0 * (r - 1) / r * ctx.hidden * ctx.bpe / ctx.intra, 0.0)
        # every TP rank samples the whole vocabulary (vLLM gathers the logits, then each rank samples)
        sampler = ctx.vocab * SAMPLER_BYTES_PER_VOCAB / (ctx.hbm * e["decode_eff"])
        self.per_seq = self.comm_seq + sampler + e["decode_seq_s"]
        self.fixed = (np.where(tp, 2 * ctx.layers * 2.0 * e["collective_latency_s"], 0.0) + e["decode_step_s"]
                      + ctx.layers * (DECODE_KERNELS_PER_LAYER * e["kernel_s"] + e["decode_layer_s"]))

    def weights_for(self, b):
        """Seconds to read the weights a step of `b` sequences uses (a mixture of experts: the experts its
        tokens route to)."""
        if self._moe is None:
            return self.weights
        from problems.placement.model.moe import expected_distinct_experts

        return self.weights + self.expert_w * expected_distinct_experts(self._moe, b)

    def step(self, b, kv):
        return np.maximum(self.weights_for(b) + kv * self.kv_read, b * self.flop_seq + kv * self.flop_kv) \
            + self.fixed + b * self.per_seq

    def prefill(self, tokens, context):
        """Prefill of `tokens` new tokens attending to `context` earlier ones on average, in chunks."""
        compute = tokens * (self.flop_seq + context * self.flop_kv)
        return np.maximum(compute, np.ceil(tokens / ENGINE_BATCHED_TOKENS) * self.weights_for(ENGINE_BATCHED_TOKENS))


def fixed_batch_s(ctx: ModelContext, rtp: int, batch: int, prompt: int, output: int, pool: int = 0) -> float:
    """One engine generating `output` tokens for each of `batch` sequences of `prompt` tokens at once (the
    fixed-length benchmarks of inference engines: every response runs to the limit): the prompts'
    prefill, then one decode step per output token at the full batch, the KV cache growing."""
    c = EngineCosts(ctx, np.array([rtp]))
    pick = lambda v: float(np.asarray(v).ravel()[pool] if np.ndim(v) else v)  # noqa: E731
    w, kvr, fs, fk, fx, cs = (pick(x) for x in (c.weights_for(batch), c.kv_read, c.flop_seq, c.flop_kv, c.fixed,
                                                c.per_seq))
    s = np.arange(output, dtype=float)
    kv = batch * (prompt + s)
    decode = np.maximum(w + kv * kvr, batch * fs + kv * fk) + fx + batch * cs
    pre = max(batch * prompt * (fs + prompt / 2.0 * fk),
              np.ceil(batch * prompt / ENGINE_BATCHED_TOKENS) * pick(c.weights_for(ENGINE_BATCHED_TOKENS)))
    return float(pre + decode.sum())


def decode_step_s(ctx: ModelContext, rtp, batch, context):
    """One decode step of an engine of `rtp` GPUs running `batch` sequences of mean `context` tokens."""
    return EngineCosts(ctx, rtp).step(batch, batch * context)


def rollout_times(ctx: ModelContext, f: dict) -> dict[str, np.ndarray]:
    """Rollout of one step's samples over all engines, shares balanced by engine speed."""
    L = ctx.lengths
    rtp = f["rollout_tp"]
    engines = (f["rollout_gpus"] + f["shared_gpus"]) // rtp  # (N, P)
    has = engines > 0
    mns = f["max_num_seqs"][:, None].astype(float)
    kv_tokens = kv_budget_bytes(ctx, rtp, f["kv_mem_frac"], f["max_num_seqs"]) / ctx.kv_bytes_per_token
    if not ctx.kv_tp_split:  # MLA: each TP rank caches every token's latent, so the engine holds one GPU's worth
        kv_tokens = kv_tokens / rtp
    p = float(ctx.prompt_len)
    c = EngineCosts(ctx, rtp)
    # steady continuous batching: as many sequences as the slots and the KV cache hold, at the mean age
    ctx_ss = p + L.mean_age
    full = np.maximum(np.minimum(mns, np.floor(kv_tokens / ctx_ss)), 1.0)
    # engines on devices without memory of their own (CPU devices: one host) share its cores and memory
    # bandwidth: vLLM's CPU engine binds its threads to every core of the host it is given, so k engines on
    # one host each run at 1/k of what one engine alone (what a profile measures) does
    host_share = np.where(ctx.host_memory, np.maximum(np.minimum(engines, ctx.gpn // rtp), 1), 1).astype(float)
    t_full = c.step(full, full * ctx_ss) * host_share
    # each engine's share of the samples, in proportion to its steady token rate (all finish together)
    rate = np.where(has, full / t_full, 0.0)
    share = ctx.samples * rate / np.maximum(psum(engines * rate), 1e-30)[:, None]
    # the drain cohort: the share if it fits at once (slots, and KV at the cohort's peak), else a full batch
    fits = np.floor(kv_tokens / max(L.kv_peak(p), ctx_ss))
    m = np.maximum(np.minimum(np.minimum(share, full), fits), np.minimum(share, 1.0))
    # vLLM admits while the prompts' blocks are free and preempts at the KV peak: those prefill again
    admitted = np.minimum(np.minimum(share, mns), np.floor(kv_tokens / p))
    preempted = np.maximum(admitted - m, 0.0)
    prefill = c.prefill(share * p / ctx.group + preempted * (p + L.mean_age), p / 2.0)
    bulk = np.maximum(share - m, 0.0) * L.mean / full * t_full
    # drain: per length segment, the cohort's alive sequence-steps and KV tokens read, up to its longest;
    # every roofline term scales with 1/rtp, so the segments' per-pool factors are formed once
    end = L.longest_of(m)
    lo, seg = L.edges[:-1, None], L.steps[:, None]
    kv_seg = (p * L.alive + L.second)[:, None]  # KV tokens read per cohort sequence in each segment (K, 1)
    alive = L.alive[:, None]
    r = np.asarray(rtp, dtype=float)
    u = ctx.unit_costs
    drain = np.empty_like(m)
    for j in range(m.shape[1]):  # (K, N) per pool: numpy sums a short leading axis fast, a trailing one slowly
        steps = np.minimum(np.maximum(end[:, j] - lo, 0.0), seg)
        mj = m[:, j]
        mem = steps * u["weights"][j] + mj * (u["kv_read"][j] * kv_seg * (1.0 if ctx.kv_tp_split else r[:, j]))
        if ctx.moe:  # the experts the cohort's alive sequences route to, segment by segment
            from problems.placement.model.moe import expected_distinct_experts

            mem = mem + steps * u["expert_weights"][j] * expected_distinct_experts(ctx, mj[None, :] * alive)
        comp = mj * (u["flop_seq"][j] * alive + u["flop_kv"][j] * kv_seg)
        drain[:, j] = np.maximum(mem, comp).sum(axis=0) / r[:, j] + np.asarray(c.fixed)[..., j] * steps.sum(axis=0)
    drain = (drain + np.asarray(c.per_seq) * m * L.mean) * host_share
    prefill = prefill * host_share
    sync = np.where(has, prefill + bulk + drain, 0.0)
    steady = np.where(has, prefill + share * L.mean / full * t_full, 0.0)
    rollout_s, bulk_s = pmax(sync), pmax(steady)
    return {
        "rollout_engines": psum(engines),
        "rollout_bulk_s": bulk_s,
        "rollout_tail_s": np.maximum(rollout_s - bulk_s, 0.0),
        "rollout_s": rollout_s,
        "decode_tokens_s": psum(engines * rate),
        "kv_tokens_min": pmin(np.where(has, kv_tokens, np.inf)),
        "concurrency": full,
        "kv_tokens": kv_tokens,
        "engines": engines,
        "preempted": psum(engines * preempted),
    }
