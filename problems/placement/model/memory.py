"""Memory per GPU: model states by sharding, activations, KV cache, runtime and allocator overhead.

Sources (shared reference systems.md):
- mixed-precision Adam = 16 bytes/param (2 weights + 2 grads + 12 fp32 master, m, v), divided
  across data-parallel ranks by ZeRO stage (Rajbhandari et al., ZeRO); in fp32 training the same 16
  (4 weights + 4 grads + 8 moments).
- activations per layer (Korthikanti et al. 2022): s*b*h*(10 + 24/t + 5*a*s/(h*t)) bytes with TP t;
  flash attention never materialises the a*s*s score tensors, so the 5as/(ht) term is dropped
  (kept for unfused attention);
  with full recomputation only the layer input, 2*s*b*h, is kept (plus one layer re-materialised);
  with sequence parallelism s*b*h*34/t (and 2*s*b*h/t under full recomputation);
  torchtitan's selective op checkpointing keeps the layer input, every other matmul output and
  attention's output (`selective_op_split`).
- eager layers (`elementwise_kernels: eager`, Hugging Face's modules): the tensors autograd saves, counted
  (`hf_layer_bytes_per_token`); with `amp_autocast` also autocast's weight casts and AdamW's foreach
  temporaries (`hf_step_extras`). On an H200 this project's trainer's peak allocated memory came within
  0.9% median of them over 25 steps (results/bench/gpu_train.md).
- KV cache bytes = 2 * layers * kv_heads * head_dim * tokens * bytes_per_elem.
- ZeRO-3 / FSDP hold the full weights of the unit computing and of the next one it prefetches
  (FSDP2's implicit prefetch, DeepSpeed's prefetch bucket); units kept unsharded after forward
  (`reshard_after_forward=False`) hold the whole stage's weights from forward to backward; in pipeline
  stages (torch.distributed.pipelining) the whole stage's weights and gradients stay unsharded to the step's
  end (`pipelined_unsharded`).
- Pipeline stages: the first stage keeps the most micro-batches in flight, the last alone holds the loss
  logits; the peak is the larger of the two.

Memory as allocated and as reserved. PyTorch's caching allocator keeps freed blocks for reuse and
asks the driver for new segments when no cached block fits, so a run goes out of memory when its
*reserved* memory (allocated + fragments) reaches the device's capacity: the memory objective and the
`mem_fits` constraint use the reserved figure. The fragments come from the dynamic tensors
(activations, gathered weights): STWeaver (arXiv 2507.16274) measured default allocators wasting up
to 43% of memory, more with recomputation and virtual pipelines, which break the tensors' regular
lifetimes. Modelled: reserved dynamic = allocated dynamic x (1 + waste), waste = `alloc_waste` (0.30
assumed, refit by calibration) plus ALLOC_WASTE_RECOMPUTE with full recomputation and
ALLOC_WASTE_INTERLEAVE with virtual pipeline stages; with both the dynamic memory's waste share
reaches STWeaver's 43% (1 - 1/1.754). An RL process shows the same: cosmos-rl (PR #388, Qwen2.5-7B)
reserved 127.0 GB for 60.9 GB allocated (96.6 GB with expandable segments).
All arrays are (N, P): plans x pools.
"""

from __future__ import annotations

import numpy as np

from problems.placement.model.params import ModelContext
from problems.placement.names import SHARD_FSDP, SHARD_NONE, SHARD_Z1, SHARD_Z2, SHARD_Z3  # noqa: F401

# vLLM profiles activations with one batch of max_num_batched_tokens (chunked prefill budget);
# 2048 is its long-standing default for chunked prefill (assumed)
ENGINE_BATCHED_TOKENS = 2048
# extra allocator waste (as a share of the dynamic memory allocated) with full recomputation and with
# virtual pipeline stages: the two together take the base 0.30 to STWeaver's worst case of 43% of the
# reserved dynamic memory wasted (1 / (1 - 0.43) = 1.754); split evenly (assumed: the paper names both)
ALLOC_WASTE_RECOMPUTE = ALLOC_WASTE_INTERLEAVE = (1.0 / (1.0 - 0.43) - 1.30) / 2.0


