"""Why no plan fits: the binding reason for the CLI's infeasible case, or None when plans fit."""

from __future__ import annotations

import numpy as np

from problems.placement.specs import Cluster, Workload


def explain_infeasible(cluster: Cluster, workload: Workload, samples: int = 20000, seed: int = 0,
                       efficiencies: dict | None = None) -> str | None:
    """Check the cheapest-memory layouts first (closed form, a proof), then search a random sample
    of plans (no proof: a sample can miss the plans that fit)."""
    reason = structural_infeasibility(cluster, workload, efficiencies)
    if reason:
        return reason
    from problems.placement.problem import CONSTRAINTS, PlacementProblem

    prob = PlacementProblem(cluster, workload, efficiencies=efficiencies)
    lay = prob.layout
    rng = np.random.default_rng(seed)
    X = lay.repair(prob.xl + rng.random((samples, prob.n_var)) * (prob.xu - prob.xl))
    r = prob.evaluate_matrix(X)
    G = prob._constraints(r)
    if (G <= 0).all(axis=1).any():
        return None
    closest = np.argmin(np.clip(G, 0, None).sum(axis=1))
    bind = CONSTRAINTS[int(np.argmax(G[closest]))]
    return (f"no sampled plan of {samples} meets every constraint; the closest violates {bind} "
            f"(peak memory {r['peak_mem_frac'][closest]:.2f} of a GPU, {r['throughput_samples_s'][closest]:.3g} samples/s, "
            f"${r['cost_usd_h'][closest]:.2f}/h)")


def structural_infeasibility(cluster: Cluster, workload: Workload, efficiencies: dict | None = None) -> str | None:
    """A proof that no plan fits memory: the widest engine cannot hold the weights and one longest
    sample, or the smallest training footprint of any layout exceeds every GPU. None otherwise."""
    from problems.placement.model.memory import (activation_bytes, model_state_bytes,
                                                 rollout_fixed_bytes)
    from problems.placement.problem import PlacementProblem

    prob = PlacementProblem(cluster, workload, efficiencies=efficiencies)
    ctx, lay = prob.ctx, prob.layout
    name = workload.model.name
    wgb = ctx.weight_bytes / 1e9
    need_tokens = ctx.prompt_len + ctx.resp_max

    # rollout: one engine of the widest TP in some pool must hold the weights and one longest sample
    best_free, best_desc = -np.inf, ""
    for i, p in enumerate(cluster.pools):
        t = int(lay.rtp_options[i][lay.rtp_n[i] - 1])
        fixed = rollout_fixed_bytes(ctx, np.array([t]), np.array([8]))[0]
        free = t * (0.95 * ctx.mem[i] - ctx.eff["runtime_gb"][i] * 1e9 - fixed) - need_tokens * ctx.kv_bytes_per_token
        if free > best_free:
            best_free, best_desc = free, f"{t} x {p.gpu.memory_gb:g} GB ({p.gpu.name})"
    if best_free < 0:
        return (f"weights of {name} need {wgb:.0f} GB per rollout engine plus KV for one {need_tokens}-token sample; "
                f"the largest GPU group with TP<=node size has {best_desc}")

    # training: the smallest footprint per GPU any layout reaches in each pool
    least, where = np.inf, ""
    for i, p in enumerate(cluster.pools):
        for tp in lay.tp_options[p.gpus_per_node % lay.tp_options == 0]:
            for pp in lay.pp_options:
                g = tp * pp
                if g > cluster.total_gpus:
                    continue
                dp = np.array([max(cluster.total_gpus // g, 1)])
                st = model_state_bytes(ctx, np.array([tp]), np.array([pp]), dp, np.array([3]), np.array([1]))
                act = activation_bytes(ctx, np.array([tp]), np.array([pp]), np.array([1]), np.array([1]), np.array([1]))
                need = float(st[0] + act[0]) + ctx.eff["runtime_gb"][i] * 1e9
                if need - ctx.mem[i] < least:
                    least = need - ctx.mem[i]
                    where = (f"{need / 1e9:.0f} GB per GPU even with TP={tp}, PP={pp}, ZeRO-3 over {int(dp[0])} "
                             f"replicas, optimizer offload, recompute and micro-batch 1; a {p.gpu.name} has "
                             f"{p.gpu.memory_gb:g} GB")
    if least > 0:
        states = 16 * ctx.params * (1 + ctx.has_critic) / 1e9
        return f"training {name} ({workload.algorithm}) needs {states:.0f} GB of model states; {where}"
    return None
