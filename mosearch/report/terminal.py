"""Terminal tables (rich): the front, the baselines, and one chosen plan."""

from __future__ import annotations

import numpy as np
from rich.console import Console
from rich.table import Table

from problems.placement.plan import Plan
from problems.placement.names import ASYNC

# column key -> (heading, format, higher is better)
METRIC_COLUMNS = {
    "throughput_samples_s": ("samples/s", "{:.2f}", True),
    "throughput_tokens_s": ("tokens/s", "{:,.0f}", True),
    "cost_usd_h": ("$/h", "{:.4g}", False),
    "usd_per_1k_samples": ("$/1k samples", "{:.3g}", False),
    "peak_mem_frac": ("peak mem", "{:.3f}", False),
    "staleness": ("staleness", "{:.2f}", False),
}
SORT_KEYS = {
    "throughput": "throughput_samples_s", "tokens": "throughput_tokens_s", "cost": "cost_usd_h",
    "usd_per_1k": "usd_per_1k_samples", "memory": "peak_mem_frac", "staleness": "staleness",
}


# Piped output (no terminal to measure) gets a wide page instead of rich's 80 columns.
PIPE_WIDTH = 160


def console() -> Console:
    c = Console()
    if not c.is_terminal:
        c = Console(width=PIPE_WIDTH)
    return c


# The model's predictions a person reads, in plain words (others, e.g. kv_shortfall, are internal).
STEP_LABELS = {
    "step_s": "one RL step (s)",
    "rollout_s": "generating the step's samples (s)",
    "rollout_bulk_s": "  until most samples are done (s)",
    "rollout_tail_s": "  then the longest samples alone (s)",
    "train_s": "training on them (s)",
    "train_compute_s": "  forward and backward passes (s)",
    "dp_sync_s": "  gradient exchange between data-parallel ranks (s)",
    "optimizer_s": "  optimizer update (s)",
    "sync_s": "sending new weights to the rollout engines (s)",
    "switch_s": "swapping rollout and training on shared GPUs (s)",
    "decode_tokens_s": "generation speed, all engines (tokens/s)",
    "peak_mem_gb_train": "peak memory of a training GPU (GB)",
    "peak_mem_gb_rollout": "peak memory of a rollout GPU (GB)",
    "model_states_gb": "weights, gradients, optimizer state per training GPU (GB)",
    "cross_region_gb_step": "traffic between regions per step (GB)",
    "gpu_usd_h": "GPU rent ($/h)",
    "egress_usd_h": "traffic between regions ($/h)",
}


# parts a plan may not have (no shared GPUs, one region): left out when 0
OPTIONAL_PARTS = ("switch_s", "egress_usd_h", "cross_region_gb_step")


def step_parts(predicted: dict[str, float]) -> dict[str, float]:
    """The predictions of STEP_LABELS a plan has, in that order."""
    return {k: predicted[k] for k in STEP_LABELS
            if k in predicted and not (k in OPTIONAL_PARTS and predicted[k] == 0)}


def gpu_summary(plan: Plan) -> str:
    """'10 MI300X + 4 L4' style: the GPUs a plan uses, by type (largest share first)."""
    by: dict[str, int] = {}
    for p in plan.pools:
        if p.used_gpus:
            by[p.gpu] = by.get(p.gpu, 0) + p.used_gpus
    return " + ".join(f"{n} {g}" for g, n in sorted(by.items(), key=lambda kv: -kv[1])) or "none"


def throughput_band(plan: Plan) -> tuple[float, float] | None:
    """The samples/s range the model's held-out error on published runs gives this plan (its executor and GPU
    generations: problems/placement/model/fitted.py), or None without a prediction."""
    from problems.placement.model.fitted import plan_band

    thr = plan.predicted.get("throughput_samples_s")
    if thr is None or not np.isfinite(thr):
        return None
    lo, hi = plan_band(plan.executor, [p.gpu for p in plan.pools if p.used_gpus], moe_train_share(plan))
    return thr * float(np.exp(lo)), thr * float(np.exp(hi))


def is_moe(plan: Plan) -> bool:
    """The plan trains a mixture of experts: its prediction counts MoE layers, or it splits experts (EP > 1)."""
    return plan.predicted.get("moe_layers", 0.0) > 0 or plan.train.ep > 1


def moe_train_share(plan: Plan) -> float | None:
    """A MoE plan's predicted training time over its step (what its band widens by: model/fitted.py
    moe_step_residuals), None for a dense plan; a MoE plan without the two figures counts its whole step."""
    if not is_moe(plan):
        return None
    step, train = plan.predicted.get("step_s"), plan.predicted.get("train_s")
    return float(train / step) if step and train is not None and np.isfinite(step) and step > 0 else 1.0