def selective_op_split(hidden, q_dim, kv_dim, ffn, gated=True):
    """torchtitan's selective "op" activation checkpointing of one transformer layer
    (`_apply_ac_to_transformer_block`, torchtitan commit 9dec370, torchtitan/parallelisms/
    parallelize_llama.py): outputs of matmuls and of scaled-dot-product attention are saved "except
    every second mm"; every other op is recomputed in the backward. The layer's matmuls run in the
    order wq, wk, wv, wo, then w1, w3, w2 (gated: w2(silu(w1 x) * w3 x)) or up, down (plain), so
    the 2nd, 4th and 6th are recomputed.
    Returns (weights of the recomputed matmuls, saved elements per token that TP shards, saved
    elements per token that stay whole): the saved matmul outputs; the attention output and the
    layer input are added by the caller."""
    mlp = [(hidden * ffn, ffn, True), (hidden * ffn, ffn, True), (ffn * hidden, hidden, False)] if gated \
        else [(hidden * ffn, ffn, True), (ffn * hidden, hidden, False)]
    mms = [(hidden * q_dim, q_dim, True), (hidden * kv_dim, kv_dim, True), (hidden * kv_dim, kv_dim, True),
           (q_dim * hidden, hidden, False), *mlp]
    recomputed = sum(w for i, (w, _, _) in enumerate(mms) if i % 2 == 1)
    sharded = sum(o for i, (_, o, sh) in enumerate(mms) if i % 2 == 0 and sh)
    whole = sum(o for i, (_, o, sh) in enumerate(mms) if i % 2 == 0 and not sh)
    return float(recomputed), float(sharded), float(whole)


def state_bytes_per_param(bpe: int, bf16_states: bool = False) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per parameter for Adam: 16 in all, 8 with bf16 optimizer states
    (`optimizer_states: bf16`: bf16 m and v, no fp32 master copy)."""
    if bpe == 2:
        if bf16_states:
            return 2.0, 2.0, 4.0  # bf16 weights, grads, m and v
        return 2.0, 2.0, 12.0  # bf16/fp16 weights and grads; fp32 master + m + v
    return 4.0, 4.0, 8.0  # fp32 weights and grads; m + v


def stage_params(ctx: ModelContext, pp: np.ndarray) -> np.ndarray:
    """Parameters on the most loaded pipeline stage: its share of layers plus one embedding matrix."""
    layers = np.ceil(ctx.layers / pp) if ctx.stage_layers is None else float(ctx.stage_layers.max())
    embed = np.where(pp > 1, ctx.vocab * ctx.hidden, ctx.embedding_params)
    return layers * ctx.params_per_layer + embed + ctx.hidden


def params_sharded(sharding):
    """ZeRO-3 and FSDP shard the parameters themselves (ZeRO-1/2 only the optimizer state and gradients)."""
    return (sharding == SHARD_Z3) | (sharding == SHARD_FSDP)


STATE_PARTS = ("weights", "gradients", "optimizer", "reference")  # the keys of `model_state_parts`


def model_state_parts(ctx: ModelContext, tp, pp, dp, sharding, offload, ep=None) -> dict[str, np.ndarray]:
    """Per GPU, bytes: the weights, gradients and optimizer state of the trained models (the actor, + the
    critic for PPO) and the frozen reference's weights. A mixture of experts (`ctx.moe`): its routed experts
    split by expert parallelism `ep` and sharded over the expert-data-parallel ranks, the rest as a dense
    model's (model/moe.py `expert_split`)."""
    if ctx.moe:
        from problems.placement.model import moe

        ep = np.ones_like(np.asarray(tp)) if ep is None else ep
        experts, edp_factor = moe.expert_split(ctx, tp, pp, ep)
        dense = _state_parts(ctx, moe.dense_stage_params(ctx, stage_params(ctx, pp), pp) / tp, dp, sharding, offload)
        routed = _state_parts(ctx, experts, np.maximum(dp, 1) * edp_factor, sharding, offload)
        return {k: dense[k] + routed[k] for k in dense}
    return _state_parts(ctx, stage_params(ctx, pp) / tp, dp, sharding, offload)


