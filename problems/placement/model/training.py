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
- the step's samples are split over data-parallel replicas in proportion to replica speed (what
  mosearch's trainer does with a plan's `train_speed`, so unequal GPUs finish together); a plain
  training job (`predict`) splits evenly (global batch / dp each: Megatron-LM, DeepSpeed, verl), so
  the slowest replica sets the time (`ModelContext.even_split`).
- pipeline of m micro-batches over stages with times t_i: sum(t_i) + (m - 1) max(t_i) (Metis); the
  LM head runs on the last stage; an explicit layout may give uneven layers and a GPU type per stage.
"""

from __future__ import annotations

import numpy as np

from problems.placement.model.comm import (dp_gradient_sync_s, dp_ring_bw, fsdp_collectives, fsdp_traffic_s,
                                           ring_allreduce_s, tp_collectives)
from problems.placement.model.memory import (SHARD_NONE, eager_layers, keeps_scores, params_per_gpu, params_sharded,
                                             selective_op_split, state_bytes_per_param)
from problems.placement.model.params import ModelContext
from problems.placement.model.reduce import over_region_pairs, pany, pargmax, pmax, pmin, psum


# HBM bytes per vocabulary entry and token that each forward through the LM head moves after its matmul, and
# each backward: the bf16 logits written (2); forward, read off verl's log-prob path (verl/utils/torch_functional:
# temperature division in place (4), the fused cross-entropy's read (2), the entropy's softmax (4), logsumexp (2),
# probability-times-logit product (6) and sum (2)) and PyTorch's cross-entropy of a plain training job (fp32 upcast
# 6, log-softmax 8, gather) alike at about 22; backward: the fused cross-entropy's gradient (read 2, write 2) and
# the temperature's (read 2, write 2), 8
LOGIT_BYTES_FWD = 22.0
LOGIT_BYTES_BWD = 8.0

# HBM bytes per parameter of an optimizer step on the GPU. Fused Adam (Megatron, DeepSpeed, torchtitan's
# default, one kernel): reads weight, gradient and both moments and writes three of them, 2 x (w + g + o) of
# `state_bytes_per_param`. PyTorch's AdamW with its default multi-tensor ("foreach") implementation, as this
# project's trainer builds it (`amp_autocast` jobs), runs eight passes over fp32 tensors (weight decay,
# lerp, two on the second moment, its square root into a temporary, the bias correction, eps, addcdiv): 84
# bytes read and written per parameter, counted from the aten operations it dispatches
# (tests/placement/test_optimizer_traffic.py); the gradient clipping before it (clip_grad_norm_: a norm over
# every gradient, then a scale) adds 12.
ADAMW_FOREACH_BYTES = 84.0
GRAD_CLIP_BYTES = 12.0


def forward_only_passes(ctx: ModelContext) -> float:
    """Forward-only passes over the batch per step: the old log-probs where the executor recomputes them, the
    reference, the critic's values; none in a plain training job."""
    if not ctx.rl_passes:
        return 0.0
    return float(ctx.steps.old_logprob_pass) + float(ctx.has_reference) + float(ctx.has_critic)


def pass_counts(ctx: ModelContext, recompute):
    """(forward passes, backward passes) per sample and step, as multiples of one actor forward."""
    rec = recompute.astype(float)
    # actor fwd (+recompute), the forward-only passes, and the critic's training fwd (+recompute) and backward
    critic = float(ctx.rl_passes and ctx.has_critic)
    return 1.0 + rec + forward_only_passes(ctx) + critic * (1.0 + rec), 1.0 + critic


def layer_fwd_flops(params_per_layer, q_dim, seq, seqs, attn_context):
    """FLOPs of one transformer layer's forward for `seqs` sequences of `seq` tokens: 2 per weight
    per token, plus attention over `attn_context` keys per token (seq/2 causal with flash
    attention; seq where the kernel computes the full score matrix). Validated against profiles."""
    return seqs * seq * (2.0 * params_per_layer + 4.0 * q_dim * attn_context)


