"""The placement problem: specs, GPU catalog, plans and their encoding, the performance model."""

from problems.placement.encoding import Layout
from problems.placement.explain import explain_infeasible
from problems.placement.plan import Plan, load_plan
from problems.placement.problem import (
    CONSTRAINTS,
    OBJECTIVES,
    PlacementProblem,
    PlacementRepair,
    objectives,
)
from problems.placement.specs import Cluster, Workload, load_cluster, load_workload

__all__ = [
    "CONSTRAINTS", "OBJECTIVES", "Cluster", "Layout", "PlacementProblem", "PlacementRepair", "Plan",
    "Workload", "explain_infeasible", "load_cluster", "load_plan", "load_workload", "objectives",
]
