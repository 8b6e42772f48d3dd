"""An archive of every non-dominated solution evaluated during a run.

Plugs into pymoo's own archive hook: `Algorithm.advance` calls `archive.add(infills)`
after each generation and `Result.archive` carries it out. Unbounded by default; a
`max_size` truncates at random (pymoo's default truncation) when set.

Feasible solutions only, once any exist; before that the least-violating ones are kept
so a user sees how close the run got. Repeated objective vectors are kept once.
pymoo's default duplicate elimination on X is switched off: it builds an all-pairs
distance matrix that grows quadratically with the archive.
"""

from __future__ import annotations

import numpy as np
from pymoo.util.archive import Archive

from problems.pareto import non_dominated


class NonDominatedArchive(Archive):
    def __new__(cls, individuals=[], **kwargs):
        kwargs.setdefault("duplicate_elimination", None)
        return super().__new__(cls, individuals, **kwargs)

    def _find_opt(self, sols):
        cv = sols.get("CV")
        feas = (cv <= 0).ravel() if cv is not None and cv.size else np.ones(len(sols), dtype=bool)
        if np.any(feas):
            sols = sols[feas]
            return sols[non_dominated(sols.get("F"), keep_duplicates=False)]
        cv = cv.ravel()
        return sols[np.flatnonzero(cv == cv.min())[:1]]
