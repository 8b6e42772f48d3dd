"""Running one placement search: algorithm, budget, progress, interruption, the archive.

Every algorithm evaluates through `RecordingProblem`, whose per-batch hook is where the
planner reports a generation, writes the history row and decides to stop (time limit,
Ctrl-C). The first Ctrl-C asks to stop after the batch being evaluated; a second one
interrupts at once. Either way the archive holds every feasible non-dominated plan
evaluated so far, and an interrupted result is marked partial.
"""

from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from mosearch.algorithms.maoea_cs import PLANNER_SWITCH_SHARE
from mosearch.planner import algorithms
from mosearch.planner import checkpoint as ckpt
from mosearch.planner.hv import HVScale
from mosearch.planner.polish import ParetoLocalSearch
from mosearch.planner.progress import SearchProgress
from mosearch.planner.recording import RecordingProblem

# A --time run still gives MaOEA-CS an evaluation budget for its decaying mutation step:
# the time limit times this rate. Default runs measured 4,000-8,000 evaluations/s (model plus
# algorithm, one core of the 2-core development machine) on mixed-64 and hetero-1024
# (run.yaml: search_evaluations / search_wall_s).
TIME_EVAL_RATE = 5000
UNLIMITED_EVALS = 10**9
# The history's hypervolume every this many batches: the archive changes in almost every batch,
# and the exact 4-objective volume of its ~2,000 plans took 3 s of a 27 s mixed-64 plan when
# computed for all ~700 batches.
HV_EVERY = 5
# `mosearch plan`'s evaluation budget. 60k evaluations (half MaOEA-CS, half Pareto local search on its
# archive): mixed-64 x qwen2.5-7b-grpo and hetero-1024 each take ~20 s of wall time on the 2-core
# development machine under load (load average 6-9), and mixed-8 reaches 0.99 of the exact front's
# hypervolume, which 30k did on one seed of three (mosearch/bench/planner_targets.py,
# results/bench/planner.md).
DEFAULT_EVALS = 60_000
YIELD_GENERATIONS = 3  # MaOEA-CS's last generations whose archive entries per evaluation the local search must match


@dataclass
class SearchSettings:
    """The search's settings; the defaults are `mosearch plan`'s (the product's)."""
    algorithm: str = algorithms.DEFAULT
    evals: int | None = DEFAULT_EVALS  # None: the time limit alone
    time_s: float | None = None
    seed: int = 1
    pop_size: int = 100
    jobs: int = 1
    progress: bool = True
    # share of the evaluation budget at whose start Pareto local search on the archive (polish.py)
    # takes over from MaOEA-CS; with `adaptive` it keeps it only while productive
    polish: float = 0.25
    # drop offspring equal to a parent after the integer repair (they would spend an evaluation on
    # nothing). At 3,000 evaluations this raised the planner's median hypervolume (seeds 1-3) on
    # mixed-8 x 7B 0.277 -> 0.300, mixed-64 x 32B 0.267 -> 0.324, h100-64 x 7B 0.244 -> 0.287.
    dedup: bool = True
    # MaOEA-CS's phase 2 (mostly SBX) begins at this share of its budget at the latest (None: the
    # entry's rule alone, which cannot fire before generation 51). Chosen on an earlier model: with
    # polish 0.5 and the entry's rule the planner's median hypervolume at 3,000 evaluations (seeds
    # 1-5) was at least every baseline's on 7 of 11 `mosearch bench planners` scenarios, with polish
    # 0.25 and switch_share 0.3 on 10 (that model's figures; not re-measured since).
    switch_share: float | None = PLANNER_SWITCH_SHARE
    # Adaptive local search: MaOEA-CS's schedule (mutation step, switch_share) spans the whole budget;
    # from the `polish` share on, MaOEA-CS generations alternate with local-search batches of about
    # pop_size evaluations, the side in use keeping the budget while it puts at least as many plans
    # into the archive per evaluation as the other did when last measured (`_alternate`). False:
    # MaOEA-CS on 1 - polish of the budget with its schedule on that part, then local search to the
    # end (it may stop early). Measured on the current model: at 3,000 evaluations (seeds 1-5) at
    # least every baseline on 11 of 12 `mosearch bench planners` scenarios with it, 8 without (median
    # HV over the best rival 1.166 / 1.147 on geometric mean; there the local search mostly hands back
    # after one batch); on the 7 clusters of mosearch/bench/unseen_planners.py 5 of 7 either way (HV with /
    # without 0.999). At `mosearch plan`'s 60,000 evaluations it costs a little: HV 0.997 of the fixed
    # share's on geometric mean, lower in 6 of 6 runs (mosearch/bench/local_search_default_budget.py).
    adaptive: bool = True
    # Budget polish after the search (budgets.py, default algorithm only): one- and two-edit local
    # search from every throughput-cost front plan until no budget or throughput floor improves,
    # capped at this many evaluations on clusters of up to three pools, (3/pools)^1.5 of it above (0:
    # off). mixed-64 x qwen2.5-7b converges after about 260,000 (run.yaml: budget_polish).
    budget_polish_evals: int = 1_500_000


