"""Training time of one RL step: forward/backward passes, pipeline bubble, TP and DP communication.

Sources (shared reference systems.md):
- training FLOPs ~ 6 * params * tokens (forward 2, backward 4); full recomputation adds a forward;
  attention adds 4 * q_dim * context per token and layer per forward (Narayanan et al.:
  72*B*s*h^2*(1 + s/(6h) + ...)).
- RL adds forward-only passes: old log-probs of the actor (verl recomputes them each step), the
  frozen reference (KL term; PPO), and for PPO a critic trained like the actor plus its value pass.
- time = matmul FLOPs / (peak * mfu) + element-wise HBM traffic / (bandwidth * decode_eff) per GPU
  type: layer norms, dropout/residual adds and the MLP activation are memory bound; their bytes
  are counted from the layer's kernels (`layer_elementwise_bytes`: the tensors Korthikanti et al.
  2022 list as stored activations, written and read by each kernel);
  pipeline bubble: (m + p - 1) micro-batch slots for m
  micro-batches on p stages (GPipe/1F1B, Metis); TP: two all-reduces of the activations per layer
  per forward and two per backward (Megatron-LM).
- the step's samples are split over data-parallel replicas in proportion to replica speed, so
  unequal GPU types finish together (up to whole micro-batches).
"""

from __future__ import annotations

import numpy as np

from problems.placement.model.comm import dp_gradient_sync_s, ring_allreduce_s
from problems.placement.model.memory import SHARD_FSDP, SHARD_NONE, SHARD_Z3, state_bytes_per_param, stage_params
from problems.placement.model.params import ModelContext
from problems.placement.model.rollout import attn_flops_per_token
from problems.placement.model.reduce import over_region_pairs, pany, pmax, pmin, psum


def pass_counts(ctx: ModelContext, recompute):
    """(forward passes, backward passes) per sample and step, as multiples of one actor forward."""
    rec = recompute.astype(float)
    fwd = 1.0 + rec + 1.0 + ctx.has_reference  # actor fwd (+recompute) + old log-probs (+ reference)
    bwd = 1.0
    if ctx.has_critic:
        fwd = fwd + 1.0 + rec + 1.0  # critic fwd (+recompute) + value pass
        bwd = bwd + 1.0
    return fwd, bwd


def layer_fwd_flops(params_per_layer, q_dim, seq, seqs, attn_context):
    """FLOPs of one transformer layer's forward for `seqs` sequences of `seq` tokens: 2 per weight
    per token, plus attention over `attn_context` keys per token (seq/2 causal with flash
    attention; seq where the kernel computes the full score matrix). Validated against profiles."""
    return seqs * seq * (2.0 * params_per_layer + 4.0 * q_dim * attn_context)


def layer_elementwise_bytes(tokens, hidden, ffn_shard, bpe, gated=True, score_elems=0.0, fused_softmax=True):
    """HBM bytes of the memory-bound kernels of one transformer layer (Megatron layout, no sequence
    parallelism), as (forward, backward). `tokens` = seqs * seq; `ffn_shard` = MLP width / tp;
    `score_elems` = seqs * heads/tp * seq^2 for attention that materialises the score matrix
    (unfused kernels), 0 for flash attention. Dropout masks are 1 byte per element.
    Per hidden element, forward: two layer norms (read, write) and two bias-dropout-residual adds
    (read branch, read residual, write, mask); backward: layer-norm grads (read x, dy, write dx),
    dropout grads (read dy, mask, write) and the residual-gradient sums (read 2, write 1).
    MLP activation: GeLU reads and writes ffn (backward reads x, dy, writes dx); SwiGLU reads gate
    and up, writes one (backward reads three, writes two).
    Scores, fused softmax: QK^T writes, softmax reads and writes, dropout reads, writes and a mask,
    AV reads; backward: AV grads read P and write dP, dropout, softmax (read P, dP, write), QK^T
    grads read dS twice. Unfused (fp32) softmax adds a scale and a mask-fill pass each way."""
    fwd_h = hidden * (10.0 * bpe + 2.0)
    bwd_h = hidden * (16.0 * bpe + 2.0)
    fwd_f = ffn_shard * (3.0 if gated else 2.0) * bpe
    bwd_f = ffn_shard * (5.0 if gated else 3.0) * bpe
    fwd_s = np.where(fused_softmax, 6.0 * bpe + 1.0, 10.0 * bpe + 2.0)
    bwd_s = np.where(fused_softmax, 9.0 * bpe + 1.0, 13.0 * bpe + 2.0)
    fwd = tokens * (fwd_h + fwd_f) + score_elems * fwd_s
    bwd = tokens * (bwd_h + bwd_f) + score_elems * bwd_s
    return fwd, bwd


def replica_speed(ctx: ModelContext, tp, pp) -> np.ndarray:
    """(N, P) training FLOP/s of one data-parallel replica (tp * pp GPUs) in each pool: the weight of
    the pool's replicas when the step's samples are split (the trainer splits by the same numbers,
    carried in the plan as `PoolRoles.train_speed`)."""
    g = np.asarray(tp) * np.asarray(pp)
    return g[:, None] * ctx.flops * ctx.eff["mfu"]


def replica_shares(ctx: ModelContext, f: dict) -> np.ndarray:
    """(N, P) samples per replica of each pool: the step's samples in proportion to replica speed."""
    reps = (f["train_gpus"] + f["shared_gpus"]) // (f["tp"] * f["pp"])[:, None]
    speed = replica_speed(ctx, f["tp"], f["pp"])
    total = np.maximum(psum(reps * speed), 1e-30)
    return np.where(reps > 0, ctx.samples * speed / total[:, None], 0.0)


