"""One benchmark run of a planner on one scenario, recorded the same way for every method.

A scenario is a shipped cluster x workload pair. Every search method sees the placement
problem through `BudgetProblem`, which counts evaluations, stops the method exactly at the
budget (a batch that crosses it is cut: its rows past the budget are not recorded), keeps the
archive of feasible non-dominated plans and samples the hypervolume at fixed evaluation
checkpoints. Wall time excludes the hypervolume sampling itself.

Hypervolume uses the planner's fixed normalisation (`mosearch.planner.hv`): computed once
per scenario, before any method runs, from the corner grid with seed 0, so it depends on
no method's result.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pymoo.core.problem import Problem

from mosearch.planner import algorithms as planner_algorithms
from mosearch.planner import seeding
from mosearch.planner.archive import Archive
from mosearch.planner.hv import HVScale, scale_for
from mosearch.planner.search import SearchSettings
from problems.placement.problem import PlacementProblem, objectives

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = ("mixed-8", "mixed-64", "hetero-1024", "h100-64")
WORKLOADS = ("qwen2.5-1.5b-grpo", "qwen2.5-7b-grpo", "qwen2.5-32b-grpo")
N_CHECKPOINTS = 50
POP_SIZE = SearchSettings.pop_size  # `mosearch plan`'s default population
# Static penalty for methods without constraint handling (pymoo's MOEA/D): far above any
# objective value of a feasible plan (throughput and $/h stay below 1e5 on the shipped clusters).
PENALTY = 1e6

# method -> label, in table order
SEARCH_METHODS = {
    "planner": "planner: seeded MaOEA-CS + dedup + local search (ours)",
    "maoea-cs": "MaOEA-CS alone (ablation)",
    "maoea-cs-dedup": "MaOEA-CS + dedup (ablation)",
    "nsga3": "NSGA-III (pymoo)",
    "moead": "MOEA/D (pymoo, penalty)",
    "rvea": "RVEA (pymoo)",
    "agemoea2": "AGE-MOEA-II (pymoo)",
    "deap-nsga3": "NSGA-III (DEAP)",
    "random": "random search",
}

# our variants: never counted as rivals of each other
OURS = ("planner", "maoea-cs", "maoea-cs-dedup")
# the product's search, the headline of the table (what `mosearch plan` runs)
PRODUCT = "planner"


def scenario_id(cluster: str, workload: str) -> str:
    return f"{cluster} x {workload}"


def all_scenarios() -> list[tuple[str, str]]:
    return [(c, w) for c in CLUSTERS for w in WORKLOADS]


def load_problem(cluster: str, workload: str) -> PlacementProblem:
    cl = Path(cluster) if cluster.endswith(".yaml") else ROOT / "problems" / "clusters" / f"{cluster}.yaml"
    return PlacementProblem.from_files(cl, ROOT / "problems" / "workloads" / f"{workload}.yaml")


@dataclass
class Reference:
    """The fixed per-scenario normalisation and whether any plan is feasible at all."""

    scale: HVScale
    feasible: bool
    corners: seeding.Corners
    # what the performance model says about the corner grid: runs cached under another
    # fingerprint were scored by another version of the model and are not comparable
    fingerprint: str


def model_fingerprint(corners: seeding.Corners) -> str:
    """A short hash of the model's predictions on the (seeded, fixed) corner grid."""
    M = np.column_stack([corners.thr, corners.cost, corners.mem, corners.stale, corners.ok])
    digest = hashlib.sha256(np.asarray(corners.X, dtype=float).tobytes())
    digest.update(np.array([float(f"{v:.9g}") for v in M.ravel()]).tobytes())
    return digest.hexdigest()[:16]


def reference(problem: PlacementProblem) -> Reference:
    corners = seeding.Corners(problem, seed=0)
    scale = scale_for(problem.cluster, problem.workload, corners.best_throughput(), corners.max_feasible_cost())
    return Reference(scale, bool(corners.ok.any()), corners, model_fingerprint(corners))


class BudgetReached(Exception):
    pass