def _mark(trail: list, rec) -> list:
    """`trail` with this generation's (evaluations, archive entries) mark, the last
    YIELD_GENERATIONS + 1 kept (MaOEA-CS's yield is measured over them)."""
    return (trail + [(rec.n_evals, rec.n_entered)])[-(YIELD_GENERATIONS + 1):]


def _rate(a: tuple[int, int], b: tuple[int, int]) -> float:
    """Archive entries per evaluation between two (evaluations, entries) marks."""
    return (b[1] - a[1]) / (b[0] - a[0]) if b[0] > a[0] else 0.0


def _alternate(rec, algo, problem, settings: SearchSettings, phase: str, meta: dict, arrays: dict,
               trail: list, save) -> None:
    """The adaptive local search: from MaOEA-CS's part of the budget to the end, each step is one
    MaOEA-CS generation or one local-search batch of about a population's evaluations. Each arm's
    yield is the plans it put into the archive per evaluation (MaOEA-CS: over its last
    YIELD_GENERATIONS generations; the local search: its last batch). The local search starts; the
    arm in use keeps the budget while its yield is at least the other's last measured one, so a
    local search that adds plans more slowly than MaOEA-CS hands the budget back, and gets it
    again once MaOEA-CS's yield has fallen below its own. A local search with no fresh neighbour
    left (`done`) hands back for good. Stops by the budget or time limit (StopSearch)."""
    from pymoo.termination import get_termination

    algo.termination = get_termination("n_eval", UNLIMITED_EVALS)
    pls = ParetoLocalSearch(rec, algorithms.problem_repair(problem), seed=settings.seed,
                            batch_evals=settings.pop_size)
    if phase == "mix":
        ckpt.guarded(ckpt.restore_maoea, algo, meta["maoea"], arrays)
        algo.termination = get_termination("n_eval", UNLIMITED_EVALS)
        ckpt.guarded(ckpt.restore_polish, pls, meta["polish"], arrays)
        mix = meta["mix"]
        active, ea_rate, ls_rate = str(mix["active"]), float(mix["ea_rate"]), mix["ls_rate"]
        trail = [tuple(t) for t in mix["trail"]]
    else:
        active, ea_rate, ls_rate = "polish", _rate(trail[0], trail[-1]), None
    parts = {"maoea": lambda: ckpt.maoea_state(algo), "polish": lambda: ckpt.polish_state(pls),
             "mix": lambda: ({"active": active, "ea_rate": ea_rate, "ls_rate": ls_rate,
                              "trail": [list(t) for t in trail]}, {})}
    while True:
        if active == "polish" and not pls.done():
            mark = (rec.n_evals, rec.n_entered)
            pls.step()
            if rec.n_evals > mark[0]:
                ls_rate = _rate(mark, (rec.n_evals, rec.n_entered))
                if ls_rate < ea_rate:
                    active = "maoea"
        else:
            active = "maoea"
            algo.next()
            trail = _mark(trail, rec)
            ea_rate = _rate(trail[0], trail[-1])
            if ls_rate is not None and ea_rate < ls_rate and not pls.done():
                active = "polish"
        save("mix", parts)


