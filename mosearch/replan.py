"""Re-planning a run for the cluster a node loss left (`mosearch train --on-node-loss replan`).

The trainer detects the loss and asks for a plan; this module answers as `mosearch plan` and `pick`
would have for the surviving cluster: the plan's cluster spec with each node group cut to the
devices Ray still has alive (per GPU type, and region where nodes are labelled), the same workload,
the search's limits and the pick's rule and limits (`plan.chosen_by`; a plan without it: the knee,
no limits, said in the log). Everything it writes goes under RUN/replans/N/: the surviving cluster
spec, the front, and the chosen plan (paths relative to it, as `pick` writes them).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from problems.atomic import atomic_write_text
from problems.errors import InputError, NoFeasiblePlan

REPLAN_EVALS = 3000  # the search's budget for a re-plan: seconds, not the minute of a first `mosearch plan`


def surviving_cluster(spec: dict, cluster_file: Path, found, dest: Path) -> dict:
    """The cluster spec `spec` (read from `cluster_file`) cut to what `found` (Ray's alive nodes)
    still has: each node group keeps whole nodes of its devices left for its GPU type (and region,
    where the cluster labels regions); relative profile paths are rewritten for `dest`."""
    import os

    from trainer.placement import _match

    left = {(k, r): n for k, by in found.regions.items() for r, n in by.items()} if found.regions else {}
    by_type = dict(found.devices)
    groups = []
    for g in spec.get("node_groups") or []:
        name = _match(g["gpu"], by_type)
        have = 0 if name is None else (left.get((name, g["region"]), 0) if left else by_type[name])
        per = int(g.get("gpus_per_node", 1))
        nodes = min(int(g.get("nodes", 1)), have // per)
        if nodes == 0 and have > 0:  # fewer devices than a whole node of the spec: one smaller node
            per = 1 << (have.bit_length() - 1)
            nodes = 1
        if nodes:
            groups.append({**g, "nodes": nodes, "gpus_per_node": per})
            taken = nodes * per
            if left:
                left[(name, g["region"])] -= taken
            else:
                by_type[name] -= taken
    if not groups:
        raise InputError(str(cluster_file), "node_groups", "no node group has devices left on the surviving nodes",
                         "a node of the plan's GPU types still in the Ray cluster")
    out = {**spec, "node_groups": groups}
    if spec.get("profiles"):
        out["profiles"] = {k: v if Path(v).is_absolute() else os.path.relpath(cluster_file.parent / v, dest.parent)
                           for k, v in spec["profiles"].items()}
    return out


def replanner(inputs, out: str | Path, evals: int = REPLAN_EVALS, log=print):
    """A `replan(found) -> (plan, plan file)` for the driver (trainer/driver.py Driver)."""
    from mosearch import decide
    from mosearch.decide import Limits
    from mosearch.planner.run import plan_run
    from mosearch.planner.search import SearchSettings
    from mosearch.results import objective_matrix
    from problems.placement.planfiles import for_file

    count = [0]

    def replan(found):
        count[0] += 1
        where = Path(out) / "replans" / str(count[0])
        cluster_src = inputs.require_path("cluster")
        spec = yaml.safe_load(cluster_src.read_text())
        cluster_file = where / "cluster.yaml"
        left = surviving_cluster(spec, cluster_src, found, cluster_file)
        atomic_write_text(cluster_file, yaml.safe_dump(left, sort_keys=False))
        chosen = inputs.plan.chosen_by
        rule = chosen.rule if chosen else "knee"
        lim = (chosen.limits if chosen else {}) or {}
        sl = (chosen.search_limits if chosen else {}) or {}
        search = Limits(sl.get("max_cost_usd_h"), sl.get("min_throughput"), sl.get("max_staleness"),
                        sl.get("max_mem_frac"))
        pick = Limits(*(lim.get(k) for k in ("max_cost", "min_throughput", "max_staleness", "max_mem_frac")))
        res = np.array(chosen.resolution) if chosen and chosen.resolution else decide.RESOLUTION
        weights = np.array(chosen.weights) if chosen and chosen.weights else None
        log(f"re-planning for the surviving cluster ({found.describe()}): {evals} evaluations, "
            + (f"then the pick's rule {rule} ({pick.describe()})" if chosen else
               "then the knee (the plan does not say how it was picked)"))
        outcome = plan_run(str(cluster_file), str(inputs.require_path("workload")), where / "front",
                           SearchSettings(evals=evals, progress=False), search, report=False, resolution=res)
        F = objective_matrix(outcome.plans)
        choice = decide.choose(F, pick, weights, rule, res)
        if choice.index is None:
            raise NoFeasiblePlan(str(cluster_file), None, f"no plan of the {len(F)} found meets {pick.describe()}")
        plan = outcome.plans[choice.index].model_copy(update={"chosen_by": chosen})
        plan_file = where / "plan.yaml"
        atomic_write_text(plan_file, for_file(plan, plan_file).to_yaml())
        log(f"re-planned: {plan.plan_id} of {len(F)} plans, {plan.rollout_engines} engine(s), train dp={plan.train.dp} "
            f"tp={plan.train.tp} pp={plan.train.pp} {plan.execution.mode}; written to {plan_file}")
        return plan, str(plan_file)

    return replan
