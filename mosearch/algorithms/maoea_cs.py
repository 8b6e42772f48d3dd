"""MaOEA-CS: many-objective optimisation by corner solution search, as a pymoo Algorithm.

The CEC'2017 many-objective competition winner (Sun et al., arXiv:1806.02967; entry
report and MATLAB code in the competition repository ranchengcn/IEEE-CEC-MaOO-Competition,
files MOEARNS.m, SelectCorner.m, DSASelection.m, AngleBasedSelect.m, RealMutation.m).

    from pymoo.optimize import minimize
    res = minimize(problem, MaOEACS(pop_size=100), ("n_eval", 20000), seed=1)

How a run goes (each part in its own module):
- population size rounded up to max(ceil(N/M) M, 2M) (`round_pop_size`);
- after each environmental selection (`dsa.py`): corners of the first front
  (`corners.py`, both kinds), nadir = max over the corners;
- each generation draws one number r: with probability delta every corner makes
  floor(N / |corners|) children by the exploitative mutation (Eq. 5, `operators.py`),
  otherwise SBX + polynomial mutation makes N children from random-permutation pairs;
- delta = 0.9 in phase 1 and 0.1 in phase 2. The switch is one-way: from iteration 51
  on, once the largest relative change of any nadir coordinate against 50 iterations
  earlier is below 0.001 M (NaN ratios from a zero nadir coordinate are ignored, as
  MATLAB's max ignores NaN);
- environmental selection: DSA with max-min angle selection (`angle_selection.py`).

Deviations from the entry, and why:
- Kind-2 corner test uses ideal-shifted objective sums (see `corners.py`): the raw
  sums make the rule depend on the objectives' origin; identical when the ideal point is
  the origin (most MaF problems; not MaF8, MaF9, MaF13).
- Angle selection never re-picks a corner (the code could in principle add a corner a
  second time once every other candidate is exhausted); it only changes which
  duplicate survives.
- alpha's budget maxFE is read from the termination (`("n_eval", E)`, or
  `("n_gen", G)` as G N); `max_evals=` overrides it; with neither, alpha stays 0.7.
- Random numbers come from pymoo's per-run generator (`seed=`), not MATLAB's stream,
  so runs match the entry in distribution, not draw for draw.
- Crossover: by default the entry's own SBX (PlatEMO 1.x EAreal: unbounded spread,
  random sign per variable, half the variables crossed, children clipped to the bounds
  after polynomial mutation; `operators.unbounded_sbx`). `sbx="pymoo"` swaps in pymoo's
  bounded SBX instead; measured here it trails the published IGD on MaF10 (WFG1) at
  M = 5 (0.67 vs 0.54), where the entry's variant matches it (0.56 over 3 seeds).

Extensions (each switchable, off means the entry's behaviour):
- `constraints=True`: feasibility first (see `dsa.py`); with `False` constraint
  values are ignored, like the entry.
- `sampling=`: pymoo's usual argument, or seeds: a Population or an (k, D) array of
  user solutions (evaluated or not). Fewer than N seeds are all kept and the rest of
  the first population is drawn by `fill_sampling`; more than N go through one DSA
  selection. Seeds are repaired like any other solution.
- `archive=True`: every feasible non-dominated solution seen, in `algorithm.archive`
  and `res.archive` (`archive.py`). It costs a non-dominated sort of archive plus
  offspring per generation; turn it off for many-objective benchmarks where almost
  every solution is non-dominated.
- `integer=`: True, a boolean mask over variables, or None to follow `problem.vtype`;
  those variables are rounded (and clipped into bounds) before `repair=` runs. This is
  how integer and mixed integer/real vector problems run; pymoo's dict-variable
  ("vars") problems are not supported: encode them as a vector plus a mask.
- `eliminate_duplicates=True`: offspring equal to a parent or each other are dropped
  before evaluation (useful on integer problems; off by default like the entry).
- `switch_share=s`: phase 2 also begins once s of the evaluation budget is spent, whether
  or not the nadir has settled. The entry's rule cannot fire before iteration 51, so on a
  budget of a few dozen generations the whole run is phase 1 (90% corner mutation); the
  planner's short searches use this. None (default): the entry's rule only.

The placement planner adds one more around the algorithm, not inside it: its first population
is seeded with structured pool-level plans (`mosearch/planner/structured.py`: pool roles, then
the training layout per footprint, then the engine TP per pool, then the mode), scored by the
model before the search; the algorithm itself runs unchanged on them.
"""

from __future__ import annotations

import math

import numpy as np
from pymoo.algorithms.base.genetic import GeneticAlgorithm
from pymoo.core.duplicate import DefaultDuplicateElimination, NoDuplicateElimination
from pymoo.core.population import Population
from pymoo.core.repair import NoRepair, Repair
from pymoo.operators.sampling.rnd import FloatRandomSampling
from pymoo.util.display.multi import MultiObjectiveOutput

