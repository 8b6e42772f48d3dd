"""Mixture-of-experts terms: expert parallelism's sharding of the expert states, the all-to-all dispatch and
combine of each MoE layer, router load imbalance, and the experts a decode step reads.

Kept apart from the dense formulas (training.py, memory.py, rollout.py call in here only for a MoE workload,
`ctx.moe`), so a dense workload's figures do not change. Every array is (N,) or (N, P) as in the callers.

Expert parallelism (EP) as Megatron-core lays it out (`expert_model_parallel_size`, docs: "MoE" user guide):
the experts of each MoE layer are split over the `ep` ranks of an expert-parallel group, carved from the
dp x tp ranks of one pipeline stage, so EP x PP composes as the dense layers' TP x PP does. With ep > 1 the
experts are not tensor-parallel (expert_tensor_parallel_size 1, what verl's and slime's MoE recipes set);
with ep = 1 they are sharded by TP as a dense MLP (Megatron-core's default expert TP = TP). The expert
gradients are reduced, and a distributed optimizer / ZeRO shards the expert optimizer states, over the
expert-data-parallel group of dp x tp / ep ranks; the rest of the model is sharded over dp as a dense one.
"""

from __future__ import annotations

import numpy as np

from problems.placement.model.params import ModelContext
from problems.placement.model.reduce import pany

# Router load imbalance: the most loaded EP rank processes this many times the mean tokens in the experts,
# and receives as many in the dispatch; the step waits for it. Wang et al. 2024 ("Auxiliary-Loss-Free Load
# Balancing Strategy for Mixture-of-Experts", arXiv 2408.15664, the scheme DeepSeek-V3 trains with) measure
# the most loaded expert's excess over the mean (MaxVio) at 0.04 with their bias-based balancing and 0.52-0.72
# with an auxiliary loss (1B and 3B models, over the validation set); an EP rank holds experts/ep experts, whose
# loads average, so its excess is below one expert's. 1.2 assumed between the two, refit by calibration
# from measured MoE steps
MOE_IMBALANCE = 1.2
# Share of the dispatch/combine all-to-all hidden behind computation. Megatron-core runs them on the critical
# path (attention/router -> dispatch -> experts -> combine -> next layer) unless the combined-1F1B schedule is
# enabled (--overlap-moe-expert-parallel-comm, "Combined 1F1B: Expert-Parallel All-to-All Overlap" in the
# Megatron-core developer guide), which verl's, AReaL's and RLinf's MoE examples leave off: 0
A2A_OVERLAP = 0.0


def ep_of(f: dict, n: int) -> np.ndarray:
    """The plans' expert-parallel sizes (N,): 1 where the population has none (dense workloads)."""
    ep = f.get("ep")
    return np.ones(n, dtype=np.int64) if ep is None else np.asarray(ep, dtype=np.int64)


def expert_split(ctx: ModelContext, tp, pp, ep):
    """(expert parameters on a GPU of the most loaded stage, expert-data-parallel divisor factor): the
    routed experts of a stage's MoE layers over ep ranks (ep > 1) or sharded by tp (ep = 1); the expert
    states are then sharded over dp * tp / ep ranks (ep > 1) or dp (ep = 1): the factor tp / ep or 1."""
    tp, ep = np.asarray(tp, dtype=float), np.asarray(ep, dtype=float)
    per_layer = ctx.expert_params / max(ctx.moe_layers, 1)
    moe_layers = np.minimum(np.ceil(ctx.layers / np.asarray(pp, dtype=float)), ctx.moe_layers) \
        if ctx.stage_layers is None else min(float(np.max(ctx.stage_layers)), ctx.moe_layers)
    stage = moe_layers * per_layer
    div = np.where(ep > 1, ep, tp)
    return stage / div, np.where(ep > 1, tp / ep, 1.0)


def stage_params_per_gpu(ctx: ModelContext, stage_params, tp, pp, ep):
    """Parameters per GPU of the most loaded stage: the dense part over tp, the routed experts by
    `expert_split`. `stage_params`: memory.stage_params (all of the stage's parameters)."""
    experts, _ = expert_split(ctx, tp, pp, ep)
    return dense_stage_params(ctx, stage_params, pp) / np.asarray(tp, dtype=float) + experts


def dense_stage_params(ctx: ModelContext, stage_params, pp):
    """The most loaded stage's parameters other than the routed experts."""
    if ctx.stage_layers is None:
        moe_layers = np.minimum(np.ceil(ctx.layers / np.asarray(pp, dtype=float)), ctx.moe_layers)
    else:
        moe_layers = min(float(np.max(ctx.stage_layers)), ctx.moe_layers)
    return stage_params - moe_layers * ctx.expert_params / max(ctx.moe_layers, 1)


