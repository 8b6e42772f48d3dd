"""Weight-sync time: the one function the planner, `predict` and a run's summary use.

A sync as the trainer runs it (comm.py holds its parts): the source gathers the full weights when
the trainer is cut or sharded (`sync_gather_s`), packs them into buckets and sends copies along the
plan's route (`weight_sync_s`, `sync_copies`, `engine_sync_s`), then the engines reload; a colocated
plan hands its buckets over in place. `sync_s` composes these over a population of plans;
`layout_sync_s` scores the engines a run actually had (a run summary lists them one by one).
"""

from __future__ import annotations

import numpy as np

from problems.placement.model.comm import engine_sync_s, sync_copies, sync_gather_s, weight_sync_s
from problems.placement.model.memory import params_sharded

# the efficiency figures (per pool) a sync reads
SYNC_EFF = ("sync_load_gbs", "sync_overhead_s", "sync_send_gbs", "p2p_latency_s")
GATHER_EFF = ("tp_op_s", "fsdp_op_s", "collective_latency_s", "p2p_latency_s")


def sync_s(weight_bytes, src_region, engines, pool_region, region_bw, region_lat, region_egress, staged,
           n_regions: int, eff: dict, pack_bw, handover, gather: dict | None = None):
    """(seconds, cross-region bytes, egress $) of one sync per plan.

    engines (N, P): engines per pool; pool_region (P,); src_region (N,); region_* (R, R) in bytes/s, s and
    $/byte; staged, handover (N,) bool; eff: SYNC_EFF -> (P,) figures of the engines' pools; pack_bw (N,)
    bytes/s of the source's memory. gather: the source's gather of a cut or sharded trainer, keys
    tensors, tp_tensors (counts), tp, pp, dp, sharding (N,), bw (N,) bytes/s and GATHER_EFF (N,) of the
    source; None skips it. A colocated hand-over moves no bytes between regions."""
    route, cross, usd = weight_sync_s(weight_bytes, src_region, engines, pool_region, region_bw, region_lat,
                                      region_egress, staged, n_regions)
    copies = sync_copies(engines, pool_region, staged, n_regions)
    t = engine_sync_s(route, weight_bytes, engines, copies, *(eff[k] for k in SYNC_EFF), pack_bw=pack_bw,
                      handover=handover)
    if gather is not None:
        g = gather
        t = t + sync_gather_s(weight_bytes, g["tensors"], g["tp_tensors"], g["tp"], g["pp"], g["dp"],
                              params_sharded(g["sharding"]), *(g[k] for k in GATHER_EFF), g["bw"])
    return t, np.where(handover, 0.0, cross), np.where(handover, 0.0, usd)


def layout_sync_s(cluster, copy_bytes: float, engine_regions: list[str], engine_gpus: list[str],
                  sender_region: str, staged: bool, handover: bool = False, arch=None, train: dict | None = None
                  ) -> float:
    """`sync_s` for engines given one by one (a run's), grouped into one pseudo-pool per (GPU type, region)
    of `cluster`; with the architecture `arch` and the trainer's layout `train` (tp, pp, dp, sharding) the
    source's gather of a cut or sharded trainer first. Efficiencies: the model's defaults and the
    cluster's profiles."""
    from problems.placement.model.params import DEFAULTS
    from problems.placement.names import SHARDINGS

    regions = cluster.regions
    keys = list(zip(engine_gpus or [None] * len(engine_regions), engine_regions))
    pools = list(dict.fromkeys(keys))
    engines = np.array([[keys.count(k) for k in pools]], dtype=float)
    eff = [DEFAULTS | cluster.efficiencies.get(g, {}) for g, _ in pools]
    # the source packs at its device's memory bandwidth: the sender region's first pool
    src = next((p for p in cluster.pools if p.region == sender_region), cluster.pools[0])
    gather = None
    if arch is not None and train:
        e = DEFAULTS | cluster.efficiencies.get(src.gpu.name, {})
        one = lambda v: np.array([v])  # noqa: E731
        gather = {"tensors": arch.state_tensors, "tp_tensors": arch.tp_sharded_tensors,
                  **{k: one(train.get(k, 1)) for k in ("tp", "pp", "dp")},
                  "sharding": one(SHARDINGS.index(train.get("sharding", "none"))), "bw": one(src.intra_gbs * 1e9),
                  **{k: one(e[k]) for k in GATHER_EFF}}
    t, _, _ = sync_s(copy_bytes, np.array([regions.index(sender_region)]), engines,
                     np.array([regions.index(r) for _, r in pools]), cluster.region_bw * 1e9, cluster.region_latency,
                     cluster.region_egress / 1e9, np.array([staged]), len(regions),
                     {k: np.array([x[k] for x in eff]) for k in SYNC_EFF},
                     np.array([src.gpu.bandwidth_tbs * 1e12]), np.array([handover]), gather)
    return float(t[0])
