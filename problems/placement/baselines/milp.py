"""AReaL-Hex-style baseline: a MILP (HiGHS) on a linearised model, mapped back and scored in full.

After AReaL-Hex (arXiv 2511.00796): asynchronous rollout and training on disjoint GPUs, with
stage sizes and the GPUs of each stage chosen by a MILP under a budget; bandwidth-rich GPUs
tend to generation, FLOP-rich ones to training. Our linearisation:
  * coefficients from the full model: for every pool i and engine TP k, rho_ik = samples/s per rollout GPU
    (`rollout_bulk_s` of a plan whose engines all sit in pool i, best rollout TP, KV fraction
    on the grid and max_num_seqs) and tau_i(c) = samples/s per training GPU (`train_s` of a plan
    training only in pool i) for each training configuration c (TP, PP, sharding, micro-batch,
    recomputation, offload) whose training memory fits that pool; 0 where nothing fits;
  * variables: engines e_ik of each rollout TP option k (binary y_ik picks one option per
    pool, the encoding's single engine TP per pool) and replicas d_i (integers), so pool i
    gives sum_k rtp_k*e_ik GPUs to rollout and g*d_i to training (g = TP*PP of c), within
    count_i;
  * maximise the training rate sum_i tau_i g d_i subject to the balance constraint
    sum_ik rho_ik rtp_k e_ik >= sum_i tau_i g d_i (rollout keeps up), the budget
    sum_i price_i (GPUs of pool i) <= B, and at least one engine and one replica.
  Linear throughput ignores weight sync, the response-length tail, cross-pool all-reduce and
  egress; the full model scores the mapped plan, so these errors show as a gap, not a bias.
One MILP per training configuration on a short list (the best per pool and overall) and per
pool set (all pools; each region alone); when egress pushes a mapped plan over the budget the
MILP is solved again with the budget scaled down by the overshoot (up to 3 times). The
mapped plans run asynchronously with the workload's staleness bound (AReaL's bounded staleness).
"""

from __future__ import annotations

import ctypes
import itertools
import os
import sys

import highspy
import numpy as np

from problems.placement.baselines._common import Scorer, budgeted, rank, template
from problems.placement.encoding import LOG2_MB_RANGE, LOG2_SEQS_RANGE
from problems.placement.names import SHARDINGS
from problems.placement.enumerate import KV_GRID
from problems.placement.problem import PlacementProblem

SHORTLIST = 6
# Branch-and-bound nodes per MILP. The shipped clusters' MILPs close within 21 nodes; on a
# generated 32-pool cluster one MILP ran for minutes unbounded. At the limit the best integer
# solution found so far is used (the full model scores it anyway).
NODE_LIMIT = 500


def _probe(prob: PlacementProblem, i: int, role: str) -> np.ndarray:
    """A disaggregated vector whose `role` GPUs all sit in pool i (the other role elsewhere)."""
    lay = prob.layout
    P = lay.n_pools
    x = template(prob)
    x[lay.g("mode")] = 1
    c = int(lay.counts[i])
    other = [j for j in np.argsort(-lay.counts) if j != i]
    mine, theirs = (0, P) if role == "rollout" else (P, 0)
    if other:
        x[mine + i] = c
        x[theirs + other[0]] = lay.counts[other[0]]
    else:
        x[mine + i] = c - c // 2
        x[theirs + i] = c // 2
    return x