def band_note(plan: Plan) -> str:
    """What the plan's samples/s band is made of (BAND_NOTE; for a mixture of experts, what widens it)."""
    if not is_moe(plan):
        return BAND_NOTE
    from problems.placement.model.fitted import moe_training_band

    b = moe_training_band()
    moe = ("" if b is None else
           f", widened for a mixture of experts: none of those runs is one, so its training time is taken as wrong as "
           f"the model's published MoE training iterations ({np.expm1(b[0]):+.0%} to {np.expm1(b[1]):+.0%}, 10th-90th "
           f"percentile of {b[2]}: results/bench/moe_validation.md)")
    return BAND_NOTE + moe


def tie_test(plan: Plan, other: Plan) -> tuple[bool, str]:
    """(whether the model cannot tell which of two plans is faster, the test it used): model/fitted.py `tied`."""
    from problems.placement.model.fitted import tied

    a, b = plan.predicted.get("throughput_samples_s"), other.predicted.get("throughput_samples_s")
    if a is None or b is None or not (np.isfinite(a) and np.isfinite(b)) or min(a, b) <= 0:
        return False, "no prediction"
    return tied(float(a), plan.executor, [p.gpu for p in plan.pools if p.used_gpus],
                float(b), other.executor, [p.gpu for p in other.pools if p.used_gpus])


def band_text(plan: Plan) -> str:
    b = throughput_band(plan)
    return "-" if b is None else f"{b[0]:.3g}-{b[1]:.3g}"


def _value(plan: Plan, key: str) -> float:
    v = plan.predicted.get(key)
    return float("nan") if v is None else float(v)


def _fmt(plan: Plan, key: str) -> str:
    v = _value(plan, key)
    return "-" if not np.isfinite(v) else METRIC_COLUMNS[key][1].format(v)


def roles_summary(plan: Plan) -> str:
    """'8 H100@us: 8 shared | 16 L40S@eu: 12 rollout (TP 2), 4 train' style, pools used only."""
    parts = []
    for p in plan.pools:
        if not p.used_gpus:
            continue
        roles = []
        if p.shared_gpus:
            roles.append(f"{p.shared_gpus} shared")
        if p.rollout_gpus:
            roles.append(f"{p.rollout_gpus} rollout")
        if p.train_gpus:
            roles.append(f"{p.train_gpus} train")
        tp = f" (rollout TP {p.rollout_tp})" if p.rollout_gpus or p.shared_gpus else ""
        parts.append(f"{p.pool}: {', '.join(roles)}{tp}")
    return "; ".join(parts)


ROLES_NOTE = "roles: gen = generates (rollout), train = trains, both = the same GPUs do both in turn"


def pool_roles(plan: Plan) -> str:
    """'4 H100 train, 4 L40S gen' style: what each used pool does (gen, train, both: the same GPUs
    in turn; a pool split between roles lists its counts), named by GPU type, by pool where two
    used pools share a type."""
    used = [p for p in plan.pools if p.used_gpus]
    types = [p.gpu for p in used]
    parts = []
    for p in used:
        name = p.pool if types.count(p.gpu) > 1 else p.gpu
        roles = [(n, r) for n, r in ((p.shared_gpus, "both"), (p.rollout_gpus, "gen"), (p.train_gpus, "train")) if n]
        what = roles[0][1] if len(roles) == 1 else "(" + ", ".join(f"{n} {r}" for n, r in roles) + ")"
        parts.append(f"{p.used_gpus} {name} {what}")
    return ", ".join(parts) or "none"


def layout_summary(plan: Plan) -> str:
    t = plan.train
    extra = [t.sharding] + (["recompute"] if t.recompute else []) + (["opt offload"] if t.optimizer_offload else [])
    ep = f" EP{t.ep}" if t.ep > 1 else ""  # a mixture of experts' expert parallelism
    return f"DP{t.dp} TP{t.tp} PP{t.pp}{ep} mb{t.micro_batch} {' '.join(extra)}"


def mode_summary(plan: Plan) -> str:
    e = plan.execution
    return e.mode + (f" k={e.staleness_bound}" if e.mode == ASYNC else "")


def sort_plans(plans: list[Plan], sort: str) -> list[Plan]:
    key = SORT_KEYS[sort]
    higher = METRIC_COLUMNS[key][2]
    vals = np.array([_value(p, key) for p in plans])
    order = np.argsort(-vals if higher else vals, kind="stable")
    return [plans[i] for i in order]


