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
    cluster = prob.cluster  # the pools that can run the workload's precision: the model's arrays follow them
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


def _rollout_need(problem) -> tuple[np.ndarray, np.ndarray]:
    """(P, K) least share of each GPU's memory an engine of each rollout TP option of each pool
    needs (its weight shard, workspace at the fewest concurrent sequences and KV for one longest
    sample over its GPUs, at least the encoding's lowest kv_mem_frac), and those TP options.
    Options past a pool's valid ones are inf."""
    from problems.placement.encoding import KV_FRAC_RANGE, LOG2_SEQS_RANGE
    from problems.placement.model.memory import rollout_fixed_bytes

    ctx, lay = problem.ctx, problem.layout
    rtp = lay.rtp_options.astype(float)  # (P, K)
    seqs = np.full(rtp.shape, 2.0 ** LOG2_SEQS_RANGE[0])
    kv_one = (ctx.prompt_len + ctx.resp_max) * ctx.kv_bytes_per_token
    bytes_ = kv_one / rtp + ctx.eff["runtime_gb"][:, None] * 1e9 + rollout_fixed_bytes(ctx, rtp, seqs)
    need = np.maximum(bytes_ / ctx.mem[:, None], KV_FRAC_RANGE[0])
    need[need > KV_FRAC_RANGE[1]] = np.inf  # above the highest kv_mem_frac: no such engine
    need[np.arange(rtp.shape[1])[None, :] >= lay.rtp_n[:, None]] = np.inf
    return need, lay.rtp_options


def _training_least(problem) -> tuple[float, np.ndarray, np.ndarray]:
    """Lower bounds of the training side that hold for every layout: the model states all training
    GPUs hold together (bytes; ZeRO-3 and optimizer offload, the least sharded copy any pipeline
    depth leaves), the activations one GPU holds at the least (bytes; micro-batch 1, recompute,
    one micro-batch in flight), and per pool the least share of a GPU's memory a training GPU
    needs (states sharded over the whole cluster as well)."""
    from problems.placement.model.memory import activation_bytes, model_state_bytes
    from problems.placement.names import SHARD_Z3

    ctx, lay, cluster = problem.ctx, problem.layout, problem.cluster
    one, z3 = np.array([1]), np.array([SHARD_Z3])
    states_total = min(float(pp * model_state_bytes(ctx, one, np.array([pp]), one, z3, one)[0])
                       for pp in lay.pp_options)
    acts, per_gpu = [], []
    for tp in lay.tp_options:
        for pp in lay.pp_options:
            g = int(tp * pp)
            if g > cluster.total_gpus:
                continue
            t, p = np.array([tp]), np.array([pp])
            act = float(activation_bytes(ctx, t, p, one, one, one)[0])
            st = float(model_state_bytes(ctx, t, p, np.array([max(cluster.total_gpus // g, 1)]), z3, one)[0])
            acts.append(act)
            per_gpu.append(st + act)
    act_least = min(acts)
    frac = (min(per_gpu) + ctx.eff["runtime_gb"] * 1e9) / ctx.mem  # (P,)
    return states_total, np.full(len(ctx.mem), act_least), frac


def least_mem_frac(problem) -> tuple[float, str]:
    """A lower bound of every plan's peak memory share, and what sets it: a plan runs at least one
    rollout engine and trains on at least one GPU, and its peak is the largest over its GPUs."""
    from problems.placement.encoding import KV_FRAC_RANGE

    pools = problem.cluster.pools
    r_need, rtp = _rollout_need(problem)
    _, _, t_frac = _training_least(problem)
    r = np.unravel_index(np.argmin(r_need), r_need.shape)
    t = int(np.argmin(t_frac))
    if r_need[r] >= t_frac[t]:
        floor = " (the lowest kv_mem_frac)" if r_need[r] <= KV_FRAC_RANGE[0] else ""
        return float(r_need[r]), (f"a rollout engine takes at least {float(r_need[r]):.2f} of its GPUs' memory{floor}, "
                                  f"{int(rtp[r])} x {pools[r[0]].gpu.name} at the least")
    return float(t_frac[t]), (f"a training GPU needs at least {float(t_frac[t]):.2f} of its memory ({pools[t].gpu.name}, "
                              "ZeRO-3 over the whole cluster, optimizer offload, recompute, micro-batch 1)")


def least_cost(problem, max_mem_frac: float = 1.0) -> tuple[float, str]:
    """A lower bound of every plan's $/h at this peak memory share, and what sets it (inf when no
    engine or no training GPU fits at all). A plan pays at least for its cheapest engine and for
    the GPUs that hold the training states: every training GPU holds an equal share of at least
    `states_total` bytes beside its activations and runtime, so those GPUs cost at least
    states_total x the lowest $ per usable byte, and at least as many of the cheapest GPU as the
    largest usable memory needs. Colocated plans use the same GPUs for both: the dearer of the
    two, not their sum."""
    ctx, pools = problem.ctx, problem.cluster.pools
    r_need, rtp = _rollout_need(problem)
    states_total, act_least, _ = _training_least(problem)
    price = ctx.price
    engine_cost = np.where(r_need <= max_mem_frac, rtp * price[:, None], np.inf)
    e = np.unravel_index(np.argmin(engine_cost), engine_cost.shape)
    usable = max_mem_frac * ctx.mem - ctx.eff["runtime_gb"] * 1e9 - act_least
    ok = usable > 0
    if not ok.any() or not np.isfinite(engine_cost[e]):
        return float("inf"), "no engine or no training GPU fits"
    ratio = price[ok] / usable[ok]
    train_cost = max(states_total * ratio.min(), np.ceil(states_total / usable[ok].max()) * price[ok].min())
    if engine_cost[e] >= train_cost:
        return float(engine_cost[e]), (f"a rollout engine needs at least {int(rtp[e])} x {pools[e[0]].gpu.name} at "
                                       f"${price[e[0]]:.2f}/h each")
    cheap = pools[int(np.flatnonzero(ok)[np.argmin(ratio)])].gpu.name
    return float(train_cost), (f"training holds at least {states_total / 1e9:.0f} GB of model states in GPU memory "
                               f"(ZeRO-3, optimizer offload), ${train_cost:.2f}/h of GPUs at the least (the lowest "
                               f"$ per GB: {cheap})")


def limit_infeasibility(problem, max_cost: float | None, max_mem_frac: float | None) -> tuple[str, str, str] | None:
    """A proof that a limit cannot be met, from the lower bounds above that hold for every plan:
    (the limit as given, what fails with the figure it would need, the value that could work),
    or None. The bounds are the model's own memory terms at their least, so a limit they rule
    out no plan meets; a limit they do not rule out may still be out of reach."""
    if max_mem_frac is not None:
        need, what = least_mem_frac(problem)
        if max_mem_frac < need:
            return (f"--max-mem-frac {max_mem_frac:g}", f"every plan needs at least {need:.2f} of some GPU's memory: "
                    f"{what}", f"--max-mem-frac {np.ceil(need * 100) / 100:.2f} or more")
    if max_cost is not None:
        least, what = least_cost(problem, 1.0 if max_mem_frac is None else max_mem_frac)
        if np.isfinite(least) and max_cost < least:
            return (f"--max-cost {max_cost:g}", f"the cheapest plan that can run costs at least ${least:.2f}/h: {what}",
                    f"--max-cost {np.ceil(least * 100) / 100:.2f} or more")
    return None
