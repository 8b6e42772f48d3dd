"""`mosearch bench planners`: search quality, anytime behaviour, plan quality and planner speed.

For every shipped cluster x workload pair, every search method (the planner's pipeline as
`mosearch plan` runs it, its MaOEA-CS ablations and the baselines registry) runs to the same
number of evaluations over several seeds; the single-objective
baseline planners' plans and (on mixed-8) the exact enumerated front are scored as point
sets. Each finished run is appended to a JSON-lines cache beside the table, so a partial
re-run (`--scenarios`, `--seeds`, `--evals`, `--methods`) computes only what is missing and
the table is always rebuilt from everything cached at the requested budget. The markdown is
written atomically; one PNG per scenario shows hypervolume against evaluations and wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import warnings
from pathlib import Path

import numpy as np

from mosearch.bench import baseline_plans as bp
from mosearch.bench import scenarios as sc
from problems.atomic import atomic_write_text
from problems.errors import InputError
from mosearch.bench import provenance

DEFAULT_OUTPUT = Path("results/bench/planners.md")
DEFAULT_EVALS = 3_000
DEFAULT_SEEDS = 5
EXACT_CLUSTERS = ("mixed-8",)
TARGET_SHARE = 0.8
TARGET_EXACT = 0.99


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenarios", default="all",
                   help="comma list of CLUSTER or CLUSTER:WORKLOAD (e.g. mixed-8,h100-64:qwen2.5-7b-grpo); default all")
    p.add_argument("--seeds", type=int, default=DEFAULT_SEEDS, help=f"runs per method and scenario, seeds 1..S (default {DEFAULT_SEEDS})")
    p.add_argument("--evals", type=int, default=DEFAULT_EVALS, help=f"equal evaluation budget per run (default {DEFAULT_EVALS})")
    p.add_argument("--methods", default="all", help=f"comma list from: {', '.join(sc.SEARCH_METHODS)} (default all)")
    p.add_argument("--no-exact", action="store_true", help="skip the exhaustive enumeration on mixed-8")
    p.add_argument("--scale", default="default", help="speed-and-scale part: 'default' (8..4096 GPUs, and 1024 GPUs in 4-32 pools; 'full' is the same), "
                        "'quick' (8, 64), or 'none'")
    p.add_argument("--output", default=str(DEFAULT_OUTPUT), help="markdown table to write")
    p.add_argument("--cache", default=None, help="JSON-lines run cache (default: beside the output, *_runs.jsonl)")
    p.add_argument("--render-only", action="store_true", help="rebuild the table and plots from the cache")


# ---------------------------------------------------------------- options
def parse_scenarios(text: str) -> list[tuple[str, str]]:
    every = sc.all_scenarios()
    if text.strip().lower() == "all":
        return every
    out = []
    for part in filter(None, (s.strip() for s in text.split(","))):
        cl, _, wl = part.partition(":")
        hit = [(c, w) for c, w in every if c == cl and (not wl or w == wl)]
        if not hit:
            raise InputError(None, "--scenarios", f"unknown scenario {part!r}",
                             f"CLUSTER[:WORKLOAD] with CLUSTER in {', '.join(sc.CLUSTERS)} and WORKLOAD in "
                             f"{', '.join(sc.WORKLOADS)}")
        out += hit
    return list(dict.fromkeys(out))


def parse_methods(text: str) -> list[str]:
    if text.strip().lower() == "all":
        return list(sc.SEARCH_METHODS)
    names = [s.strip() for s in text.split(",") if s.strip()]
    bad = [n for n in names if n not in sc.SEARCH_METHODS]
    if bad or not names:
        raise InputError(None, "--methods", f"unknown method {bad[0] if bad else text!r}",
                         f"comma list from: {', '.join(sc.SEARCH_METHODS)}")
    return [m for m in sc.SEARCH_METHODS if m in names]


# ---------------------------------------------------------------- cache
def _key(r: dict) -> tuple:
    return (r["kind"], r["scenario"], r.get("method"), r.get("seed"), r.get("evals"))


def load_cache(path: Path) -> dict[tuple, dict]:
    runs: dict[tuple, dict] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a kill
            runs[_key(r)] = r
    return runs


def _append(path: Path, runs: dict, r: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:  # one line per finished item: a killed run loses only itself
        f.write(json.dumps(r) + "\n")
    runs[_key(r)] = r


def _current(runs: dict, key: tuple, fingerprint: str) -> dict | None:
    """The cached record under `key` if the current model scored it (and, for a run, the method
    had its current settings), else None."""
    r = runs.get(key)
    if r is None or r.get("fingerprint") != fingerprint:
        return None
    if key[0] == "run" and r.get("config", "") != sc.method_config(key[2]):
        return None
    return r


def measure(scenarios, methods, seeds: int, evals: int, exact: bool, cache: Path, runs: dict, log=print) -> None:
    """Seeds outermost, so a run stopped half way still has every scenario at fewer seeds;
    the slow enumeration last. Cached items scored by another version of the performance model
    (another fingerprint of the corner grid's predictions) are measured again."""
    live = []
    for cl, wl in scenarios:
        sid = sc.scenario_id(cl, wl)
        problem = sc.load_problem(cl, wl)
        ref = sc.reference(problem)
        fp = ref.fingerprint
        if _current(runs, ("reference", sid, None, None, None), fp) is None:
            if ("reference", sid, None, None, None) in runs:
                log(f"{sid}: the model's predictions on the corner grid (the model or the grid) changed "
                    "since the cached runs; measuring again")
            _append(cache, runs, {"kind": "reference", "scenario": sid, "feasible": ref.feasible,
                                  "scale": ref.scale.as_dict(), "fingerprint": fp})
        if not ref.feasible:
            log(f"{sid}: no feasible plan in the corner grid; skipped")
            continue
        b = _current(runs, ("baselines", sid, None, None, None), fp)
        if b is None or b.get("source") != bp.source():
            _append(cache, runs, {"kind": "baselines", "scenario": sid, "source": bp.source(),
                                  "plans": bp.baseline_points(problem), "fingerprint": fp})
        live.append((cl, sid, problem, ref))
    warm = set()
    for seed in range(1, seeds + 1):
        for cl, sid, problem, ref in live:
            for m in methods:
                if _current(runs, ("run", sid, m, seed, evals), ref.fingerprint) is not None:
                    continue
                if m not in warm:
                    # one untimed short run per method and process: JIT compilation (numba in
                    # AGE-MOEA-II) and first imports would otherwise land in the first timed run
                    sc.run_method(problem, m, 2 * sc.POP_SIZE, 0, ref.scale)
                    warm.add(m)
                r = sc.run_method(problem, m, evals, seed, ref.scale)
                _append(cache, runs, {"kind": "run", "scenario": sid, "method": m, "seed": seed, "evals": evals,
                                      "fingerprint": ref.fingerprint, "config": sc.method_config(m), **r})
                log(f"{sid} {m} seed {seed}: hv {r['hv']:.4f}, {r['wall_s']:.1f} s")
    for cl, sid, problem, ref in live:
        if exact and cl in EXACT_CLUSTERS and _current(runs, ("exact", sid, None, None, None), ref.fingerprint) is None:
            log(f"{sid}: enumerating the exact front ...")
            _append(cache, runs, {"kind": "exact", "scenario": sid, "fingerprint": ref.fingerprint,
                                  **bp.exact_front(problem)})
            log(f"{sid}: exact front {len(runs[('exact', sid, None, None, None)]['front'])} plans")


# ---------------------------------------------------------------- numbers
def _hv(scale: dict, front) -> float:
    from mosearch.planner.hv import HVScale

    s = HVScale(scale["throughput_samples_s"], scale["cost_usd_h"], scale["staleness"])
    return s.hv(np.array(front, dtype=float).reshape(-1, 4))


def _q(v) -> tuple[float, float, float]:
    v = np.asarray(v, dtype=float)
    return tuple(float(x) for x in np.percentile(v, [25, 50, 75]))


def _fmt(x, digits=4) -> str:
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "—"
    return f"{x:.{digits}g}"


def scenario_data(runs: dict, sid: str, methods, seeds: int, evals: int) -> dict | None:
    """Everything cached for one scenario that the model of its latest reference scored."""
    ref = runs.get(("reference", sid, None, None, None))
    if ref is None:
        return None
    fp = ref.get("fingerprint")
    d = {"sid": sid, "feasible": ref["feasible"], "scale": ref["scale"], "runs": {}, "baselines": {}, "exact": None}
    if not ref["feasible"]:
        return d
    for m in methods:
        rs = [r for s in range(1, seeds + 1) if (r := _current(runs, ("run", sid, m, s, evals), fp)) is not None]
        if rs:
            d["runs"][m] = rs
    b = _current(runs, ("baselines", sid, None, None, None), fp)
    if b:
        d["baseline_source"] = b["source"]
        for name, rec in b["plans"].items():
            d["baselines"][name] = {**rec, "hv": _hv(ref["scale"], rec["front"])}
    e = _current(runs, ("exact", sid, None, None, None), fp)
    if e:
        d["exact"] = {**e, "hv": _hv(ref["scale"], e["front"])}
    return d


def time_to(rs: list[dict], target: float) -> tuple[float | None, float | None, int]:
    """Median evaluations and seconds at which a run's HV first reaches `target` (over the runs that do)."""
    ev, wall = [], []
    for r in rs:
        for n, w, h in r["curve"]:
            if h >= target:
                ev.append(n)
                wall.append(w)
                break
    if not ev:
        return None, None, 0
    return float(np.median(ev)), float(np.median(wall)), len(ev)


def best_under(front, max_cost=None, min_thr=None) -> tuple[float | None, float | None]:
    """(highest throughput at cost <= max_cost, lowest cost at throughput >= min_thr) on a front."""
    F = np.array(front, dtype=float).reshape(-1, 4)
    thr, cost = -F[:, 0], F[:, 1]
    a = b = None
    if max_cost is not None:
        ok = cost <= max_cost * (1 + 1e-9)
        a = float(thr[ok].max()) if ok.any() else None
    if min_thr is not None:
        ok = thr >= min_thr * (1 - 1e-9)
        b = float(cost[ok].min()) if ok.any() else None
    return a, b


# ---------------------------------------------------------------- markdown
def render(runs: dict, scenarios, methods, seeds: int, evals: int, plot_dir: Path, scale_rows: list[dict],
           command: str) -> str:
    data = [d for cl, wl in scenarios if (d := scenario_data(runs, sc.scenario_id(cl, wl), methods, seeds, evals))]
    feasible = [d for d in data if d["feasible"] and d["runs"]]
    skipped = [d["sid"] for d in data if not d["feasible"]]
    lines = ["# Planners: search quality, anytime behaviour, plan quality, speed", "", provenance.line(), ""]
    summary_at = len(lines)
    from mosearch.planner.search import SearchSettings

    product = SearchSettings()
    polish, switch = product.polish, product.switch_share or 1.0
    lines += [
        f"Regenerate with `{command}` (runs cached in `planners_runs.jsonl` beside this file; delete it to re-measure).",
        "",
        f"- Budget: **{evals:,} evaluations per run for every search method**. The planner's every evaluation "
        "counts inside it: its corner grid (`mosearch plan`'s 3,000 plans, cut to a fifth of the budget when "
        f"smaller; the distinct plans after the repair are scored), seeded MaOEA-CS on the first {1 - polish:.0%} of the rest (phase 2 from {switch:.0%} of "
        f"{'the whole rest' if product.adaptive else 'that part'} at the latest), Pareto local search from there"
        + (" on, alternating with MaOEA-CS generations: local-search batches of about a population, the side in use "
           "keeping the budget while it puts at least as many plans into the archive per evaluation as the other "
           "did when last measured (MaOEA-CS over its last 3 generations)"
           if product.adaptive else " (it may stop early when no neighbour is fresh, never late)")
        + "; the MaOEA-CS ablations count their grid the same way and keep "
        "the entry's phase switch rule; runs cached by the model or search settings of another version "
        "are measured again. "
        "`mosearch plan` also runs the baseline planners for its report; they are not part of its search and "
        f"are not counted. Population {sc.POP_SIZE} where the method takes one, seeds 1..{seeds}; "
        "one process, `OMP_NUM_THREADS=1`, on a shared 2-core machine "
        f"({platform.processor() or platform.machine()}, Python {platform.python_version()}). Wall times are "
        "contended and indicative only."
        + ("" if len(methods) == len(sc.SEARCH_METHODS) else " Not run at this budget: "
           + ", ".join(v for k, v in sc.SEARCH_METHODS.items() if k not in methods) + "."),
        "- Hypervolume: minimised objectives normalised by a **fixed reference per scenario**, computed once "
        "before any method runs from the planner's corner grid (seed 0): throughput axis 1 - t / (2 x fastest "
        "grid plan), cost / (price of every GPU of the cluster, or the dearest feasible grid plan if higher), "
        "peak memory fraction as is, staleness / max(1, workload bound); reference point 1.1 on every axis; "
        "exact 4-D HV (moocore via pymoo). Per-scenario scales are in the last section.",
        "- Constraints: every method's front is its archive of feasible non-dominated plans evaluated "
        "(same recorder for all). pymoo's MOEA/D rejects constrained problems, so it sees a static penalty "
        f"({sc.PENALTY:g} x total violation added to every objective); DEAP NSGA-III uses the same penalty; "
        "the other pymoo algorithms use their own constraint domination.",
        f"- Single-objective baseline plans from: {_sources(feasible)}; scored as point sets (no equal budget: "
        "they are planners with their own cost).",
        "- All throughput and cost figures are **predictions of the performance model**, not measurements, "
        "until calibrated runs confirm them.",
    ]
    if skipped:
        lines += [f"- Skipped: {', '.join(skipped)}: none of the corner grid's plans (up to 3,000, every footprint x "
                  "mode x common layout) is feasible, so no fixed reference exists; a screen, not a proof of "
                  "infeasibility."]
    lines += [""]

    # 1. search quality
    lines += ["## 1. Search quality: hypervolume of the final front", "",
              "Median [interquartile range] over seeds; **bold**: the highest median of the search methods. "
              "Baseline planners' plans and the exact front (mixed-8, by enumeration) as point sets.", ""]
    base_names = sorted({n for d in feasible for n in d["baselines"]}, key=_base_order)
    head = ["scenario", *[sc.SEARCH_METHODS[m] for m in methods], *base_names, "exact front"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    wins, exact_ratio, best_known, verdict = {}, {}, {}, {}
    for d in feasible:
        med = {m: _q([r["hv"] for r in d["runs"][m]]) for m in methods if m in d["runs"]}
        top = max(v[1] for v in med.values())
        cells = [d["sid"]]
        for m in methods:
            if m not in med:
                cells.append("—")
                continue
            q1, q2, q3 = med[m]
            s = f"{q2:.4f} [{q1:.4f}, {q3:.4f}]"
            cells.append(f"**{s}**" if q2 >= top else s)
        others = {m: v[1] for m, v in med.items() if m not in sc.OURS}
        for n in base_names:
            b = d["baselines"].get(n)
            cells.append(f"{b['hv']:.4f}" if b else "—")
            if b:
                others[n] = b["hv"]
        ex = d["exact"]
        cells.append(f"{ex['hv']:.4f}" if ex else "—")
        lines.append("| " + " | ".join(cells) + " |")
        if ex:
            best_known[d["sid"]] = _union_hv(d)
        rivals = {k: v for k, v in others.items() if k in sc.SEARCH_METHODS}
        best_rival = max(rivals, key=rivals.get) if rivals else None
        for own in sc.OURS:
            if own not in med:
                continue
            ours = med[own][1]
            wins.setdefault(own, {})[d["sid"]] = (
                all(ours >= v for v in others.values()), [k for k, v in others.items() if v > ours],
                ours / rivals[best_rival] if best_rival and rivals[best_rival] > 0 else None, best_rival)
            if ex and ex["hv"] > 0:
                exact_ratio.setdefault(own, {})[d["sid"]] = (ours / ex["hv"], ours / best_known[d["sid"]])
            if own == sc.PRODUCT and others:
                top_other = max(others, key=others.get)
                verdict[d["sid"]] = (ours, top_other, others[top_other], ours >= others[top_other],
                                     ours / ex["hv"] if ex and ex["hv"] > 0 else None)
    lines += [""]
    if verdict:
        n_ok = sum(v[3] for v in verdict.values())
        lines += [f"The {sc.SEARCH_METHODS[sc.PRODUCT]} against every baseline (search methods other than ours and "
                  "the baseline planners' plans), per scenario:", "",
                  "| scenario | planner median HV | best baseline | its HV | planner / best baseline | planner >= "
                  "every baseline | planner / exact front |", "|---|---|---|---|---|---|---|"]
        for sid, (ours, nm, v, ok, exr) in verdict.items():
            lines.append(f"| {sid} | {ours:.4f} | {_label(nm)} | {v:.4f} | {ours / v if v > 0 else float('inf'):.3f} "
                         f"| {'yes' if ok else 'no'} | {_fmt(exr)} |")
        lines += ["", f"At least every baseline on {n_ok}/{len(verdict)} scenarios ({n_ok / len(verdict):.0%}; target "
                  f">= {TARGET_SHARE:.0%}).", ""]
    if exact_ratio:
        ex_any = next(d["exact"] for d in feasible if d["exact"])  # noqa: F841
        lines += [f"Exact front: every plan of the space with kv_mem_frac on the grid {ex_any.get('kv_grid')} "
                  f"(the one coarsened variable; a search may slightly beat it there), "
                  f"{ex_any['evaluations']:,} plans evaluated after dominance rules, {ex_any['wall_s']:.0f} s. "
                  "Searches vary kv_mem_frac continuously, so they can exceed it (lower KV memory gives a lower peak "
                  "memory fraction). Best known front = non-dominated union of the exact front and every run's "
                  "front: " + ", ".join(f"{s}: HV {v:.4f}" for s, v in best_known.items()) + ".", ""]

    # 2. anytime
    lines += ["## 2. Anytime behaviour", "",
              "Evaluations and seconds (median over the seeds that get there, and how many do) until a run's "
              "hypervolume first reaches 95% and 99% of the best final median hypervolume of the scenario. "
              f"Plots: `{plot_dir.name}/<scenario>.png` (median over seeds; HV against evaluations and against "
              "wall time).", ""]
    head = ["scenario", "method", "final HV (median)", "evals to 95%", "s to 95%", "evals to 99%", "s to 99%",
            "front size (median)", "wall s (median)", "evals/s"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for d in feasible:
        best = max(float(np.median([r["hv"] for r in rs])) for rs in d["runs"].values())
        for m in methods:
            rs = d["runs"].get(m)
            if not rs:
                continue
            e95, s95, n95 = time_to(rs, 0.95 * best)
            e99, s99, n99 = time_to(rs, 0.99 * best)
            wall = float(np.median([r["wall_s"] for r in rs]))
            rate = float(np.median([r["evaluations"] / max(r["wall_s"], 1e-9) for r in rs]))
            lines.append("| " + " | ".join([
                d["sid"], sc.SEARCH_METHODS[m], f"{float(np.median([r['hv'] for r in rs])):.4f}",
                _reach(e95, n95, len(rs), "{:,.0f}"), _reach(s95, n95, len(rs), "{:.2f}"),
                _reach(e99, n99, len(rs), "{:,.0f}"), _reach(s99, n99, len(rs), "{:.2f}"),
                f"{float(np.median([len(r['front']) for r in rs])):.0f}", f"{wall:.2f}", f"{rate:,.0f}"]) + " |")
    lines += [""]
    for d in feasible:
        png = plot_dir / f"{_slug(d['sid'])}.png"
        if png.exists():
            lines.append(f"![{d['sid']}]({plot_dir.name}/{png.name})")
    lines += [""]

    # 3. plan quality
    lines += ["## 3. Plan quality at the best homogeneous deployment's budget and throughput", "",
              "Budget B = $/h of the best homogeneous plan (the fastest single-GPU-type plan). Per method, the "
              "highest throughput on its final front at cost <= B (median over seeds), as a ratio to the "
              "verl-style colocated plan (its fastest plan within B) and to the HetRL-style plan (that planner "
              "rerun with B as its budget; MILP likewise); and the lowest $/h at throughput >= the homogeneous "
              "plan's, as 'x cheaper' than it. **Model predictions**, not measured runs.", ""]
    head = ["scenario", "method", "B $/h", "samples/s at <= B", "x verl-style", "x HetRL-style",
            "lowest $/h at >= homog. thr.", "homog. $/h / that (>1: cheaper)"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ratios: dict[str, list[float]] = {}
    for d in feasible:
        homog = d["baselines"].get(bp.HOMOGENEOUS)
        if not homog or not homog["front"]:
            continue
        T, B = bp.fastest(homog["front"])
        verl = d["baselines"].get(bp.VERL)
        verl_thr = best_under(verl["front"], max_cost=B)[0] if verl and verl["front"] else None
        het = d["baselines"].get(bp.HETRL)
        het = (het or {}).get("at_budget", het)
        het_thr = best_under(het["front"], max_cost=B)[0] if het and het["front"] else None
        rows = [(sc.SEARCH_METHODS[m], d["runs"][m]) for m in methods if m in d["runs"]]
        rows += [(n + (" (run at B)" if "at_budget" in d["baselines"][n] else ""),
                  [d["baselines"][n].get("at_budget", d["baselines"][n])]) for n in base_names if n in d["baselines"]]
        for label, rs in rows:
            got = [best_under(r["front"], max_cost=B, min_thr=T) for r in rs]
            thr = [g[0] for g in got if g[0] is not None]
            cost = [g[1] for g in got if g[1] is not None]
            t = float(np.median(thr)) if thr else None
            c = float(np.median(cost)) if cost else None
            rv = t / verl_thr if t and verl_thr else None
            rh = t / het_thr if t and het_thr else None
            if label == sc.SEARCH_METHODS[sc.PRODUCT] and rv:
                ratios.setdefault("verl", []).append(rv)
                if rh:
                    ratios.setdefault("hetrl", []).append(rh)
                if c:
                    ratios.setdefault("cost", []).append(c / B)
            lines.append("| " + " | ".join([d["sid"], label, f"{B:.4g}", _fmt(t), _fmt(rv, 3), _fmt(rh, 3), _fmt(c),
                                            _fmt(B / c if c else None, 3)]) + " |")
    lines += [""]

    # 4. speed and scale
    lines += _scale_section(scale_rows)
    lines += _scales_table(feasible)

    # summary and targets at the top
    summary = _summary(wins, exact_ratio, ratios, scale_rows, feasible)
    summary[-1:-1] = _other_budgets(plot_dir, evals)
    lines[summary_at:summary_at] = summary
    return "\n".join(lines) + "\n"


def _other_budgets(plot_dir: Path, evals: int) -> list[str]:
    """Headline lines of tables rendered at other budgets into the plot folder (a partial rerun
    with `--output <plot folder>/<name>.md` and this table's cache), quoted with their source."""
    out = []
    for md in sorted(plot_dir.glob("*.md")) if plot_dir.is_dir() else []:
        text = md.read_text().splitlines()
        budget = next((l for l in text if l.startswith("- Budget: **")), "")
        if f"**{evals:,} evaluations" in budget:
            continue
        keep = [l[2:] for l in text if l.startswith(("- Search quality:", "- Exact front,"))]
        how = next((l for l in text if l.startswith("Regenerate with")), "")
        skipped = budget.partition(" Not run at this budget: ")[2].rstrip(".")
        if keep:
            out.append(f"- At another budget, `{plot_dir.name}/{md.name}` ({budget[len('- Budget: '):].split('.')[0]}"
                       + (f", except {skipped}" if skipped else "") + "; "
                       f"{how[len('Regenerate with '):].split(' (')[0]}): " + " ".join(keep))
    return out


def _reach(v, n, total, f) -> str:
    if v is None:
        return f"never (0/{total})"
    return f.format(v) + ("" if n == total else f" ({n}/{total})")


def _base_order(n: str) -> tuple:
    order = [bp.HETRL, bp.MILP, bp.VERL, bp.HOMOGENEOUS]
    return (order.index(n) if n in order else len(order), n)


def _sources(data) -> str:
    s = sorted({d.get("baseline_source", "") for d in data} - {""})
    return ", ".join(s) or "none"


def _slug(sid: str) -> str:
    return sid.replace(" x ", "__").replace(" ", "_")


def _union_hv(d: dict) -> float:
    """HV of the non-dominated union of the exact front and every run's final front."""
    from problems.pareto import non_dominated as non_dominated_mask

    parts = [np.array(d["exact"]["front"], dtype=float).reshape(-1, 4)]
    parts += [np.array(r["front"], dtype=float).reshape(-1, 4) for rs in d["runs"].values() for r in rs]
    F = np.vstack(parts)
    return _hv(d["scale"], F[non_dominated_mask(F)])


def _label(name: str) -> str:
    return sc.SEARCH_METHODS.get(name, name)


def _gmean(v) -> float:
    return float(np.exp(np.mean(np.log(v))))


ABLATIONS = {
    "maoea-cs": "MaOEA-CS alone (the corner grid, then MaOEA-CS for the whole rest of the budget: no local search)",
    "maoea-cs-dedup": "MaOEA-CS with duplicate elimination (offspring equal to a parent after the integer repair "
                      "are dropped; no local search)",
}


def _summary(all_wins, all_exact, ratios, scale_rows, data) -> list[str]:
    out = ["## Summary", ""]
    own = sc.PRODUCT
    name = sc.SEARCH_METHODS[own]
    wins, exact_ratio = all_wins.get(own, {}), all_exact.get(own, {})
    if wins:
        n_win = sum(1 for w, *_ in wins.values() if w)
        share = n_win / len(wins)
        lost = {s: l for s, (w, l, *_) in wins.items() if not w}
        out.append(f"- Search quality: the planner's median hypervolume ({name}, as `mosearch plan` searches) is "
                   f"at least every baseline search method's and every baseline planner's plans' on "
                   f"**{n_win}/{len(wins)} scenarios ({share:.0%})**; target >= {TARGET_SHARE:.0%}: "
                   f"**{'met' if share >= TARGET_SHARE else 'missed'}** (per scenario: section 1, second table).")
        won = [s for s, (w, *_) in wins.items() if w]
        if won:
            out.append("- Where it wins: " + ", ".join(won) + ".")
        if lost:
            out.append("- Where it does not win (methods or baseline plans with a higher median HV): "
                       + "; ".join(f"{s} ({', '.join(_label(x) for x in l)})" for s, l in lost.items()) + ".")
        rel = [(r, b) for _, _, r, b in wins.values() if r is not None]
        if rel:
            rs = [r for r, _ in rel]
            top = max(set(b for _, b in rel), key=[b for _, b in rel].count)
            out.append(f"- Its median HV / the best baseline search method's median HV: geometric mean "
                       f"{_gmean(rs):.3f} over {len(rs)} scenarios (range {min(rs):.3f}-{max(rs):.3f}); the strongest "
                       f"rival most often: {sc.SEARCH_METHODS[top]}.")
    for s, (r, rb) in exact_ratio.items():
        out.append(f"- Exact front, {s}: the planner's median HV = **{r:.4f}** of the enumerated front's (kv_mem_frac "
                   f"on 3 values there, so > 1 is possible) and {rb:.4f} of the best known front's; target >= "
                   f"{TARGET_EXACT} of the exact front: **{'met' if r >= TARGET_EXACT else 'missed'}**.")
    for m, what in ABLATIONS.items():
        abl = all_wins.get(m, {})
        if not abl:
            continue
        n_win = sum(1 for w, *_ in abl.values() if w)
        rs = [r for _, _, r, _ in abl.values() if r is not None]
        ex = ", ".join(f"{r:.4f} of the exact front on {s}" for s, (r, rb) in all_exact.get(m, {}).items())
        out.append(f"- Ablation, {what}: at least every baseline on {n_win}/{len(abl)} scenarios "
                   f"({n_win / len(abl):.0%})" + (f", median HV / best baseline search method's {_gmean(rs):.3f} "
                   "(geometric mean)" if rs else "") + (f", {ex}" if ex else "") + ".")
    if ratios.get("verl"):
        v = ratios["verl"]
        s = (f"- Plan quality (model predictions): at the best homogeneous plan's $/h, the planner's fastest plan "
             f"trains {_gmean(v):.2f}x the verl-style colocated plan (geometric mean, range {min(v):.2f}-{max(v):.2f}x)")
        if ratios.get("hetrl"):
            s += f", {_gmean(ratios['hetrl']):.2f}x the HetRL-style plan"
        if ratios.get("cost"):
            c = ratios["cost"]
            s += (f"; its cheapest plan at least as fast as the homogeneous one costs {_gmean(c):.2f}x the "
                  f"homogeneous plan's $/h (geometric mean, range {min(c):.2f}-{max(c):.2f}; < 1 is cheaper)")
        out.append(s + ".")
    if scale_rows:
        big = max(scale_rows, key=lambda r: (r["gpus"], r["pools"]))
        fit = _slope(scale_rows)
        from mosearch.bench.scale import POOL_SERIES, SIZE_SERIES, TIME_LIMIT_S

        missing = [n for n, _, _ in SIZE_SERIES + POOL_SERIES if n not in {r["cluster"] for r in scale_rows}]
        if missing:
            out.append(f"- Scale: **no finished measurement for {', '.join(missing)}**; the 4,096-GPU target "
                       f"(< {TIME_LIMIT_S:.0f} s) is unconfirmed for those.")
        done = big.get("complete", True)
        load = "/".join(f"{v:.1f}" for v in big.get("load", []))
        out.append(f"- Speed: a default `mosearch plan` search on {big['gpus']:,} GPUs / {big['pools']} pools "
                   + (f"took {big['search_s']:.0f} s wall, {big['cpu_s']:.0f} s CPU" if done else
                      f"did only {big['evals']:,} evaluations in {big['search_s']:.0f} s wall ({big['cpu_s']:.0f} s CPU)")
                   + (f" (load average {load} at start/end on 2 cores)" if load else "")
                   + f"; < {TIME_LIMIT_S:.0f} s: **{'yes' if done and big['search_s'] < TIME_LIMIT_S else 'no'}**. "
                   f"CPU time of the whole default run grows as pools^{fit:.2f} (fit over {len(scale_rows)} clusters; "
                   f"target <= 1: **{'met' if fit <= 1.0 else 'missed'}**).")
    out += [""]
    return out


def _scale_section(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    from mosearch.bench.scale import DEFAULT_SEARCH

    out = ["## 4. Speed and scale", "",
           f"Model throughput: plans evaluated per second by `PlacementProblem.evaluate_matrix` on batches of 100 "
           f"(a population) and 10,000 random vectors (best of 3). Default run: `mosearch plan`'s defaults "
           f"({DEFAULT_SEARCH['evals']:,} search evaluations, population {DEFAULT_SEARCH['pop_size']}, no report), "
           "workload qwen2.5-7b-grpo, seed 1, end to end in one process: problem build, corner grid, MaOEA-CS, "
           "Pareto local search, decoding the front and the baseline planners of the report (verl-style, best "
           "homogeneous, HetRL-style, MILP). Clusters above 64 GPUs except hetero-1024 are generated "
           "(`mosearch/bench/gen_clusters.py`).", "",
           "| cluster | GPUs | pools | variables | plans/s (batch 100) | plans/s (batch 10k) | default run wall s | "
           "of which search | CPU s | load at start/end | front size |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["gpus"], r["pools"])):
        cut = "" if r.get("complete", True) else f" (time limit: {r['evals']:,} evals done)"
        load = "/".join(f"{v:.1f}" for v in r.get("load", [])) or "—"
        out.append(f"| {r['cluster']} | {r['gpus']:,} | {r['pools']} | {r['n_var']} | {r['rate_100']:,.0f} | "
                   f"{r['rate_10k']:,.0f} | {r['search_s']:.1f}{cut} | {_fmt(r.get('search_wall_s'), 3)} | "
                   f"{r['cpu_s']:.1f} | {load} | {r['front']} |")
    at1024 = [r for r in rows if r["gpus"] == 1024]
    out += ["", "The machine is shared (1-minute load average in the table, 2 cores; other processes take most "
            "of the CPU at times), so wall seconds (and the plans/s columns, wall-clock rates) are inflated by waiting for a "
            "core, and growth is fitted on the CPU seconds of the benchmark process, which waiting does not count. Least-squares fit of log(CPU s of the whole "
            f"default run) on log(pools), all rows: slope **{_slope(rows):.2f}** (1 = linear); on log(GPUs): "
            f"{_slope(rows, 'gpus'):.2f}"
            + (f"; at 1,024 GPUs, pools only: {_slope(at1024):.2f}" if len({r['pools'] for r in at1024}) > 1 else "")
            + ". Before the MILP baseline's node limit (problems/placement/baselines/milp.py), one of its MILPs on "
            "32 pools ran for minutes and the 4,096-GPU run did not finish in 22 minutes (the search itself was "
            "not the slow part: see the 'of which search' column).", ""]
    return out


def _slope(rows, key="pools") -> float:
    x = np.log([r[key] for r in rows])
    y = np.log([r["cpu_s"] for r in rows])
    if len(set(x)) < 2:
        return float("nan")
    return float(np.polyfit(x, y, 1)[0])


def _scales_table(data) -> list[str]:
    out = ["## Hypervolume reference per scenario", "",
           "| scenario | throughput scale (samples/s) | cost scale ($/h) | staleness scale | reference point |",
           "|---|---|---|---|---|"]
    for d in data:
        s = d["scale"]
        out.append(f"| {d['sid']} | {s['throughput_samples_s']:.4g} | {s['cost_usd_h']:.4g} | {s['staleness']:g} | "
                   f"{s['reference']} |")
    return out + [""]


# ---------------------------------------------------------------- plots
def plot(runs: dict, scenarios, methods, seeds: int, evals: int, plot_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plot_dir.mkdir(parents=True, exist_ok=True)
    files = []
    for cl, wl in scenarios:
        d = scenario_data(runs, sc.scenario_id(cl, wl), methods, seeds, evals)
        if not d or not d["runs"]:
            continue
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
        for m in methods:
            rs = d["runs"].get(m)
            if not rs:
                continue
            marks, wall, hv = _on_marks(rs, evals)
            style = dict(lw=2.2 if m in sc.OURS else 1.2, label=sc.SEARCH_METHODS[m])
            a1.plot(marks, hv, drawstyle="steps-post", **style)
            a2.plot(wall, hv, **style)
        for name, b in d["baselines"].items():
            for a in (a1, a2):
                a.axhline(b["hv"], ls=":", lw=1, color="gray")
            a1.annotate(name, (0, b["hv"]), fontsize=7, color="gray", va="bottom")
        if d["exact"]:
            for a in (a1, a2):
                a.axhline(d["exact"]["hv"], ls="--", lw=1, color="black")
            a1.annotate("exact front", (0, d["exact"]["hv"]), fontsize=7, va="bottom")
        a1.set_xlabel("evaluations")
        a2.set_xlabel("wall time (s, contended 2-core machine)")
        a2.set_xscale("log")
        for a in (a1, a2):
            a.set_ylabel("hypervolume (median over seeds)")
            a.grid(alpha=0.3)
        a1.legend(fontsize=7, loc="lower right")
        fig.suptitle(f"{d['sid']}: anytime hypervolume ({evals:,} evaluations, {seeds} seeds)")
        fig.tight_layout()
        path = plot_dir / f"{_slug(d['sid'])}.png"
        tmp = path.with_suffix(".tmp.png")
        fig.savefig(tmp, dpi=90)
        os.replace(tmp, path)
        plt.close(fig)
        files.append(path)
    return files


def _on_marks(rs: list[dict], evals: int):
    """Seeds' curves on common evaluation marks (a curve holds its last value between its own
    points): marks, median wall s, median HV."""
    marks = np.linspace(evals / sc.N_CHECKPOINTS, evals, sc.N_CHECKPOINTS)
    W, H = [], []
    for r in rs:
        C = np.array(r["curve"], dtype=float)
        j = np.searchsorted(C[:, 0], marks, side="right") - 1  # last point at or before each mark
        H.append(np.where(j >= 0, C[np.maximum(j, 0), 2], 0.0))
        W.append(np.where(j >= 0, C[np.maximum(j, 0), 1], np.nan))
    with warnings.catch_warnings():  # marks before any seed's first point have no wall time
        warnings.simplefilter("ignore", RuntimeWarning)
        wall = np.nanmedian(np.array(W), axis=0)
    return marks, wall, np.median(np.array(H), axis=0)


# ---------------------------------------------------------------- entry
def run(args: argparse.Namespace) -> int:
    scenarios = parse_scenarios(args.scenarios)
    methods = parse_methods(args.methods)
    if args.seeds < 1:
        raise InputError(None, "--seeds", f"got {args.seeds}", "a positive number of seeds")
    if args.evals < 2 * sc.POP_SIZE:
        raise InputError(None, "--evals", f"got {args.evals}", f"at least {2 * sc.POP_SIZE} (two populations)")
    if args.scale not in ("default", "full", "quick", "none"):
        raise InputError(None, "--scale", f"got {args.scale!r}", "default, full, quick or none")
    output = Path(args.output)
    cache = Path(args.cache) if args.cache else output.with_name(output.stem + "_runs.jsonl")
    runs = load_cache(cache)
    log = lambda s: print(s, flush=True)  # noqa: E731
    t0 = time.perf_counter()
    if not args.render_only:
        measure(scenarios, methods, args.seeds, args.evals, not args.no_exact, cache, runs, log)
    scale_rows = []
    if args.scale != "none":
        from mosearch.bench import scale

        scale_rows = scale.measure(args.scale, cache, runs, None if args.render_only else log, _append)
    plot_dir = output.with_suffix("")
    plot(runs, scenarios, methods, args.seeds, args.evals, plot_dir)
    command = "mosearch bench planners" + _flags(args)
    text = render(runs, scenarios, methods, args.seeds, args.evals, plot_dir, scale_rows, command)
    atomic_write_text(output, text)
    log(f"wrote {output} ({time.perf_counter() - t0:.0f} s)")
    return 0


def _flags(args) -> str:
    out = ""
    for name, default in (("scenarios", "all"), ("seeds", DEFAULT_SEEDS), ("evals", DEFAULT_EVALS),
                          ("methods", "all"), ("scale", "default")):
        v = getattr(args, name)
        if v != default:
            out += f" --{name} {v}"
    out += " --no-exact" if args.no_exact else ""
    if Path(args.output) != DEFAULT_OUTPUT:
        out += f" --output {args.output}"
    return out + (f" --cache {args.cache}" if args.cache else "")
