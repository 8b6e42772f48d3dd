"""The live progress line of a search (rich): generation, evaluations, feasible share,
hypervolume, best throughput and cheapest cost so far."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn


class SearchProgress:
    """Bar over the evaluation budget (or the time budget when only --time is given)."""

    def __init__(self, total: float, unit: str, enabled: bool = True):
        self.unit = unit
        self.enabled = enabled
        self.progress = Progress(
            TextColumn("[bold]search[/]"),
            BarColumn(bar_width=24),
            TimeElapsedColumn(),
            TextColumn("{task.fields[line]}"),
            console=Console(file=sys.stderr),
            transient=False,
            disable=not enabled,
        )
        self.task = self.progress.add_task("search", total=total, line="starting")

    def __enter__(self) -> "SearchProgress":
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def update(self, done: float, row: dict) -> None:
        thr, hv = row.get("best_throughput"), row.get("hv")
        cost = row.get("min_cost")
        line = (f"gen {row['generation']}  evals {row['evaluations']}  feasible {100 * row['feasible_share']:.0f}%  "
                f"HV {'-' if hv is None else f'{hv:.4f}'}  front {row['front_size']}  "
                f"best {'-' if thr is None else f'{thr:.2f}'} samples/s  "
                f"cheapest {'-' if cost is None else f'{cost:.2f}'} $/h")
        self.progress.update(self.task, completed=done, line=line)
