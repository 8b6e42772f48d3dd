"""Exporters: a plan as the placement configuration of verl, AReaL or RLinf.

Each target module has `export(plan, ctx) -> dict` (pure) and `notes(plan, ctx) -> list[str]`
(what the target cannot express). `render` turns both into one commented YAML document: the file the
executor's own launch command reads (`launch.py`), its header naming that command.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Callable

import yaml

from problems.placement.plan import Plan
from mosearch.export import areal, launch, rlinf, verl
from mosearch.export import layout as L
from mosearch.export.context import ExportContext

EXPORTERS: dict[str, Callable[[Plan, ExportContext | None], dict]] = {
    "verl": verl.export,
    "areal": areal.export,
    "rlinf": rlinf.export,
}
NOTES: dict[str, Callable[[Plan, ExportContext | None], list[str]]] = {
    "verl": verl.notes,
    "areal": areal.notes,
    "rlinf": rlinf.notes,
}


def layout_lines(plan: Plan, ctx: ExportContext) -> list[str]:
    lines, base = [], 0
    for rank, n in enumerate(L.nodes(plan, ctx)):
        roles = ", ".join(f"{r} {c}" for r, c in Counter(n.roles).items())
        gpus = f"GPU {base}" if n.size == 1 else f"GPUs {base}-{base + n.size - 1}"
        lines.append(f"node {rank}: {n.pool}, {gpus}: {roles}"
                     + (f", idle {n.size - len(n.roles)}" if len(n.roles) < n.size else ""))
        base += n.size
    return lines


def render(target: str, plan: Plan, ctx: ExportContext | None = None, path: Path | None = None) -> str:
    """The export as the file `path` (None: printed), its header saying how to start it."""
    ctx = ctx or ExportContext()
    data = launch.document(target, plan, ctx, EXPORTERS[target](plan, ctx))
    head = [f"{target} configuration exported by `mosearch export` from plan {plan.plan_id}",
            f"cluster {plan.cluster.name} (sha256 {plan.cluster.sha256[:12]}), "
            f"workload {plan.workload.name} (sha256 {plan.workload.sha256[:12]}), "
            f"mode {plan.execution.mode}, staleness bound {plan.execution.staleness_bound}",
            "layout:"] + ["  " + s for s in layout_lines(plan, ctx)]
    notes = list(ctx.cluster_notes) + NOTES[target](plan, ctx)
    head += launch.header(target, plan, ctx, path)
    if notes:
        head += ["notes:"] + [f"  - {n}" for n in notes]
    comment = "".join(f"# {line}\n" for line in head)
    return comment + yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


__all__ = ["EXPORTERS", "NOTES", "ExportContext", "render"]