def _state_parts(ctx: ModelContext, psh, dp, sharding, offload) -> dict[str, np.ndarray]:
    """`model_state_parts` of `psh` parameters per GPU whose states shard over `dp` ranks."""
    w, g, o = state_bytes_per_param(ctx.bpe, ctx.bf16_states)
    dpf = np.maximum(dp, 1).astype(float)
    z3 = params_sharded(sharding)
    w_div = np.where(z3, dpf, 1.0)
    g_div = np.where(z3 | (sharding == SHARD_Z2), dpf, 1.0)
    o_div = np.where(sharding == SHARD_NONE, 1.0, dpf)
    copies = 1.0 + ctx.has_critic
    return {"weights": psh * w / w_div * copies, "gradients": psh * g / g_div * copies,
            "optimizer": np.where(np.asarray(offload).astype(bool), 0.0, psh * o / o_div) * copies,
            "reference": ctx.has_reference * (not ctx.steps.reference_on_host) * psh * w / w_div}


def model_state_bytes(ctx: ModelContext, tp, pp, dp, sharding, offload, ep=None) -> np.ndarray:
    """Weights, gradients and optimizer of the actor (+ critic for PPO, + frozen reference) per GPU."""
    return sum(model_state_parts(ctx, tp, pp, dp, sharding, offload, ep).values())


def params_per_gpu(ctx: ModelContext, tp, pp, ep=None):
    """Parameters on a GPU of the most loaded stage before data-parallel sharding: the stage's over tp, a
    mixture of experts' routed experts by expert parallelism (model/moe.py)."""
    if not ctx.moe:
        return stage_params(ctx, pp) / tp
    from problems.placement.model import moe

    ep = np.ones_like(np.asarray(tp)) if ep is None else ep
    return moe.stage_params_per_gpu(ctx, stage_params(ctx, pp), tp, pp, ep)


def fused_layer_bytes_per_token(ctx: ModelContext) -> tuple[float, float]:
    """Bytes per token one transformer layer with fused kernels (Megatron-LM / Transformer Engine) keeps for
    its backward, as (what tensor parallelism leaves whole, what it splits over t); sequence parallelism
    splits the first part too. Korthikanti et al. 2022 (section 4.1) count them by tensor for GPT: layer
    norm inputs, the QKV and first MLP projections' input, q, k, v, the attention output (the output
    projection's input), the MLP activation's input and the second projection's input, and a 1-byte mask
    per dropout after attention and after the MLP; with a 16-bit GPT layer (k and v as wide as q, a plain
    MLP of 4h) that is their 10 + 24/t bytes per hidden element. Read here off the architecture:
    - k and v at the KV projections' width (grouped-query attention: Megatron's num_query_groups);
    - the MLP activation saves its input, 2 x ffn for a gated MLP (Megatron's bias_swiglu), ffn for a plain
      one (GeLU; squared ReLU saves its ReLU output, as wide);
    - dropout masks only when the model trains with dropout (`hidden_dropout`: PyTorch's dropout at p = 0
      returns its input and saves nothing; Llama, Qwen and Nemotron configs set 0, GPT-3's 0.1);
    - in FP8, Transformer Engine's Linear layers save the FP8 cast of their input (1 byte) for the weight
      gradient; attention stays 16-bit and keeps its output, which the output projection saves again in FP8."""
    b = float(ctx.bpe)
    lin = 1.0 if ctx.fp8_linears else b
    h, f = ctx.hidden, ctx.ffn
    masks = 2.0 * h if ctx.hidden_dropout else 0.0
    unsplit = 2 * h * b + 2 * h * lin + masks  # two norm inputs, the QKV and first MLP inputs, the masks
    attn = (ctx.q_dim + 2 * (ctx.kv_dim or ctx.q_dim)) * b + ctx.q_dim * b + (ctx.q_dim if ctx.fp8_linears else 0.0)
    mlp = (2 * f if ctx.gated else f) * b + f * lin
    return unsplit, attn + mlp


