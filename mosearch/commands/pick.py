"""`mosearch pick`: choose one plan from a run's front and write it as a plan file."""

from __future__ import annotations

import argparse
from pathlib import Path


from mosearch import decide
from mosearch.decide import Limits
from mosearch.report.terminal import band_note, band_text, console, front_table, plan_tables, tie_test
from mosearch.results import load_run, objective_matrix
from problems.atomic import atomic_write_text
from problems.errors import InputError
from problems.placement.plan import Selection
from problems.placement.planfiles import for_file


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pick", help="choose a plan (fastest within a budget, cheapest reaching a throughput, knee, "
                                    "weights) and write plan.yaml",
                       description="A budget (--max-cost) picks the fastest plan within it; a throughput floor "
                                   "(--min-throughput) the cheapest plan reaching it; with neither, the knee of "
                                   "throughput against $ per sample. --max-staleness and --max-mem-frac filter. "
                                   "Every plan the search found is considered, not only the front shown.")
    p.add_argument("run_dir", metavar="RUN", help="run directory written by `mosearch plan`")
    rule = p.add_mutually_exclusive_group()
    rule.add_argument("--knee", action="store_true",
                      help="the knee of throughput against $ per sample, within the limits (default without "
                           "--max-cost/--min-throughput)")
    rule.add_argument("--weights", metavar="throughput=..,cost=..,memory=..,staleness=..",
                      help="importance weights; the plan minimising the achievement function on normalised objectives")
    p.add_argument("--max-cost", type=float, help="budget, $/h: the fastest plan within it")
    p.add_argument("--min-throughput", type=float, help="samples/s: the cheapest plan reaching it")
    p.add_argument("--max-staleness", type=float, help="mean policy-version lag (a filter)")
    p.add_argument("--max-mem-frac", type=float, help="peak memory fraction (a filter)")
    p.add_argument("--resolution", metavar="throughput=..,cost=..,memory=..,staleness=..",
                   help="differences counted as ties (default: the run's, else throughput and cost 5%%, "
                        "memory 0.15, staleness 1)")
    p.add_argument("--keep-when-tied", action="store_true",
                   help="keep the plan the rule chose where the model cannot tell it from a cheaper or less stale "
                        "neighbour (by default pick takes that neighbour, and says why)")
    p.add_argument("--out", help="plan file to write (default RUN/plan.yaml)")
    p.set_defaults(func=run)


def _parse(flag: str, fn, text: str):
    try:
        return fn(text)
    except ValueError as err:
        raise InputError(None, flag, str(err)) from None


def _step(plan, chosen, what: str) -> str:
    """'p012 (+8% samples/s for +12% $/h)' style, against the chosen plan."""
    a, b = plan.predicted, chosen.predicted
    dt = a["throughput_samples_s"] / b["throughput_samples_s"] - 1.0
    dc = a["cost_usd_h"] / b["cost_usd_h"] - 1.0 if b["cost_usd_h"] > 0 else float("nan")
    return (f"{what} {plan.plan_id}: {a['throughput_samples_s']:.3g} samples/s at {a['cost_usd_h']:.4g} $/h "
            f"({dt:+.0%} samples/s, {dc:+.0%} $/h)")


def _settle_ties(con, plan, front, faster, cheaper, limits, res, keep: bool):
    """Print the chosen plan's samples/s band. Where the model cannot tell it from a neighbour (their ratio
    within the held-out error of published pairs: model/fitted.py `tied`), take the cheaper neighbour, else
    one as fast within that error and less stale, if it meets the limits, and say why (with --keep-when-tied
    only say so). Returns (plan, faster, cheaper)."""
    con.print(f"Predicted {plan.predicted['throughput_samples_s']:.3g} samples/s, band {band_text(plan)} "
              f"({band_note(plan)}).")
    for i, what in ((cheaper, "cheaper"), (faster, "less stale")):
        if i is None:
            continue
        other = front[i]
        tie, test = tie_test(plan, other)
        if not tie:
            continue
        ok = bool(decide.within(objective_matrix([other]), limits)[0])
        fo = other.predicted
        better = (fo["cost_usd_h"] < plan.predicted["cost_usd_h"] if what == "cheaper"
                  else fo.get("staleness", 0.0) < plan.predicted.get("staleness", 0.0)
                  and fo["cost_usd_h"] <= plan.predicted["cost_usd_h"] * (1.0 + res[1]))
        head = (f"[yellow]{plan.plan_id} and {other.plan_id} are tied[/] ({test}; "
                f"{plan.predicted['throughput_samples_s']:.3g} against {fo['throughput_samples_s']:.3g} samples/s)")
        if ok and better and keep:
            con.print(f"{head}: {other.plan_id} is the {what} ({fo['cost_usd_h']:.4g} $/h, staleness "
                      f"{fo.get('staleness', 0.0):.2g}); keeping {plan.plan_id} as --keep-when-tied asks.")
            continue
        if ok and better:
            con.print(f"{head}: taking {other.plan_id}, the {what} ({fo['cost_usd_h']:.4g} $/h, staleness "
                      f"{fo.get('staleness', 0.0):.2g}), since the model cannot tell which is faster "
                      "(--keep-when-tied keeps the first choice).")
            fr = decide.neighbours(objective_matrix(front), objective_matrix([other])[0], res)
            return other, fr[0], fr[1]
        con.print(f"{head}; keeping {plan.plan_id}: {other.plan_id} is "
                  + ("outside the limits." if not ok else f"not {what}."))
    return plan, faster, cheaper


