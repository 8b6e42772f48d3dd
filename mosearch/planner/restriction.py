"""What an executor's rules cost: the fastest plan without them against the fastest with them.

Both figures come from the same method, the structured pool-level stage (`structured.py`) under the
same limits, so the ratio compares like with like: the unrestricted problem and the executor's. The
front's own fastest plan (after the whole search) is reported beside them.
"""

from __future__ import annotations

import time

from mosearch.planner.structured import StructuredSeeds


def restriction_cost(problem, limits, seed: int, structured: StructuredSeeds | None = None) -> dict:
    """{"unrestricted": samples/s, "restricted": samples/s, "cost": 1 - restricted / unrestricted}."""
    t0 = time.perf_counter()
    free = problem.without_executor()
    unrestricted = StructuredSeeds(free, seed=seed).best_within()
    restricted = (structured or StructuredSeeds(problem, seed=seed)).best_within()
    cost = 1.0 - restricted / unrestricted if unrestricted > 0 else 0.0
    return {"executor": problem.executor.runs,
            "method": "structured pool-level stage, same limits, with and without the executor's rules",
            "unrestricted": round(unrestricted, 6), "restricted": round(restricted, 6), "cost": round(cost, 6),
            "wall_s": round(time.perf_counter() - t0, 3)}


def describe(r: dict) -> str:
    """One line for the terminal and the report."""
    front = r.get("front_best")
    tail = f"; this front's fastest: {front:.3g} samples/s" if front is not None else ""
    return (f"{r['executor']}'s rules cost {100 * r['cost']:.1f}% of the throughput: the structured stage's fastest "
            f"plan within the same limits is {r['unrestricted']:.3g} samples/s without them, "
            f"{r['restricted']:.3g} with them{tail}")
