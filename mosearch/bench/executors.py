"""Fronts a team can run: per executor and case, the plans its own start-up code accepts as planned, and
the throughput its rules cost.

For each case (cluster x workload) it searches the unrestricted front (`mosearch plan`) and one front
per executor (`mosearch plan --executor verl|areal|rlinf`) with the same seed and budget, then:
- accepted / total: the plans of the front (front.csv) whose export, written as `mosearch export --out`
  writes it and composed exactly as the command in its header composes it, the executor's own start-up
  code starts asking for exactly the plan's GPUs, DP, TP/PP, critic layout and engines (tests/export/
  targets.py: verl 0.9.1's validate_config (Megatron or FSDP actor config), v1 trainer __init__ and
  _init_resource_pool_mgr; AReaL 1.0.4's load_expr_config, PPOTrainer.__init__ and its scheduler's
  allocation of every role up to the worker processes; RLinf 0.3.0's validate_cfg whole and placement);
  a missing executor package stops the benchmark with an error (it is not a refusal);
- the same for the unrestricted front exported to that executor (what a user got before);
- the throughput cost of the rules: the fastest plan of the executor's front against the unrestricted
  front's (same search, same budget), and the structured stage's fastest with and without the rules
  (what `mosearch plan --executor` prints).
Figures are the performance model's predictions for GPU clusters, not measurements.

Usage: python -m mosearch.bench.executors [--evals 3000] [--out results/bench/executors.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INPUTS = ROOT / "benchmarks"  # clusters and workloads written for the benchmarks
sys.path.insert(0, str(ROOT))

SHIPPED = [("mixed-64", "qwen2.5-7b-grpo"), ("h100-64", "llama3.1-70b-ppo"), ("mixed-64", "llama3.1-70b-ppo"),
           ("mixed-8", "qwen2.5-1.5b-grpo")]
# written for this benchmark (benchmarks/clusters/exec-*.yaml); no rule was tuned on them
NEW = [("exec-h200-l40s-2region", "qwen2.5-7b-grpo"), ("exec-a100-uneven-nodes", "qwen2.5-7b-grpo"),
       ("exec-h100-a10g-3region", "qwen2.5-32b-grpo")]
EXECUTORS = ("verl", "areal", "rlinf")


def _cluster_path(name: str) -> Path:
    p = ROOT / f"problems/clusters/{name}.yaml"
    return p if p.is_file() else INPUTS / f"clusters/{name}.yaml"


def _search(cluster: Path, workload: Path, out: Path, executor: str, evals: int):
    from mosearch.planner.run import plan_run
    from mosearch.planner.search import SearchSettings
    from problems.errors import NoFeasiblePlan

    try:
        res = plan_run(str(cluster), str(workload), out, SearchSettings(evals=evals, seed=1, progress=False),
                       report=False, executor=None if executor == "mosearch" else executor)
    except NoFeasiblePlan as err:
        return None, str(err.problem)
    return res, None


class MissingPackage(RuntimeError):
    """An executor's package (or one it imports) is not installed: the check could not run. An error of the
    environment, never counted as a refusal."""


def _megatron(executor: str, plan, workload) -> bool:
    """Whether the export trains with Megatron (verl: TP/PP; AReaL: PP; RLinf: TP/PP, and PPO's critic)."""
    t = plan.train
    if executor == "areal":
        return t.pp > 1
    return t.tp > 1 or t.pp > 1 or (executor == "rlinf" and workload.algorithm == "ppo")


def _accepted(executor: str, plans, ctx, workload, work) -> tuple[int, str, int]:
    """(plans started as planned, the first refusal, Megatron plans among those started)."""
    from tests.export.targets import CHECKS

    ok, first, megatron = 0, "", 0
    for plan in plans:
        try:
            CHECKS[executor](plan, ctx, workload, work)
            ok += 1
            megatron += _megatron(executor, plan, workload)
        except ImportError as err:  # ModuleNotFoundError included: nothing was checked
            raise MissingPackage(f"{executor}: {type(err).__name__}: {err}") from err
        except Exception as err:  # a refusal, or asking for other GPUs / layout than planned
            first = first or f"{type(err).__name__}: {(str(err).splitlines() or ['(no message)'])[0][:110]}"
    return ok, first, megatron


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--evals", type=int, default=3000)
    ap.add_argument("--out", default="results/bench/executors.md")
    args = ap.parse_args()

    from mosearch.export import ExportContext
    from problems.placement.specs import load_cluster, load_workload
    from tests.export.targets import new_workdir

    t0, commit = time.time(), _commit()  # the code it runs is imported now
    tmp = Path(tempfile.mkdtemp(prefix="exec-bench-"))
    work = new_workdir()  # the exports as written, the users' base configs beside them, a local stand-in model
    rows = []
    for cluster_name, wl in SHIPPED + NEW:
        cpath, wpath = _cluster_path(cluster_name), ROOT / f"problems/workloads/{wl}.yaml"
        c, w = load_cluster(cpath), load_workload(wpath)
        ctx = ExportContext.from_specs(c, w)
        free, why = _search(cpath, wpath, tmp / f"{cluster_name}-{wl}-free", "mosearch", args.evals)
        free_plans = [free.plans[i] for i in free.front] if free else []
        free_best = max((p.predicted["throughput_samples_s"] for p in free_plans), default=0.0)
        for ex in EXECUTORS:
            res, why = _search(cpath, wpath, tmp / f"{cluster_name}-{wl}-{ex}", ex, args.evals)
            plans = [res.plans[i] for i in res.front] if res else []
            try:
                ok, first, megatron = _accepted(ex, plans, ctx, w, work)
                before, before_why, _ = _accepted(ex, free_plans, ctx, w, work)
            except MissingPackage as err:
                sys.exit(f"mosearch.bench.executors: cannot check: {err} (install the executor's package; "
                         "a missing package is not a refusal)")
            best = max((p.predicted["throughput_samples_s"] for p in plans), default=0.0)
            r = res.restriction if res else None
            rows.append({
                "executor": ex, "case": f"{cluster_name} x {wl}", "new": (cluster_name, wl) in NEW,
                "accepted": ok, "total": len(plans), "megatron": megatron, "before": before, "before_total": len(free_plans),
                "best": best, "free_best": free_best,
                "cost": 1 - best / free_best if free_best > 0 else float("nan"),
                "stage": r, "why": why, "first": first, "before_why": before_why,
            })
            print(f"{ex:6s} {cluster_name} x {wl}: accepted {ok}/{len(plans)} (unrestricted front {before}/"
                  f"{len(free_plans)}), best {best:.3g} vs {free_best:.3g} samples/s", flush=True)
    wall = time.time() - t0
    write_table(rows, args, wall, commit)


def _commit() -> str:
    """The commit the benchmark ran at (with `+changes` when the tree differed from it)."""
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def _fmt(x: float) -> str:
    return f"{x:.3g}" if x else "-"


def write_table(rows: list[dict], args, wall: float, commit: str) -> None:
    load = os.getloadavg()
    lines = [
        "# Fronts a team can run: executors' start-up code on every front plan, and what their rules cost",
        "",
        f"Regenerate with `python -m mosearch.bench.executors --evals {args.evals} --out {args.out}` "
        f"({wall:.0f} s on a shared 2-core machine, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}; "
        f"{platform.machine()}, Python {platform.python_version()}; at commit {commit}, {time.strftime('%Y-%m-%d')}).",
        "",
        f"- Fronts: `mosearch plan` with `--evals {args.evals} --seed 1` (plus its structured stage), unrestricted and "
        "with `--executor`; every plan of front.csv is exported as `mosearch export --out` writes it, composed exactly "
        "as the command in its header composes it, and started by the executor's own code as far as it runs without "
        "GPUs (tests/export/targets.py): verl 0.9.1 (hydra compose of the file on its ppo_trainer / "
        "ppo_megatron_trainer, validate_config with the Megatron or FSDP actor config, the v1 trainer's __init__ and "
        "_init_resource_pool_mgr), AReaL 1.0.4 (load_expr_config, PPOTrainer.__init__ and its scheduler's allocation "
        "of every role, up to the worker processes), RLinf 0.3.0 (hydra compose, validate_cfg whole: Megatron and "
        "FSDP branches, the vocabulary-per-TP check; ModelParallelComponentPlacement and every component's placement "
        "on the plan's nodes). Accepted = started, asking for exactly the plan's GPUs per node, DP, TP/PP, critic "
        "layout and engines. A missing executor package stops the benchmark with an error.",
        "- `unrestricted`: the unrestricted front's plans exported to that executor (what a user got before).",
        "- Cost: 1 - (fastest plan of the executor's front) / (fastest of the unrestricted front), same search and "
        "budget; `stage` is what `mosearch plan --executor` prints: the structured stage's fastest plan with / "
        "without the rules. Throughputs are the performance model's predictions (samples/s), not measurements.",
        "- Clusters marked * were written for this benchmark (benchmarks/clusters/exec-*.yaml); no rule was tuned "
        "on them.",
        "",
        "| executor | case | accepted as planned (Megatron) | unrestricted front accepted | fastest, executor front | "
        "fastest, unrestricted | throughput cost | stage: with / without rules |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        st = r["stage"]
        stage = f"{_fmt(st['restricted'])} / {_fmt(st['unrestricted'])}" if st else "-"
        acc = f"{r['accepted']}/{r['total']} ({r['megatron']})" if r["total"] else "no plan"
        cost = f"{100 * r['cost']:.1f}%" if r["total"] and r["free_best"] else ("100%" if r["free_best"] else "-")
        lines.append(f"| {r['executor']} | {r['case']}{' *' if r['new'] else ''} | {acc} | "
                     f"{r['before']}/{r['before_total']} | {_fmt(r['best'])} | {_fmt(r['free_best'])} | {cost} | {stage} |")
    lines.append("")
    for ex in EXECUTORS:
        mine = [r for r in rows if r["executor"] == ex]
        a, t = sum(r["accepted"] for r in mine), sum(r["total"] for r in mine)
        m = sum(r["megatron"] for r in mine)
        b, bt = sum(r["before"] for r in mine), sum(r["before_total"] for r in mine)
        costs = [r["cost"] for r in mine if r["total"] and r["free_best"]]
        lines.append(f"- {ex}: {a}/{t} front plans accepted as planned ({100 * a / max(t, 1):.0f}%; {m} of them train with "
                     f"Megatron); the unrestricted "
                     f"fronts' plans {b}/{bt} ({100 * b / max(bt, 1):.0f}%); throughput cost median "
                     f"{100 * sorted(costs)[len(costs) // 2]:.1f}% over the cases with a front" if costs else
                     f"- {ex}: {a}/{t} accepted")
    empty = [r for r in rows if not r["total"]]
    for r in empty:
        lines.append(f"- {r['executor']} x {r['case']}: no front: {r['why']}")
    firsts = sorted({(r["executor"], r["before_why"]) for r in rows if r["before_why"]})
    if firsts:
        lines.append("- Why unrestricted plans fail (first refusal per executor and case, as the executor says it):")
        lines += [f"  - {ex}: {why}" for ex, why in firsts[:12]]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
