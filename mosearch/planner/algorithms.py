"""Building the search algorithm named on the command line.

`maoea-cs` (the default) is MaOEA-CS as a pymoo Algorithm, seeded with the corner
heuristics and given the problem's repair. The other names are the baselines registry of
`mosearch.algorithms` (pymoo NSGA-III, MOEA/D, RVEA, AGE-MOEA-II, DEAP NSGA-III, random
search), each run as the registry runs it; the planner's recording wrapper keeps the plans
they evaluate, so every algorithm yields its front the same way.
"""

from __future__ import annotations

from problems.errors import InputError

DEFAULT = "maoea-cs"


def problem_repair(problem):
    """The placement problem's structural repair, if it has one (an object with `.do`)."""
    for name in ("repair", "make_repair"):
        r = getattr(problem, name, None)
        if r is None:
            continue
        return r if hasattr(r, "do") else r()
    return None


def registry() -> dict:
    from mosearch.algorithms import REGISTRY

    return dict(REGISTRY)


def names() -> list[str]:
    return [DEFAULT, *[n for n in registry() if n != DEFAULT]]


def check_name(name: str) -> None:
    if name != DEFAULT and name not in registry():
        raise InputError(None, "--algorithm", f"unknown algorithm {name!r}", f"one of: {', '.join(names())}")


def make_maoea(problem, pop_size: int, seeds, max_evals: int | None, dedup: bool = False,
               switch_share: float | None = None):
    from mosearch.algorithms import MaOEACS

    # Bounded SBX: every placement variable is a bounded integer or fraction, and the entry's
    # unbounded SBX throws children past the bounds that the repair then clips onto them. On
    # mixed-8 (grid ratio against the exact front, 60k evaluations, seeds 1-3) bounded SBX gave
    # 0.986 / 0.999 / 0.994, unbounded 0.968 / 0.987 / 0.988 (mosearch/bench/planner_targets.py).
    # archive=False: the planner keeps its own archive (RecordingProblem); pymoo's copy of it cost a
    # per-individual attribute walk of ~2,000 plans every generation (a quarter of the search's time)
    return MaOEACS(pop_size=pop_size, sampling=seeds, repair=problem_repair(problem), max_evals=max_evals,
                   sbx="pymoo", eliminate_duplicates=dedup, switch_share=switch_share, archive=False)


def baseline_runner(name: str):
    """`run(problem, n_eval, seed)` of a registry baseline."""
    check_name(name)
    return registry()[name].run
