"""Cost: dollars per hour of the GPUs the plan uses, plus cross-region traffic; $/1k samples.

GPUs a plan leaves idle are not billed to it (they can serve other jobs). Egress is charged per
byte leaving a region at the link's $/GB (cluster spec), at the plan's step rate.
"""

from __future__ import annotations

import numpy as np
from problems.placement.model.reduce import psum


def gpu_usd_h(used_gpus, price):
    """(N, P) used GPUs x (P,) $/GPU-h -> (N,): additive over pools."""
    return psum(used_gpus * price)


def egress_usd_h(egress_usd_per_step, step_s):
    return egress_usd_per_step * 3600.0 / step_s


def usd_per_1k_samples(cost_usd_h, samples_s):
    return cost_usd_h / 3600.0 / np.maximum(samples_s, 1e-30) * 1000.0
