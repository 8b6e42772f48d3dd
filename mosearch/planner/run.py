"""`mosearch plan` end to end: inputs -> problem -> seeded search -> run directory.

Writes front.csv, front.json, plans/<id>.yaml, baselines.csv/json (when the baseline
planners give plans), history.csv, run.yaml, the PNG plots and report.html, all in one
commit (`results.staged`): a run killed at any moment leaves the previous result or the
new one. An interrupted search still writes everything it found, marked partial.

While it searches, checkpoint/ holds the inputs and settings (run.json) and, every K
batches, the search state (state.npz); `resume_run` goes on from there and, with the same
seed and an evaluation budget, ends with the same front as a run never stopped.
"""

from __future__ import annotations

import datetime as _dt
import platform
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import numpy as np

from mosearch import decide, results
from mosearch.decide import Limits
from mosearch.planner import checkpoint as ckpt
from mosearch.planner import algorithms, canonical, seeding
from mosearch.planner.hv import scale_for
from mosearch.planner.search import SearchResult, SearchSettings, run_search
from mosearch.planner.structured import StructuredSeeds
from problems.errors import InputError, NoFeasiblePlan
from problems.placement.plan import Plan, file_sha256
from problems.placement.problem import objectives

STRUCTURED_SEED = 0  # the structured seeds' sampling (large clusters), the same whatever --seed
PACKAGES = ("mosearch", "numpy", "pymoo", "moocore", "pydantic", "matplotlib", "rich", "ray")


@dataclass
class PlanOutcome:
    out: Path
    plans: list[Plan]  # the plans found (front_all.csv: non-dominated, less those `decide.found_front` drops)
    baselines: dict[str, Plan]
    knee: int | None  # into plans
    result: SearchResult
    files: list[Path]
    front: np.ndarray | None = None  # rows of plans on the epsilon front people read (front.csv)
    evaluations: int = 0  # seeding + search: the one count every output reports
    restriction: dict | None = None  # what the executor's rules cost (planner/restriction.py)
    notes: list[str] = field(default_factory=list)  # what the user should know of the search (pools left out,
    # uneven nodes, how the executor runs the workload)


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def build_problem(cluster: str, workload: str, limits: Limits, executor: str | None = None):
    from problems.placement.problem import PlacementProblem

    kw = {} if limits.max_mem_frac is None else {"max_mem_frac": limits.max_mem_frac}
    return PlacementProblem.from_files(cluster, workload, max_cost_usd_h=limits.max_cost,
                                       min_throughput=limits.min_throughput, max_staleness=limits.max_staleness,
                                       executor=executor, **kw)


def decode_front(problem, X: np.ndarray, F: np.ndarray, resolution: np.ndarray | None = None) -> list[Plan]:
    """Archive -> canonical plans (`canonical.py`), fastest first, named p000, p001, ...;
    with `resolution`, less those another beats by more than it in throughput and cost
    (`decide.found_front`).

    The whole front is scored in one vectorised call (as `problem.decode` does one plan at a
    time). Without the model's lifetime-planned memory peak: it replays one training
    iteration per plan (~0.1 s each), minutes for a front of hundreds; peak_mem_frac, the
    objective, is in every plan."""
    R = canonical.canonicalize(problem, np.asarray(X, dtype=float))
    r = problem.evaluate_matrix(R)
    keep = canonical.simplest_per_objectives(problem, R, objectives(r))
    R = R[keep]
    order = np.lexsort((r["cost_usd_h"][keep], -r["throughput_samples_s"][keep]))  # fastest, then cheapest
    R = R[order]
    r = {k: v[keep][order] for k, v in r.items()}
    if resolution is not None and len(R):
        kept = decide.found_front(np.column_stack([r[c] for c in decide.COLUMNS]), resolution)
        R, r = R[kept], {k: v[kept] for k, v in r.items()}
    plans = []
    for i in range(len(R)):
        pred = {k: float(v[i]) for k, v in r.items()}
        plans.append(problem.layout.to_plan(R[i], problem.cluster, problem.cluster_ref, problem.workload_ref,
                                            f"p{i:03d}", pred))
    return plans


