"""Profiling-guided calibration: fit the performance model's per-device parameters to measurements.

A profile (written by `mosearch profile`) holds raw measurements of one device type and the
parameters fitted from them. Each fit is a small least-squares problem of the form the model
uses, `seconds = overhead + work / rate`, so the fitted rate is comparable to the catalog's peak
times efficiency, and the fixed overhead (kernel launches, Python, scheduling) that dominates small
models is kept instead of being folded into a wrong efficiency.
"""

from __future__ import annotations

import numpy as np

from problems.placement.profile import Fitted


def _line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least squares y = a + b x with a >= 0 and b > 0 (refit through the origin if a < 0)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) >= 2 and np.ptp(x) > 0:
        b, a = np.polyfit(x, y, 1)
        if a >= 0 and b > 0:
            return float(a), float(b)
    b = float((x @ y) / (x @ x))
    return 0.0, max(b, 1e-30)


def fit(measurements: dict, params: int, layers: int, hidden: int, kv_bytes_per_token: int,
        weight_bytes: int, ffn: int | None = None, gated: bool = True, bytes_per_elem: int = 4) -> Fitted:
    """Fit the model's parameters from the rows `mosearch.profile.measure` returns.

    Each fit mirrors the formula the model evaluates with the fitted value, so a profile
    reproduces its own measurements: e.g. the training model adds element-wise HBM traffic at
    the decode bandwidth efficiency to the FLOP time, so that traffic is taken out of the
    measured step times before the FLOP rate (mfu) is fitted.
    """
    from problems.placement.model.memory import state_bytes_per_param
    from problems.placement.model.training import layer_elementwise_bytes

    m = measurements
    tflops = max(r["tflops"] for r in m["matmul"])
    bw_tbs = float(np.median([r["gbs"] for r in m["memory_bandwidth"]])) / 1e3

    # decode step: read the weights once and each sequence's KV cache (bandwidth bound)
    dc = m["decode"]
    moved = np.array([weight_bytes + r["batch"] * r["context"] * kv_bytes_per_token for r in dc])
    over_d, sec_per_byte = _line(moved, [r["step_seconds"] for r in dc])
    decode_eff = min(1.0, 1 / (sec_per_byte * bw_tbs * 1e12))

    # training: 6 N t FLOPs per step (systems.md) + attention 12 L h s t (Narayanan et al.), after
    # the element-wise traffic of one forward + backward (flash-style attention, as the model assumes)
    tr = m["train_step"]
    flops = np.array([6 * params * r["tokens"] + 12 * layers * hidden * r["seq_len"] * r["tokens"] for r in tr])
    tokens = np.array([r["tokens"] for r in tr], float)
    ew_f, ew_b = layer_elementwise_bytes(tokens, hidden, ffn or 4 * hidden, bytes_per_elem, gated)
    ew_s = layers * (ew_f + ew_b) / (bw_tbs * 1e12 * decode_eff)
    # one micro-batch's forward + backward: the model adds the optimizer update once per step on its
    # own (Adam states streamed through memory); older profiles timed it with every grid step, so take
    # the model's own estimate of it out of those
    adam_s = params * 2 * sum(state_bytes_per_param(bytes_per_elem)) / (bw_tbs * 1e12 * decode_eff)
    seconds = np.array([r["fwd_bwd_seconds"] if "fwd_bwd_seconds" in r else r["seconds"] - adam_s for r in tr]) - ew_s
    over_t, sec_per_flop = _line(flops, seconds)
    mfu = min(1.0, 1 / (sec_per_flop * tflops * 1e12))

    # prefill: 2 N t FLOPs
    pf = m["prefill"]
    over_p, sec_per_flop_p = _line(np.array([2 * params * r["tokens"] for r in pf]), [r["seconds"] for r in pf])
    prefill_eff = min(1.0, 1 / (sec_per_flop_p * tflops * 1e12))

    coll = m.get("collective") or []
    lat = collective_latencies(coll)
    # a sync (model/comm.py::engine_sync_s): copies x (bytes at the broadcast rate + latencies), then
    # the rest once per sync; take the measured send out, fit the rest as fixed cost + bytes / rate
    from problems.placement.model.comm import PACK_BYTES_PER_BYTE, sync_broadcasts

    send_gbs = lat.get("bcast_gbs") or 0.0
    p2p = lat.get("p2p_latency_s") or 0.0
    ws = m["weight_sync"]
    rest = [r["seconds"] - r.get("copies", 1) * ((r["bytes"] / send_gbs / 1e9 if send_gbs else 0.0)
                                                 + float(sync_broadcasts(r["bytes"])) * p2p)
            - (PACK_BYTES_PER_BYTE * r["bytes"] / (bw_tbs * 1e12) if r.get("copies", 1) else 0.0) for r in ws]
    sync_over, sync_gbs = 0.0, max(r["bytes"] for r in ws) / max(min(rest), 1e-9) / 1e9
    if len({r["bytes"] for r in ws}) >= 2:  # two model sizes: a fixed cost per engine + a rate
        sync_over, sec_per_byte = _line([r["bytes"] for r in ws], rest)
        sync_gbs = 1 / sec_per_byte / 1e9
    intra = max((r["bus_gbs"] for r in coll if r.get("op", "all_reduce") == "all_reduce"), default=None)
    switch = sum(r["seconds"] for r in m.get("offload", [])) + sum(r["seconds"] for r in m.get("engine_switch", []))
    return Fitted(tflops=tflops, bandwidth_tbs=bw_tbs, mfu=mfu, train_overhead_s=over_t, prefill_eff=prefill_eff,
                  prefill_overhead_s=over_p, decode_eff=decode_eff, decode_step_overhead_s=over_d, intra_gbs=intra,
                  sync_gbs=sync_gbs, sync_overhead_s=sync_over, switch_s=switch, **lat)


