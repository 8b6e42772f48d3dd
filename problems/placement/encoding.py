"""The plan as a fixed-length numeric vector, its structural repair, and the way back to a `Plan`.

Layout for a cluster with P pools (all variables integer-valued except kv_mem_frac):

    [0, P)        rollout GPUs per pool (colocated mode: the pool's shared GPUs)   0..count
    [P, 2P)       training GPUs per pool (ignored in colocated mode)                0..count
    [2P, 3P)      rollout TP, index into the pool's TP options                      0..len-1
    3P + 0        kv_mem_frac (vLLM gpu_memory_utilization)                         real 0.30..0.95
    3P + 1        log2 max_num_seqs                                                 3..10
    3P + 2        training TP, index into TP_OPTIONS                                0..len-1
    3P + 3        training PP, index into PP_OPTIONS                                0..len-1
    3P + 4        sharding, index into SHARDINGS                                    0..4
    3P + 5        log2 micro_batch                                                  0..5
    3P + 6        activation recomputation                                          0..1
    3P + 7        optimizer offload                                                 0..1
    3P + 8        execution mode, index into MODES                                  0..2
    3P + 9        staleness bound k (async only, else repaired to 0)                0..max_staleness
    3P + 10       log2 pipeline_chunks                                              0..5
    3P + 11       weight-sync route, index into ROUTES                              0..1
    3P + 12       expert-parallel size, index into ep_options (mixtures of experts  0..len-1
                  only: a dense workload's vector stops at 3P + 11)

Repair (vectorised over a population) rounds and clips, then makes the plan structurally valid:
TP dividing a node's GPUs and the attention heads; every data-parallel replica (tp*pp GPUs)
inside one pool; rollout GPUs a multiple of the pool's engine TP; role counts within the pool;
at least one replica and one engine (falling back to tp=pp=1 and then to colocated mode); for a mixture
of experts, EP dividing the routed experts (its options) and dp*tp (lowered to the largest option that does).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from problems.placement.names import COLOCATED, MODES, ROUTES, SHARDINGS  # noqa: F401  (read from here too)
from problems.placement.plan import (
    Execution,
    Plan,
    PoolRoles,
    RolloutLayout,
    SpecRef,
    TrainLayout,
    WeightSync,
)
from problems.placement.specs import Cluster, Workload
from problems.placement.model.reduce import pany, pargmax, psum

KV_FRAC_RANGE = (0.30, 0.95)
LOG2_SEQS_RANGE = (3, 10)  # 8..1024 concurrent sequences per engine
LOG2_MB_RANGE = (0, 5)  # micro-batch 1..32
LOG2_CHUNKS_RANGE = (0, 5)  # 1..32 streamed chunks
MAX_PP = 16

GLOBAL_NAMES = ("kv_mem_frac", "log2_max_num_seqs", "train_tp_idx", "train_pp_idx", "sharding",
                "log2_micro_batch", "recompute", "optimizer_offload", "mode", "staleness_bound",
                "log2_pipeline_chunks", "sync_route")
EP_NAME = "train_ep_idx"  # after GLOBAL_NAMES, in a mixture of experts' vectors only
# largest expert-parallel size searched: Megatron-core's MoE recipes go to EP 64 (DeepSeek-V3); beyond it the
# all-to-all spans more nodes than any published layout
MAX_EP = 64


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _pow2_upto(n: int) -> list[int]:
    out, v = [], 1
    while v <= n:
        out.append(v)
        v *= 2
    return out


class PlanOutsideSpace(ValueError):
    """A plan this search space cannot hold; `key` names the plan's key that is outside it."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