from mosearch.algorithms.archive import NonDominatedArchive
from mosearch.algorithms.dsa import DSASurvival
from mosearch.algorithms.operators import Explorative, corner_mutation, mutation_alpha

PHASE_DELTA = (0.9, 0.1)  # probability of corner search in phase 1 / phase 2 (report)
SWITCH_WINDOW = 50  # iterations between compared nadir estimates (MOEARNS.m)
PLANNER_SWITCH_SHARE = 0.3  # switch_share of `mosearch plan`'s searches (chosen there: planner/search.py)
SWITCH_TOL = 1e-3  # per-objective tolerance; the threshold is SWITCH_TOL * M (MOEARNS.m)


class IntegerRounding(Repair):
    """Round the masked variables to integers inside their bounds; others untouched."""

    def __init__(self, mask: np.ndarray):
        super().__init__()
        self.mask = np.asarray(mask, dtype=bool)

    def _do(self, problem, X, **kwargs):
        X = np.array(X, dtype=float, copy=True)
        cols = self.mask
        lo = np.ceil(problem.xl[cols] - 1e-9)
        hi = np.floor(problem.xu[cols] + 1e-9)
        X[:, cols] = np.clip(np.round(X[:, cols]), lo, hi)
        return X


class _Chain(Repair):
    def __init__(self, *repairs):
        super().__init__()
        self.repairs = [r for r in repairs if r is not None and not isinstance(r, NoRepair)]

    def do(self, problem, pop, **kwargs):
        for r in self.repairs:
            pop = r.do(problem, pop, **kwargs)
        return pop


def _budget(termination, pop_size: int) -> float | None:
    """Largest evaluation count the termination allows, if it says (recursing into collections)."""
    found = []

    def visit(t, depth=0):
        if t is None or depth > 4:
            return
        n_eval = getattr(t, "n_max_evals", None)
        if n_eval is not None and np.isfinite(n_eval):
            found.append(float(n_eval))
        n_gen = getattr(t, "n_max_gen", None)
        if n_gen is not None and np.isfinite(n_gen):
            found.append(float(n_gen) * pop_size)
        for name in ("terminations", "criteria"):
            for sub in getattr(t, name, None) or []:
                visit(sub, depth + 1)
        for name in ("max_evals", "max_gen"):
            visit(getattr(t, name, None), depth + 1)

    visit(termination)
    return min(found) if found else None


