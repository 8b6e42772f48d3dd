"""Collective and point-to-point communication times.

Sources (shared reference systems.md): ring all-reduce moves 2(n-1)/n * bytes over the slowest
link of the ring (Metis `_get_dp_cost`, Sailor). Hierarchical (NCCL tree/ring over nodes): GPUs of
a node first reduce over the intra-node link, then nodes all-reduce the whole gradient over their
network interface. ZeRO-1/2 (Megatron's distributed optimizer) move one all-reduce's volume per step
(reduce-scatter of gradients, all-gather of updated weights). ZeRO-3/FSDP gathers the weights in
every forward and (resharding after forward, FSDP2's and DeepSpeed's default) again in the backward,
and reduce-scatters gradients, every micro-batch (ZeRO paper, Rajbhandari et al.; FSDP2 without
`no_sync`); prefetching the next unit overlaps that traffic with compute, so only what exceeds the
micro-batch's compute, and each pass's first unit, is exposed (`fsdp_traffic_s`).

Small messages pay a fixed cost per collective (the alpha of the alpha-beta model: Hockney 1994;
Thakur, Rabenseifner & Gropp 2005), so layouts that issue many small collectives per micro-batch
(tensor parallelism, FSDP units, pipeline sends) are charged count x (latency + per-op overhead)
with the counts derived from the layout (`tp_collectives`, `fsdp_collectives`).
"""

from __future__ import annotations

import numpy as np
from problems.placement.model.reduce import pmax, psum


def ring_allreduce_s(nbytes, n, bw, latency=0.0):
    """Ring all-reduce of `nbytes` among `n` ranks whose slowest link carries `bw` bytes/s."""
    n = np.asarray(n, dtype=float)
    return np.where(n > 1, 2.0 * (n - 1) / np.maximum(n, 1) * nbytes / bw + 2.0 * (n - 1) * latency, 0.0)


def tp_collectives(n_fwd, n_bwd, gated=True, split_projections=False):
    """All-reduces one transformer layer's tensor-parallel group issues per micro-batch.

    Forward: one after each row-parallel projection (attention output, MLP down): 2 per pass.
    Backward: one on the input gradient of each column-parallel block: Megatron-LM fuses q/k/v and
    gate/up into one column-parallel matrix each (2 per pass, Shoeybi et al. 2019); DTensor's
    `parallelize_module` on Hugging Face layers (mosearch's trainer) parallelises q, k, v, gate and
    up separately, each reducing its own input gradient (5 per pass; 4 for a plain MLP)."""
    bwd = np.where(split_projections, 3.0 + np.where(gated, 2.0, 1.0), 2.0)
    return 2.0 * n_fwd + bwd * n_bwd


def fsdp_collectives(units, n_fwd, n_bwd):
    """(all-gathers, reduce-scatters) per micro-batch of FSDP / ZeRO-3 with `units` sharded units (each
    decoder layer one, the root holding embedding, norm and head another), gradients reduced every
    micro-batch (FSDP2 without `no_sync`): every forward gathers each unit; every backward gathers
    each again except the root, which stays gathered from its forward (FSDP2 keeps the root unsharded
    after forward), and reduce-scatters each unit's gradient once."""
    units = np.asarray(units, dtype=float)
    return n_fwd * units + n_bwd * (units - 1.0), n_bwd * units


def dp_ring_bw(intra, inter, gpn, gpus_per_replica, nodes, cross_bw, n_regions):
    """Bytes/s per rank of a ring over the data-parallel ranks that hold one shard (one GPU of each
    replica). Inside one node: the node's link. Across nodes: a node's NIC carries the rings of as many
    shards as the node holds GPUs of one replica (min(GPUs per node, tp x pp)), each its share. Across
    regions: the region link carries the rings of all tp x pp shards."""
    g = np.maximum(np.asarray(gpus_per_replica, dtype=float), 1.0)
    shards = np.minimum(gpn, g)
    bw = np.where(nodes > 1, np.minimum(intra, inter / shards), intra)
    return np.where(n_regions > 1, np.minimum(bw, cross_bw / g), bw)


def fsdp_traffic_s(weight_bytes, grad_bytes, dp, ring_bw, latency, gathers, scatters):
    """(seconds of one micro-batch's ZeRO-3 / FSDP traffic, seconds of one all-gather) for a rank whose
    stage shard is `weight_bytes` of weights and `grad_bytes` of gradients: `gathers` all-gathers of the
    weights (each forward pass; each backward again when units reshard after forward) and `scatters`
    reduce-scatters of the gradients (each backward), each a ring over the dp ranks: (dp - 1)/dp of the
    bytes over `ring_bw` plus dp - 1 latencies (Rajbhandari et al., ZeRO; PyTorch FSDP2 `fully_shard`)."""
    frac = (dp - 1.0) / np.maximum(dp, 1.0)
    ag = np.where(dp > 1, frac * weight_bytes / ring_bw + (dp - 1.0) * latency, 0.0)
    rs = np.where(dp > 1, frac * grad_bytes / ring_bw + (dp - 1.0) * latency, 0.0)
    return gathers * ag + scatters * rs, ag


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
    """Copies on the critical path of the trainer's broadcast sync (trainer/weight_sync.py; gloo sends
    one per receiver): direct, one per engine from the source; staged, one per region from the
    source, then the biggest region's leader forwards to the rest of its region after it received
    them (no credit for overlapping the two across buckets: the trainer's leader forwards a bucket
    before loading it, and engines sharing a host send one after the other). So inside one region
    staged moves as many copies as direct; its gain is the slow links it does not cross (`weight_sync_s`)."""
    per_region = np.stack([psum(engines * (pool_region[None, :] == r)) for r in range(n_regions)], axis=1)
    staged_copies = (per_region > 0).sum(axis=1) + np.maximum(per_region.max(axis=1) - 1, 0)
    return np.where(staged, staged_copies, psum(engines)).astype(float)