def layer_elementwise_bytes(tokens, hidden, ffn_shard, bpe, gated=True, score_elems=0.0, fused_softmax=True,
                            sp=1.0):
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
    grads read dS twice. Unfused (fp32) softmax adds a scale and a mask-fill pass each way.
    `sp`: the TP degree under sequence parallelism (Korthikanti et al. 2022, section 4.2.2: layer
    norms, dropout and residual adds run on 1/t of the tokens), 1 without it."""
    fwd_h = hidden * (10.0 * bpe + 2.0) / sp
    bwd_h = hidden * (16.0 * bpe + 2.0) / sp
    fwd_f = ffn_shard * (3.0 if gated else 2.0) * bpe
    bwd_f = ffn_shard * (5.0 if gated else 3.0) * bpe
    fwd_s = np.where(fused_softmax, 6.0 * bpe + 1.0, 10.0 * bpe + 2.0)
    bwd_s = np.where(fused_softmax, 9.0 * bpe + 1.0, 13.0 * bpe + 2.0)
    fwd = tokens * (fwd_h + fwd_f) + score_elems * fwd_s
    bwd = tokens * (bwd_h + bwd_f) + score_elems * bwd_s
    return fwd, bwd


def eager_elementwise_bytes(hidden, qk_shard, ffn_shard, bpe, gated=True, sp=1.0, norm=True, rope=True, act=True):
    """HBM bytes per token of one transformer layer that PyTorch eager modules move beyond the fused kernels
    `layer_elementwise_bytes` counts, as (forward, backward). Read off the modules as Hugging Face's Llama /
    Qwen2 layers (transformers' LlamaRMSNorm, apply_rotary_pos_emb with rotate_half, LlamaMLP; what verl's
    FSDP workers run, verl f252da3 with use_liger and use_fused_kernels off) and torchtitan's eager Llama
    (torchtitan eaea6f6 models/norms.py RMSNorm, models/llama/model.py apply_rotary_emb and FeedForward) write them:
    - RMSNorm, per hidden element: cast to fp32 (read bpe, write 4), square (read 4, write 4), mean (read 4),
      scale by the reciprocal root (read 4, write 4), cast back (read 4, write bpe), times the weight (read and
      write bpe): 28 + 4 bpe where a fused kernel reads and writes once (2 bpe); its backward through the same
      chain (the weight's product, the casts, the scale and its reduction, the square, the two gradient paths'
      sum) about 44 + 6 bpe where a fused kernel reads x and dy and writes dx (3 bpe); two per layer, on 1/tp
      of the tokens under sequence parallelism (`sp`).
    - RoPE, per query and key element: Hugging Face's rotate_half (negate half, concatenate), two products and
      a sum (10 bpe), torchtitan's complex product with fp32 casts (16 + 2 bpe, the same at bpe 2); about as
      much again backward; a fused kernel reads and writes once each way (2 bpe): 8 bpe more each way.
    - SwiGLU's activation, per MLP element: SiLU (read, write) and the product with the up projection (read 2,
      write 1), 5 bpe where a fused kernel takes 3; backward the product's two gradients (read 2, write 1 each)
      and SiLU's (read 2, write 1), 9 bpe where a fused kernel takes 5. A plain (GeLU) MLP's activation is one
      kernel either way.
    `norm`, `rope`, `act`: which of them run eagerly (torchtitan's fused_rmsnorm keeps the norms fused;
    Megatron-core fuses RoPE only with apply_rope_fusion and the activation only with bias_activation_fusion,
    both off by default: megatron/core/transformer/transformer_config.py)."""
    nf = float(norm) * 2.0 * (28.0 + 2.0 * bpe) * hidden / sp
    nb = float(norm) * 2.0 * (44.0 + 3.0 * bpe) * hidden / sp
    rp = float(rope) * 8.0 * bpe * qk_shard
    act_f = float(act) * float(gated) * 2.0 * bpe * ffn_shard
    act_b = float(act) * float(gated) * 4.0 * bpe * ffn_shard
    return nf + rp + act_f, nb + rp + act_b


def replica_speed(ctx: ModelContext, tp, pp) -> np.ndarray:
    """(N, P) training FLOP/s of one data-parallel replica (tp * pp GPUs) in each pool: the weight of
    the pool's replicas when the step's samples are split (the trainer splits by the same numbers,
    carried in the plan as `PoolRoles.train_speed`)."""
    g = np.asarray(tp) * np.asarray(pp)
    return g[:, None] * ctx.flops * ctx.eff["mfu"]


def replica_shares(ctx: ModelContext, f: dict, reps: np.ndarray | None = None, dp: np.ndarray | None = None) -> np.ndarray:
    """(N, P) samples per replica of each pool and optimizer update: split evenly over the dp replicas
    (`ctx.even_split`: Megatron-LM, DeepSpeed, verl) or in proportion to replica speed (mosearch's
    trainer, which reads the same weights from the plan's `PoolRoles.train_speed`)."""
    if reps is None:
        reps = (f["train_gpus"] + f["shared_gpus"]) // (f["tp"] * f["pp"])[:, None]
        dp = psum(reps)
    samples = ctx.samples / ctx.updates
    if ctx.even_split:
        share = np.broadcast_to((samples / np.maximum(dp, 1))[:, None], reps.shape)
    else:
        speed = replica_speed(ctx, f["tp"], f["pp"])
        share = samples * speed / np.maximum(psum(reps * speed), 1e-30)[:, None]
    return np.where(reps > 0, share, 0.0)


def train_times(ctx: ModelContext, f: dict, chunks) -> dict[str, np.ndarray]:
    e = ctx.eff
    tp, pp, mb = f["tp"], f["pp"], f["micro_batch"]
    g = tp * pp
    col = lambda v: np.reshape(np.broadcast_to(v, tp.shape), (-1, 1))  # noqa: E731  (a scalar or (N,) -> (N, 1))
    gpus = f["train_gpus"] + f["shared_gpus"]  # (N, P)
    staged = ctx.stage_layers is not None
    tok = ctx.prompt_len + ctx.resp_mean
    # a sequence's attention work grows with its length squared: averaged over the response lengths it is
    # E[(p + L)^2], the mean's square plus the variance (each packed sequence attends only to itself)
    tok2 = tok ** 2 if ctx.lengths is None else ctx.lengths.mean_square(ctx.prompt_len)
    n_fwd, n_bwd = pass_counts(ctx, f["recompute"])
    passes = (n_fwd + 2.0 * n_bwd) * np.ones(len(tp))  # matmul work in forwards (a backward is two)
    # per sample and one forward: a layer's matmuls (attention over half the keys with causal flash
    # attention, all of them where the kernel computes the full score matrix) and the LM head
    # a mixture of experts computes on its active parameters (ModelContext.compute_params_per_layer)
    # (N,): PyTorch's math kernel where this project's trainer's fp32 grouped-query attention falls back to it
    unfused = keeps_scores(ctx, mb)
    layer_f = layer_fwd_flops(ctx.compute_params_per_layer, ctx.q_dim, tok, 1,
                              np.where(unfused, tok2 / tok, tok2 / tok / 2.0))
    weight_f = layer_fwd_flops(ctx.compute_params_per_layer, ctx.q_dim, tok, 1, 0.0)  # the weight matmuls alone
    attn_f = layer_f - weight_f  # QK^T and AV: BF16 in an FP8 run (`ctx.flops_hp`)
    head_f = 2.0 * ctx.vocab * ctx.hidden * tok
    # selective op checkpointing (no full recompute): every second matmul and every element-wise
    # kernel of the forward run again in the backward, attention is kept
    sel = float(ctx.selective_op) * (1.0 - f["recompute"].astype(float))  # (N,)
    sel_w, _, _ = selective_op_split(ctx.hidden, ctx.q_dim, ctx.kv_dim, ctx.ffn, ctx.gated)
    sel_f = sel * 2.0 * sel_w * tok  # (N,) recomputed matmul FLOPs per sample and layer
    flops_sample = passes * (ctx.layers * layer_f + head_f) + ctx.layers * sel_f
    if staged:  # an explicit layout: dp replicas, each a pipeline over the pools in stage_pool
        dp = f["dp"].astype(float)
        reps = gpus // np.maximum(tp * f["stages_on_pool"], 1)
    else:
        reps = gpus // g[:, None]
        dp = psum(reps)
    share = replica_shares(ctx, f, reps, dp)  # samples per replica and optimizer update
    # micro-batches per replica and chunk; a chunk's partial micro-batch still costs a slot
    per_chunk = share / chunks[:, None]
    if ctx.micro_batch_tokens is None:
        m = np.ceil(per_chunk / mb[:, None])
        mb_eff = np.minimum(mb[:, None], np.maximum(per_chunk, 1.0))
    else:  # packed by tokens: as many micro-batches as the rank's tokens fill budgets, samples shared evenly
        m = np.where(per_chunk > 0, np.ceil(per_chunk * tok / ctx.micro_batch_tokens), 0.0)
        mb_eff = np.maximum(per_chunk / np.maximum(m, 1.0), 1.0)
    # one layer, one micro-batch on a pool's GPU: matmuls over tp GPUs, element-wise kernels through
    # HBM (score-matrix passes when attention is unfused), TP all-reduces and a per-layer floor
    rate = tp[:, None] * ctx.flops * e["mfu"]
    rate_hp = rate if ctx.flops_hp is None else tp[:, None] * ctx.flops_hp * e["mfu"]
    score = np.where(unfused, ctx.heads / tp * tok2, 0.0)
    sp = np.where(ctx.sequence_parallel, tp, 1).astype(float)
    ew_f, ew_b = layer_elementwise_bytes(tok, ctx.hidden, ctx.ffn / tp, ctx.bpe, ctx.gated, score, ctx.bpe == 2, sp)
    if ctx.eager_norm or ctx.eager_rope or ctx.eager_act:  # eager PyTorch ops: several kernels per norm, RoPE, act.
        xf, xb = eager_elementwise_bytes(ctx.hidden, (ctx.q_dim + ctx.kv_dim) / tp, ctx.ffn / tp, ctx.bpe,
                                         ctx.gated, sp, ctx.eager_norm, ctx.eager_rope, ctx.eager_act)
        ew_f, ew_b = ew_f + tok * xf, ew_b + tok * xb
    ew_sample = (n_fwd + sel) * ew_f + n_bwd * ew_b  # (N,) bytes per sample and layer
    # TP all-reduces per layer and micro-batch, each its latency, per-op framework cost and bytes
    n_ar = tp_collectives(n_fwd[:, None] * np.ones(1), n_bwd, ctx.gated, e["tp_split_projections"][None, :] > 0)
    act_bytes = mb_eff * tok * ctx.hidden * ctx.bpe
    one_ar = ring_allreduce_s(act_bytes, tp[:, None], ctx.intra, e["collective_latency_s"]) + e["tp_op_s"]
    tp_comm = np.where(tp[:, None] > 1, n_ar * one_ar, 0.0)
    # flash attention: its own kernels' efficiency (`attn_eff`, FlashAttention-2's published share of the
    # peak), and a backward of 2.5 forwards (it recomputes the scores: five matmuls to the forward's two,
    # Dao 2023); unfused attention is plain matmuls at mfu, two forwards per backward
    attn_passes = np.where(unfused, passes, n_fwd + 2.5 * n_bwd)
    rate_attn = np.where(col(unfused), rate_hp, rate_hp * (e["attn_eff"] / e["mfu"]))
    matmul = (passes * weight_f + sel_f)[:, None] / rate + (attn_passes * attn_f)[:, None] / rate_attn
    layer = (mb_eff * matmul + mb_eff * ew_sample[:, None] / (ctx.hbm * e["elementwise_eff"])
             + tp_comm + e["layer_s"])
    if eager_layers(ctx):  # the host launching eager layers' kernels one by one (Python per op): the GPU waits
        # when it is the slower
        layer = np.maximum(layer, col(n_fwd) * e["hf_layer_fwd_s"] + col(n_bwd) * e["hf_layer_bwd_s"])
    a2a = np.zeros((1, 1))
    if ctx.moe:  # the experts' all-to-alls and the router's imbalance (model/moe.py), per layer and micro-batch
        from problems.placement.model import moe

        busy = gpus > 0
        extra, a2a = moe.train_layer_extra_s(ctx, f, tok, mb_eff, n_fwd, n_bwd, rate, e["collective_latency_s"], busy,
                                             _slowest_cross(ctx, busy), _regions_used(ctx, busy))
        layer = layer + extra
    # the logits each pass through the head produces, processed element-wise over the whole vocabulary (a
    # recomputation re-runs the layers, not the head); vocabulary-parallel over TP
    rec = f["recompute"].astype(float)
    logit_bytes = tok * ctx.vocab / tp * ((n_fwd - rec) * LOGIT_BYTES_FWD + n_bwd * LOGIT_BYTES_BWD)
    head = (mb_eff * (passes * head_f)[:, None] / rate_hp
            + mb_eff * logit_bytes[:, None] / (ctx.hbm * e["elementwise_eff"]))
    # pipeline p2p: activations forward and gradients back at each stage boundary
    spans = g[:, None] > ctx.gpn
    p2p_bw = np.where(spans, ctx.inter / ctx.gpn, ctx.intra)
    xfer = np.where(pp[:, None] > 1, 2.0 * (act_bytes / tp[:, None] / p2p_bw + e["p2p_latency_s"]), 0.0)
    p2p = xfer + e["microbatch_s"]
    # a pipeline of m micro-batches: every stage once, then m - 1 more of the slowest (Metis, GPipe/1F1B)
    stage_layers_max = float(np.max(ctx.stage_layers)) if staged else np.ceil(ctx.layers / pp)[:, None]
    if staged:
        sp = ctx.stage_pool
        lay = ctx.stage_layers[None, :]
        t_stage = lay * layer[:, sp] + p2p[:, sp]
        t_stage[:, -1] += head[:, sp[-1]]
        m_rep = pmax(np.where(reps > 0, m, 0.0))
        slow = np.argmax(t_stage, axis=1)[:, None]
        iv = float(ctx.interleave)
        crit = lambda v: (v.sum(axis=1) / iv + (m_rep - 1.0 / iv) * np.take_along_axis(v, slow, 1)[:, 0])  # noqa: E731
        compute = chunks * crit(t_stage)
        tp_part = chunks * crit(lay * tp_comm[:, sp])
        ep_part = chunks * crit(lay * np.broadcast_to(a2a, layer.shape)[:, sp])
        pp_part = chunks * crit(xfer[:, sp] * np.ones_like(lay))
        bubble = chunks * (t_stage.sum(axis=1) - np.take_along_axis(t_stage, slow, 1)[:, 0]) / iv
    else:
        per_stage = np.ceil(ctx.layers / pp)[:, None]
        heaviest = per_stage * layer + head + p2p  # the last stage holds the head
        every = ctx.layers * layer + head + pp[:, None] * p2p
        iv = float(ctx.interleave)
        per_pool = np.where(reps > 0, chunks[:, None] * (every / iv + (m - 1.0 / iv) * heaviest), 0.0)

    # gradient synchronisation over all replicas (actor, + critic for PPO)
    w_b, g_b, o_b = state_bytes_per_param(ctx.bpe, ctx.bf16_states)
    models = 1.0 + ctx.has_critic
    grad_bytes = ctx.params * g_b * models
    if ctx.moe:  # what each GPU holds (its routed experts by EP) times the replica's GPUs
        grad_bytes = params_per_gpu(ctx, tp, pp, f.get("ep")) * g * g_b * models
    nodes = psum(np.ceil(gpus / ctx.gpn))
    used = gpus > 0
    intra_min = pmin(np.where(used, ctx.intra, np.inf))
    inter_min = pmin(np.where(used, ctx.inter, np.inf))
    regions = _regions_used(ctx, used)
    cross_bw = _slowest_cross(ctx, used)
    zero3 = params_sharded(f["sharding"])
    lat = e["collective_latency_s"].max()
    gpn_min = pmin(np.where(used, ctx.gpn, np.inf))
    # none / ZeRO-1 / ZeRO-2: one all-reduce's volume per step; ZeRO-3 / FSDP: per micro-batch, below
    dp_sync = dp_gradient_sync_s(grad_bytes, dp, g, nodes, intra_min, inter_min, cross_bw, regions,
                                 np.zeros(len(dp), dtype=bool), lat, gpn_min)
    dp_sync = np.where(zero3, 0.0, dp_sync)
    units = (np.max(ctx.stage_layers) if staged else np.ceil(ctx.layers / pp)) + 1.0
    # each forward pass gathers the stage's weights (recomputation re-runs a unit whose weights the
    # backward has gathered anyway), each backward again unless units stay unsharded after forward,
    # and reduce-scatters its gradients; one micro-batch's compute on the heaviest stage hides the rest
    gathers = n_fwd - f["recompute"].astype(float) * models + np.where(ctx.reshard_after_forward, n_bwd, 0.0)
    stage_w = params_per_gpu(ctx, tp, pp, f.get("ep"))
    ring = dp_ring_bw(intra_min, inter_min, gpn_min, g, nodes, cross_bw, regions)
    traffic, one_ag = fsdp_traffic_s(stage_w * w_b, stage_w * g_b, dp, ring, lat, gathers, n_bwd)
    # each pool's ranks against their own micro-batches (N, P): a faster pool runs more of them, each
    # hiding less; an explicit layout's replicas are one pipeline, its stages' slowest micro-batch
    mb_compute = np.where(reps > 0, stage_layers_max * layer - tp_comm * stage_layers_max, 0.0)
    m_rank = np.where(reps > 0, m, 0.0) * chunks[:, None]
    if staged:
        mb_compute, m_rank = col(pmax(mb_compute)), col(pmax(m_rank))
    exposed = np.maximum(col(traffic) - mb_compute, 0.0) + col(gathers * one_ag / units)
    # and each collective its ring latency and FSDP's per-op cost (copy-in/out, hooks), unit by unit
    ag, rs = fsdp_collectives(units, n_fwd, n_bwd)
    fsdp_op = pmax(np.where(used, (dp[:, None] - 1.0) * e["collective_latency_s"] + e["fsdp_op_s"], 0.0))
    sync = np.where(col(zero3 & (dp > 1)), m_rank * (exposed + col(models * (ag + rs) * fsdp_op)), col(dp_sync))
    if staged:
        dp_sync = sync[:, 0]
    else:  # the step waits for the pool whose compute and exposed traffic together take longest
        j = pargmax(np.where(reps > 0, per_pool + sync, -np.inf))[:, None]
        at = lambda v: np.take_along_axis(np.broadcast_to(v, per_pool.shape), j, 1)[:, 0]  # noqa: E731
        compute, dp_sync = at(per_pool), at(sync)
        tp_part = chunks * at((ctx.layers / iv + (m - 1.0 / iv) * per_stage) * tp_comm)
        ep_part = chunks * at((ctx.layers / iv + (m - 1.0 / iv) * per_stage) * a2a)
        pp_part = chunks * at((pp[:, None] / iv + m - 1.0 / iv) * xfer)
        bubble = chunks * at(every - heaviest) / iv
    # optimizer step: on GPU, streams the shard's Adam state through HBM (read + write);
    # offloaded, gradients go down and weights come up over the host link and CPU Adam runs
    psh = params_per_gpu(ctx, tp, pp, f.get("ep"))
    o_div = np.where(f["sharding"] == SHARD_NONE, 1.0, np.maximum(dp, 1))
    shard = psh / o_div * models
    hbm_eff = e["decode_eff"] if ctx.train_hbm_eff is None else ctx.train_hbm_eff
    hbm_min = pmin(np.where(used, ctx.hbm * hbm_eff, np.inf))
    host = pmin(np.where(used, e["host_gbs"] * 1e9, np.inf))
    cpu = pmin(np.where(used, e["cpu_adam_gbs"] * 1e9, np.inf))
    step_bytes = ADAMW_FOREACH_BYTES + GRAD_CLIP_BYTES if ctx.amp_autocast else 2.0 * (w_b + g_b + o_b)
    on_gpu = shard * step_bytes / hbm_min
    off = shard * (g_b + w_b) / host + shard * 2.0 * o_b / cpu
    opt = np.where(f["optimizer_offload"].astype(bool), off, on_gpu)
    u = float(ctx.updates)
    compute, dp_sync, opt = u * compute, u * dp_sync, u * opt
    # the forward-only passes over the batch (old log-probs, reference, critic values): their share of the
    # matmul work, what an executor scoring the reward meanwhile has to hide it behind
    experience = compute * forward_only_passes(ctx) / passes
    return {
        "train_compute_s": compute,
        "pipeline_bubble_s": u * bubble,
        "tp_comm_s": u * tp_part,
        "pp_comm_s": u * pp_part,
        "ep_comm_s": u * ep_part,
        "dp_sync_s": dp_sync,
        "optimizer_s": opt,
        "train_s": compute + dp_sync + opt,
        "experience_s": experience,
        "dp": dp,
        "micro_batches": m,
        "train_flops": flops_sample * ctx.samples,
        "selective_recompute_flops": ctx.layers * sel_f * ctx.samples,
        "micro_batch_eff": pmax(np.where(reps > 0, mb_eff, 0.0)),
        "dp_cross_region_bytes": np.where((regions > 1) & (dp > 1), np.where(
            zero3, (regions - 1) * u * pmax(m_rank) * (gathers * w_b + n_bwd * g_b) * stage_w * g, 2.0 * (regions - 1) * grad_bytes),
            0.0),
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
