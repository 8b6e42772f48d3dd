"""Collective and point-to-point communication times.

Sources (shared reference systems.md): ring all-reduce moves 2(n-1)/n * bytes over the slowest
link of the ring (Metis `_get_dp_cost`, Sailor). Hierarchical (NCCL tree/ring over nodes): GPUs of
a node first reduce over the intra-node link, then nodes all-reduce the whole gradient over their
network interface. ZeRO-3/FSDP gathers parameters in forward and backward and reduce-scatters
gradients: 3 x (n-1)/n x bytes instead of 2 x (ZeRO paper, Rajbhandari et al.).
"""

from __future__ import annotations

import numpy as np
from problems.placement.model.reduce import pmax, psum


def ring_allreduce_s(nbytes, n, bw, latency=0.0):
    """Ring all-reduce of `nbytes` among `n` ranks whose slowest link carries `bw` bytes/s."""
    n = np.asarray(n, dtype=float)
    return np.where(n > 1, 2.0 * (n - 1) / np.maximum(n, 1) * nbytes / bw + 2.0 * (n - 1) * latency, 0.0)


def dp_gradient_sync_s(grad_bytes, dp, gpus_per_replica, nodes, intra, inter_node, cross_bw, n_regions,
                       zero3, latency, gpus_per_node=None):
    """Data-parallel gradient synchronisation of one step.

    grad_bytes: gradient bytes of one whole replica; dp: replicas; nodes: nodes the replicas span;
    intra: slowest intra-node link (bytes/s per GPU); inter_node: slowest node NIC (bytes/s);
    cross_bw: slowest inter-region link among the training regions; n_regions: regions spanned;
    gpus_per_node: the smallest node of the training pools (None: a node holds a whole replica).
    """
    volume = np.where(zero3, 1.5, 1.0)  # relative to an all-reduce
    one_node = nodes <= 1
    # inside one node: a ring over dp ranks, each holding a 1/(tp*pp) shard
    within = ring_allreduce_s(grad_bytes / gpus_per_replica, dp, intra, latency)
    # across nodes: intra-node reduce, then nodes all-reduce what they hold over their NIC: a whole
    # replica's gradient, or, when a replica spans several nodes (tp*pp > GPUs per node), only the
    # shards of its GPUs on that node (each rank all-reduces its own 1/(tp*pp) with its peers)
    held = 1.0 if gpus_per_node is None else np.minimum(1.0, gpus_per_node / np.maximum(gpus_per_replica, 1))
    across = ring_allreduce_s(grad_bytes * held, nodes, inter_node, latency) + ring_allreduce_s(
        grad_bytes / gpus_per_replica, np.minimum(dp, 2), intra, latency)
    t = np.where(one_node, within, across)
    # regions: every extra region exchanges the full gradient once each way over its link
    t = t + np.where(n_regions > 1, 2.0 * (n_regions - 1) * grad_bytes / cross_bw, 0.0)
    return np.where(dp > 1, volume * t, 0.0)


def sync_copies(engines, pool_region, staged, n_regions):
    """Copies the busiest source of the trainer's broadcast sends (trainer/weight_sync.py; gloo sends
    one per receiver): direct, one per engine; staged, one per region, or a leader's fan-out to the
    rest of its region if that is more."""
    per_region = np.stack([psum(engines * (pool_region[None, :] == r)) for r in range(n_regions)], axis=1)
    staged_copies = np.maximum((per_region > 0).sum(axis=1), per_region.max(axis=1) - 1)
    return np.where(staged, staged_copies, psum(engines)).astype(float)


def engine_sync_s(route_s, weight_bytes, engines, copies, load_gbs, overhead_s):
    """A sync as the trainer runs it: the route's transfer over the links, or the copies the busiest
    source pushes through the sync path at its measured rate (sending, loading, pipelined bucket by
    bucket), whichever is slower, plus a fixed cost per sync. engines: (N, P); copies: (N,);
    load_gbs, overhead_s: (P,), fitted from measured syncs (0 = not profiled: no such term)."""
    has = engines > 0
    rate = np.where(load_gbs > 0, load_gbs * 1e9, np.inf)[None, :]
    load = pmax(np.where(has, copies[:, None] * weight_bytes / rate, 0.0))
    return np.maximum(route_s, load) + pmax(np.where(has, overhead_s[None, :], 0.0))


def weight_sync_s(weight_bytes, src_region, engines, pool_region, region_bw, region_lat, region_egress,
                  staged, n_regions):
    """Trainer -> rollout engines after each update, over the slowest link of the route.

    direct: every engine outside the trainers' region pulls its own full copy over the region link;
    staged: one copy crosses to each remote region, then a pipelined broadcast fans out inside it.
    In-region traffic is a pipelined broadcast at the region's node bandwidth (weight_bytes / bw).
    Returns (seconds, cross-region bytes, egress $) per plan.
    """
    N = len(src_region)
    t = np.zeros(N)
    cross = np.zeros(N)
    usd = np.zeros(N)
    for r in range(n_regions):
        e_r = psum(engines * (pool_region[None, :] == r))
        has = e_r > 0
        local = src_region == r
        link = region_bw[src_region, r]
        lat = region_lat[src_region, r]
        fan = region_bw[r, r]
        in_region = weight_bytes / fan
        copies = np.where(staged, 1.0, e_r)
        remote = copies * weight_bytes / link + lat + np.where(staged, weight_bytes / fan, 0.0)
        tr = np.where(local, in_region, remote)
        t = np.maximum(t, np.where(has, tr, 0.0))
        b = np.where(has & ~local, copies * weight_bytes, 0.0)
        cross += b
        usd += b * region_egress[src_region, r]
    return t, cross, usd