def _miss(name: str, g: float, limits: Limits, max_mem: float) -> str:
    """One never-met constraint in natural units (the problem scales the limit constraints): the
    best any evaluated plan reached, whatever it did on the other limits."""
    if name == "max_cost" and limits.max_cost:
        return f"the cheapest plan found costs {limits.max_cost * (1 + g):.3g} $/h > {limits.max_cost:g} $/h"
    if name == "min_throughput" and limits.min_throughput:
        return (f"the fastest plan found trains {limits.min_throughput * (1 - g):.3g} samples/s "
                f"< {limits.min_throughput:g}")
    if name == "max_staleness" and limits.max_staleness is not None:
        return f"the freshest plan found has staleness {limits.max_staleness + g:.3g} > {limits.max_staleness:g}"
    if name == "mem_fits":
        return f"the least memory found is {max_mem + g:.3g} of a GPU > {max_mem:g}"
    if name == "kv_fits":
        return "no rollout engine found holds the KV cache of one longest sample"
    return f"{name} (closest plan misses by {g:.3g})"


def no_feasible(problem, result: SearchResult, limits: Limits) -> NoFeasiblePlan:
    """The answer when the front is empty. "proven infeasible" only with a proof: the model fits
    no GPU at all (a closed-form memory bound), or the budget is below the cheapest GPU's price
    (every plan runs on at least one GPU). Otherwise "no plan found", with the best figures the
    search reached for each limit it never met, and the count of plans it evaluated: a search
    that did not reach a limit has not shown that no plan reaches it."""
    proof = _proof(problem, limits)
    if proof:
        reason = f"proven infeasible: {proof}"
    else:
        from problems.placement.problem import CONSTRAINTS

        names = list(getattr(problem, "constraint_names", None) or CONSTRAINTS)
        g = result.g_best
        max_mem = limits.max_mem_frac if limits.max_mem_frac is not None else 1.0
        never = [] if g is None or len(g) != len(names) else list(np.flatnonzero(g > 0))
        if never:
            found = "; ".join(_miss(names[i], float(g[i]), limits, max_mem) for i in never)
        else:
            found = ("every limit was met by some plan, never all at once"
                     + (f" (limits {limits.describe()})" if limits.any() else ""))
        reason = (f"no plan found: {found}; not proven infeasible ({result.evaluations} plans evaluated, "
                  "no bound rules the limits out)")
    return NoFeasiblePlan(problem.workload.path, None, reason,
                          "a larger cluster, a smaller model or looser limits" if proof
                          else "looser limits, or a longer search (--evals)")


def _proof(problem, limits: Limits) -> str | None:
    from problems.placement.explain import limit_infeasibility, structural_infeasibility

    reason = structural_infeasibility(problem.cluster, problem.workload, problem.efficiencies or None)
    if reason:
        return reason
    hit = limit_infeasibility(problem, limits.max_cost, limits.max_mem_frac)
    return f"{hit[0]} {hit[1]}" if hit else None


def check_proven_infeasible(problem, limits: Limits) -> None:
    """Before any search: a proof that no plan can run (the model fits no GPU: NoFeasiblePlan,
    exit 1) or that a limit given cannot be met (a lower bound over every plan above it: the
    limit is the bad input, exit 2, with the figure it would need). Only proofs, never guesses."""
    from problems.placement.explain import limit_infeasibility, structural_infeasibility

    reason = structural_infeasibility(problem.cluster, problem.workload, problem.efficiencies or None)
    if reason:
        raise NoFeasiblePlan(problem.workload.path, None, f"proven infeasible: {reason}",
                             "a larger cluster, a smaller model or looser limits")
    hit = limit_infeasibility(problem, limits.max_cost, limits.max_mem_frac)
    if hit:
        raise InputError(None, hit[0], f"proven infeasible: {hit[1]}", hit[2])


SETTINGS_SAVED = ("algorithm", "evals", "time_s", "seed", "pop_size", "jobs", "polish", "dedup", "switch_share", "adaptive",
                  "budget_polish_evals")