def activation_bytes(ctx: ModelContext, tp, pp, mb, recompute, n_micro) -> np.ndarray:
    """Activations held at the peak of a 1F1B schedule: the first stage's layers with the most micro-batches in
    flight, or the last stage's with the head's logits, whichever is larger (one stage without pipelining). Padded
    micro-batches hold `mb` sequences of the longest length; packed ones (`ctx.packing`: padding removed,
    sequences concatenated up to a token budget) mb sequences of the mean length, at least the longest."""
    s = ctx.prompt_len + ctx.resp_max  # the longest sample sets the peak
    if ctx.packing:
        s = np.maximum(ctx.prompt_len + ctx.resp_mean, s / np.maximum(mb, 1))
    scale = ctx.bpe / 2  # Korthikanti's coefficients count 16-bit elements
    sbh = s * mb * ctx.hidden
    # unfused attention also keeps, per score element, the softmax output and the dropout's output (working
    # precision each) and its mask (1 byte: PyTorch's native_dropout saves a bool mask whatever the dtype):
    # Korthikanti's 5as/(ht) in 16-bit, 9 bytes per element in fp32
    scores = 0.0 if ctx.flash else ctx.heads * s / (ctx.hidden * tp) * (2.0 * ctx.bpe + 1.0)
    # sequence parallelism splits the layer norm / dropout activations and the layer input over t too
    # (Korthikanti et al. 2022, eq. 4.2.2)
    sp = np.where(ctx.sequence_parallel, tp, 1)
    unsplit, split = fused_layer_bytes_per_token(ctx)
    per_layer_full = s * mb * (unsplit / sp + split / tp) + sbh * scores
    full_rec = recompute.astype(bool)
    per_layer_kept = np.where(full_rec, 2 * sbh * scale / sp, per_layer_full)
    if ctx.selective_op:  # torchtitan's selective op: the layer input, the saved matmul outputs, attention's output
        _, sharded, whole = selective_op_split(ctx.hidden, ctx.q_dim, ctx.kv_dim, ctx.ffn, ctx.gated)
        per_tok = (ctx.hidden + whole) / sp + (sharded + ctx.q_dim) / tp  # elements
        lse = ctx.heads / tp * 4  # fp32 log-sum-exp per head, bytes
        per_layer_kept = np.where(full_rec, per_layer_kept, s * mb * (per_tok * ctx.bpe + lse))
    if eager_layers(ctx) and not ctx.selective_op:
        # Hugging Face's eager attention (unfused) saves the fp32 softmax and, in 16-bit, its cast that multiplies
        # V (attention dropout 0 in Qwen2 / Llama configs: PyTorch's dropout returns its input at p = 0, no mask);
        # PyTorch's math kernel (`sdpa_paths`) saves the softmax in the working precision, fp32 there; a padded
        # micro-batch's layers each keep the mask, one row of the padded length per token, unsplit by TP
        padded, _ = sdpa_paths(ctx, mb)
        unfused = keeps_scores(ctx, mb)
        hf_scores = np.where(unfused, ctx.heads / tp * s * (4.0 + (ctx.bpe if ctx.bpe < 4 else 0.0)), 0.0)
        hf_scores = hf_scores + np.where(padded, ctx.bpe * s, 0.0)
        per_layer_full = s * mb * (hf_layer_bytes_per_token(ctx, tp, padded | unfused, unfused) + hf_scores)
        # recomputation keeps each layer's input: the residual stream, fp32 under autocast and in fp32
        residual = 4.0 if ctx.amp_autocast or ctx.bpe >= 4 else float(ctx.bpe)
        per_layer_kept = np.where(full_rec, s * mb * ctx.hidden * residual, per_layer_full)
    n = np.maximum(n_micro, 1)
    # logits of one micro-batch in the working precision plus fp32 for the softmax/loss, and what a loss
    # computed over all positions at once keeps beyond that (`loss_head_bytes`, model/params.py): on the last
    # stage only, which holds the fewest micro-batches in flight
    logits = s * mb * ctx.vocab / tp * (ctx.bpe + 4 + ctx.eff["loss_head_bytes"])
    if ctx.stage_layers is None:
        layers = np.ceil(ctx.layers / pp)
        # 1F1B keeps pp micro-batches on the first stage and one on the last; the interleaved schedule with v
        # chunks per rank warms up with 2 (pp - 1 - rank) + (v - 1) pp chunks of layers / (pp v) layers
        # (Megatron-LM's forward_backward_pipelining_with_interleaving): pp + (pp - 1) / v micro-batches' worth on
        # the first stage (Korthikanti et al. 2022, section 4.2.3: a factor 1 + (p - 1) / (p v)), ((v - 1) pp + 1) / v
        # on the last
        v = max(int(ctx.interleave), 1)
        first = np.where(pp > 1, pp + (pp - 1) / v if v > 1 else pp, 1)
        last = np.where(pp > 1, ((v - 1) * pp + 1) / v, 1)
        acts = np.maximum(layers * np.minimum(first, n) * per_layer_kept,
                          layers * np.minimum(last, n) * per_layer_kept + logits)
    else:  # stage i keeps pp - i micro-batches in flight; the peak is the stage with most layers x that
        k = len(ctx.stage_layers)
        acts = np.max(np.stack(np.broadcast_arrays(*[
            ctx.stage_layers[i] * np.minimum(k - i, n) * per_layer_kept + (logits if i == k - 1 else 0.0)
            for i in range(k)])), axis=0)
    # recomputation materialises one layer's full activations in the backward
    return acts + np.where(full_rec | ctx.selective_op, per_layer_full, 0)