class MaOEACS(GeneticAlgorithm):
    def __init__(
        self,
        pop_size: int = 100,
        sampling=None,
        repair: Repair | None = None,
        fill_sampling=None,
        eta_c: float = 20.0,
        eta_m: float = 20.0,
        sbx: str = "unbounded",
        delta: tuple[float, float] = PHASE_DELTA,
        switch_window: int = SWITCH_WINDOW,
        switch_tol: float = SWITCH_TOL,
        max_evals: int | None = None,
        round_pop_size: bool = True,
        constraints: bool = True,
        archive: bool = True,
        integer=None,
        eliminate_duplicates: bool = False,
        switch_share: float | None = None,
        output=MultiObjectiveOutput(),
        **kwargs,
    ):
        self.seeds = sampling if isinstance(sampling, (Population, np.ndarray, list)) else None
        self.fill_sampling = fill_sampling if fill_sampling is not None else (sampling if self.seeds is None and sampling is not None else FloatRandomSampling())
        self.user_repair = repair
        super().__init__(
            pop_size=pop_size,
            sampling=self.fill_sampling,
            survival=DSASurvival(constraints=constraints),
            repair=repair,
            eliminate_duplicates=eliminate_duplicates,
            output=output,
            archive=NonDominatedArchive() if archive else None,
            **kwargs,
        )
        self.requested_pop_size = pop_size
        self.explorative = Explorative(eta_c, eta_m, sbx)
        self.delta = tuple(delta)
        self.switch_window = switch_window
        self.switch_tol = switch_tol
        self.max_evals = max_evals
        self.round_pop_size = round_pop_size
        self.integer = integer
        self.dedup = bool(eliminate_duplicates)
        if switch_share is not None and not 0 <= switch_share <= 1:
            raise ValueError(f"switch_share must lie in [0, 1], got {switch_share}")
        self.switch_share = switch_share
        # run state
        self.phase = 0
        self.switch_iter = None
        self.nadir_history: list[np.ndarray] = []
        self.operator_counts = {(0, "corner"): 0, (0, "sbx"): 0, (1, "corner"): 0, (1, "sbx"): 0}

    # -------------------------------------------------------------- setup

    def _setup(self, problem, **kwargs):
        if getattr(problem, "vars", None):
            raise ValueError(
                "MaOEACS works on vector-encoded problems; encode dict variables as a vector and pass integer=<mask>"
            )
        if problem.xl is None or problem.xu is None:
            raise ValueError("MaOEACS needs finite variable bounds (problem.xl, problem.xu)")
        m = problem.n_obj
        if self.round_pop_size:
            self.pop_size = max(math.ceil(self.requested_pop_size / m) * m, 2 * m)
        else:
            self.pop_size = self.requested_pop_size
        self.n_offsprings = self.pop_size

        mask = self._integer_mask(problem)
        rounding = IntegerRounding(mask) if mask.any() else None
        self.repair = _Chain(rounding, self.user_repair)
        if mask.any() and isinstance(self.fill_sampling, FloatRandomSampling):
            # Floats are rounded by the repair, so plain float sampling is enough.
            pass
        self.eliminate_duplicates = DefaultDuplicateElimination() if self.dedup else NoDuplicateElimination()
        self.budget = self.max_evals if self.max_evals is not None else _budget(self.termination, self.pop_size)
        self.phase = 0
        self.switch_iter = None
        self.nadir_history = []
        self.operator_counts = {k: 0 for k in self.operator_counts}

    def _integer_mask(self, problem) -> np.ndarray:
        d = problem.n_var
        spec = self.integer
        if spec is None:
            vt = getattr(problem, "vtype", None)
            is_int = vt is not None and isinstance(vt, type) and issubclass(vt, (int, np.integer)) and vt is not bool
            return np.full(d, bool(is_int))
        if isinstance(spec, bool):
            return np.full(d, spec)
        mask = np.asarray(spec, dtype=bool)
        if mask.shape != (d,):
            raise ValueError(f"integer mask has shape {mask.shape}, expected ({d},)")
        return mask

    # -------------------------------------------------------------- initialisation

    def _initialize_infill(self):
        seeds = Population.empty()
        if self.seeds is not None:
            seeds = self.seeds if isinstance(self.seeds, Population) else Population.new(X=np.atleast_2d(np.asarray(self.seeds, dtype=float)))
            seeds = seeds.copy()
        n_fill = self.pop_size - len(seeds)
        if n_fill > 0:
            fill = self.fill_sampling(self.problem, n_fill, random_state=self.random_state)
            pop = Population.merge(seeds, fill) if len(seeds) else fill
        else:
            pop = seeds
        todo = [k for k in range(len(pop)) if len(pop[k].evaluated) == 0]
        if todo:
            pop[todo] = self.repair.do(self.problem, pop[todo], random_state=self.random_state)
        return pop

    def _initialize_advance(self, infills=None, **kwargs):
        self.pop = self.survival.do(self.problem, infills, n_survive=self.pop_size, random_state=self.random_state)
        self._after_selection()

    # -------------------------------------------------------------- generation

    def _infill(self):
        rng = self.random_state
        r = rng.random()
        p = self.delta[self.phase]
        use_corners = (r <= p) if self.phase == 0 else (r < p)
        corners = self.survival.corners
        if use_corners and corners is not None and len(corners) > 0:
            k = max(1, self.pop_size // len(corners))
            parents = np.repeat(corners.get("X").astype(float), k, axis=0)
            alpha = mutation_alpha(self.evaluator.n_eval, self.budget, self.pop_size)
            X = corner_mutation(parents, self.problem.xl, self.problem.xu, alpha, rng)
            off = Population.new(X=X)
            self.operator_counts[(self.phase, "corner")] += 1
        else:
            off = self.explorative.do(self.problem, self.pop, rng, algorithm=self)
            self.operator_counts[(self.phase, "sbx")] += 1
        off = self.repair.do(self.problem, off, random_state=rng)
        if self.dedup:
            off = self.eliminate_duplicates.do(off, self.pop)
            if len(off) == 0:
                # Everything duplicated: fall back to a fresh random batch rather than stalling.
                off = self.repair.do(self.problem, self.fill_sampling(self.problem, self.pop_size, random_state=rng), random_state=rng)
        return off

    def _advance(self, infills=None, **kwargs):
        pop = Population.merge(self.pop, infills) if infills is not None else self.pop
        self.pop = self.survival.do(self.problem, pop, n_survive=self.pop_size, random_state=self.random_state)
        self._after_selection()

    def _after_selection(self):
        m = self.problem.n_obj
        nadir = self.survival.nadir
        self.nadir_history.append(np.full(m, np.nan) if nadir is None else np.asarray(nadir, dtype=float))
        it, w = len(self.nadir_history), self.switch_window
        if self.phase == 0 and self.switch_share is not None and self.budget and self.evaluator.n_eval >= self.switch_share * self.budget:
            self.phase = 1
            self.switch_iter = it
        if self.phase == 0 and it > w:
            old, new = self.nadir_history[-1 - w], self.nadir_history[-1]
            with np.errstate(divide="ignore", invalid="ignore"):
                change = np.abs(new - old) / np.abs(old)
            if np.any(np.isfinite(change)) or np.any(np.isinf(change)):
                worst = np.nanmax(change) if not np.all(np.isnan(change)) else np.nan
                if worst < self.switch_tol * m:
                    self.phase = 1
                    self.switch_iter = it

    @property
    def corners(self) -> Population | None:
        """Corner solutions found by the last environmental selection."""
        return self.survival.corners

    @property
    def nadir(self) -> np.ndarray | None:
        return self.survival.nadir