@dataclass
class Layout:
    """Variable positions, bounds and option tables for one (cluster, workload)."""

    n_pools: int
    counts: np.ndarray  # (P,) GPUs per pool
    gpn: np.ndarray  # (P,) GPUs per node
    rtp_options: np.ndarray  # (P, K) rollout TP options per pool, padded with the last valid one
    rtp_n: np.ndarray  # (P,) valid options per pool
    tp_options: np.ndarray  # training TP options
    pp_options: np.ndarray
    max_staleness: int
    samples: int
    # the executor the plans are for (problems/placement/executors.py) and what its rules read; None:
    # this project's trainer, no rule beyond the structure
    executor: object | None = None
    rule_ctx: object | None = None
    # expert-parallel sizes searched (divisors of the routed experts up to MAX_EP); None: a dense model
    ep_options: np.ndarray | None = None

    @classmethod
    def build(cls, cluster: Cluster, workload: Workload, executor: str | None = None) -> "Layout":
        m = workload.model
        counts = np.array([p.count for p in cluster.pools], dtype=np.int64)
        gpn = np.array([p.gpus_per_node for p in cluster.pools], dtype=np.int64)
        # TP must shard the attention heads (Architecture.tp_problem: vLLM may replicate KV heads,
        # Megatron may not) and tile a node (a divisor of its GPUs: 1, 2, 3, 6 on a 6-GPU server)
        per_pool = [[t for t in _divisors(int(g)) if t <= c and m.tp_problem(t, kv_replicas=True) is None]
                    for g, c in zip(gpn, counts)]
        k = max(len(o) for o in per_pool)
        rtp = np.array([o + [o[-1]] * (k - len(o)) for o in per_pool], dtype=np.int64)
        tp = np.array(sorted({t for g in gpn for t in _divisors(int(g)) if m.tp_problem(t, kv_replicas=False) is None}),
                      dtype=np.int64)
        pp = np.array(_pow2_upto(min(MAX_PP, workload.model.layers)), dtype=np.int64)
        out = cls(len(counts), counts, gpn, rtp, np.array([len(o) for o in per_pool]), tp, pp,
                  workload.max_staleness, workload.samples_per_step)
        if m.is_moe:
            out.ep_options = np.array([d for d in _divisors(m.experts) if d <= min(MAX_EP, int(counts.sum()))],
                                      dtype=np.int64)
        if executor is not None:
            from problems.placement import executors as E

            ex = E.get(executor)
            if ex.external:
                out.executor = ex
                out.rule_ctx = E.RuleContext(gpn=gpn, layers=m.layers, samples=workload.samples_per_step,
                                             ppo=workload.has_critic, max_staleness=workload.max_staleness)
        return out

    # ------------------------------------------------------------ positions and bounds
    @property
    def moe(self) -> bool:
        return self.ep_options is not None

    @property
    def global_names(self) -> tuple[str, ...]:
        return GLOBAL_NAMES + ((EP_NAME,) if self.moe else ())

    @property
    def n_var(self) -> int:
        return 3 * self.n_pools + len(self.global_names)

    def g(self, name: str) -> int:
        return 3 * self.n_pools + self.global_names.index(name)

    def names(self, pool_ids: list[str]) -> list[str]:
        return ([f"rollout_gpus[{p}]" for p in pool_ids] + [f"train_gpus[{p}]" for p in pool_ids]
                + [f"rollout_tp_idx[{p}]" for p in pool_ids] + list(self.global_names))

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        P = self.n_pools
        xl = np.zeros(self.n_var)
        xu = np.zeros(self.n_var)
        xu[:P] = self.counts
        xu[P:2 * P] = self.counts
        xu[2 * P:3 * P] = self.rtp_n - 1
        lo_hi = {
            "kv_mem_frac": KV_FRAC_RANGE, "log2_max_num_seqs": LOG2_SEQS_RANGE,
            "train_tp_idx": (0, len(self.tp_options) - 1), "train_pp_idx": (0, len(self.pp_options) - 1),
            "sharding": (0, len(SHARDINGS) - 1), "log2_micro_batch": LOG2_MB_RANGE,
            "recompute": (0, 1), "optimizer_offload": (0, 1), "mode": (0, len(MODES) - 1),
            "staleness_bound": (0, self.max_staleness), "log2_pipeline_chunks": LOG2_CHUNKS_RANGE,
            "sync_route": (0, len(ROUTES) - 1),
        }
        if self.moe:
            lo_hi[EP_NAME] = (0, len(self.ep_options) - 1)
        for name, (lo, hi) in lo_hi.items():
            xl[self.g(name)], xu[self.g(name)] = lo, hi
        return xl, xu

    def integer_mask(self) -> np.ndarray:
        mask = np.ones(self.n_var, dtype=bool)
        mask[self.g("kv_mem_frac")] = False
        return mask

    # ------------------------------------------------------------ repair
    def repair(self, X: np.ndarray) -> np.ndarray:
        """Any real matrix (N, n_var) -> structurally valid, integer-valued where integer."""
        X = np.array(X, dtype=float, copy=True)
        if X.ndim == 1:
            X = X[None, :]
        xl, xu = self.bounds()
        X = np.where(np.isfinite(X), X, xl)
        ints = self.integer_mask()
        X[:, ints] = np.rint(X[:, ints])
        kv = self.g("kv_mem_frac")
        X[:, kv] = np.round(X[:, kv], 4)  # the precision a plan file keeps
        X = np.clip(X, xl, xu)
        P = self.n_pools
        if self.executor is not None:  # the executor's modes first: colocated plans share their GPUs
            from problems.placement.executors import pre_repair

            X = pre_repair(self.executor, self, X)

        mode = X[:, self.g("mode")].astype(np.int64)
        X[mode != 2, self.g("staleness_bound")] = 0
        chunk_cap = int(np.floor(np.log2(max(1, self.samples))))
        X[:, self.g("log2_pipeline_chunks")] = np.minimum(X[:, self.g("log2_pipeline_chunks")], chunk_cap)
        mb_cap = int(np.floor(np.log2(max(1, self.samples))))
        X[:, self.g("log2_micro_batch")] = np.minimum(X[:, self.g("log2_micro_batch")], mb_cap)

        roll = X[:, :P].astype(np.int64)
        train = X[:, P:2 * P].astype(np.int64)
        rtp_idx = X[:, 2 * P:3 * P].astype(np.int64)
        tp_idx = X[:, self.g("train_tp_idx")].astype(np.int64)
        pp_idx = X[:, self.g("train_pp_idx")].astype(np.int64)
        counts = self.counts[None, :]
        pool_ix = np.arange(P)[None, :]

        def unit(tp_i, pp_i):
            """GPUs per replica and whether each pool can host one: (N,) and (N,P)."""
            tp = self.tp_options[tp_i]
            g = tp * self.pp_options[pp_i]
            host = (self.gpn[None, :] % tp[:, None] == 0) & (g[:, None] <= counts)
            return tp, g, host

        # a replica that no pool can host: shrink pp, then tp, until one fits
        tp, g, host = unit(tp_idx, pp_idx)
        for _ in range(len(self.pp_options) + len(self.tp_options)):
            bad = ~pany(host)
            if not bad.any():
                break
            shrink_pp = bad & (pp_idx > 0)
            pp_idx = np.where(shrink_pp, pp_idx - 1, pp_idx)
            tp_idx = np.where(bad & ~shrink_pp & (tp_idx > 0), tp_idx - 1, tp_idx)
            tp, g, host = unit(tp_idx, pp_idx)
        rtp = np.take_along_axis(self.rtp_options, rtp_idx.T, axis=1).T  # (N,P)

        colo = mode == 0
        # ---- disaggregated / async: disjoint roles
        t = np.where(host, (train // g[:, None]) * g[:, None], 0)
        none = (psum(t) == 0) & ~colo
        if none.any():  # give one replica to the largest pool that can host it
            best = pargmax(np.where(host, counts, -1))
            t = np.where(none[:, None] & (pool_ix == best[:, None]), g[:, None], t)
        r = np.minimum(roll, counts - t)
        r = (r // rtp) * rtp
        no_eng = (psum(r) == 0) & ~colo
        if no_eng.any():
            free = counts - t
            fits = free >= rtp
            has_fit = pany(fits)
            pick = pargmax(np.where(fits, free, -1))
            a = no_eng & has_fit
            r = np.where(a[:, None] & (pool_ix == pick[:, None]), rtp, r)
            # no free GPUs for an engine of that TP: one GPU with TP 1
            b = no_eng & ~has_fit & pany(free >= 1)
            pick1 = pargmax(free)
            sel = b[:, None] & (pool_ix == pick1[:, None])
            r = np.where(sel, 1, r)
            rtp_idx = np.where(sel, 0, rtp_idx)
            rtp = np.where(sel, self.rtp_options[:, 0][None, :], rtp)
            # every GPU trains: give one replica's GPUs back to rollout
            c = no_eng & ~has_fit & ~pany(free >= 1)
            if c.any():
                most = pargmax(t)
                sel = c[:, None] & (pool_ix == most[:, None])
                t = np.where(sel, t - g[:, None], t)
                wide = sel & (rtp > g[:, None])  # an engine wider than the freed GPUs: TP 1
                rtp_idx = np.where(wide, 0, rtp_idx)
                rtp = np.where(wide, self.rtp_options[:, 0][None, :], rtp)
                r = np.where(sel, (g[:, None] // rtp) * rtp, r)
                # that was the only replica: fall back to colocated
                colo = colo | (c & (psum(t) == 0))
        # ---- colocated: shared GPUs hold a whole number of replicas and engines
        lcm = np.lcm(rtp, g[:, None])
        s = np.where(host, (roll // lcm) * lcm, 0)
        none = psum(s) == 0
        if (none & colo).any():
            ok = host & (lcm <= counts)
            best = pargmax(np.where(ok, counts, -1))
            has = pany(ok)
            s = np.where((none & has)[:, None] & (pool_ix == best[:, None]), lcm, s)
            # no pool fits lcm(engine TP, replica): engine TP 1 and replica 1 GPU
            z = none & colo & ~has
            if z.any():
                tp_idx = np.where(z, 0, tp_idx)
                pp_idx = np.where(z, 0, pp_idx)
                rtp_idx = np.where(z[:, None], 0, rtp_idx)
                s = np.where(z[:, None] & (pool_ix == int(np.argmax(self.counts))), 1, s)

        X[:, :P] = np.where(colo[:, None], s, r)
        X[:, P:2 * P] = np.where(colo[:, None], s, t)
        X[:, 2 * P:3 * P] = rtp_idx
        X[:, self.g("train_tp_idx")] = tp_idx
        X[:, self.g("train_pp_idx")] = pp_idx
        X[:, self.g("mode")] = np.where(colo, 0, mode)
        X[colo, self.g("staleness_bound")] = 0
        X[colo, self.g("log2_pipeline_chunks")] = 0  # colocated phases run back to back: nothing streams
        if self.executor is not None:  # then what the executor can express (counts, TPs, knobs)
            from problems.placement.executors import post_repair

            for _ in range(2):  # EP decides the executor's backend; its node rounding may lower dp
                X = self.repair_ep(X)
                X = post_repair(self.executor, self, X, self.rule_ctx)
        return self.repair_ep(X)

    def repair_ep(self, X: np.ndarray) -> np.ndarray:
        """A mixture of experts' EP lowered to the largest option dividing dp*tp (the plan schema's rule:
        expert-parallel groups are carved from one stage's data- and tensor-parallel ranks); EP 1 always does."""
        if not self.moe or len(X) == 0:
            return X
        P = self.n_pools
        colo = X[:, self.g("mode")].astype(np.int64) == 0
        train = np.where(colo[:, None], X[:, :P], X[:, P:2 * P]).sum(axis=1).astype(np.int64)
        tp = self.tp_options[X[:, self.g("train_tp_idx")].astype(np.int64)]
        pp = self.pp_options[X[:, self.g("train_pp_idx")].astype(np.int64)]
        grid = np.maximum(train // (tp * pp), 1) * tp
        j = self.g(EP_NAME)
        want = X[:, j].astype(np.int64)
        idx = np.arange(len(self.ep_options))[None, :]
        ok = (grid[:, None] % self.ep_options[None, :] == 0) & (idx <= want[:, None])
        X[:, j] = np.max(np.where(ok, idx, 0), axis=1)
        return X

    # ------------------------------------------------------------ vector -> fields
    def fields(self, X: np.ndarray) -> dict[str, np.ndarray]:
        """Named integer/real fields of a repaired population (no validation)."""
        X = np.atleast_2d(X)
        P = self.n_pools
        mode = X[:, self.g("mode")].astype(np.int64)
        colo = mode == 0
        a = X[:, :P].astype(np.int64)
        b = X[:, P:2 * P].astype(np.int64)
        rtp_idx = X[:, 2 * P:3 * P].astype(np.int64)
        z = np.zeros_like(a)
        return {
            "rollout_gpus": np.where(colo[:, None], z, a),
            "train_gpus": np.where(colo[:, None], z, b),
            "shared_gpus": np.where(colo[:, None], a, z),
            "rollout_tp": np.take_along_axis(self.rtp_options, np.clip(rtp_idx, 0, None).T, axis=1).T,
            "kv_mem_frac": X[:, self.g("kv_mem_frac")].astype(float),
            "max_num_seqs": 2 ** X[:, self.g("log2_max_num_seqs")].astype(np.int64),
            "tp": self.tp_options[X[:, self.g("train_tp_idx")].astype(np.int64)],
            "pp": self.pp_options[X[:, self.g("train_pp_idx")].astype(np.int64)],
            "sharding": X[:, self.g("sharding")].astype(np.int64),
            "micro_batch": 2 ** X[:, self.g("log2_micro_batch")].astype(np.int64),
            "recompute": X[:, self.g("recompute")].astype(np.int64),
            "optimizer_offload": X[:, self.g("optimizer_offload")].astype(np.int64),
            "mode": mode,
            "staleness_bound": X[:, self.g("staleness_bound")].astype(np.int64),
            "pipeline_chunks": 2 ** X[:, self.g("log2_pipeline_chunks")].astype(np.int64),
            "route": X[:, self.g("sync_route")].astype(np.int64),
            **({"ep": self.ep_options[X[:, self.g(EP_NAME)].astype(np.int64)]} if self.moe else {}),
        }

    # ------------------------------------------------------------ Plan <-> vector
    def to_plan(self, x: np.ndarray, cluster: Cluster, cluster_ref: SpecRef, workload_ref: SpecRef,
                plan_id: str, predicted: dict[str, float] | None = None) -> Plan:
        f = {k: v[0] for k, v in self.fields(np.atleast_2d(x)).items()}
        tp, pp = int(f["tp"]), int(f["pp"])
        pools = [PoolRoles(pool=p.id, gpu=p.gpu.name, region=p.region,
                           rollout_gpus=int(f["rollout_gpus"][i]), train_gpus=int(f["train_gpus"][i]),
                           shared_gpus=int(f["shared_gpus"][i]), rollout_tp=int(f["rollout_tp"][i]))
                 for i, p in enumerate(cluster.pools)]
        n_train = int((f["train_gpus"] + f["shared_gpus"]).sum())
        return Plan(
            plan_id=plan_id, cluster=cluster_ref, workload=workload_ref, pools=pools,
            rollout=RolloutLayout(kv_mem_frac=float(f["kv_mem_frac"]), max_num_seqs=int(f["max_num_seqs"])),
            train=TrainLayout(dp=n_train // (tp * pp), tp=tp, pp=pp, sharding=SHARDINGS[int(f["sharding"])],
                              micro_batch=int(f["micro_batch"]), recompute=bool(f["recompute"]),
                              optimizer_offload=bool(f["optimizer_offload"]), ep=int(f.get("ep", 1))),
            execution=Execution(mode=MODES[int(f["mode"])], staleness_bound=int(f["staleness_bound"]),
                                pipeline_chunks=int(f["pipeline_chunks"])),
            weight_sync=WeightSync(route=ROUTES[int(f["route"])]),
            predicted=predicted or {},
            executor=self.executor.name if self.executor is not None else None,
        )

    def from_plan(self, plan: Plan, cluster: Cluster) -> np.ndarray:
        """The vector of a plan (pools matched by id). Raises ValueError for a plan this space cannot hold."""
        P = self.n_pools
        x = np.zeros(self.n_var)
        by_id = {p.pool: p for p in plan.pools}
        # a pool the plan leaves idle may be one the problem left out (problem.py: its precision)
        unknown = sorted({p.pool for p in plan.pools if p.used_gpus} - {p.id for p in cluster.pools})
        if unknown:
            raise PlanOutsideSpace("pools", f"plan names pools not in the cluster: {', '.join(unknown)}")
        colo = plan.execution.mode == COLOCATED
        for i, pool in enumerate(cluster.pools):
            roles = by_id.get(pool.id)
            if roles is None:
                x[2 * P + i] = 0
                continue
            x[i] = roles.shared_gpus if colo else roles.rollout_gpus
            x[P + i] = roles.shared_gpus if colo else roles.train_gpus
            opts = [int(t) for t in self.rtp_options[i][: self.rtp_n[i]]]
            if roles.rollout_tp not in opts:
                raise PlanOutsideSpace(f"pools[{plan.pools.index(roles)}].rollout_tp", f"rollout_tp {roles.rollout_tp} is "
                                       f"not an option for pool {pool.id}: {', '.join(map(str, opts))}")
            x[2 * P + i] = opts.index(roles.rollout_tp)

        def index(options, value, what):
            options = [int(o) for o in options]
            if value not in options:
                raise PlanOutsideSpace(what, f"{what} {value} is not one of {', '.join(map(str, options))}")
            return options.index(value)

        t = plan.train
        x[self.g("kv_mem_frac")] = plan.rollout.kv_mem_frac
        x[self.g("log2_max_num_seqs")] = np.log2(plan.rollout.max_num_seqs)
        x[self.g("train_tp_idx")] = index(self.tp_options, t.tp, "train.tp")
        x[self.g("train_pp_idx")] = index(self.pp_options, t.pp, "train.pp")
        x[self.g("sharding")] = SHARDINGS.index(t.sharding)
        x[self.g("log2_micro_batch")] = np.log2(t.micro_batch)
        x[self.g("recompute")] = int(t.recompute)
        x[self.g("optimizer_offload")] = int(t.optimizer_offload)
        x[self.g("mode")] = MODES.index(plan.execution.mode)
        x[self.g("staleness_bound")] = plan.execution.staleness_bound
        x[self.g("log2_pipeline_chunks")] = np.log2(plan.execution.pipeline_chunks)
        x[self.g("sync_route")] = ROUTES.index(plan.weight_sync.route)
        if self.moe:
            x[self.g(EP_NAME)] = index(self.ep_options, t.ep, "train.ep")
        elif t.ep != 1:
            raise PlanOutsideSpace("train.ep", f"train.ep {t.ep} for a dense model (expert parallelism needs experts)")
        return x
