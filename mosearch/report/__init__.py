"""Plots and the offline HTML report of a run directory."""

from __future__ import annotations

from pathlib import Path

from mosearch.results import objective_matrix
from problems.placement.plan import Plan


def write_report_files(out: Path, plans: list[Plan], baselines: dict[str, Plan], knee: int | None,
                       history: list[dict], title: str, subtitle: str, run_dir: Path | None = None) -> list[Path]:
    """Every plot and report.html into `out` (`run_dir`: the run directory the files end in, where
    `out` is a stage); returns the files written."""
    from mosearch.report import html, plots

    out = Path(out)
    F = objective_matrix(plans)
    modes = [p.execution.mode for p in plans]
    base_F = {name: objective_matrix([p])[0] for name, p in baselines.items()}
    written = []
    if len(plans):
        written.append(plots.scatter_matrix(F, modes, knee, out / "scatter_matrix.png"))
        written.append(plots.throughput_cost(F, modes, knee, base_F, out / "throughput_cost.png"))
        written.append(plots.parallel_coordinates(F, knee, out / "parallel_coordinates.png"))
    if history:
        written.append(plots.hv_history(history, out / "hv_history.png"))
    written.append(html.write_report(out / "report.html", plans, baselines, knee, title, subtitle, run_dir))
    return written