def a2a_s(ctx: ModelContext, tokens, ep, bw) -> np.ndarray:
    """Seconds of one all-to-all (dispatch or combine) of a MoE layer on one GPU if all it sends crossed `bw`:
    each of its `tokens` goes to experts_per_token experts, hidden * bpe bytes each, of which (ep - 1) / ep
    leave the GPU (uniform routing), times the router's imbalance for the busiest rank (`imbalance`)."""
    sent = tokens * ctx.experts_per_token * ctx.hidden * ctx.bpe * imbalance(ctx)
    ep = np.asarray(ep, dtype=float)
    return np.where(ep > 1, sent * (ep - 1.0) / ep / bw, 0.0)


def train_layer_extra_s(ctx: ModelContext, f: dict, tok, mb_eff, n_fwd, n_bwd, rate, lat, used, cross_bw, regions):
    """(N, P) seconds a MoE model adds per layer (averaged over its layers) and micro-batch beyond the dense
    formulas run on its active parameters, and the all-to-all part of it:
    - the dispatch and combine all-to-alls: two per forward pass (every forward of the step: the actor's, its
      recomputation, the old log-probs', the reference's), two per backward (their gradients);
    - the router's imbalance: the busiest rank's routed-expert matmuls take MOE_IMBALANCE times the mean.
    Tokens per GPU: the micro-batch's over the TP group (Megatron-core splits a TP group's tokens before the
    dispatch: sequence parallelism is required with MoE and TP)."""
    n = len(f["tp"])
    ep = ep_of(f, n)
    tp = f["tp"].astype(float)
    share = ctx.moe_layers / ctx.layers
    tokens = mb_eff * tok / tp[:, None]
    ep_c = ep.astype(float)[:, None]
    gpn = ctx.gpn[None, :].astype(float)
    # the part of a GPU's traffic that leaves its node: (ep - gpn) / (ep - 1) of what leaves the GPU
    remote = np.where(ep_c > gpn, (ep_c - gpn) / np.maximum(ep_c - 1.0, 1.0), 0.0)
    nic = ctx.inter / ctx.gpn
    # an EP group wider than a pool's training GPUs of one stage spans pools: across regions when the plan
    # trains in several (the slowest region link, shared by a node's GPUs)
    stage_gpus = (f["train_gpus"] + f["shared_gpus"]) / f["pp"][:, None]
    spans_pools = pany(used & (ep_c > stage_gpus))
    far = np.where((regions > 1) & spans_pools, cross_bw / np.maximum(ctx.gpn.min(), 1), np.inf)[:, None]
    remote_bw = np.minimum(nic[None, :], far)
    # the traffic inside the node over NVLink and the rest over the slower link at once: the longer leg, plus
    # one collective latency
    local = a2a_s(ctx, tokens, ep_c, ctx.intra[None, :]) * (1.0 - remote)
    leg = np.maximum(local, a2a_s(ctx, tokens, ep_c, remote_bw) * remote) + np.where(ep_c > 1, lat, 0.0)
    n_a2a = 2.0 * (n_fwd + n_bwd)[:, None]
    a2a = share * n_a2a * leg * (1.0 - A2A_OVERLAP)
    # routed-expert matmul seconds per layer and micro-batch (forward passes and backwards, 2 each), over TP
    expert_f = 2.0 * ctx.routed_active_per_moe_layer * tok * (n_fwd + 2.0 * n_bwd)
    busiest = share * mb_eff * (imbalance(ctx) - 1.0) * expert_f[:, None] / rate
    return a2a + busiest, a2a


def imbalance(ctx: ModelContext) -> float:
    """The busiest EP rank's routed tokens over the mean: the context's (a force-balanced benchmark sets 1), else
    MOE_IMBALANCE."""
    return ctx.moe_imbalance or MOE_IMBALANCE


def expected_distinct_experts(ctx: ModelContext, tokens) -> np.ndarray:
    """Experts of one MoE layer a batch of `tokens` tokens routes to, in expectation: each token picks
    experts_per_token of E, so an expert is missed by all with probability (1 - k/E)^tokens (routing taken
    uniform and independent across tokens; a real router's skew makes it fewer). One token reads k experts;
    a decode batch of a few hundred sequences reads nearly all of them (Qwen3-30B-A3B, k/E = 1/16: 64
    sequences read 98% of the experts)."""
    E, k = float(ctx.experts), float(ctx.experts_per_token)
    t = np.maximum(np.asarray(tokens, dtype=float), 0.0)
    # E (1 - (1 - k/E)^t) as -E expm1(t log(1 - k/E)): one exp per element where power takes a log and an exp
    return -E * np.expm1(t * np.log1p(-k / E)) if k < E else np.where(t > 0, E, 0.0)


def decode_weight_s(ctx: ModelContext, unit, tokens) -> np.ndarray:
    """Seconds (one GPU of a TP-1 engine; divide by its GPUs) to read the weights one decode step uses: the
    non-expert weights and shared experts always, the routed experts its tokens pick (`unit`: ctx.unit_costs).
    An expert-parallel engine (vLLM enable_expert_parallel) holds experts/ranks whole experts per GPU in
    place of a 1/ranks slice of each: the same bytes per GPU in expectation."""
    return unit["weights"] + unit["expert_weights"] * expected_distinct_experts(ctx, tokens)
