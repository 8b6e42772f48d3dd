"""PNG plots of a front: scatter matrix of the four objectives, throughput against cost with
the knee and the baselines marked, parallel coordinates, hypervolume over the search."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from problems.atomic import atomic_write_bytes  # noqa: E402
from problems.placement.names import MODE_COLOURS, OBJECTIVES, OTHER_COLOUR  # noqa: E402

LABELS = [o.label for o in OBJECTIVES]
LOG_SPAN = 10.0  # a cost axis spanning more than this ratio is drawn logarithmic


def _log_axis(axis) -> None:
    """Logarithmic, ticked at 1, 2, 5 x 10^k with plain numbers (not 2 x 10^1)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _log_cost(values: np.ndarray) -> bool:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return len(v) > 0 and v.min() > 0 and v.max() / v.min() > LOG_SPAN


def _save(fig, path: Path) -> Path:
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return path


def _colours(modes: list[str]) -> list[str]:
    return [MODE_COLOURS.get(m, OTHER_COLOUR) for m in modes]


def _mode_legend(ax, modes: list[str]) -> None:
    for m in sorted(set(modes)):
        ax.scatter([], [], c=MODE_COLOURS.get(m, OTHER_COLOUR), s=18, label=m)


def scatter_matrix(F: np.ndarray, modes: list[str], knee: int | None, path: Path) -> Path:
    m = F.shape[1]
    # fixed margins: constrained layout doubles the rendering time of a 4 x 4 grid
    fig, axes = plt.subplots(m, m, figsize=(2.3 * m, 2.3 * m))
    fig.subplots_adjust(left=0.1, bottom=0.09, right=0.98, top=0.94, wspace=0.38, hspace=0.3)
    colours = _colours(modes)
    log_cost = _log_cost(F[:, 1])
    for i in range(m):
        for j in range(m):
            ax = axes[i, j]
            if i == j:
                bins = min(20, max(3, len(F) // 3))
                if i == 1 and log_cost:
                    bins = np.geomspace(F[:, 1].min(), F[:, 1].max(), bins + 1)
                ax.hist(F[:, i], bins=bins, color="#999999")
            else:
                ax.scatter(F[:, j], F[:, i], c=colours, s=10, alpha=0.75, linewidths=0)
                if knee is not None:
                    ax.scatter(F[knee, j], F[knee, i], marker="*", s=140, c="gold", edgecolors="black", zorder=3)
            if j == 1 and log_cost:
                ax.set_xscale("log")
                _log_axis(ax.xaxis)
            if i == 1 and j != 1 and log_cost:
                ax.set_yscale("log")
                _log_axis(ax.yaxis)
            if i == m - 1:
                ax.set_xlabel(LABELS[j], fontsize=8)
            if j == 0:
                ax.set_ylabel(LABELS[i], fontsize=8)
            ax.tick_params(labelsize=7)
    _mode_legend(axes[0, m - 1], modes)
    handles, labels = axes[0, m - 1].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="upper right", ncol=len(labels), frameon=False)
    fig.suptitle(f"Front: {len(F)} distinct plans (star: knee; colour: execution mode)", fontsize=11, x=0.35)
    return _save(fig, path)


def throughput_cost(F: np.ndarray, modes: list[str], knee: int | None, baselines: dict[str, np.ndarray],
                    path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(9, 5), layout="constrained")
    ax.scatter(F[:, 1], F[:, 0], c=_colours(modes), s=22, alpha=0.8, linewidths=0)
    _mode_legend(ax, modes)
    if knee is not None:
        ax.scatter(F[knee, 1], F[knee, 0], marker="*", s=260, c="gold", edgecolors="black", zorder=3, label="knee")
    # baselines on the same point share one marker and one legend entry
    groups: dict[tuple, list[str]] = {}
    for name, f in baselines.items():
        groups.setdefault((round(float(f[1]), 6), round(float(f[0]), 6)), []).append(name)
    markers = iter("sD^vP<>Xhp")
    for (cost, thr), names in groups.items():
        ax.scatter(cost, thr, marker=next(markers, "o"), s=70, facecolors="none", edgecolors="black",
                   linewidths=1.3, zorder=4, label="baseline: " + ",\n  ".join(names))
    if _log_cost(np.concatenate([F[:, 1], [c for c, _ in groups]])):
        ax.set_xscale("log")
        _log_axis(ax.xaxis)
        ax.set_xlabel("cost ($/h, log scale)")
    else:
        ax.set_xlabel("cost ($/h)")
    ax.set_ylabel("throughput (samples/s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.set_title(f"Throughput against cost: {len(F)} distinct plans")
    return _save(fig, path)


def parallel_coordinates(F: np.ndarray, knee: int | None, path: Path) -> Path:
    lo, hi = F.min(axis=0), F.max(axis=0)
    G = F.astype(float).copy()
    log_cost = _log_cost(F[:, 1])
    if log_cost:  # small plans stay apart on a wide cost range
        G[:, 1] = np.log(F[:, 1])
    glo, ghi = G.min(axis=0), G.max(axis=0)
    N = (G - glo) / np.where(ghi - glo > 0, ghi - glo, 1.0)
    fig, ax = plt.subplots(figsize=(8, 4.5), layout="constrained")
    from matplotlib.collections import LineCollection

    order = np.argsort(F[:, 0])
    xs = np.arange(F.shape[1])
    # one artist for every plan's polyline (one ax.plot per plan takes seconds on large fronts)
    segments = np.stack([np.broadcast_to(xs, N.shape), N], axis=2)[order]
    ax.add_collection(LineCollection(segments, cmap="viridis", array=N[order, 0], alpha=0.45, linewidths=1))
    ax.set_xlim(xs[0] - 0.1, xs[-1] + 0.1)
    ax.set_ylim(-0.05, 1.05)
    if knee is not None:
        ax.plot(xs, N[knee], color="black", lw=2.5, label="knee")
        ax.legend(fontsize=8, loc="upper right")
    ax.set_xticks(xs)
    labels = [lab + (", log" if k == 1 and log_cost else "") for k, lab in enumerate(LABELS)]
    ax.set_xticklabels([f"{lab}\n[{lo[k]:.3g} .. {hi[k]:.3g}]" for k, lab in enumerate(labels)], fontsize=8)
    ax.set_yticks([0, 1])
    ax.set_yticklabels(["front min", "front max"], fontsize=8)
    ax.set_title(f"Parallel coordinates: {len(F)} distinct plans (colour: throughput)")
    ax.grid(axis="x", alpha=0.4)
    return _save(fig, path)


def hv_history(history: list[dict], path: Path) -> Path:
    rows = [r for r in history if r["hv"] is not None]  # computed every few batches (planner.search.HV_EVERY)
    ev = [r["evaluations"] for r in rows]
    hv = [r["hv"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
    ax.plot(ev, hv, lw=1.5)
    ax.set_xlabel("evaluations of the search (after seeding)")
    ax.set_ylabel("hypervolume (normalised)")
    ax.grid(alpha=0.3)
    ax.set_title("Search progress")
    return _save(fig, path)
