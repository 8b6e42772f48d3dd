"""Execution flow: how rollout, training, weight sync and context switches compose into a step.

Sources (shared reference systems.md): RLinf (context switching; elastic pipelining streams
micro-batches from rollout to training), AReaL/AReaL-Hex (asynchronous rollout with staleness
bound k: a sample may come from a policy up to k versions old; interruptible generation lets a
long sample span versions), verl fully-async (2.35-2.67x over colocated sync).

- colocated: rollout, switch (offload/onload), training and an in-place weight reshard in sequence;
- disaggregated: two-stage pipeline over `chunks` chunks: max(R, T) + min(R, T)/chunks, then the
  weight sync (the next rollout needs the new weights);
- async, k >= 1: stages overlap fully; the step time is the bottleneck stage. A sample may span
  k + 1 versions, so the longest response bounds a step only as tail/(k + 1); rollout pauses for
  the weight load. k = 0 is on-policy and flows like disaggregated.
- staleness (mean policy-version lag of trained samples): 0 for synchronous flows; in async mode
  a sample sees about one update while it is generated when rollout is the bottleneck, and rollout
  runs ahead by T/A versions (capped at k, where it blocks) when training is the bottleneck.
"""

from __future__ import annotations

import numpy as np

from problems.placement.names import MODE_ASYNC, MODE_COLOCATED, MODE_DISAGGREGATED  # noqa: F401


def compose(mode, k, chunks, rollout_s, rollout_bulk_s, rollout_tail_s, train_s, sync_s, switch_s):
    """Step seconds and staleness per plan (all arguments (N,))."""
    colocated = rollout_s + switch_s + train_s + sync_s
    pipelined = np.maximum(rollout_s, train_s) + np.minimum(rollout_s, train_s) / chunks + sync_s
    kf = k.astype(float)
    a = np.maximum(rollout_bulk_s, rollout_tail_s / (kf + 1.0)) + sync_s
    overlapped = np.maximum(a, train_s)
    asynchronous = np.where(k > 0, overlapped, pipelined)
    step = np.where(mode == MODE_COLOCATED, colocated, np.where(mode == MODE_DISAGGREGATED, pipelined, asynchronous))
    lag = np.minimum(kf, np.maximum(1.0, train_s / np.maximum(a, 1e-30)))
    staleness = np.where((mode == MODE_ASYNC) & (k > 0), lag, 0.0)
    return step, staleness


def switch_s(states_bytes, rollout_weight_bytes, host_bytes_s, host_memory):
    """Colocated context switch per step on one GPU: training states out and back in over the host
    link, and the engine's weights offloaded and reloaded (vLLM sleep mode); free on CPU devices."""
    t = 2.0 * (states_bytes + rollout_weight_bytes) / host_bytes_s
    return np.where(host_memory, 0.0, t)
