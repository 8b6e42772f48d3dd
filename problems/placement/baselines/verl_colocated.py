"""verl-style baseline: actor, rollout and reference colocated on every GPU of one type.

verl's default (RayPPOTrainer with a hybrid engine) shares one resource pool between the
FSDP actor and the vLLM rollout, switching context between phases (shared reference
systems.md). Fixed as verl ships it: FSDP sharding, no pipeline parallelism, colocated mode,
vLLM max_num_seqs 1024 (verl's rollout default); searched as verl users tune them: rollout
TP (`tensor_model_parallel_size`), `gpu_memory_utilization` (on the enumeration's KV grid),
micro-batch per GPU, gradient checkpointing, and training TP (the Megatron backend, with its distributed
optimizer and `optimizer_cpu_offload`) when FSDP alone does not fit. verl's FSDP workers have no CPU optimizer
step (their optimizer offload moves the states between phases, which colocated mode's context switch
already is), so FSDP candidates keep the optimizer on the GPUs (problems/placement/executors.py, verl's
rules), and every candidate is moved to the nearest plan verl starts (its executor repair: the batch
divisible by the trainer GPUs, whole nodes); those the repair cannot make startable are dropped. Each GPU type: its pools one at a time and all together.
"""

from __future__ import annotations

import itertools

import numpy as np

from problems.placement.baselines._common import Scorer, budgeted, pools_of_type, rank, template
from problems.placement.encoding import LOG2_MB_RANGE
from problems.placement.names import SHARDINGS
from problems.placement.enumerate import KV_GRID
from problems.placement.executors import violation_count
from problems.placement.problem import PlacementProblem

VERL_MAX_NUM_SEQS_LOG2 = 10  # 1024


def candidates(problem: PlacementProblem, pools: list[int], kv_grid=KV_GRID) -> np.ndarray:
    lay = problem.layout
    P = lay.n_pools
    base = template(problem)
    base[lay.g("sharding")] = SHARDINGS.index("fsdp")
    base[lay.g("log2_max_num_seqs")] = VERL_MAX_NUM_SEQS_LOG2
    rtp_values = sorted({int(v) for i in pools for v in lay.rtp_options[i][: lay.rtp_n[i]]})
    rows = []
    for rtp, tp_i, mb, rec, off, kv in itertools.product(
            rtp_values, range(len(lay.tp_options)), range(LOG2_MB_RANGE[0], LOG2_MB_RANGE[1] + 1),
            (0, 1), (0, 1), kv_grid):
        if lay.tp_options[tp_i] > min(lay.gpn[i] for i in pools):
            continue
        megatron = lay.tp_options[tp_i] > 1
        if off and not megatron:  # FSDP: no CPU optimizer step in verl
            continue
        x = base.copy()
        if megatron:  # its distributed optimizer: the optimizer state sharded, ZeRO-1
            x[lay.g("sharding")] = SHARDINGS.index("zero1")
        for i in pools:
            x[i] = x[P + i] = lay.counts[i]
            opts = list(lay.rtp_options[i][: lay.rtp_n[i]])
            x[2 * P + i] = max(j for j, v in enumerate(opts) if v <= rtp) if min(opts) <= rtp else 0
        x[lay.g("train_tp_idx")] = tp_i
        x[lay.g("log2_micro_batch")] = mb
        x[lay.g("recompute")] = rec
        x[lay.g("optimizer_offload")] = off
        x[lay.g("kv_mem_frac")] = kv
        rows.append(x)
    return np.array(rows)


def plan(problem: PlacementProblem, budget_usd_h: float | None = None, evals: int | None = None, seed: int = 0,
         kv_grid=KV_GRID):
    """Best colocated plan per GPU type by throughput (rows best first; feasible ones first)."""
    prob = budgeted(problem, budget_usd_h)
    score = Scorer(prob)
    # verl's start-up rules (batch divisible by the trainer GPUs, whole nodes, ...) applied as the
    # executor's repair: a row is a plan verl starts as planned
    verl = PlacementProblem(problem.cluster, problem.workload, executor="verl").layout
    rng = np.random.default_rng(seed)
    out_X, out_F, out_ok, out_v, labels = [], [], [], [], []
    for gpu, idx in pools_of_type(prob).items():
        sets = [[i] for i in idx] + ([idx] if len(idx) > 1 else [])
        C = np.vstack([candidates(prob, s, kv_grid) for s in sets])
        if evals is not None and len(C) > evals:
            C = C[rng.choice(len(C), evals, replace=False)]
        R, F, ok, viol, _ = score(verl.repair(C))
        # repair must keep the plan colocated on this type's GPUs only
        P = prob.layout.n_pools
        other = np.ones(P, bool)
        other[idx] = False
        stay = (R[:, prob.layout.g("mode")] == 0) & ~((R[:, :P] > 0) & other).any(axis=1)
        stay &= violation_count(verl.executor, verl, verl.fields(R), verl.rule_ctx) == 0  # what repair cannot fix
        R, F, ok, viol = R[stay], F[stay], ok[stay], viol[stay]
        if len(R) == 0:
            continue
        b = rank(F, ok, viol)[0]
        out_X.append(R[b]), out_F.append(F[b]), out_ok.append(ok[b]), out_v.append(viol[b])
        labels.append(gpu)
    if not out_X:  # on no GPU type does verl start a colocated plan (its batch or node rules)
        raise ValueError("verl-colocated: no colocated plan verl starts as planned on this cluster")
    o = rank(np.array(out_F), np.array(out_ok), np.array(out_v))
    return score.result("verl-colocated", np.array(out_X)[o], np.array(out_F)[o], np.array(out_ok)[o],
                        [labels[i] for i in o], budget_usd_h)
