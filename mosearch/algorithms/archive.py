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
from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting


class NonDominatedArchive(Archive):
    def __new__(cls, individuals=[], **kwargs):
        kwargs.setdefault("duplicate_elimination", None)
        return super().__new__(cls, individuals, **kwargs)

    def _find_opt(self, sols):
        cv = sols.get("CV")
        feas = (cv <= 0).ravel() if cv is not None and cv.size else np.ones(len(sols), dtype=bool)
        if np.any(feas):
            sols = sols[feas]
            F = sols.get("F")
            idx = NonDominatedSorting().do(F, only_non_dominated_front=True)
            _, first = np.unique(F[idx], axis=0, return_index=True)
            return sols[idx[np.sort(first)]]
        cv = cv.ravel()
        return sols[np.flatnonzero(cv == cv.min())[:1]]
