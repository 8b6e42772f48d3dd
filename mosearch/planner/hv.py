"""Hypervolume of a placement front on normalised objectives with a fixed reference point.

Each minimised objective is divided by a scale fixed before the search starts, so the
value is comparable between generations, seeds and algorithms of one scenario:
throughput 1 - t / t_scale, cost c / c_scale, memory as the fraction it already is, staleness s / max(1, workload bound). Reference point: 1.1 on
every axis (a plan with zero throughput, the whole cluster's price, full memory or the
staleness bound still adds a little volume). Exact HV by moocore through pymoo.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pymoo.indicators.hv import HV

from problems.placement.names import OBJECTIVES

SENSE = np.array([o.sense for o in OBJECTIVES])

REF = 1.1


@dataclass(frozen=True)
class HVScale:
    throughput: float  # samples/s that maps to 0 on the throughput axis
    cost: float  # $/h that maps to 1
    staleness: float  # version lag that maps to 1

    def by_column(self) -> dict[str, float]:
        """The scale of each objective, by its column (memory is already a fraction)."""
        return {"throughput_samples_s": float(self.throughput), "cost_usd_h": float(self.cost), "peak_mem_frac": 1.0,
                "staleness": float(self.staleness)}

    def normalise(self, M: np.ndarray) -> np.ndarray:
        """Minimised objectives (problem.OBJECTIVES order) -> normalised: a maximised objective x as
        1 - x / scale, a minimised one as x / scale."""
        M = np.atleast_2d(np.asarray(M, dtype=float))
        scale = self.by_column()
        s = np.array([scale[o.column] for o in OBJECTIVES])
        return (SENSE < 0) + M / s

    def hv(self, M: np.ndarray) -> float:
        if len(M) == 0:
            return 0.0
        N = self.normalise(M)
        N = N[(N < REF).all(axis=1)]
        if len(N) == 0:
            return 0.0
        return float(HV(ref_point=np.full(N.shape[1], REF))(N))

    def as_dict(self) -> dict:
        return self.by_column() | {"reference": REF}


def scale_for(cluster, workload, best_throughput: float, known_max_cost: float = 0.0) -> HVScale:
    """Fix the scale for one scenario before the search. `best_throughput`: the fastest plan
    known (the fastest corner seed); twice that is the throughput axis' far end. Cost: the
    price of every GPU of the cluster, or more when a known feasible plan costs more (the
    cross-region traffic of a plan is billed on top of its GPUs)."""
    price = sum(p.count * p.gpu.price_usd_h for p in cluster.pools)
    return HVScale(
        throughput=max(2.0 * float(best_throughput), 1e-9),
        cost=max(price, float(known_max_cost), 1e-9),
        staleness=float(max(1, workload.max_staleness)),
    )
