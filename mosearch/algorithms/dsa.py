"""DSA environmental selection of MaOEA-CS (dominated space-reduction + angle selection).

On the merged population (code DSASelection.m):
1. non-dominated sort on objectives rounded to 1e-4 (as the code does); ideal point
   over the whole population; corners of the first front; nadir = max over corners;
2. first front larger than N: drop members beyond the nadir in any objective; if too
   few remain, refill with the dropped ones nearest the ideal point; if too many, the
   max-min angle selection starting from the corners;
3. first front smaller than N: fill with the dominated solutions nearest the ideal
   point (Euclidean distance of f - z*).

Constraint handling (an extension, switchable): feasibility first. Feasible solutions
always beat infeasible ones and go through the selection above; remaining places go to
infeasible solutions in order of total constraint violation. While nothing is
feasible the "corners" handed to the exploitative operator are the 2M least-violating
solutions, so that phase pulls the search toward the feasible region instead of
stalling.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pymoo.core.survival import Survival

from mosearch.algorithms.angle_selection import max_min_angle_select
from mosearch.algorithms.corners import corner_indices
from problems.pareto import non_dominated

ROUND_DECIMALS = 4  # the code's roundn(objs, -4) before sorting


@dataclass
class Selection:
    """Result of one DSA selection, all indices into the input array."""

    survivors: np.ndarray
    corners: np.ndarray
    nadir: np.ndarray
    ideal: np.ndarray


def first_front(F: np.ndarray) -> np.ndarray:
    """Boolean mask of the non-dominated rows of F after rounding to 1e-4."""
    return non_dominated(np.round(F, ROUND_DECIMALS), keep_duplicates=True)


def dsa_select(F: np.ndarray, n: int) -> Selection:
    """Pick n rows of F (minimisation) by DSA selection; also return corners and nadir."""
    F = np.asarray(F, dtype=float)
    n = min(n, len(F))
    nd_mask = first_front(F)
    ideal = F.min(axis=0)
    nd = np.flatnonzero(nd_mask)
    corners = nd[corner_indices(F[nd], ideal)]
    nadir = F[corners].max(axis=0)

    if len(nd) > n:
        over = np.any(F[nd] > nadir, axis=1)
        inside, outside = nd[~over], nd[over]
        if len(inside) < n:
            dist = np.linalg.norm(F[outside] - ideal, axis=1)
            fill = outside[np.argsort(dist, kind="stable")[: n - len(inside)]]
            survivors = np.concatenate([inside, fill])
        elif len(inside) > n:
            pos = np.full(len(F), -1)
            pos[inside] = np.arange(len(inside))
            start = pos[corners]
            start = start[start >= 0]
            survivors = inside[max_min_angle_select(F[inside], start, n, ideal, nadir)]
        else:
            survivors = inside
    elif len(nd) < n:
        dominated = np.flatnonzero(~nd_mask)
        dist = np.linalg.norm(F[dominated] - ideal, axis=1)
        fill = dominated[np.argsort(dist, kind="stable")[: n - len(nd)]]
        survivors = np.concatenate([nd, fill])
    else:
        survivors = nd
    return Selection(survivors=survivors, corners=corners, nadir=nadir, ideal=ideal)


class DSASurvival(Survival):
    """pymoo Survival wrapping `dsa_select`, with optional feasibility-first constraints.

    After `do`, `self.corners` is the Population of corner solutions (all of them are
    among the survivors) and `self.nadir` the estimated nadir point (None while no
    solution is feasible).
    """

    def __init__(self, constraints: bool = True):
        super().__init__(filter_infeasible=False)
        self.constraints = constraints
        self.corners = None
        self.nadir = None

    def _do(self, problem, pop, *args, n_survive=None, **kwargs):
        n = len(pop) if n_survive is None else min(n_survive, len(pop))
        F = pop.get("F")
        if self.constraints and problem.has_constraints():
            cv = pop.get("CV").ravel()
            feas = np.flatnonzero(cv <= 0)
        else:
            cv = None
            feas = np.arange(len(pop))

        if len(feas) == 0:
            order = np.argsort(cv, kind="stable")
            survivors = order[:n]
            self.corners = pop[order[: min(2 * problem.n_obj, n)]]
            self.nadir = None
            return pop[survivors]

        sel = dsa_select(F[feas], min(n, len(feas)))
        survivors = feas[sel.survivors]
        if len(survivors) < n:
            infeas = np.setdiff1d(np.arange(len(pop)), feas)
            infeas = infeas[np.argsort(cv[infeas], kind="stable")]
            survivors = np.concatenate([survivors, infeas[: n - len(survivors)]])
        self.corners = pop[feas[sel.corners]]
        self.nadir = sel.nadir
        return pop[survivors]
