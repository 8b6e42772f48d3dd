"""The vectorised performance model: fields of a population of plans -> named (N,) arrays.

One module per formula: rollout, training, comm, memory, flow, cost (and lifetime for the
offline lifetime-planned memory peak of single plans). `evaluate(ctx, fields)` composes them.
"""

from __future__ import annotations

import numpy as np

from problems.placement.model import cost as _cost
from problems.placement.model.executor_costs import executor_terms
from problems.placement.model.flow import MODE_COLOCATED, compose, switch_s
from problems.placement.model.memory import STATE_PARTS, train_memory
from problems.placement.model.params import ModelContext, build_context
from problems.placement.model.rollout import rollout_times
from problems.placement.model.sync import GATHER_EFF, SYNC_EFF, sync_s
from problems.placement.model.training import train_times
from problems.placement.model.reduce import over_region_pairs, pargmax, pmax, psum

__all__ = ["ModelContext", "build_context", "evaluate"]


def evaluate(ctx: ModelContext, f: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    e = ctx.eff
    mode, k = f["mode"], f["staleness_bound"]
    colo = mode == MODE_COLOCATED
    # several optimizer updates per step train on the whole batch: no streaming into training
    chunks = np.where(colo | (ctx.updates > 1), 1, f["pipeline_chunks"]).astype(float)
    ro = rollout_times(ctx, f)
    tr = train_times(ctx, f, chunks)
    # orchestration overheads (0 unless calibrated from runs): one rollout call per chunk, and each
    # engine's share of the samples
    call = chunks * e["rollout_call_s"].max() + ctx.samples / np.maximum(ro["rollout_engines"], 1) * e["rollout_sample_s"].max()
    # the executor's own per-step work (model/executor_costs.py): per sample on the rollout side (reward
    # scoring, the driver's data handling), fixed per step on the training side (sleep/wake, round trips)
    ex_train, ex_roll = executor_terms(ctx, colo, ctx.samples)
    if ctx.steps.reward_overlaps_experience:  # scored while the log-prob and reference passes run
        ex_roll = np.maximum(ex_roll - tr["experience_s"], 0.0)
    call = call + ex_roll
    for key in ("rollout_s", "rollout_bulk_s", "rollout_tail_s"):
        ro[key] = ro[key] + call
    per_rank_mb = pmax(chunks[:, None] * tr["micro_batches"]) * ctx.updates
    fx = ctx.fitted_steps
    tr["train_s"] = (tr["train_s"] + ex_train + e["train_call_s"].max()
                     + fx.get("microbatch_s", 0.0) * per_rank_mb + e["microbatch_loop_s"].max() * per_rank_mb
                     + np.where(tr["dp"] > 1, e["dp_microbatch_s"].max() * per_rank_mb, 0.0))
    engines = ro["engines"]
    train_gpus = f["train_gpus"] + f["shared_gpus"]
    roll_gpus = f["rollout_gpus"] + f["shared_gpus"]
    used = f["rollout_gpus"] + f["train_gpus"] + f["shared_gpus"]

    # ---- memory per GPU
    tp, pp, dp = f["tp"], f["pp"], tr["dp"]
    mem = train_memory(ctx, f, dp, tr["micro_batches"])
    allocated, reserved = mem["allocated"], mem["reserved"]  # (N, P)
    states = sum(mem[k] for k in STATE_PARTS)  # (N,)
    rollout_peak = f["kv_mem_frac"][:, None] * ctx.mem
    shared = f["shared_gpus"] > 0
    peak = np.where(shared, np.maximum(reserved, rollout_peak),
                    np.maximum(np.where(f["train_gpus"] > 0, reserved, 0.0),
                               np.where(f["rollout_gpus"] > 0, rollout_peak, 0.0)))
    frac = np.where(used > 0, peak / ctx.mem, 0.0)
    peak_frac = pmax(frac)
    need_tokens = ctx.prompt_len + ctx.resp_max
    kv_short = (need_tokens - ro["kv_tokens_min"]) / need_tokens

    # ---- weight sync and context switch
    bytes_w = ctx.weight_bytes
    src = pargmax(train_gpus)  # weights leave from the pool with the most trainers
    # colocated engines map the trainer's buckets on their device (CUDA IPC / shared memory), then reload;
    # a cut or sharded trainer first gathers the full weights on the source, tensor by tensor
    gather = {"tensors": ctx.state_tensors, "tp_tensors": ctx.tp_sharded_tensors, "tp": tp, "pp": pp, "dp": dp,
              "sharding": f["sharding"], "bw": ctx.intra[src], **{k: e[k][src] for k in GATHER_EFF}}
    sync, sync_cross, sync_usd = sync_s(bytes_w, ctx.region[src], engines, ctx.region, ctx.region_bw, ctx.region_lat,
                                        ctx.region_egress, f["route"] == 1, int(ctx.region_bw.shape[0]),
                                        {k: e[k] for k in SYNC_EFF}, ctx.hbm[src], colo, gather)
    # what leaves the GPU for the engine's turn: the training states where the executor offloads them, and
    # its offloaded parameters reloaded once per training-side phase (model/executor_costs.py)
    moved = states * ctx.steps.states_offloaded + ctx.steps.param_phases * mem["weights"] / 2.0
    sw = pmax(np.where(shared, switch_s(moved[:, None], bytes_w / f["rollout_tp"], e["host_gbs"] * 1e9,
                                   ctx.host_memory), 0.0))
    sw = np.where(colo, sw + e["switch_call_s"].max(), 0.0)

    # ---- flow
    step, staleness = compose(mode, k, chunks, ro["rollout_s"], ro["rollout_bulk_s"], ro["rollout_tail_s"],
                              tr["train_s"], sync, sw)
    step = step + e["step_call_s"].max()
    samples_s = ctx.samples / step
    tokens_s = samples_s * (ctx.prompt_len + ctx.resp_mean)

    # ---- cost
    dp_egress = tr["dp_cross_region_bytes"] * _max_cross_egress(ctx, train_gpus > 0)
    gpu_h = _cost.gpu_usd_h(used, ctx.price)
    egress_h = _cost.egress_usd_h(sync_usd + dp_egress, step)
    cost_h = gpu_h + egress_h

    gb = 1e-9
    role_peak = lambda mask, v: pmax(np.where(mask, v, 0.0)) * gb  # noqa: E731
    return {
        "throughput_samples_s": samples_s,
        "throughput_tokens_s": tokens_s,
        "cost_usd_h": cost_h,
        "gpu_usd_h": gpu_h,
        "egress_usd_h": egress_h,
        "usd_per_1k_samples": _cost.usd_per_1k_samples(cost_h, samples_s),
        "peak_mem_frac": peak_frac,
        "staleness": staleness,
        "step_s": step,
        "rollout_s": ro["rollout_s"],
        "rollout_bulk_s": ro["rollout_bulk_s"],
        "rollout_tail_s": ro["rollout_tail_s"],
        "train_s": tr["train_s"],
        "train_compute_s": tr["train_compute_s"],
        "pipeline_bubble_s": tr["pipeline_bubble_s"],
        "tp_comm_s": tr["tp_comm_s"],
        "pp_comm_s": tr["pp_comm_s"],
        "ep_comm_s": tr["ep_comm_s"],
        "dp_sync_s": tr["dp_sync_s"],
        "optimizer_s": tr["optimizer_s"],
        "sync_s": sync,
        "switch_s": sw,
        "decode_tokens_s": ro["decode_tokens_s"],
        "rollout_engines": ro["rollout_engines"].astype(float),
        "dp": dp.astype(float),
        "used_gpus": psum(used).astype(float),
        "train_gpus": psum(train_gpus).astype(float),
        "rollout_gpus": psum(roll_gpus).astype(float),
        "peak_mem_gb_train": role_peak(train_gpus > 0, reserved),
        "peak_mem_gb_rollout": role_peak(roll_gpus > 0, rollout_peak),
        "train_allocated_gb": role_peak(train_gpus > 0, allocated),
        "train_reserved_gb": role_peak(train_gpus > 0, reserved),
        "model_states_gb": states * gb,
        "kv_tokens_min": ro["kv_tokens_min"],
        "kv_shortfall": kv_short,
        "cross_region_gb_step": (sync_cross + tr["dp_cross_region_bytes"]) * gb,
        # the model's mixture-of-experts layers (0: dense): a MoE plan's band adds the MoE training error
        # (model/fitted.py moe_step_residuals)
        "moe_layers": np.full(len(step), float(ctx.moe_layers if ctx.moe else 0)),
    }


def _max_cross_egress(ctx: ModelContext, used) -> np.ndarray:
    """Dearest $/byte between two regions the plan trains in (0 in one region)."""
    return over_region_pairs(ctx.region, used, ctx.region_egress, np.maximum, 0.0)
