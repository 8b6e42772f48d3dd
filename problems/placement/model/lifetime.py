"""Memory of one training iteration: an offline lifetime-planned peak next to a caching allocator.

After STWeaver/STAlloc (arXiv 2507.16274): a training iteration allocates the same tensors in the
same order every time, so their addresses can be planned offline from their lifetimes; PyTorch's
caching allocator instead reuses cached blocks greedily and fragments (up to 43% wasted).
Here the tensors of one iteration on the most loaded training GPU (first pipeline stage, 1F1B
schedule, variable sequence lengths as in RL, drawn from the workload's length distribution) are listed with their lifetimes, then
- `planned`: placed offline, largest first, at the lowest address free over their whole lifetime;
- `caching`: replayed through a simplified PyTorch caching allocator (512 B rounding; 2 MiB
  segments for small requests, 20 MiB for requests under 10 MiB, else rounded to 2 MiB; best-fit
  reuse of cached blocks, split when the rest is large enough, coalescing on free, no release);
- `live`: the most bytes alive at once (a lower bound for any allocator).
For one plan at a time (decode / reports), not the population hot path.
"""

from __future__ import annotations

import bisect

import numpy as np

from problems.placement.model.memory import model_state_bytes
from problems.placement.model.params import ModelContext

MIB = 1 << 20
MAX_SIM_MICRO = 4  # micro-batches past the pipeline depth add nothing new to the peak


def _lengths(ctx: ModelContext, n: int, seed: int = 0) -> np.ndarray:
    """Padded sequence length of each micro-batch: responses drawn from the workload's length distribution
    (model/lengths.py), the longest one in the batch."""
    resp = ctx.lengths.sample(n, seed) if ctx.lengths is not None else np.full(n, float(ctx.resp_mean))
    resp[0] = ctx.resp_max
    return ctx.prompt_len + np.ceil(resp)