def _rollout_coeffs(score: Scorer, kv_grid):
    """(rho (P, K): samples/s per rollout GPU of pool i with rollout TP option k, seqs, kv) for
    the global (max_num_seqs, KV fraction) with the most rollout capacity."""
    prob = score.problem
    lay = prob.layout
    P = lay.n_pools
    rows, meta = [], []
    for i in range(P):
        base = _probe(prob, i, "rollout")
        for k, seqs, kv in itertools.product(range(lay.rtp_n[i]), range(LOG2_SEQS_RANGE[0], LOG2_SEQS_RANGE[1] + 1),
                                             kv_grid):
            x = base.copy()
            x[2 * P + i] = k
            x[lay.g("log2_max_num_seqs")] = seqs
            x[lay.g("kv_mem_frac")] = kv
            rows.append(x)
            meta.append((i, k, seqs, kv))
    R, _, _, _, r = score(np.array(rows))
    gpus = R[np.arange(len(R)), [m[0] for m in meta]]  # rollout GPUs left in the probed pool
    ok = (r["kv_shortfall"] <= 0) & (r["peak_mem_gb_rollout"] <= np.array(
        [prob.cluster.pools[m[0]].gpu.capacity_gb * prob.limits["max_mem_frac"] for m in meta]))
    rate = np.where(ok & (gpus > 0), prob.workload.samples_per_step / r["rollout_bulk_s"] / np.maximum(gpus, 1), 0.0)
    best = None
    K = lay.rtp_options.shape[1]
    for seqs, kv in itertools.product(range(LOG2_SEQS_RANGE[0], LOG2_SEQS_RANGE[1] + 1), kv_grid):
        rho = np.zeros((P, K))
        for j, m in enumerate(meta):
            if m[2] == seqs and m[3] == kv:
                rho[m[0], m[1]] = rate[j]
        total = float(rho.max(axis=1) @ lay.counts)
        if best is None or total > best[0]:
            best = (total, rho, seqs, kv)
    return best[1:]


def _train_coeffs(score: Scorer):
    """(configs (n, 6), tau (n, P) samples/s per training GPU, 0 where it does not fit)."""
    prob = score.problem
    lay = prob.layout
    P = lay.n_pools
    configs = np.array(list(itertools.product(
        range(len(lay.tp_options)), range(len(lay.pp_options)), [SHARDINGS.index("zero1"), SHARDINGS.index("fsdp")],
        range(LOG2_MB_RANGE[0], LOG2_MB_RANGE[1] + 1), (0, 1), (0, 1))), dtype=float)
    cols = [lay.g(n) for n in ("train_tp_idx", "train_pp_idx", "sharding", "log2_micro_batch", "recompute",
                               "optimizer_offload")]
    tau = np.zeros((len(configs), P))
    for i in range(P):
        X = np.repeat(_probe(prob, i, "train")[None, :], len(configs), axis=0)
        X[:, cols] = configs
        R, _, _, _, r = score(X)
        same = (R[:, cols] == configs).all(axis=1)  # repair did not shrink the layout
        gpus = R[:, P + i]
        fits = r["peak_mem_gb_train"] <= prob.cluster.pools[i].gpu.capacity_gb * prob.limits["max_mem_frac"]
        tau[:, i] = np.where(same & fits & (gpus > 0),
                             prob.workload.samples_per_step / r["train_s"] / np.maximum(gpus, 1), 0.0)
    return configs, cols, tau


def _highs() -> highspy.Highs:
    """A silent solver. HiGHS writes its copyright banner to the process's stdout when the first
    solver is built, before any option can turn it off; that write goes to the null device."""
    sys.stdout.flush()
    saved, null = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        try:  # the banner may still sit in C's stdio buffer
            ctypes.CDLL(None).fflush(None)
        except (OSError, AttributeError, TypeError):  # no C library handle (e.g. Windows)
            pass
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)
    return h