def run(args) -> int:
    run_ = load_run(args.run_dir)
    plans = run_.all_plans
    if not plans:
        raise InputError(str(Path(args.run_dir) / "front.json"), "plans", "the front is empty", "a run that found plans")
    weights = _parse("--weights", decide.parse_weights, args.weights) if args.weights else None
    res = _parse("--resolution", decide.parse_resolution, args.resolution) if args.resolution else run_.resolution
    limits = Limits(args.max_cost, args.min_throughput, args.max_staleness, args.max_mem_frac)
    limits.check()
    F = objective_matrix(plans)
    choice = decide.choose(F, limits, weights, decide.rule_for(limits, weights, args.knee), res)
    con = console()
    if run_.partial:
        con.print("[yellow]note: this front comes from an interrupted search (partial)[/]")
    if choice.index is None:
        near = [plans[i] for i in choice.closest]
        con.print(f"[red]No plan of the {len(plans)} found meets {limits.describe()}.[/] The closest:")
        con.print(front_table(near, {}, "closest plans (least total relative miss)", None))
        return 1
    plan = plans[choice.index]
    con.print(f"[bold]Chose {plan.plan_id}[/]: {decide.why(F, choice, limits, res)}.")
    # neighbours over the budget or below the floor are worth seeing; over a memory or staleness limit not
    front = [p for p, ok in zip(run_.plans, decide.within(run_.F, Limits(max_staleness=args.max_staleness,
                                                                         max_mem_frac=args.max_mem_frac))) if ok]
    faster, cheaper = decide.neighbours(objective_matrix(front), F[choice.index], res)
    plan, faster, cheaper = _settle_ties(con, plan, front, faster, cheaper, limits, res, args.keep_when_tied)
    near = [_step(front[i], plan, "a little faster") for i in (faster,) if i is not None]
    near += [_step(front[i], plan, "a little cheaper") for i in (cheaper,) if i is not None]
    on = "" if any(p.plan_id == plan.plan_id for p in run_.plans) else (
        f" (of the {len(run_.plans)} in front.csv; {plan.plan_id} itself is in front_all.csv)")
    con.print(f"Next to it on the front{on}: " + ("; ".join(near) if near else "nothing faster or cheaper") + ".")
    for t in plan_tables(plan, run_.plans):
        con.print(t)
    out = Path(args.out) if args.out else Path(args.run_dir) / "plan.yaml"
    # the rule and limits travel with the plan: a re-plan after a node loss chooses the same way
    chosen = Selection(rule=choice.rule, limits={k: getattr(limits, k) for k in ("max_cost", "min_throughput",
                                                                                 "max_staleness", "max_mem_frac")},
                       search_limits=run_.info.get("limits") or {}, resolution=[float(r) for r in res],
                       weights=None if weights is None else [float(w) for w in weights])
    plan = plan.model_copy(update={"chosen_by": chosen})
    atomic_write_text(out, for_file(plan, out).to_yaml())  # the specs' paths relative to the plan file
    ex = (run_.info or {}).get("executor") or "mosearch"
    if ex == "mosearch":
        con.print(f"Wrote {out}. Run it: mosearch train --plan {out}")
    else:
        con.print(f"Wrote {out} (front searched for {run_.info.get('executor_runs', ex)}). Run it there: "
                  f"mosearch export {out} --to {ex}")
    return 0