def train_times(ctx: ModelContext, f: dict, chunks) -> dict[str, np.ndarray]:
    e = ctx.eff
    tp, pp, mb = f["tp"], f["pp"], f["micro_batch"]
    g = tp * pp
    gpus = f["train_gpus"] + f["shared_gpus"]  # (N, P)
    reps = gpus // g[:, None]
    dp = psum(reps)
    tok = ctx.prompt_len + ctx.resp_mean
    fwd_tok = 2.0 * ctx.params + attn_flops_per_token(ctx, tok / 2.0)  # FLOPs per token, one forward
    n_fwd, n_bwd = pass_counts(ctx, f["recompute"])
    flops_sample = tok * fwd_tok * (n_fwd + 2.0 * n_bwd) * np.ones(len(tp))
    share = replica_shares(ctx, f)  # samples per replica
    # micro-batches per replica and chunk; a chunk's partial micro-batch still costs a slot
    per_chunk = share / chunks[:, None]
    m = np.ceil(per_chunk / mb[:, None])
    mb_eff = np.minimum(mb[:, None], np.maximum(per_chunk, 1.0))
    # per-stage compute of one micro-batch: its FLOPs over the stage's tp GPUs
    slot = mb_eff * flops_sample[:, None] / (pp[:, None] * tp[:, None] * ctx.flops * e["mfu"])
    # element-wise kernels (flash attention: no score matrix), streamed through HBM per stage
    ew_f, ew_b = layer_elementwise_bytes(tok, ctx.hidden, ctx.ffn / tp, ctx.bpe)
    ew_sample = n_fwd * ew_f + n_bwd * ew_b  # (N,) bytes per sample and layer
    layers_stage = np.ceil(ctx.layers / pp)
    slot = slot + mb_eff * (ew_sample * layers_stage)[:, None] / (ctx.hbm * e["decode_eff"])
    n_ar = 2.0 * (n_fwd + n_bwd)  # activation all-reduces per layer and micro-batch
    act_bytes = mb_eff * tok * ctx.hidden * ctx.bpe
    tp_comm = np.where(tp[:, None] > 1, (n_ar * layers_stage)[:, None]
                       * ring_allreduce_s(act_bytes, tp[:, None], ctx.intra, e["collective_latency_s"]), 0.0)
    # pipeline p2p: activations forward and gradients back at each stage boundary
    spans = g[:, None] > ctx.gpn
    p2p_bw = np.where(spans, ctx.inter / ctx.gpn, ctx.intra)
    p2p = np.where(pp[:, None] > 1, 2.0 * act_bytes / tp[:, None] / p2p_bw, 0.0)
    slot = slot + tp_comm + p2p + e["microbatch_s"]
    per_pool = np.where(reps > 0, chunks[:, None] * (m + pp[:, None] - 1) * slot, 0.0)
    compute = pmax(per_pool)

    # gradient synchronisation over all replicas (actor, + critic for PPO)
    w_b, g_b, o_b = state_bytes_per_param(ctx.bpe)
    models = 1.0 + ctx.has_critic
    grad_bytes = ctx.params * g_b * models
    nodes = psum(np.ceil(gpus / ctx.gpn))
    used = gpus > 0
    intra_min = pmin(np.where(used, ctx.intra, np.inf))
    inter_min = pmin(np.where(used, ctx.inter, np.inf))
    regions = _regions_used(ctx, used)
    cross_bw = _slowest_cross(ctx, used)
    zero3 = (f["sharding"] == SHARD_Z3) | (f["sharding"] == SHARD_FSDP)
    lat = e["collective_latency_s"].max()
    dp_sync = dp_gradient_sync_s(grad_bytes, dp, g, nodes, intra_min, inter_min, cross_bw, regions, zero3, lat)
    # optimizer step: on GPU, streams the shard's Adam state through HBM (read + write);
    # offloaded, gradients go down and weights come up over the host link and CPU Adam runs
    psh = stage_params(ctx, pp) / tp
    o_div = np.where(f["sharding"] == SHARD_NONE, 1.0, np.maximum(dp, 1))
    shard = psh / o_div * models
    hbm_min = pmin(np.where(used, ctx.hbm * e["decode_eff"], np.inf))
    host = pmin(np.where(used, e["host_gbs"] * 1e9, np.inf))
    cpu = pmin(np.where(used, e["cpu_adam_gbs"] * 1e9, np.inf))
    on_gpu = shard * 2.0 * (w_b + g_b + o_b) / hbm_min
    off = shard * (g_b + w_b) / host + shard * 2.0 * o_b / cpu
    opt = np.where(f["optimizer_offload"].astype(bool), off, on_gpu)
    return {
        "train_compute_s": compute,
        "dp_sync_s": dp_sync,
        "optimizer_s": opt,
        "train_s": compute + dp_sync + opt,
        "dp": dp,
        "micro_batches": m,
        "train_flops": flops_sample * ctx.samples,
        "dp_cross_region_bytes": np.where((regions > 1) & (dp > 1), 2.0 * (regions - 1) * grad_bytes, 0.0),
        "train_regions": regions,
    }


def _regions_used(ctx: ModelContext, used) -> np.ndarray:
    n = np.zeros(used.shape[0])
    for r in np.unique(ctx.region):
        n += pany(used & (ctx.region == r))
    return n


def _slowest_cross(ctx: ModelContext, used) -> np.ndarray:
    """Slowest link between any two regions the plan trains in (inf when one region)."""
    return over_region_pairs(ctx.region, used, ctx.region_bw, np.minimum, np.inf)