def solve(rho, rtp, tau, g, counts, price, budget):
    """The MILP for one training configuration.

    rho (P, K) and rtp (P, K): rollout rate per GPU and TP of each engine option of each pool
    (one option per pool, as the plan encodes one engine TP per pool); tau (P,): training rate
    per GPU. Returns (rollout GPUs, training GPUs, engine TP option) per pool, or None."""
    h = _highs()
    h.setOptionValue("mip_max_nodes", NODE_LIMIT)
    P, K = rho.shape
    kint = highspy.HighsVarType.kInteger
    e = [[h.addVariable(lb=0, ub=int(counts[i] // rtp[i, k]) if rho[i, k] > 0 else 0, type=kint)
          for k in range(K)] for i in range(P)]
    y = [[h.addVariable(lb=0, ub=1, type=kint) for k in range(K)] for i in range(P)]
    d = [h.addVariable(lb=0, ub=int(counts[i] // g) if tau[i] > 0 else 0, type=kint) for i in range(P)]
    for i in range(P):
        h.addConstr(sum(y[i]) <= 1)
        for k in range(K):
            h.addConstr(e[i][k] - float(counts[i]) * y[i][k] <= 0)
        h.addConstr(sum(float(rtp[i, k]) * e[i][k] for k in range(K)) + float(g) * d[i] <= float(counts[i]))
    train_rate = sum(float(tau[i] * g) * d[i] for i in range(P))
    roll_rate = sum(float(rho[i, k] * rtp[i, k]) * e[i][k] for i in range(P) for k in range(K))
    h.addConstr(roll_rate - train_rate >= 0)
    spend = sum(float(price[i] * rtp[i, k]) * e[i][k] for i in range(P) for k in range(K)) + sum(
        float(price[i] * g) * d[i] for i in range(P))
    if budget is not None:
        h.addConstr(spend <= float(budget))
    h.addConstr(sum(e[i][k] for i in range(P) for k in range(K)) >= 1)
    h.addConstr(sum(d) >= 1)
    # tie-break toward the cheaper plan: 1e-6 of the rate per $/h
    h.maximize(train_rate - 1e-6 * float(max(tau.max(), 1e-9) * g) * spend)
    status = h.getModelStatus()
    stopped = (status == highspy.HighsModelStatus.kSolutionLimit
               and h.getInfo().primal_solution_status == highspy.SolutionStatus.kSolutionStatusFeasible)
    if status != highspy.HighsModelStatus.kOptimal and not stopped:
        return None
    ev = np.rint([[h.val(v) for v in row] for row in e]).astype(int)
    dv = np.rint([h.val(v) for v in d]).astype(int)
    opt = ev.argmax(axis=1)
    return (ev * rtp).sum(axis=1), dv * g, opt


def plan(problem: PlacementProblem, budget_usd_h: float | None = None, evals: int | None = None, seed: int = 0,
         kv_grid=KV_GRID):
    prob = budgeted(problem, budget_usd_h)
    score = Scorer(prob)
    lay = prob.layout
    P = lay.n_pools
    rho, seqs, kv = _rollout_coeffs(score, kv_grid)
    rtp = lay.rtp_options
    configs, cols, tau = _train_coeffs(score)
    counts = lay.counts
    price = np.array([p.gpu.price_usd_h for p in prob.cluster.pools])
    short = set(np.argsort(-(tau @ counts))[:SHORTLIST].tolist())
    short |= {int(np.argmax(tau[:, i])) for i in range(P) if tau[:, i].max() > 0}
    # pool sets: the whole cluster, and each region alone (no egress, which the MILP cannot see)
    regions = [p.region for p in prob.cluster.pools]
    masks = [np.ones(P, bool)] + ([np.array([r == reg for r in regions]) for reg in dict.fromkeys(regions)]
                                  if len(set(regions)) > 1 else [])
    rows, labels = [], []
    for mask, c in itertools.product(masks, sorted(short)):
        g = int(lay.tp_options[int(configs[c, 0])] * lay.pp_options[int(configs[c, 1])])
        b = budget_usd_h
        for _ in range(3):  # the budget binds on GPUs only: shrink it until the full cost fits
            sol = solve(rho * mask[:, None], rtp, tau[c] * mask, g, counts, price, b)
            if sol is None:
                break
            x = template(prob)
            x[:P], x[P:2 * P], x[2 * P:3 * P] = sol
            x[cols] = configs[c]
            x[lay.g("log2_max_num_seqs")], x[lay.g("kv_mem_frac")] = seqs, kv
            k = prob.workload.max_staleness
            x[lay.g("mode")], x[lay.g("staleness_bound")] = (2, k) if k > 0 else (1, 0)
            rows.append(x)
            labels.append(f"milp tp*pp={g} rollout={sol[0].tolist()} train={sol[1].tolist()}")
            cost = float(score(x[None, :])[1][0, 1])
            if b is None or cost <= budget_usd_h:
                break
            b = b * budget_usd_h / cost * 0.98
    if not rows:
        raise ValueError("the MILP has no solution for any training configuration (budget too small?)")
    R, F, ok, viol, _ = score(np.array(rows))
    o = rank(F, ok, viol)
    return score.result("milp", R[o], F[o], ok[o], [labels[i] for i in o], budget_usd_h,
                        rho=rho.tolist())