def front_table(plans: list[Plan], baselines: dict[str, Plan], title: str, knee_id: str | None) -> Table:
    t = Table(title=title, title_justify="left", caption=ROLES_NOTE, caption_justify="left")
    t.add_column("plan", no_wrap=True)
    for key, (head, _, _) in METRIC_COLUMNS.items():
        t.add_column(head, justify="right")
        if key == "throughput_samples_s":
            t.add_column("samples/s band", justify="right")
    t.add_column("GPUs and roles")
    t.add_column("mode")
    t.add_column("training layout")
    for p in plans:
        name = p.plan_id + (" (knee)" if p.plan_id == knee_id else "")
        t.add_row(name, *_metric_cells(p), pool_roles(p), mode_summary(p), layout_summary(p),
                  style="bold" if p.plan_id == knee_id else None)
    if baselines:
        t.add_section()
        for name, p in baselines.items():
            t.add_row(f"baseline: {name}", *_metric_cells(p), pool_roles(p),
                      mode_summary(p), layout_summary(p), style="dim")
    return t


def _metric_cells(p: Plan) -> list[str]:
    cells = []
    for k in METRIC_COLUMNS:
        cells.append(_fmt(p, k))
        if k == "throughput_samples_s":
            cells.append(band_text(p))
    return cells


BAND_NOTE = ("samples/s band: the 10th-90th percentile of the model's held-out error on published RL steps of the "
             "plan's executor and GPU generations (problems/placement/data/fitted.yaml)")


def plan_tables(plan: Plan, front: list[Plan]) -> list[Table]:
    """The chosen plan: which GPU does what, layout and mode, predictions against the front's range."""
    roles = Table(title=f"plan {plan.plan_id}: who does what", title_justify="left")
    for col in ("pool", "GPU", "region", "rollout", "train", "shared", "rollout TP", "engines"):
        roles.add_column(col, justify="left" if col in ("pool", "GPU", "region") else "right")
    for p in plan.pools:
        if not p.used_gpus:  # pools the plan leaves idle
            continue
        rolls = p.rollout_gpus or p.shared_gpus
        roles.add_row(p.pool, p.gpu, p.region, str(p.rollout_gpus), str(p.train_gpus), str(p.shared_gpus),
                      str(p.rollout_tp) if rolls else "-", str(p.rollout_engines) if rolls else "-")
    lay = Table(title="layout and execution", title_justify="left", show_header=False)
    lay.add_column("what")
    lay.add_column("value")
    t, e, r = plan.train, plan.execution, plan.rollout
    lay.add_row("training", f"DP {t.dp} x TP {t.tp} x PP {t.pp} = {t.dp * t.tp * t.pp} GPUs, {t.sharding}, "
                            f"micro-batch {t.micro_batch}, recompute {'on' if t.recompute else 'off'}, "
                            f"optimizer offload {'on' if t.optimizer_offload else 'off'}")
    lay.add_row("rollout", f"{plan.rollout_engines} vLLM engine(s), each may use {r.kv_mem_frac:.0%} of GPU memory "
                           f"(gpu_memory_utilization), {r.max_num_seqs} concurrent sequences per engine")
    lay.add_row("execution", f"{e.mode}" + (f", staleness bound k = {e.staleness_bound}" if e.mode == ASYNC else "")
                + f", {e.pipeline_chunks} pipeline chunk(s)")
    lay.add_row("weight sync", plan.weight_sync.route)

    pred = Table(title="predicted, against the front", title_justify="left")
    for col in ("objective", "this plan", "front best", "front worst"):
        pred.add_column(col, justify="left" if col == "objective" else "right")
    for key, (head, fmt, higher) in METRIC_COLUMNS.items():
        vals = np.array([_value(p, key) for p in front])
        vals = vals[np.isfinite(vals)]
        best = (vals.max() if higher else vals.min()) if len(vals) else float("nan")
        worst = (vals.min() if higher else vals.max()) if len(vals) else float("nan")
        pred.add_row(head, _fmt(plan, key), "-" if not np.isfinite(best) else fmt.format(best),
                     "-" if not np.isfinite(worst) else fmt.format(worst))
        if key == "throughput_samples_s":
            pred.add_row("samples/s band (held-out error)", band_text(plan), "", "")
    steps = step_parts(plan.predicted)
    tables = [roles, lay, pred]
    if steps:
        note = (" (rollouts of several steps overlap: a step can be shorter than its rollout)"
                if plan.execution.mode == ASYNC else "")
        st = Table(title="predicted step, memory and cost" + note, title_justify="left")
        st.add_column("part")
        st.add_column("value", justify="right")
        for k, v in steps.items():
            st.add_row(STEP_LABELS[k], f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}")
        tables.append(st)
    return tables