SMALL_MESSAGE = 1 << 16  # bytes: at or below this a collective's time is its latency (alpha)


def collective_latencies(rows: list[dict]) -> dict:
    """Alphas and per-op costs from the profile's collective grid (`mosearch.profile.measure.collective`).

    alpha: the fastest small-message time of each op (latency-bound there; a least-squares intercept
    over 4 KiB - 32 MiB would be set by the large messages' noise): a ring all-reduce over n ranks
    takes 2(n - 1) steps, a broadcast sends n - 1 copies (one per peer: a point-to-point send).
    Per-op cost: the wrapped layer's time minus the plain one's, per collective it issued, minus
    the bare collective's own time at that size (interpolated on the measured all-reduce rows)."""
    out: dict = {}
    small = lambda op: [r for r in rows if r.get("op", "all_reduce") == op and r.get("bytes", 0) <= SMALL_MESSAGE]  # noqa: E731
    ar, bc, ag = small("all_reduce"), small("broadcast"), small("all_gather")
    if ar:
        r = min(ar, key=lambda r: r["seconds"])
        out["collective_latency_s"] = r["seconds"] / (2 * (r["world"] - 1))
    if bc:
        r = min(bc, key=lambda r: r["seconds"])
        out["p2p_latency_s"] = r["seconds"] / (r["world"] - 1)
    big = [r for r in rows if r.get("op") == "broadcast" and r["bytes"] > SMALL_MESSAGE]
    if big:  # bandwidth-bound: the largest message (one copy per peer)
        r = max(big, key=lambda r: r["bytes"])
        out["bcast_gbs"] = r["bytes"] / (r["seconds"] / (r["world"] - 1)) / 1e9
    full = sorted((r["bytes"], r["seconds"]) for r in rows if r.get("op", "all_reduce") == "all_reduce" and "bytes" in r)
    bare = lambda nbytes: float(np.interp(nbytes, [b for b, _ in full], [t for _, t in full])) if full else 0.0  # noqa: E731
    for r in rows:
        if r.get("op") == "tp_layer":
            out["tp_op_s"] = max(0.0, (r["seconds"] - r["plain_seconds"]) / r["collectives"] - bare(r["bytes"]))
        elif r.get("op") == "fsdp_units" and r["collectives"] > 0:
            gather = min((x["seconds"] for x in ag), default=0.0)
            out["fsdp_op_s"] = max(0.0, (r["seconds"] - r["plain_seconds"]) / r["collectives"] - gather)
    return out
