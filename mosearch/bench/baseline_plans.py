"""The single-objective baseline planners' plans and the exact front, as objective point sets.

Baseline planners come from `problems.placement.baselines.BASELINE_PLANNERS` (verl-style
colocated, best homogeneous, HetRL-style successive halving, MILP), each run with its own
default effort; their feasible plans are the point set scored. Without that package the two
heuristic ones of the planner's corner grid (verl-style colocated and the best single-GPU-type
plan) stand in, and the table says which source it used.
"""

from __future__ import annotations

import time

import numpy as np

from mosearch.planner import seeding
from problems.placement.problem import PlacementProblem, objectives

# canonical names used by the plan-quality table
VERL = "verl-style colocated"
HOMOGENEOUS = "best homogeneous"
HETRL = "HetRL-style"
MILP = "MILP"


def _registry():
    try:
        from problems.placement.baselines import BASELINE_PLANNERS  # type: ignore[attr-defined]
    except ImportError:
        return None
    return BASELINE_PLANNERS


def source() -> str:
    return "problems.placement.baselines" if _registry() is not None else "corner-grid heuristics (seeding.py)"


def _canonical(name: str) -> str:
    n = name.lower()
    if "verl" in n:
        return VERL
    if "homog" in n:
        return HOMOGENEOUS
    if "hetrl" in n or "halving" in n:
        return HETRL
    if "milp" in n:
        return MILP
    return name


def baseline_points(problem: PlacementProblem, seed: int = 0) -> dict[str, dict]:
    """name -> {"front": feasible objective rows (minimised), "wall_s", "evaluations"}; the
    budget-taking planners (HetRL-style, MILP) also under "at_budget": rerun with the $/h of the
    best homogeneous plan as their budget, for the plan-quality comparison."""
    reg = _registry()
    out: dict[str, dict] = {}
    if reg is not None:
        for name, planner in reg.items():
            t = time.perf_counter()
            res = planner(problem, seed=seed)
            out[_canonical(name)] = _rows(res, time.perf_counter() - t)
        homog = out.get(HOMOGENEOUS)
        if homog and homog["front"]:
            B = fastest(homog["front"])[1]
            for name in ("hetrl-sh", "milp"):
                if name in reg:
                    t = time.perf_counter()
                    res = reg[name](problem, budget_usd_h=B, seed=seed)
                    out[_canonical(name)]["at_budget"] = {"budget_usd_h": B, **_rows(res, time.perf_counter() - t)}
        return out
    t = time.perf_counter()
    corners = seeding.Corners(problem, seed=seed)
    wall = time.perf_counter() - t
    if "verl-style" in corners.picks:
        out[VERL] = _score(problem, corners.X[corners.picks["verl-style"]][None, :], wall, corners.evaluations)
    i = _best_homogeneous(problem, corners)
    if i is not None:
        out[HOMOGENEOUS] = _score(problem, corners.X[i][None, :], wall, corners.evaluations)
    return out


def _best_homogeneous(problem: PlacementProblem, corners) -> int | None:
    """The fastest feasible grid plan (ties: cheaper) whose GPUs are all of one type, read from
    the repaired plan itself rather than the grid's footprint tag."""
    f = problem.layout.fields(corners.X)
    used = (f["rollout_gpus"] + f["train_gpus"] + f["shared_gpus"]) > 0  # (N, pools)
    types = np.array([p.gpu.name for p in problem.cluster.pools])
    one_type = np.array([len(set(types[row])) == 1 for row in used])
    idx = np.flatnonzero(one_type & corners.ok)
    if len(idx) == 0:
        return None
    return int(idx[np.lexsort((corners.cost[idx], -corners.thr[idx]))[0]])


def _rows(res, wall: float) -> dict:
    F = np.asarray(res.F, dtype=float)[np.asarray(res.feasible, dtype=bool)]
    return {"front": np.round(F, 6).tolist(), "wall_s": round(wall, 4), "evaluations": int(res.evals)}


def fastest(front) -> tuple[float, float]:
    """(throughput, $/h) of the fastest row of a minimised front (ties: the cheaper)."""
    F = np.array(front, dtype=float).reshape(-1, 4)
    i = int(np.lexsort((F[:, 1], F[:, 0]))[0])
    return float(-F[i, 0]), float(F[i, 1])


def _score(problem: PlacementProblem, X: np.ndarray, wall: float, evaluations) -> dict:
    if len(X) == 0:
        return {"front": [], "wall_s": round(wall, 4), "evaluations": evaluations}
    r = problem.evaluate_matrix(X)
    ok = r["feasible"] > 0
    F = objectives(r)[ok]
    return {"front": np.round(F, 6).tolist(), "wall_s": round(wall, 4), "evaluations": evaluations}


def exact_front(problem: PlacementProblem) -> dict:
    """The exact feasible front by enumeration (small clusters only)."""
    from problems.placement.enumerate import enumerate_front

    r = enumerate_front(problem)
    return {"front": np.round(r.front_F, 6).tolist(), "wall_s": round(r.seconds, 2), "evaluations": int(r.n_evaluated),
            "n_space": int(r.n_space), "kv_grid": list(r.kv_grid)}