def eager_layers(ctx: ModelContext) -> bool:
    """The training layers are eager PyTorch modules (`elementwise_kernels: eager`): Hugging Face's layers as
    verl's FSDP workers, NeMo-RL's DTensor policy, TRL and this project's trainer run them."""
    return bool(ctx.eager_norm and ctx.eager_rope and ctx.eager_act)


def sdpa_paths(ctx: ModelContext, mb) -> tuple[np.ndarray, np.ndarray]:
    """How PyTorch's scaled_dot_product_attention runs a Hugging Face layer's attention in this project's
    trainer (`amp_autocast`), per micro-batch size `mb`: (the micro-batch is padded, the math kernel runs).
    The trainer right-pads a micro-batch of samples of different lengths and passes the padding mask;
    transformers (integrations/sdpa_attention.py `use_gqa_in_sdpa`) then repeats a grouped-query
    attention's k and v to the query heads (`repeat_kv`), and PyTorch converts the boolean mask to one in
    the query's dtype at every call, which the memory-efficient kernel saves for its backward
    (aten/src/ATen/native/transformers/attention.cpp: convert_boolean_attn_mask, preprocess_mask).
    Without padding transformers passes no mask and `enable_gqa=True`; of PyTorch's CUDA kernels only flash
    attention takes that, and only in 16-bit, so an fp32 grouped-query attention falls back to the math
    kernel, which keeps the full score matrix (PyTorch issue 139586; transformers pull request 46960; the
    H200 runs' PyTorch 2.11 did so: results/bench/gpu_train.md; PyTorch pull request 191085, July 2026, gives
    the memory-efficient kernel grouped queries, so a PyTorch that has it runs fp32 there instead).
    Lengths differ in an RL workload (`ctx.lengths_differ`), not in a training job of fixed-length sequences
    unless it says so. All False for a framework's own kernels or unfused attention (counted apart)."""
    mb = np.asarray(mb)
    if not (ctx.amp_autocast and ctx.flash):
        return np.zeros(mb.shape, bool), np.zeros(mb.shape, bool)
    padded = (mb > 1) & ctx.lengths_differ & (not ctx.packing)
    math = ~padded & (ctx.bpe >= 4) & (ctx.kv_dim < ctx.q_dim)
    return padded, math


def keeps_scores(ctx: ModelContext, mb) -> np.ndarray:
    """Per micro-batch size `mb`: the attention kernel computes and keeps the full s x s score matrix (unfused
    attention, or PyTorch's math kernel where `sdpa_paths` sends the trainer's attention)."""
    return sdpa_paths(ctx, mb)[1] | (not ctx.flash)


def hf_layer_bytes_per_token(ctx: ModelContext, tp, kv_repeated=False, unfused=False) -> np.ndarray:
    """Bytes a Hugging Face decoder layer (Qwen2 / Llama: RMSNorm, RoPE, SDPA flash attention, SwiGLU)
    saves for backward per token, counted from the tensors autograd saves (module doc;
    tests/placement/test_hf_memory.py counts them): fp32 tensors of the hidden size and a per-token fp32
    scale from the two RMSNorms, which compute in fp32, the log-sum-exp per head, and in the working
    precision the hidden-size inputs of the projections, rotated q and attention's output, k and v, and
    four tensors of the MLP width. How many hidden-size tensors in fp32 and in the working precision: four
    and five under bf16 autocast over fp32 weights (the residual stream stays fp32, autocast saves its
    casts), two and four with the weights in bf16 (FSDP's mixed precision), four and two in fp32. TP
    splits the heads and the MLP width (no sequence parallelism). `kv_repeated`: k and v saved with every
    query head (`sdpa_paths`, and Hugging Face's eager attention); `unfused`: a kernel without a
    log-sum-exp (its score matrix is counted by the caller)."""
    e = float(ctx.bpe)
    if ctx.bpe >= 4:
        n32, n_hidden = 4.0, 2.0
    elif ctx.amp_autocast:
        n32, n_hidden = 4.0, 5.0
    else:
        n32, n_hidden = 2.0, 4.0
    kv = np.where(kv_repeated, ctx.q_dim, ctx.kv_dim)
    width = (2.0 * ctx.q_dim + 2.0 * kv + 4.0 * ctx.ffn) / tp
    lse = np.where(unfused, 0.0, 4.0 * ctx.heads / tp)
    return 4.0 * n32 * ctx.hidden + 4.0 + 4.0 + lse + e * (n_hidden * ctx.hidden + width)