@dataclass
class SearchResult:
    X: np.ndarray  # archive decision vectors
    F: np.ndarray  # archive objectives, minimised
    history: list[dict] = field(default_factory=list)
    evaluations: int = 0
    generations: int = 0
    wall_s: float = 0.0
    partial: bool = False
    stop_reason: str = ""
    g_best: np.ndarray | None = None  # per constraint, the smallest value any evaluated plan reached


class StopSearch(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@contextmanager
def interrupt_flag():
    """First SIGINT sets the event; a second raises KeyboardInterrupt as usual."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum, frame):
        if stop.is_set():
            signal.signal(signal.SIGINT, previous)
            raise KeyboardInterrupt
        stop.set()

    signal.signal(signal.SIGINT, handler)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def _row(rec: RecordingProblem, t0: float, scale: HVScale | None, memo: dict) -> dict:
    """One history row. Its hypervolume is computed every HV_EVERY batches (None between); the
    search's last row always gets it (`run_search`)."""
    F = rec.archive.F
    return {
        "generation": rec.batches,
        "evaluations": rec.n_evals,
        "wall_s": round(time.perf_counter() - t0, 4),
        "hv": _hv(rec, scale, memo) if rec.batches % HV_EVERY == 0 else None,
        "front_size": len(F),
        "feasible_share": rec.last_feasible_share,
        "best_throughput": float(-F[:, 0].min()) if len(F) else None,
        "min_cost": float(F[:, 1].min()) if len(F) else None,
    }


def _hv(rec: RecordingProblem, scale: HVScale | None, memo: dict) -> float:
    """The archive's hypervolume, recomputed only when the archive changed: its arrays are
    replaced, never edited, when a plan enters, and most late batches add none."""
    if scale is None:
        return float("nan")
    data = rec.archive.state
    if memo.get("data") is not data:  # the memo holds the tuple, so its identity is never reused
        memo["data"], memo["hv"] = data, scale.hv(data[1])
    return memo["hv"]


def run_search(problem, settings: SearchSettings, seeds: np.ndarray | None = None,
               hv_scale: HVScale | None = None, on_generation=None,
               checkpointer: ckpt.Checkpointer | None = None, state: tuple[dict, dict] | None = None,
               known: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> SearchResult:
    """Search `problem` (4 minimised objectives) and return its archive and history.

    `seeds`: decision vectors for MaOEA-CS' first population (the corner heuristics).
    `on_generation(row, stop_event)`: called after each evaluated batch (tests interrupt with it).
    `checkpointer`: saves the state at generation boundaries (MaOEA-CS and the local search;
    the baseline algorithms run as black boxes and are not checkpointed).
    `state`: a saved state (`checkpoint.read_state`) to go on from. The evaluation budget
    counts from the run's start; a time limit counts from this call.
    `known`: (X, F, feasible) of plans already scored, put into the archive before the search.
    """
    if settings.evals is None and settings.time_s is None:
        raise ValueError("give an evaluation budget, a time limit or both")
    algorithms.check_name(settings.algorithm)
    budget = settings.evals if settings.evals is not None else UNLIMITED_EVALS
    history: list[dict] = list(state[0]["history"]) if state else []
    wall0 = float(state[0]["wall_s"]) if state else 0.0
    t0 = time.perf_counter() - wall0
    total, by_evals = (settings.evals, True) if settings.evals is not None else (settings.time_s, False)

    evaluation = None
    if settings.jobs and settings.jobs > 1:
        from mosearch.planner.parallel import RayEvaluation

        evaluation = RayEvaluation(problem, settings.jobs)
    partial, reason = False, "budget"
    with interrupt_flag() as stop, SearchProgress(total, "evals" if by_evals else "s", settings.progress) as bar:

        hv_memo: dict = {}

        def on_batch(rec: RecordingProblem) -> None:
            row = _row(rec, t0, hv_scale, hv_memo)
            history.append(row)
            bar.update(rec.n_evals if by_evals else row["wall_s"], {**row, "hv": hv_memo.get("hv")})
            if on_generation is not None:
                on_generation(row, stop)
            if stop.is_set():
                raise StopSearch("interrupted")
            if settings.time_s is not None and row["wall_s"] - wall0 >= settings.time_s:
                raise StopSearch("time")
            if rec.n_evals >= budget:
                raise StopSearch("budget")

        rec = RecordingProblem(problem, evaluation, on_batch)
        meta, arrays = state if state else ({}, {})
        phase = meta.get("phase", "maoea")
        if state:
            ckpt.guarded(ckpt.restore_recorder, rec, meta, arrays)
            if checkpointer is not None:
                checkpointer.last = rec.batches
        elif known is not None and len(known[0]):
            # plans scored before the search (the structured seeds): on the front from the start,
            # without taking the first population's places (a resumed run has them in its archive)
            rec.archive.add(*known)

        def save(phase_name: str, parts: dict) -> None:
            """parts: name -> callable giving (meta, arrays) of one part of the search."""
            if checkpointer is None:
                return

            def capture():
                m, a = ckpt.recorder_state(rec, history, history[-1]["wall_s"] if history else 0.0)
                m, a = {**m, "phase": phase_name}, dict(a)
                for name, part in parts.items():
                    pm, pa = part()
                    m[name] = pm
                    a.update(pa)
                return m, a

            checkpointer.boundary(rec.batches, capture)

        try:
            if settings.algorithm == algorithms.DEFAULT:
                planned = int(settings.evals or TIME_EVAL_RATE * settings.time_s)
                ea = int(planned * (1.0 - settings.polish))
                # adaptive: MaOEA-CS's schedule (mutation step, phase switch) spans the whole budget;
                # from `ea` on it alternates with the local search (`_alternate`)
                algo = algorithms.make_maoea(problem, settings.pop_size, seeds, planned if settings.adaptive else ea,
                                             settings.dedup, settings.switch_share)
                algo.setup(rec, termination=("n_eval", ea), seed=settings.seed, verbose=False)
                trail = [(rec.n_evals, rec.n_entered)]  # (evaluations, archive entries) after each MaOEA-CS generation
                maoea_part = {"maoea": lambda: ckpt.maoea_state(algo),
                              "trail": lambda: ({"marks": [list(t) for t in trail]}, {})}
                if phase == "maoea":
                    if state:
                        ckpt.guarded(ckpt.restore_maoea, algo, meta["maoea"], arrays)
                        trail = [tuple(t) for t in meta.get("trail", {}).get("marks", trail)]
                    while algo.has_next():
                        algo.next()
                        trail = _mark(trail, rec)
                        save("maoea", maoea_part)
                if settings.polish > 0 and not settings.adaptive:
                    pls = ParetoLocalSearch(rec, algorithms.problem_repair(problem), seed=settings.seed)
                    if phase == "polish":
                        ckpt.guarded(ckpt.restore_polish, pls, meta["polish"], arrays)
                    pls.run(lambda: save("polish", {"polish": lambda: ckpt.polish_state(pls)}))
                elif settings.adaptive:
                    _alternate(rec, algo, problem, settings, phase, meta, arrays, trail, save)
            else:
                algorithms.baseline_runner(settings.algorithm)(rec, budget, settings.seed)
        except StopSearch as s:
            reason = s.reason
            partial = reason == "interrupted"
        except KeyboardInterrupt:
            partial, reason = True, "interrupted"
        finally:
            if evaluation is not None:
                evaluation.close()
    if history and history[-1]["hv"] is None:  # the last row is the archive returned
        history[-1]["hv"] = _hv(rec, hv_scale, hv_memo)
    return SearchResult(
        X=rec.archive.X.copy(), F=rec.archive.F.copy(), history=history, evaluations=rec.n_evals,
        generations=rec.batches, wall_s=time.perf_counter() - t0, partial=partial, stop_reason=reason,
        g_best=rec.g_best,
    )