def _inputs(cluster, workload, problem) -> dict:
    return {"cluster": {"path": str(Path(cluster).resolve()), "sha256": file_sha256(cluster),
                        "profiles": {g: {"path": str(Path(p).resolve()), "sha256": file_sha256(p)}
                                     for g, p in problem.cluster.profiles.items()}},
            "workload": {"path": str(Path(workload).resolve()), "sha256": file_sha256(workload)}}


def _check_unchanged(run: dict) -> None:
    files = [run["cluster"], run["workload"], *run["cluster"].get("profiles", {}).values()]
    for f in files:
        try:
            now = file_sha256(f["path"])
        except OSError:
            now = None
        if now != f["sha256"]:
            raise InputError(f["path"], None, "missing or changed since the run started (sha256 differs)",
                             "the spec file as it was, or a new run without --resume")


def resume_run(out: str | Path, progress: bool = True, time_s: float | None = None, on_generation=None,
               report: bool = True, checkpoint_every: int = ckpt.DEFAULT_EVERY) -> PlanOutcome:
    """Go on with the run in `out` from its last checkpoint, with its own inputs and settings
    (`time_s`: a new time limit for the rest of the search)."""
    out = Path(out)
    run = ckpt.read_run(out / "checkpoint")
    if run.get("complete"):
        raise InputError(str(out), None, "this run is complete; nothing to resume", "an interrupted run directory")
    try:
        _check_unchanged(run)
        # a run saved before `adaptive` existed searched without it
        settings = SearchSettings(progress=progress, **{"adaptive": False, **{k: run["settings"][k] for k in SETTINGS_SAVED if k in run["settings"]}})
        limits = Limits(**run["limits"])
        run_id = str(run["run_id"])
    except (KeyError, TypeError, AttributeError) as err:
        raise InputError(str(out / "checkpoint" / ckpt.RUN_FILE), None, f"incomplete checkpoint ({err})",
                         "a checkpoint written by `mosearch plan`") from None
    if time_s is not None:
        settings.time_s = time_s
    state = ckpt.read_state(out / "checkpoint", run_id)
    res = run.get("resolution")
    return plan_run(run["cluster"]["path"], run["workload"]["path"], out, settings, limits, on_generation, report,
                    checkpoint_every, resume=(run_id, state),
                    resolution=decide.RESOLUTION if res is None else np.asarray(res, dtype=float),
                    executor=run.get("executor"))


