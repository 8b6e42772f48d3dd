"""Variation operators of MaOEA-CS.

- `corner_mutation`: the exploitative operator (entry report Eq. 5, code
  RealMutation.m). Each variable mutates with probability 1/D, at least one per child;
  the step is 0.5 (r1 - 0.5)(1 - r2^(-alpha))(ub - lb), with
  alpha = 0.7 (1 - fe / (maxFE + 2N)) decaying over the run, so early steps are heavy
  tailed and late ones small. A value leaving [lb, ub] is reflected part-way back:
  ub - 0.5 r (ub - parent), or lb + 0.5 r (parent - lb).
- `explorative_offspring`: SBX (pc = 1, eta_c = 20) then polynomial mutation
  (pm = 1/D, eta_m = 20), mates paired by one random permutation of the population
  (no tournament), as the entry calls PlatEMO's default real operator.

Both act on whole arrays: one call makes every child of a generation.
"""

from __future__ import annotations

import numpy as np
from pymoo.core.population import Population
from pymoo.operators.crossover.sbx import SBX
from pymoo.operators.mutation.pm import PM

ALPHA0 = 0.7  # initial alpha of Eq. 5 (report; RealMutation.m)


def mutation_alpha(n_eval: int, max_evals: float | None, pop_size: int) -> float:
    """alpha = 0.7 (1 - fe / (maxFE + 2N)); constant 0.7 when no budget is known."""
    if max_evals is None or not np.isfinite(max_evals):
        return ALPHA0
    return ALPHA0 * max(0.0, 1.0 - n_eval / (max_evals + 2 * pop_size))


def corner_mutation(parents: np.ndarray, xl: np.ndarray, xu: np.ndarray, alpha: float, rng: np.random.Generator) -> np.ndarray:
    """One child per row of `parents` by the exploitative operator (Eq. 5 with reflection)."""
    P = np.asarray(parents, dtype=float)
    n, d = P.shape
    mask = rng.random((n, d)) <= 1.0 / d
    none = ~mask.any(axis=1)
    mask[np.flatnonzero(none), rng.integers(0, d, size=int(none.sum()))] = True
    r1, r2 = rng.random((n, d)), rng.random((n, d))
    with np.errstate(divide="ignore", over="ignore"):
        step = 0.5 * (r1 - 0.5) * (1.0 - r2 ** (-alpha)) * (xu - xl)
    step = np.nan_to_num(step, nan=0.0, posinf=np.inf, neginf=-np.inf)
    child = np.where(mask, P + step, P)
    r3 = rng.random((n, d))
    over, under = child > xu, child < xl
    child = np.where(over, xu - 0.5 * r3 * (xu - P), child)
    child = np.where(under, xl + 0.5 * r3 * (P - xl), child)
    return child


def random_pairs(n: int, rng: np.random.Generator) -> np.ndarray:
    """floor(n/2) mating pairs from one random permutation; an odd n leaves one out."""
    perm = rng.permutation(n)
    half = n // 2
    return np.stack([perm[:half], perm[half : 2 * half]], axis=1)


def unbounded_sbx(p1: np.ndarray, p2: np.ndarray, eta: float, rng: np.random.Generator) -> np.ndarray:
    """SBX as PlatEMO 1.x's EAreal does it: unbounded spread, random sign, half the variables crossed.

    Returns both children stacked (2n, D); values may leave the bounds (clipped later).
    """
    n, d = p1.shape
    mu = rng.random((n, d))
    beta = np.where(mu <= 0.5, (2 * mu) ** (1 / (eta + 1)), (2 - 2 * mu) ** (-1 / (eta + 1)))
    beta = beta * np.where(rng.random((n, d)) < 0.5, -1.0, 1.0)
    beta[rng.random((n, d)) < 0.5] = 1.0
    mid, half = (p1 + p2) / 2, (p1 - p2) / 2
    return np.vstack([mid + beta * half, mid - beta * half])


class Explorative:
    """SBX + polynomial mutation on random-permutation pairs (PlatEMO EAreal defaults).

    sbx="pymoo": pymoo's bounded SBX (prob_var=0.5); sbx="unbounded": the entry's own
    variant (`unbounded_sbx`), children clipped into the bounds after mutation.
    """

    def __init__(self, eta_c: float = 20.0, eta_m: float = 20.0, sbx: str = "pymoo"):
        if sbx not in ("pymoo", "unbounded"):
            raise ValueError(f"sbx must be 'pymoo' or 'unbounded', got {sbx!r}")
        self.sbx = sbx
        self.eta_c = eta_c
        # prob_var=0.5: each variable is crossed with probability 1/2, as in EAreal.
        self.crossover = SBX(prob=1.0, prob_var=0.5, eta=eta_c)
        self.mutation = PM(prob=1.0, eta=eta_m)  # per-variable probability defaults to 1/D

    def do(self, problem, pop: Population, rng: np.random.Generator, algorithm=None) -> Population:
        pairs = random_pairs(len(pop), rng)
        if len(pairs) == 0:
            return Population.empty()
        if self.sbx == "pymoo":
            off = self.crossover.do(problem, pop, pairs, random_state=rng, algorithm=algorithm)
            return self.mutation.do(problem, off, random_state=rng, algorithm=algorithm)
        X = pop.get("X").astype(float)
        kids = unbounded_sbx(X[pairs[:, 0]], X[pairs[:, 1]], self.eta_c, rng)
        # pymoo's PM expects values inside the bounds; clip first, as EAreal's PM clips after.
        kids = np.clip(kids, problem.xl, problem.xu)
        off = self.mutation.do(problem, Population.new(X=kids), random_state=rng, algorithm=algorithm)
        off.set("X", np.clip(off.get("X"), problem.xl, problem.xu))
        return off