# Weight-sync bucket: 512 MiB, verl's default `update_weights_bucket_megabytes` (checkpoint engine),
# which mosearch's trainer also uses (trainer/weight_sync.py)
SYNC_BUCKET_BYTES = 512 << 20


def sync_broadcasts(weight_bytes, bucket_bytes=SYNC_BUCKET_BYTES):
    """Broadcasts of one sync on each group: a header and a body per bucket, then an end marker."""
    return 2.0 * np.ceil(np.asarray(weight_bytes, dtype=float) / bucket_bytes) + 1.0


# bytes a sync's source moves through its memory per weight byte: packing a bucket and framing it are
# a copy each, read + write (trainer/weight_sync.py: `pack`, `_frame`)
PACK_BYTES_PER_BYTE = 4.0


# a colocated hand-over (trainer/weight_sync.py `SharedBucket`): the bucket is packed straight into
# memory the engines map, one copy (read + write); the group carries a small handle, then a barrier
HANDOVER_PACK_BYTES_PER_BYTE = 2.0


def engine_sync_s(route_s, weight_bytes, engines, copies, load_gbs, overhead_s, send_gbs=None, p2p_latency_s=None,
                  pack_bw=None, handover=None):
    """A sync as the trainer runs it (trainer/weight_sync.py): the source packs the weights into
    buckets (`PACK_BYTES_PER_BYTE` through its memory at `pack_bw` bytes/s, (N,)), the busiest source sends `copies`
    copies one after the other (gloo's broadcast sends once to each receiver), each copy its bytes at
    the measured broadcast rate plus one point-to-point latency per broadcast (`sync_broadcasts`); the
    route's link transfer, if slower, bounds the same bytes. Then the engines unpack and reload the
    weights, all at once (each engine its own process and device): once per sync, at the fitted
    rate, plus a fixed cost per sync (calls, reload bookkeeping). engines: (N, P); copies: (N,); load_gbs,
    overhead_s, send_gbs, p2p_latency_s: (P,) (0 = not profiled: no such term).
    handover (N,): colocated plans, whose engines map the source's buckets: one packing copy, no
    payload sent, per bucket a handle's two broadcasts and a barrier (two more latencies)."""
    has = engines > 0
    P = engines.shape[1]
    send_gbs = np.zeros(P) if send_gbs is None else send_gbs
    lat = np.zeros(P) if p2p_latency_s is None else p2p_latency_s
    per_copy = (np.where(send_gbs > 0, weight_bytes / np.maximum(send_gbs, 1e-30) / 1e9, 0.0)
                + sync_broadcasts(weight_bytes) * lat)[None, :]
    send = pmax(np.where(has, copies[:, None] * per_copy, 0.0))
    rate = np.where(load_gbs > 0, load_gbs * 1e9, np.inf)[None, :]
    # each engine reloads in its own process on its own device, all at once: measured on this
    # machine's two CPU devices, two engines reload the 50M model in 0.155 s, one in 0.144 s
    # (results/bench/weight_sync.md, a quiet run)
    load = pmax(np.where(has, weight_bytes / rate + overhead_s[None, :], 0.0))
    pack = 0.0 if pack_bw is None else PACK_BYTES_PER_BYTE * weight_bytes / pack_bw
    if handover is None:
        return pack + np.maximum(route_s, send) + load
    handles = pmax(np.where(has, ((sync_broadcasts(weight_bytes) - 1.0) * 2.0 + 1.0) * lat[None, :], 0.0))
    hand_pack = 0.0 if pack_bw is None else HANDOVER_PACK_BYTES_PER_BYTE * weight_bytes / pack_bw
    return np.where(handover, hand_pack + handles + load, pack + np.maximum(route_s, send) + load)


def sync_gather_s(weight_bytes, tensors, tp_tensors, tp, pp, dp, sharded, tp_op_s, fsdp_op_s, coll_lat, p2p_lat, bw):
    """Gathering the full weights on the sync's source when the trainer is cut or sharded, tensor
    by tensor in state-dict order, every rank together (trainer/workers.py::iter_full_state; verl's
    FSDP -> vLLM sync gathers the same way): a TP-sharded tensor is one all-gather over tp (DTensor's
    per-op cost + its ring latency), a ZeRO-3 / FSDP tensor one all-gather over dp (FSDP's per-op cost),
    and with pp every tensor is broadcast from its stage (a point-to-point latency); the bytes cross
    at `bw`. All (N,) except the counts; 0 for a replicated trainer."""
    t_tp = np.where(tp > 1, tp_tensors * (tp_op_s + (tp - 1) * coll_lat) + weight_bytes * (tp - 1) / tp / bw, 0.0)
    t_dp = np.where(sharded & (dp > 1),
                    tensors * (fsdp_op_s + (dp - 1) * coll_lat) + weight_bytes / tp * (dp - 1) / dp / bw, 0.0)
    t_pp = np.where(pp > 1, tensors * p2p_lat + weight_bytes * (pp - 1) / pp / bw, 0.0)
    return t_tp + t_dp + t_pp


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