def hf_step_extras(ctx: ModelContext, tp, pp, dp, sharding, offload, recompute, ep=None) -> tuple[np.ndarray, np.ndarray]:
    """(during forward and backward, at the optimizer step) bytes per GPU that PyTorch's own mixed
    precision and optimizer add to the model states (`amp_autocast`, names.AMP_AUTOCAST_HELP): bf16
    autocast keeps its cast of every weight from forward to backward (not under full recomputation, where
    each layer casts again when it is recomputed), and AdamW's default multi-tensor ("foreach") step
    allocates one fp32 tensor per parameter it updates (the square root of the second moment). 0 for
    fused kernels (Megatron, DeepSpeed: fused Adam, weights already in the working precision)."""
    if not ctx.amp_autocast:
        return np.zeros(1), np.zeros(1)
    psh = params_per_gpu(ctx, tp, pp, ep)
    dpf = np.maximum(dp, 1).astype(float)
    casts = np.where(np.asarray(recompute, dtype=bool) | (ctx.bpe >= 4), 0.0,
                     psh * ctx.bpe / np.where(params_sharded(sharding), dpf, 1.0))
    step = np.where(np.asarray(offload, dtype=bool), 0.0, psh * 4.0 / np.where(sharding == SHARD_NONE, 1.0, dpf))
    return casts * (1.0 + ctx.has_critic), step * (1.0 + ctx.has_critic)


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


def gathered_bytes(ctx: ModelContext, tp, pp, dp, sharding, ep=None) -> np.ndarray:
    """ZeRO-3 / FSDP weights gathered on a GPU at once, beyond its shard: the unit computing and the one
    prefetched (each decoder layer a unit), or the whole stage where units stay unsharded (kept after forward,
    `reshard_after_forward=False`, or a pipeline stage's: `pipelined_unsharded`). Under autocast the trainer's
    FSDP gathers its fp32 master weights (no MixedPrecisionPolicy: `trainer/parallel.py` shard)."""
    w, _, _ = state_bytes_per_param(ctx.bpe)
    w = 4.0 if ctx.amp_autocast else w
    stage = params_per_gpu(ctx, tp, pp, ep)
    layers = np.ceil(ctx.layers / pp) if ctx.stage_layers is None else float(ctx.stage_layers.max())
    unit = stage / (layers + 1.0)
    held = np.where(pipelined_unsharded(pp) | (not ctx.reshard_after_forward), stage, np.minimum(2.0 * unit, stage))
    return _beyond_shard(ctx, held * w, dp, sharding)


def unsharded_gradient_bytes(ctx: ModelContext, tp, pp, dp, sharding, ep=None) -> np.ndarray:
    """ZeRO-3 / FSDP gradients a pipeline stage holds unsharded beyond its shard (`pipelined_unsharded`): the
    whole stage's, in fp32 under mixed precision (FSDP2 upcasts an accumulated unsharded gradient to its reduce
    dtype: FSDPParam.to_accumulated_grad_if_needed; torchtitan reduces in fp32), 2 bytes with bf16 states."""
    stage = params_per_gpu(ctx, tp, pp, ep)
    grads = np.where(pipelined_unsharded(pp), stage * (2.0 if ctx.bf16_states else 4.0), 0.0)
    return _beyond_shard(ctx, grads, dp, sharding)


def _beyond_shard(ctx: ModelContext, full_bytes, dp, sharding) -> np.ndarray:
    """What parameter sharding over `dp` ranks holds beyond the rank's shard of `full_bytes`, per trained model
    (the actor, + the critic for PPO); nothing without parameter sharding or with one replica."""
    dpf = np.maximum(dp, 1).astype(float)
    copies = 1.0 + ctx.has_critic
    return np.where(params_sharded(sharding) & (dpf > 1), full_bytes * (dpf - 1) / dpf * copies, 0.0)


