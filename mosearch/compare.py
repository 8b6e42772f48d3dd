"""A plan set against a run's front (`mosearch import --front`, `mosearch show --with-plan`): the
check that both are of one cluster and workload, the plan's one-line summary, and the front's
fastest plan at no more cost."""

from __future__ import annotations

import numpy as np

from problems.errors import InputError


def check_same_problem(plan, run_dir: str, what: str) -> None:
    """A plan is set against a front only of its own cluster and workload (their content hashes)."""
    from mosearch.results import load_run  # lazily: the CLI imports every command at start

    info = load_run(run_dir).info or {}
    for spec in ("cluster", "workload"):
        mine = getattr(plan, spec)
        theirs = (info.get(spec) or {}).get("sha256")
        if theirs is not None and theirs != mine.sha256:
            raise InputError(what, spec, f"{mine.name} ({mine.path}) is not the {spec} of the front {run_dir} "
                             f"({(info.get(spec) or {}).get('path')})", f"a front of the same {spec}")


def against_front(plan, run_dir: str) -> str:
    """'the front has Z samples/s at the same $/h': the fastest front plan costing no more."""
    from mosearch.results import load_run

    run = load_run(run_dir)
    tput, cost = plan.predicted["throughput_samples_s"], plan.predicted["cost_usd_h"]
    cheaper = [p for p in run.plans if p.predicted.get("cost_usd_h", np.inf) <= cost * (1 + 1e-9)]
    if not cheaper:
        return f"the front of {run_dir} has no plan at ${cost:.2f}/h or less"
    best = max(cheaper, key=lambda p: p.predicted["throughput_samples_s"])
    gain = best.predicted["throughput_samples_s"] / tput if tput > 0 else float("inf")
    return (f"the front has {best.predicted['throughput_samples_s']:.3g} samples/s at "
            f"${best.predicted['cost_usd_h']:.2f}/h ({best.plan_id}, {gain:.2f}x yours)")


def summary(plan) -> str:
    p = plan.predicted
    return (f"your config: {p['throughput_samples_s']:.3g} samples/s at ${p['cost_usd_h']:.2f}/h, "
            f"peak memory {p.get('peak_mem_frac', float('nan')):.0%} of a GPU, staleness "
            f"{p.get('staleness', float('nan')):.2g} ({plan.execution.mode}, {plan.used_gpus} GPUs)")
