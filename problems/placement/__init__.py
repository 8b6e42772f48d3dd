"""The placement problem: specs, GPU catalog, plans and their encoding, the performance model.

Names are imported on first use (PEP 562), so that `problems.placement.plan` (the plan schema)
loads without the performance model or pymoo.
"""

import importlib

_WHERE = {
    "Layout": "encoding", "explain_infeasible": "explain", "Plan": "plan", "load_plan": "plan",
    "CONSTRAINTS": "problem", "OBJECTIVES": "problem", "PlacementProblem": "problem", "PlacementRepair": "problem",
    "objectives": "problem", "Cluster": "specs", "Workload": "specs", "load_cluster": "specs",
    "load_workload": "specs",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f"problems.placement.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'problems.placement' has no attribute {name!r}")