def pipelined_unsharded(pp) -> np.ndarray:
    """Whether ZeRO-3 / FSDP units stay unsharded through the step: in pipeline stages. The plans that pair
    parameter sharding with pipeline stages run under torch.distributed.pipelining (this project's trainer,
    torchtitan; the external executors' pipeline stages are Megatron's, whose shardings are none and its
    distributed optimizer: `executors.py`). Its stage runs every micro-batch's backward but the last with
    `set_reshard_after_backward(False)` and `set_requires_gradient_sync(False)` (PipelineStage
    backward_maybe_with_nosync) and reduce-scatters once after the last (`perform_reduce_grad`): from a
    layer's first backward to the step's end its weights stay gathered and its gradient accumulates
    unsharded. torchtitan also keeps them after forward with pipeline stages (`apply_fsdp`:
    reshard_after_forward=False when pp is enabled, "to avoid per-microbatch all-gathers")."""
    return np.asarray(pp) > 1


def train_memory(ctx: ModelContext, f: dict[str, np.ndarray], dp, n_micro) -> dict[str, np.ndarray]:
    """A training GPU's memory at its peak, bytes, for plans `f` trained over `dp` replicas with `n_micro`
    micro-batches (N, P) per rank: the model states by kind ((N,), `model_state_parts`), the activations
    (N, P), the weights ZeRO-3 / FSDP gather and the gradients a pipeline stage holds unsharded (N, 1), autocast's
    weight casts and the optimizer step's
    temporaries (`hf_step_extras`, (N, 1)), and the peak allocated and reserved (N, P). Selective
    checkpointing recomputes as full recomputation does, so it fragments the allocator the same way."""
    tp, pp, sh, off, ep = f["tp"], f["pp"], f["sharding"], f["optimizer_offload"], f.get("ep")
    parts = model_state_parts(ctx, tp, pp, dp, sh, off, ep)
    mb = f["micro_batch"][:, None]
    if ctx.micro_batch_tokens is not None:  # cut by tokens (training.train_times): each holds about the budget
        mb = np.full(mb.shape, max(ctx.micro_batch_tokens / (ctx.prompt_len + ctx.resp_mean), 1.0))
    acts = activation_bytes(ctx, tp[:, None], pp[:, None], mb, f["recompute"][:, None], n_micro)
    gathered = gathered_bytes(ctx, tp, pp, dp, sh, ep)[:, None]
    grads = unsharded_gradient_bytes(ctx, tp, pp, dp, sh, ep)[:, None]
    casts, step = (np.reshape(x, (-1, 1)) for x in hf_step_extras(ctx, tp, pp, dp, sh, off, f["recompute"], ep))
    rec = (np.asarray(f["recompute"]).astype(bool) | ctx.selective_op)[:, None]
    allocated, reserved = train_peak_bytes(sum(parts.values())[:, None], acts, ctx, rec, gathered + grads,
                                           (casts, step))
    return dict(parts, activations=acts, gathered_weights=gathered, unsharded_gradients=grads, weight_casts=casts,
                optimizer_step_temporaries=step, allocated=allocated, reserved=reserved)


def train_peak_bytes(states, acts, ctx: ModelContext, recompute=0, gathered=0.0,
                     extras=(0.0, 0.0)) -> tuple[np.ndarray, np.ndarray]:
    """(allocated, reserved) peak per training GPU, runtime included: the caching allocator's fragments
    grow the dynamic part (activations, gathered weights) by `alloc_waste`, more with recomputation and
    virtual pipelines (module doc). `extras`: `hf_step_extras`, the weight casts held with the activations
    and the optimizer step's temporaries (the peak is the larger of the two moments)."""
    runtime = ctx.eff["runtime_gb"] * 1e9
    casts, step = extras
    dynamic = acts + gathered + casts
    waste = (ctx.eff["alloc_waste"] + ALLOC_WASTE_RECOMPUTE * np.asarray(recompute, dtype=float)
             + ALLOC_WASTE_INTERLEAVE * (ctx.interleave > 1))
    allocated = states + np.maximum(dynamic, step) + runtime
    reserved = states + np.maximum(dynamic * (1 + waste), step) + runtime
    return allocated, reserved