class BudgetProblem(Problem):
    """Forwards to the placement problem; records the archive and HV checkpoints; stops at `budget`.

    `penalty=True` exposes no constraints and adds PENALTY x total violation to every
    objective (for algorithms that reject constrained problems); the archive still uses
    the true constraints.
    """

    def __init__(self, inner: PlacementProblem, budget: int, scale: HVScale, penalty: bool = False):
        n_constr = 0 if penalty else inner.n_ieq_constr
        super().__init__(n_var=inner.n_var, n_obj=inner.n_obj, n_ieq_constr=n_constr, xl=inner.xl, xu=inner.xu,
                         vtype=float)
        self.inner, self.budget, self.scale, self.penalty = inner, int(budget), scale, penalty
        self.archive = Archive(inner.n_var, inner.n_obj)
        self.n_evals = 0
        self.marks = np.linspace(budget / N_CHECKPOINTS, budget, N_CHECKPOINTS).round().astype(int)
        self.curve: list[tuple[int, float, float]] = []  # (evaluations, wall s, hv)
        self.t0 = time.perf_counter()
        self.hv_time = 0.0

    def wall(self) -> float:
        return time.perf_counter() - self.t0 - self.hv_time

    def __getattr__(self, name):
        inner = self.__dict__.get("inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)

    def _evaluate(self, X, out, *args, **kwargs):
        if self.n_evals >= self.budget:
            raise BudgetReached
        X = np.atleast_2d(np.asarray(X, dtype=float))
        res = self.inner.evaluate(X, return_values_of=["F", "G"], return_as_dictionary=True)
        F, G = np.asarray(res["F"], dtype=float), np.asarray(res["G"], dtype=float)
        self.record(X, F, G)
        if self.penalty:
            out["F"] = F + PENALTY * np.maximum(G, 0).sum(axis=1, keepdims=True)
        else:
            out["F"], out["G"] = F, G

    def record(self, X: np.ndarray, F: np.ndarray, G: np.ndarray) -> None:
        room = self.budget - self.n_evals
        X, F, G = X[:room], F[:room], G[:room]
        feasible = (G <= 0).all(axis=1) & np.isfinite(F).all(axis=1)
        self.archive.add(X, F, feasible)
        before = self.n_evals
        self.n_evals += len(X)
        crossed = self.marks[(self.marks > before) & (self.marks <= self.n_evals)]
        if len(crossed):
            wall = self.wall()
            t = time.perf_counter()
            hv = self.scale.hv(self.archive.F)
            self.hv_time += time.perf_counter() - t
            self.curve.append((self.n_evals, wall, hv))


def method_config(method: str) -> str:
    """The settings a cached run of `method` was made with, where they can change between versions
    (the planner's search settings); a run cached under other settings is measured again."""
    if method != PRODUCT:
        return ""
    s = SearchSettings()
    return (f"polish={s.polish} dedup={s.dedup} switch_share={s.switch_share} "
            f"local_search={'alternating' if s.adaptive else 'last share'}")


def run_method(problem: PlacementProblem, method: str, budget: int, seed: int, scale: HVScale) -> dict:
    """Run one method to `budget` evaluations; returns the record cached by the benchmark."""
    bp = BudgetProblem(problem, budget, scale, penalty=(method == "moead"))
    try:
        if method == PRODUCT:
            _run_planner(bp, budget, seed)
        elif method in OURS:
            _run_maoea(bp, budget, seed, dedup=method == "maoea-cs-dedup")
        elif method == "random":
            from mosearch.algorithms.baselines import run_random

            # smaller batches than the registry's default so the anytime curve has resolution
            run_random(bp, budget, seed, batch=POP_SIZE)
        else:
            planner_algorithms.baseline_runner(method)(bp, budget, seed)
    except BudgetReached:
        pass
    wall = bp.wall()
    if not bp.curve or bp.curve[-1][0] != bp.n_evals:
        bp.curve.append((bp.n_evals, wall, scale.hv(bp.archive.F)))
    return {
        "evaluations": bp.n_evals, "wall_s": round(wall, 4), "hv": bp.curve[-1][2],
        "curve": [[int(n), round(w, 4), float(h)] for n, w, h in bp.curve],
        "front": np.round(bp.archive.F, 6).tolist(),
    }


def _grid(bp: BudgetProblem, budget: int, seed: int) -> seeding.Corners:
    """The corner grid, recorded as the budget's first evaluations: the planner's grid
    (`seeding.GRID_MAX` plans), cut to a fifth of the budget when that is smaller; its distinct
    plans after the repair are scored (`seeding.candidates`)."""
    grid = min(seeding.GRID_MAX, budget // 5)
    corners = seeding.Corners(bp.inner, seed=seed, max_n=grid)
    r = bp.inner.evaluate_matrix(corners.X)
    G = bp.inner._constraints(r)
    F = objectives(r)
    bp.record(corners.X, F, G)
    return corners


def _run_planner(bp: BudgetProblem, budget: int, seed: int, **settings) -> None:
    """What `mosearch plan` searches with, on the same budget as every method: the corner grid,
    then `run_search` with the rest (MaOEA-CS seeded with the corners, with duplicate
    elimination and phase 2 by `SearchSettings.switch_share` of the budget at the latest, then Pareto
    local search on the archive from the last `SearchSettings.polish` share on, handing back to
    MaOEA-CS once unproductive: `SearchSettings.adaptive`). Every evaluation
    of the three parts goes through `bp`, so all count. Not counted: the baseline planners
    `mosearch plan` also runs for its report (their plans do not enter the front). `settings`:
    SearchSettings fields to change (ablations outside the bench)."""
    from mosearch.planner.search import run_search

    corners = _grid(bp, budget, seed)
    rest = budget - bp.n_evals
    if rest <= 0:
        return
    seeds = corners.seeds(n_extra=POP_SIZE // 2, seed=seed)
    # with adaptive off, the local search may stop before the budget (no fresh neighbour for a
    # while): then the run has spent fewer evaluations, never more
    run_search(bp, SearchSettings(evals=rest, seed=seed, pop_size=POP_SIZE, progress=False, **settings), seeds)


def _run_maoea(bp: BudgetProblem, budget: int, seed: int, dedup: bool = False) -> None:
    """Plain MaOEA-CS after the planner's corner grid (its evaluations count toward the budget,
    one fifth of it at most), then MaOEA-CS seeded with the corners for the rest. `dedup`: the
    same with pymoo's duplicate elimination on (an ablation: after the integer repair many
    offspring equal a parent and would spend an evaluation for nothing)."""
    corners = _grid(bp, budget, seed)
    rest = budget - bp.n_evals
    if rest <= 0:
        return
    seeds = corners.seeds(n_extra=POP_SIZE // 2, seed=seed)
    algo = planner_algorithms.make_maoea(bp.inner, POP_SIZE, seeds, rest)
    if dedup:
        from mosearch.algorithms import MaOEACS

        algo = MaOEACS(pop_size=POP_SIZE, sampling=seeds, repair=planner_algorithms.problem_repair(bp.inner),
                       max_evals=rest, eliminate_duplicates=True)
    algo.setup(bp, termination=("n_eval", budget), seed=seed, verbose=False)
    while algo.has_next():
        algo.next()