def plan_run(cluster: str, workload: str, out: str | Path, settings: SearchSettings, limits: Limits = Limits(),
             on_generation=None, report: bool = True, checkpoint_every: int = ckpt.DEFAULT_EVERY,
             resume: tuple[str, tuple | None] | None = None, resolution: np.ndarray = decide.RESOLUTION,
             executor: str | None = None, restriction: bool = True) -> PlanOutcome:
    out = Path(out)
    problem = build_problem(cluster, workload, limits, executor)
    check_proven_infeasible(problem, limits)
    started = _dt.datetime.now(_dt.timezone.utc)
    out.mkdir(parents=True, exist_ok=True)
    results.remove_stale_stages(out)
    ck_dir = out / "checkpoint"
    if resume is None:
        run_id, state = ckpt.new_run_id(), None
        saved = {k: getattr(settings, k) for k in SETTINGS_SAVED}
        ckpt.start(ck_dir, {"run_id": run_id, **_inputs(cluster, workload, problem), "settings": saved,
                            "limits": {"max_cost": limits.max_cost, "min_throughput": limits.min_throughput,
                                       "max_staleness": limits.max_staleness, "max_mem_frac": limits.max_mem_frac},
                            "resolution": [float(r) for r in resolution], "executor": problem.executor.name,
                            "started_utc": started.isoformat(timespec="seconds")})
    else:
        run_id, state = resume
    checkpointer = ckpt.Checkpointer(ck_dir, run_id, checkpoint_every)
    corners = seeding.Corners(problem, seed=settings.seed)
    seeds_X = corners.seeds(n_extra=settings.pop_size // 2, seed=settings.seed)
    known = None
    if settings.algorithm == algorithms.DEFAULT:  # the baselines run as published, unseeded
        # one structured seed for every search seed: the budget polish starts from these plans
        # first, so every seed's answer at a budget is at least the same local optimum's
        structured = StructuredSeeds(problem, seed=STRUCTURED_SEED)
        corners.evaluations += structured.evaluations
        corners.structured_evaluations = structured.evaluations
        # all of its plans go to the archive; the fastest within each cost level also seed the
        # first population beside the corners (a quarter of it at most)
        known = structured.known()
        seeds_X = np.vstack([seeds_X, structured.population_seeds(settings.pop_size // 4)])
    cost = None
    if problem.executor.external and restriction:
        from mosearch.planner.restriction import restriction_cost

        cost = restriction_cost(problem, limits, settings.seed, structured if known is not None else None)
    scale = scale_for(problem.cluster, problem.workload, corners.best_throughput(), corners.max_feasible_cost())
    result = run_search(problem, settings, seeds_X, scale, on_generation, checkpointer, state, known)
    if len(result.F) == 0:
        raise no_feasible(problem, result, limits)
    polished = None
    if settings.algorithm == algorithms.DEFAULT and settings.budget_polish_evals > 0 and not result.partial:
        polished = _budget_polish(problem, result, settings, None if known is None else known[0][known[2]])

    plans = decode_front(problem, result.X, result.F, resolution)
    baselines = seeding.baseline_plans(problem, corners, seed=settings.seed)
    F = results.objective_matrix(plans)
    knee = decide.knee(F, resolution) if len(plans) else None
    # the front people read: the epsilon front at the resolution, with the knee on it
    front = np.union1d(decide.epsilon_front(F, resolution), [] if knee is None else [knee]).astype(int)
    t_write = time.perf_counter()
    if cost is not None and plans:
        cost["front_best"] = max(p.predicted["throughput_samples_s"] for p in plans)
    problem.restriction = cost
    with results.staged(out) as stage:
        files = _write_result(stage, out, problem, settings, limits, corners, scale, result, plans, baselines, knee,
                              cluster, workload, started, report, t_write, len(seeds_X), resumed=resume is not None,
                              front=front, resolution=resolution, polished=polished)
        # an evaluation budget used up ends the run; a time limit or an interrupt leaves it resumable
        if not result.partial and result.stop_reason == "budget":
            _mark_complete(out, stage)
    return PlanOutcome(out, plans, baselines, knee, result, [out / f.relative_to(stage) for f in files], front,
                       result.evaluations + corners.evaluations + _polish_evals(polished), cost, _notes(problem))


def _notes(problem) -> list[str]:
    """Lines the terminal and run.yaml show beside the front: the pools the search left out, what the
    cluster's uneven nodes are planned as (`Cluster.notes`), how the executor runs the workload."""
    return (([problem.left_out] if problem.left_out else []) + list(problem.cluster.notes)
            + ([problem.executor_note] if problem.executor_note else []))


def _polish_evals(bp) -> int:
    return 0 if bp is None else int(bp.evaluations)


def _budget_polish(problem, result: SearchResult, settings: SearchSettings, start: np.ndarray | None):
    """Every budget's and floor's best plan made locally optimal (budgets.py), from the structured
    seeds (`start`, the same for every seed) and then with the search's archive; its plans join
    the archive, so the front and every pick see them."""
    from mosearch.planner.archive import Archive
    from mosearch.planner.budgets import budget_polish

    # a model call costs about in proportion to the pools and a plan has about as many moves: the
    # cap is for three pools, (3 / pools)^1.5 of it above (gen-4096-p32: 43,000 evaluations, a few
    # seconds; converging there would take minutes)
    cap = int(settings.budget_polish_evals * (3 / max(3, problem.layout.n_pools)) ** 1.5)
    # under --time, a tenth of it more (at least 2 s): the limit is the search's
    max_s = None if settings.time_s is None else max(2.0, 0.1 * settings.time_s)
    if start is None or len(start) == 0:
        bp = budget_polish(problem, result.X, max_evals=cap, max_s=max_s)
    else:
        bp = budget_polish(problem, start, max_evals=cap, max_s=max_s, then=result.X)
    if len(bp.X):
        arch = Archive(result.X.shape[1], result.F.shape[1])
        arch.add(result.X, result.F)
        arch.add(bp.X, bp.F)
        result.X, result.F = arch.X.copy(), arch.F.copy()
    return bp


def _mark_complete(out: Path, stage: Path) -> None:
    """The finished run's checkpoint says so, without its state (written into the new result
    before its commit, so the old checkpoint stays whole until then)."""
    run = ckpt.read_run(out / "checkpoint")
    ckpt.write_run(stage / "checkpoint", {**run, "complete": True})
    if stage == out:
        (out / "checkpoint" / ckpt.STATE_FILE).unlink(missing_ok=True)


def _write_result(stage, out, problem, settings, limits, corners, scale, result, plans, baselines, knee,
                  cluster, workload, started, report, t_write, n_seeds, resumed, front, resolution,
                  polished=None) -> list[Path]:
    results.write_front(stage, plans, front)
    if baselines:
        results.write_baselines(stage, baselines)
    results.write_history(stage, result.history)
    info = {
        "partial": bool(result.partial),
        "stop_reason": result.stop_reason,
        "cluster": {"path": str(cluster), "sha256": file_sha256(cluster),
                    "profiles": {g: {"path": p, "sha256": file_sha256(p)} for g, p in problem.cluster.profiles.items()}},
        "workload": {"path": str(workload), "sha256": file_sha256(workload)},
        "executor": problem.executor.name,
        "executor_runs": problem.executor.runs,
        "restriction": getattr(problem, "restriction", None),
        "notes": _notes(problem),
        "algorithm": settings.algorithm,
        "seed": settings.seed,
        "pop_size": settings.pop_size,
        "evals_budget": settings.evals,
        "time_limit_s": settings.time_s,
        "jobs": settings.jobs,
        "limits": {"max_cost_usd_h": limits.max_cost, "min_throughput": limits.min_throughput,
                   "max_staleness": limits.max_staleness, "max_mem_frac": limits.max_mem_frac},
        "evaluations": result.evaluations + corners.evaluations + _polish_evals(polished),
        "search_evaluations": result.evaluations,
        "budget_polish": None if polished is None else {
            "evaluations": int(polished.evaluations), "plans_found": int(len(polished.X)),
            "rounds": polished.rounds, "two_edit_rounds": polished.two_edit_rounds,
            "converged": bool(polished.converged), "wall_s": round(polished.wall_s, 3)},
        "seeding_evaluations": corners.evaluations,
        "structured_evaluations": getattr(corners, "structured_evaluations", 0),
        "generations": result.generations,
        "search_wall_s": round(result.wall_s, 3),
        "front_size": len(front),
        "archive_size": len(plans),
        "resolution": dict(zip(decide.NAMES, (float(r) for r in resolution))),
        "knee": plans[knee].plan_id if knee is not None else None,
        "hypervolume": result.history[-1]["hv"] if result.history else None,
        "hv_normalisation": scale.as_dict(),
        "corner_seeds": sorted(corners.picks),
        "seeds": int(n_seeds),
        "baselines": list(baselines),
        "started_utc": started.isoformat(timespec="seconds"),
        "resumed": resumed,
        "versions": _versions(),
    }
    files = []
    if report:
        title = f"{problem.cluster.name} x {problem.workload.name}" + (
            f" for {problem.executor.runs}" if problem.executor.external else "")
        sub = (f"{len(front)} distinct plans (of {len(plans)} Pareto plans found; resolution "
               f"{decide.describe_resolution(resolution)}) from {info['evaluations']} evaluations "
               f"({settings.algorithm}, seed {settings.seed}){' - PARTIAL: search interrupted' if result.partial else ''}")
        from mosearch.report import write_report_files

        if info.get("restriction"):
            from mosearch.planner.restriction import describe

            sub += ". " + describe(info["restriction"])

        shown = [plans[i] for i in front]
        files = write_report_files(stage, shown, baselines, None if knee is None else int(np.searchsorted(front, knee)),
                                   result.history, title, sub, run_dir=out)
    info["write_wall_s"] = round(time.perf_counter() - t_write, 3)
    results.write_run_info(stage, info)
    return files