def iteration_tensors(ctx: ModelContext, f: dict) -> list[tuple[int, int, int]]:
    """(size bytes, alloc time, free time) of the dynamic tensors of one iteration on stage 0."""
    tp, pp, mb = int(f["tp"]), int(f["pp"]), int(f["micro_batch"])
    rec = bool(f["recompute"])
    train = f["train_gpus"] + f["shared_gpus"]
    g = tp * pp
    dp = max(int(train.sum()) // g, 1)
    m_total = int(np.ceil(ctx.samples / dp / mb))
    m = int(min(m_total, pp + MAX_SIM_MICRO))
    layers = int(np.ceil(ctx.layers / pp))
    scale = ctx.bpe / 2
    h = ctx.hidden
    seq = _lengths(ctx, m)
    # 1F1B on the first stage: pp warm-up forwards, then one backward / one forward, then drain
    order: list[tuple[str, int]] = []
    warm = min(pp, m)
    order += [("F", i) for i in range(warm)]
    nxt = warm
    for i in range(m):
        order.append(("B", i))
        if nxt < m:
            order.append(("F", nxt))
            nxt += 1
    tensors: list[tuple[int, int, int]] = []
    t = 0
    alive: dict[tuple[int, int], int] = {}
    for kind, i in order:
        sbh = seq[i] * mb * h
        full = int(sbh * (10 + 24 / tp) * scale)
        kept = int(2 * sbh * scale) if rec else full
        work = int(seq[i] * mb * 2 * ctx.ffn / tp * ctx.bpe)  # MLP intermediate, transient
        if kind == "F":
            for layer in range(layers):
                tensors.append((work, t, t + 1))
                tensors.append((kept, t, -1))
                alive[(i, layer)] = len(tensors) - 1
                t += 1
            if pp == 1:  # the loss stage: logits live until the backward starts
                tensors.append((int(seq[i] * mb * ctx.vocab / tp * (ctx.bpe + 4)), t, -2 - i))
                t += 1
        else:
            for k, (size, a, b) in enumerate(tensors):
                if b == -2 - i:
                    tensors[k] = (size, a, t + 1)
            for layer in reversed(range(layers)):
                if rec:
                    tensors.append((full, t, t + 1))
                grad = int(sbh * ctx.bpe)
                tensors.append((grad, t, t + 2))
                idx = alive.pop((i, layer))
                size, a, _ = tensors[idx]
                tensors[idx] = (size, a, t + 1)
                t += 1
    return [(s, a, max(b, a + 1)) for s, a, b in tensors if s > 0]


def live_peak(tensors) -> int:
    events = sorted([(a, s) for s, a, _ in tensors] + [(b, -s) for s, _, b in tensors], key=lambda e: (e[0], e[1]))
    cur = best = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def planned_peak(tensors) -> int:
    """Offline placement at the lowest offset not overlapping any tensor live at the same time;
    two orders are tried (largest first, and allocation order) and the smaller footprint kept."""
    by_size = sorted(tensors, key=lambda x: (-x[0], x[1]))
    by_time = sorted(tensors, key=lambda x: (x[1], -x[0]))
    return min(_first_fit(by_size), _first_fit(by_time))


def _first_fit(order) -> int:
    placed: list[tuple[int, int, int, int]] = []  # offset, size, alloc, free
    top = 0
    for s, a, b in order:
        busy = sorted((o, o + sz) for o, sz, pa, pb in placed if pa < b and a < pb)
        off = 0
        for lo, hi in busy:
            if off + s <= lo:
                break
            off = max(off, hi)
        placed.append((off, s, a, b))
        top = max(top, off + s)
    return top


def caching_peak(tensors) -> int:
    """Replay allocations in time order through a simplified PyTorch caching allocator."""
    events = []
    for k, (s, a, b) in enumerate(tensors):
        events.append((a, 1, k, s))
        events.append((b, 0, k, s))
    events.sort()
    free_blocks: dict[bool, list[tuple[int, int, int]]] = {True: [], False: []}  # small? -> (size, seg, off)
    segments: list[dict[int, tuple[int, bool]]] = []  # per segment: off -> (size, is_free)
    where: dict[int, tuple[int, int, int, bool]] = {}
    reserved = peak = 0
    for _, is_alloc, k, s in events:
        if is_alloc:
            size = max(512, -(-s // 512) * 512)
            small = size <= MIB
            pool = free_blocks[small]
            j = bisect.bisect_left(pool, (size, -1, -1))
            if j < len(pool):
                bsize, seg, off = pool.pop(j)
            else:
                seg_size = 2 * MIB if small else (20 * MIB if size < 10 * MIB else -(-size // (2 * MIB)) * 2 * MIB)
                segments.append({0: (seg_size, True)})
                reserved += seg_size
                peak = max(peak, reserved)
                seg, off, bsize = len(segments) - 1, 0, seg_size
            rest = bsize - size
            if rest >= (512 if small else MIB + 1):
                segments[seg][off] = (size, False)
                segments[seg][off + size] = (rest, True)
                bisect.insort(pool, (rest, seg, off + size))
            else:
                segments[seg][off] = (bsize, False)
                size = bsize
            where[k] = (seg, off, size, small)
        else:
            seg, off, size, small = where.pop(k)
            blocks = segments[seg]
            pool = free_blocks[small]
            # coalesce with free neighbours inside the segment
            nxt = off + size
            if nxt in blocks and blocks[nxt][1]:
                nsize = blocks.pop(nxt)[0]
                pool.remove((nsize, seg, nxt))
                size += nsize
            prev = next((o for o, (sz, fr) in blocks.items() if o + sz == off and fr), None)
            if prev is not None:
                psize = blocks[prev][0]
                pool.remove((psize, seg, prev))
                del blocks[off]
                off, size = prev, psize + size
            blocks[off] = (size, True)
            bisect.insort(pool, (size, seg, off))
    return peak


def iteration_peaks(ctx: ModelContext, f: dict) -> dict[str, float]:
    """Per training GPU, GB: model states + runtime + dynamic peak under each allocator."""
    tp, pp = np.array([f["tp"]]), np.array([f["pp"]])
    train = f["train_gpus"] + f["shared_gpus"]
    dp = np.array([max(int(train.sum()) // int(f["tp"] * f["pp"]), 1)])
    ep = np.array([f["ep"]]) if "ep" in f else None  # a mixture of experts' expert-parallel size
    states = float(model_state_bytes(ctx, tp, pp, dp, np.array([f["sharding"]]), np.array([f["optimizer_offload"]]),
                                     ep)[0])
    runtime = float(ctx.eff["runtime_gb"].max() * 1e9)
    tensors = iteration_tensors(ctx, f)
    live, planned, caching = live_peak(tensors), planned_peak(tensors), caching_peak(tensors)
    base = states + runtime
    return {
        "lifetime_live_gb": (base + live) / 1e9,
        "lifetime_planned_gb": (base + planned) / 1e9,
        "caching_alloc_gb": (base + caching) / 1e9,
        "fragmentation_gb": (caching - planned) / 1e9,
    }
