"""report.html: the front as one self-contained page that works offline.

The chart is an SVG drawn here (no plotting library in the page: a page with plotly.js inlined
weighs ~4.8 MB before any data). Hovering or clicking a point shows its plan: which GPUs of
which type do what, the parallel layout, the execution mode and the predicted step in plain
words. Four inputs filter the plans by limits (cost, throughput, staleness, memory); a table
lists the plans that pass, with their GPU types.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path

import numpy as np

from mosearch.report.terminal import OPTIONAL_PARTS, STEP_LABELS, band_text, gpu_summary, step_parts
from problems.atomic import atomic_write_text
from problems.placement.names import MODE_COLOURS, MODE_WORDS, OTHER_COLOUR
from problems.placement.plan import Plan

# the x axis turns logarithmic when the costs shown span more than this ratio
LOG_SPAN = 10.0
W, H = 760, 520
PAD_L, PAD_R, PAD_T, PAD_B = 64, 20, 16, 52


def spec_name(path: str, run_dir: Path) -> str:
    """A spec file as the report names it: relative to the run directory where both lie under the
    working directory, else by its file name, so the page carries no path of the machine that made
    it (the plan files keep the full path, and the sha256 names the content)."""
    p, run, cwd = Path(os.path.abspath(path)), Path(os.path.abspath(run_dir)), Path.cwd().resolve()
    common = Path(os.path.commonpath([p, run]))
    if common == cwd or cwd in common.parents:
        return Path(os.path.relpath(p, run)).as_posix()
    return p.name


def _calibrated_runs(plans: list[Plan], run_dir: Path) -> list[dict]:
    """The calibrated runs of the plans' cluster (`mosearch calibrate`), to mark plans far from them."""
    from problems.errors import InputError
    from problems.placement.corrections import calibrated_layouts
    from problems.placement.specs import load_cluster

    if not plans:
        return []
    path = Path(plans[0].cluster.path)
    for cand in ([path] if path.is_absolute() else [run_dir / path, path]):
        if cand.is_file():
            try:
                return calibrated_layouts(load_cluster(str(cand)))
            except (InputError, OSError):
                return []
    return []


def _plan_record(p: Plan, run_dir: Path, baseline: str | None = None, runs: list[dict] | None = None) -> dict:
    from problems.placement.corrections import extrapolation

    d = p.model_dump(mode="json")
    d["extrapolated"] = extrapolation(p, runs or [])  # far from every calibrated run of the cluster
    for kind in ("cluster", "workload"):
        d[kind]["path"] = spec_name(d[kind]["path"], run_dir)
    d["baseline"] = baseline
    d["gpus_text"] = gpu_summary(p)
    d["band_text"] = band_text(p)  # the samples/s range the model's held-out error gives (model/fitted.py)
    return d


def _script_json(data) -> str:
    # "</" inside a <script> would end it early
    return json.dumps(data).replace("</", "<\\/")


def _ticks(lo: float, hi: float, log: bool) -> list[float]:
    from matplotlib.ticker import LogLocator, MaxNLocator

    t = (LogLocator(subs=(1.0, 2.0, 5.0)) if log else MaxNLocator(6)).tick_values(lo, hi)
    return [float(v) for v in t if lo - 1e-9 * abs(hi) <= v <= hi + 1e-9 * abs(hi)]


def _fmt_tick(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


class _Axes:
    def __init__(self, x: np.ndarray, y: np.ndarray):
        x = x[np.isfinite(x)]
        y = y[np.isfinite(y)]
        lo, hi = (float(x.min()), float(x.max())) if len(x) else (0.0, 1.0)
        self.log = lo > 0 and hi / lo > LOG_SPAN
        if self.log:
            self.x0, self.x1 = np.log10(lo) - 0.05, np.log10(hi) + 0.05
        else:
            pad = (hi - lo) * 0.05 or max(abs(hi) * 0.1, 1.0)
            self.x0, self.x1 = max(0.0, lo - pad) if lo >= 0 else lo - pad, hi + pad
        self.y0, self.y1 = 0.0, (float(y.max()) * 1.08 if len(y) and y.max() > 0 else 1.0)

    def px(self, v):
        v = np.log10(np.maximum(v, 1e-12)) if self.log else np.asarray(v, dtype=float)
        return PAD_L + (v - self.x0) / (self.x1 - self.x0) * (W - PAD_L - PAD_R)

    def py(self, v):
        return H - PAD_B - (np.asarray(v, dtype=float) - self.y0) / (self.y1 - self.y0) * (H - PAD_T - PAD_B)


def _star(cx: float, cy: float, r: float) -> str:
    pts = []
    for k in range(10):
        a = np.pi / 2 + k * np.pi / 5
        rr = r if k % 2 == 0 else r * 0.45
        pts.append(f"{cx + rr * np.cos(a):.1f},{cy - rr * np.sin(a):.1f}")
    return " ".join(pts)


def _place_labels(anchors: list[tuple[float, float]], texts: list[str], taken: list[tuple]) -> list[tuple]:
    """A spot for each label beside its anchor that overlaps no label placed before it."""
    out = []
    for (x, y), t in zip(anchors, texts):
        w, h = 7.0 * len(t) + 4, 14.0
        spots = [(x + 9, y - h / 2), (x - 9 - w, y - h / 2), (x - w / 2, y - 10 - h), (x - w / 2, y + 10)]
        spots += [(x + 9, y - h / 2 + d) for d in (16, -16, 32, -32, 48, -48)]
        best = spots[0]
        for sx, sy in spots:
            inside = PAD_L <= sx and sx + w <= W - PAD_R and PAD_T <= sy and sy + h <= H - PAD_B
            if inside and not any(sx < bx + bw and bx < sx + w and sy < by + bh and by < sy + h
                                  for bx, by, bw, bh in taken):
                best = (sx, sy)
                break
        taken.append((best[0], best[1], w, h))
        out.append((best[0], best[1], w, h))
    return out


def _svg(plans: list[Plan], baselines: dict[str, Plan], knee: int | None) -> tuple[str, list[list[str]]]:
    """The chart, and the baseline key: [[label, names], ...] for baselines sharing a point."""
    pr = [p.predicted for p in plans]
    bp = [p.predicted for p in baselines.values()]
    cx = np.array([d.get("cost_usd_h", np.nan) for d in pr + bp], dtype=float)
    cy = np.array([d.get("throughput_samples_s", np.nan) for d in pr + bp], dtype=float)
    ax = _Axes(cx, cy)
    out = [f'<svg id="front" xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           f'font-family="system-ui, sans-serif" font-size="12">',
           f'<rect x="{PAD_L}" y="{PAD_T}" width="{W - PAD_L - PAD_R}" height="{H - PAD_T - PAD_B}" fill="white" '
           f'stroke="#999"/>']
    xlo, xhi = (10 ** ax.x0, 10 ** ax.x1) if ax.log else (ax.x0, ax.x1)
    for v in _ticks(xlo, xhi, ax.log):
        x = float(ax.px(v))
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{PAD_T}" y2="{H - PAD_B}" stroke="#eee"/>'
                   f'<text x="{x:.1f}" y="{H - PAD_B + 16}" text-anchor="middle">{_fmt_tick(v)}</text>')
    for v in _ticks(ax.y0, ax.y1, False):
        y = float(ax.py(v))
        out.append(f'<line x1="{PAD_L}" x2="{W - PAD_R}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
                   f'<text x="{PAD_L - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt_tick(v)}</text>')
    xt = "cost ($/h" + (", log scale)" if ax.log else ")")
    out.append(f'<text x="{(PAD_L + W - PAD_R) / 2}" y="{H - 12}" text-anchor="middle" font-size="13">{xt}</text>'
               f'<text transform="translate(16 {(PAD_T + H - PAD_B) / 2}) rotate(-90)" text-anchor="middle" '
               f'font-size="13">throughput (samples/s)</text>')
    taken: list[tuple] = []
    xs, ys = ax.px(cx[: len(plans)]), ax.py(cy[: len(plans)])
    for i, p in enumerate(plans):
        if i == knee:
            continue
        colour = MODE_COLOURS.get(p.execution.mode, OTHER_COLOUR)
        out.append(f'<circle class="pt" data-i="{i}" cx="{xs[i]:.1f}" cy="{ys[i]:.1f}" r="5.5" fill="{colour}" '
                   f'fill-opacity="0.85"><title>{html.escape(p.plan_id)}</title></circle>')
    if knee is not None:
        colour = MODE_COLOURS.get(plans[knee].execution.mode, OTHER_COLOUR)
        out.append(f'<polygon class="pt" data-i="{knee}" points="{_star(xs[knee], ys[knee], 11)}" fill="{colour}" '
                   f'stroke="black" stroke-width="1.5"><title>{html.escape(plans[knee].plan_id)} (knee)</title></polygon>')
        taken.append((xs[knee] - 11, ys[knee] - 11, 22, 22))
        (lx, ly, _, _), = _place_labels([(xs[knee] + 4, ys[knee])], ["knee"], taken)
        out.append(f'<text x="{lx + 2:.1f}" y="{ly + 11:.1f}" font-weight="bold">knee</text>')
    # baselines: one square per distinct point, labelled B1, B2, ... (names in the key below the chart)
    key: list[list[str]] = []
    if baselines:
        bx, by = ax.px(cx[len(plans):]), ax.py(cy[len(plans):])
        groups: dict[tuple, list[int]] = {}
        for j in range(len(bp)):
            groups.setdefault((round(float(bx[j])), round(float(by[j]))), []).append(j)
        names = list(baselines)
        anchors, labels = [], []
        for n, ((gx, gy), js) in enumerate(groups.items(), start=1):
            label = f"B{n}"
            key.append([label, ", ".join(names[j] for j in js)])
            out.append(f'<rect class="bl" data-b="{js[0]}" x="{gx - 6}" y="{gy - 6}" width="12" height="12" '
                       f'fill="white" fill-opacity="0.01" stroke="black" stroke-width="2">'
                       f'<title>{html.escape(key[-1][1])}</title></rect>')
            taken.append((gx - 6, gy - 6, 12, 12))
            anchors.append((gx, gy))
            labels.append(label)
        for (lx, ly, _, _), label in zip(_place_labels(anchors, labels, taken), labels):
            out.append(f'<text x="{lx + 2:.1f}" y="{ly + 11:.1f}">{label}</text>')
    # legend: the modes present, the knee, the baselines
    items = [(m, MODE_COLOURS[m]) for m in MODE_COLOURS if any(p.execution.mode == m for p in plans)]
    lx, ly = PAD_L + 10, PAD_T + 8
    box_h = 18 * (len(items) + (knee is not None) + bool(baselines)) + 8
    out.append(f'<rect x="{lx - 4}" y="{ly - 4}" width="205" height="{box_h}" fill="white" fill-opacity="0.9" '
               f'stroke="#ccc"/>')
    for m, colour in items:
        out.append(f'<circle cx="{lx + 6}" cy="{ly + 8}" r="5.5" fill="{colour}"/>'
                   f'<text x="{lx + 18}" y="{ly + 12}">{html.escape(m)}</text>')
        ly += 18
    if knee is not None:
        out.append(f'<polygon points="{_star(lx + 6, ly + 8, 8)}" fill="white" stroke="black"/>'
                   f'<text x="{lx + 18}" y="{ly + 12}">knee (the default pick)</text>')
        ly += 18
    if baselines:
        out.append(f'<rect x="{lx}" y="{ly + 2}" width="12" height="12" fill="none" stroke="black" stroke-width="2"/>'
                   f'<text x="{lx + 18}" y="{ly + 12}">baseline planners (B1...)</text>')
    out.append("</svg>")
    return "\n".join(out), key


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>mosearch front: {title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.2em; color: #222; }}
h1 {{ font-size: 1.3em; margin-bottom: .2em; }}
h3 {{ margin: .2em 0; }}
.sub {{ color: #555; margin-top: 0; }}
.row {{ display: flex; gap: 1.2em; align-items: flex-start; flex-wrap: wrap; }}
#detail {{ min-width: 380px; max-width: 520px; font-size: .9em; }}
table {{ border-collapse: collapse; font-size: .88em; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 2px 8px; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
td.l, th.l {{ text-align: left; }}
.filters {{ margin: .6em 0; }}
.filters label {{ margin-right: 1em; }}
.filters input {{ width: 6em; }}
tr.sel {{ background: #fff3b0; }}
#plans tbody tr {{ cursor: pointer; }}
#front .pt, #front .bl {{ cursor: pointer; }}
#front .pt.hit {{ stroke: black; stroke-width: 2; }}
.warn {{ color: #a00; }}
.key {{ font-size: .85em; color: #333; margin: .3em 0 0 0; padding-left: 1.2em; }}
.note {{ color: #555; font-size: .85em; max-width: 1100px; }}
</style></head><body>
<h1>Pareto front: {title}</h1>
<p class="sub">{subtitle}</p>
<div class="filters">
 <label>max cost $/h <input id="f-cost" type="number" step="any"></label>
 <label>min throughput samples/s <input id="f-thr" type="number" step="any"></label>
 <label>max staleness <input id="f-stale" type="number" step="any"></label>
 <label>max peak memory <input id="f-mem" type="number" step="any" min="0" max="1"></label>
 <button id="f-clear">clear</button> <span id="f-count"></span>
</div>
<div class="row"><div>{figure}{key}</div><div id="detail"><p>Hover or click a point to see its plan.</p></div></div>
<p class="note">Each point is a distinct plan: plans closer than the resolution in every objective are shown once
(every plan found is in front_all.csv). Colour: execution mode. Predictions of the performance model; a band is the 10th-90th percentile of its held-out error on published RL steps of the plan's executor and GPU generations (a mixture of experts' also takes its training time as wrong as the model's published MoE training iterations: none of those RL steps is of one). On a calibrated cluster (<code>mosearch calibrate</code>), a plan marked extrapolated is far from every run the calibration was fitted on.
<code>mosearch pick RUN --max-cost B</code> gives the fastest plan within a budget, <code>--min-throughput T</code>
the cheapest reaching T.</p>
<h2 style="font-size:1.1em">Plans within the limits</h2>
<table id="plans"><thead><tr><th>plan</th><th>samples/s</th><th>band</th><th>tokens/s</th><th>$/h</th><th>$/1k samples</th>
<th>peak mem</th><th>staleness</th><th class="l">mode</th><th class="l">GPUs used</th></tr></thead><tbody></tbody></table>
<script>
const PLANS = {plans};
const BASELINES = {baselines};
const KNEE = {knee};
const STEP = {step_labels};
const MODES = {mode_words};
const OPTIONAL = {optional};
function fmt(v, d) {{ if (v === undefined || v === null || Number.isNaN(v)) return "-"; return Number(v).toFixed(d); }}
function esc(s) {{ return String(s).replace(/[&<>"]/g, c => ({{"&":"&amp;","<":"&lt;",">":"&gt;","\\"":"&quot;"}})[c]); }}
function detail(p) {{
  const pr = p.predicted;
  const knee = KNEE !== null && p.plan_id === PLANS[KNEE].plan_id && !p.baseline;
  let h = `<h3>${{esc(p.baseline ? "baseline planner " + p.baseline : p.plan_id)}}${{knee ? " (knee)" : ""}}</h3>`;
  h += `<p><b>${{fmt(pr.throughput_samples_s,2)}}</b> samples/s (band ${{esc(p.band_text)}}: the model's held-out error; ${{fmt(pr.throughput_tokens_s,0)}} tokens/s), ` +
       `<b>${{fmt(pr.cost_usd_h,2)}}</b> $/h (${{fmt(pr.usd_per_1k_samples,3)}} $ per 1,000 samples), ` +
       `peak memory <b>${{fmt(pr.peak_mem_frac,2)}}</b> of a GPU, staleness <b>${{fmt(pr.staleness,2)}}</b> versions</p>`;
  if (p.extrapolated) h += `<p class="warn">${{esc(p.extrapolated)}}</p>`;
  h += "<table><tr><th>GPUs</th><th>rollout</th><th>train</th><th>shared</th><th>engines (TP)</th></tr>";
  for (const q of p.pools) {{
    if (q.rollout_gpus + q.train_gpus + q.shared_gpus === 0) continue;
    const eng = Math.floor((q.rollout_gpus + q.shared_gpus) / q.rollout_tp);
    const e = eng ? `${{eng}} (TP ${{q.rollout_tp}})` : "-";
    h += `<tr><td>${{esc(q.gpu)}} in ${{esc(q.region)}}</td><td>${{q.rollout_gpus}}</td><td>${{q.train_gpus}}</td>` +
         `<td>${{q.shared_gpus}}</td><td>${{e}}</td></tr>`;
  }}
  h += "</table>";
  const t = p.train, e = p.execution, r = p.rollout;
  h += `<p>training: data ${{t.dp}} x tensor ${{t.tp}} x pipeline ${{t.pp}} parallel, ${{esc(t.sharding)}}, micro-batch ${{t.micro_batch}}` +
       `${{t.recompute ? ", activation recomputation" : ""}}${{t.optimizer_offload ? ", optimizer state offloaded" : ""}}<br>` +
       `rollout (vLLM): each engine may use ${{fmt(r.kv_mem_frac*100,0)}}% of GPU memory, ${{r.max_num_seqs}} sequences at once<br>` +
       `execution: <b>${{esc(MODES[e.mode] || e.mode)}}</b>${{e.mode === "async" ? ", staleness bound " + e.staleness_bound : ""}}` +
       `${{e.pipeline_chunks > 1 ? ", " + e.pipeline_chunks + " pipeline chunks" : ""}}; weights sent ${{esc(p.weight_sync.route)}}</p>`;
  const rows = Object.keys(STEP).filter(k => k in pr && !(pr[k] === 0 && OPTIONAL.includes(k)));
  if (rows.length) {{
    if (e.mode === "async") h += "<p>Rollouts of several steps run at once, so one step can take less time than generating its samples.</p>";
    h += "<table><tr><th>predicted</th><th>value</th></tr>";
    for (const k of rows) h += `<tr><td>${{esc(STEP[k])}}</td><td>${{fmt(pr[k], Math.abs(pr[k]) >= 100 ? 0 : 2)}}</td></tr>`;
    h += "</table>";
  }}
  document.getElementById("detail").innerHTML = h;
  for (const el of document.querySelectorAll("#front .pt")) el.classList.toggle("hit", !p.baseline && PLANS[Number(el.dataset.i)] === p);
}}
function num(id) {{ const v = document.getElementById(id).value; return v === "" ? null : Number(v); }}
function passes(p) {{
  const pr = p.predicted, c = num("f-cost"), t = num("f-thr"), s = num("f-stale"), m = num("f-mem");
  return (c === null || pr.cost_usd_h <= c) && (t === null || pr.throughput_samples_s >= t) &&
         (s === null || pr.staleness <= s) && (m === null || pr.peak_mem_frac <= m);
}}
function refresh() {{
  const keep = PLANS.map(passes);
  for (const el of document.querySelectorAll("#front .pt")) el.style.opacity = keep[Number(el.dataset.i)] ? 1 : 0.1;
  const n = keep.filter(Boolean).length;
  document.getElementById("f-count").innerHTML = n ? `${{n}} of ${{PLANS.length}} plans` : `<span class="warn">no plan meets these limits</span>`;
  const rows = PLANS.map((p, i) => [p, i]).filter(([p, i]) => keep[i]).sort((a, b) => b[0].predicted.throughput_samples_s - a[0].predicted.throughput_samples_s);
  document.querySelector("#plans tbody").innerHTML = rows.map(([p, i]) => {{
    const pr = p.predicted;
    return `<tr data-i="${{i}}" class="${{i === KNEE ? "sel" : ""}}"><td>${{esc(p.plan_id)}}${{i === KNEE ? " (knee)" : ""}}${{p.extrapolated ? ` <span class="warn" title="${{esc(p.extrapolated)}}">extrapolated</span>` : ""}}</td><td>${{fmt(pr.throughput_samples_s,2)}}</td><td>${{esc(p.band_text)}}</td><td>${{fmt(pr.throughput_tokens_s,0)}}</td>` +
      `<td>${{fmt(pr.cost_usd_h,2)}}</td><td>${{fmt(pr.usd_per_1k_samples,3)}}</td><td>${{fmt(pr.peak_mem_frac,2)}}</td>` +
      `<td>${{fmt(pr.staleness,2)}}</td><td class="l">${{esc(p.execution.mode)}}</td><td class="l">${{esc(p.gpus_text)}}</td></tr>`;
  }}).join("");
}}
window.addEventListener("load", () => {{
  const fig = document.getElementById("front");
  const pick = ev => {{
    const el = ev.target.closest(".pt, .bl");
    if (el) detail(el.classList.contains("pt") ? PLANS[Number(el.dataset.i)] : BASELINES[Number(el.dataset.b)]);
  }};
  fig.addEventListener("mouseover", pick);
  fig.addEventListener("click", pick);
  for (const id of ["f-cost", "f-thr", "f-stale", "f-mem"]) document.getElementById(id).addEventListener("input", refresh);
  document.getElementById("f-clear").addEventListener("click", () => {{ for (const id of ["f-cost", "f-thr", "f-stale", "f-mem"]) document.getElementById(id).value = ""; refresh(); }});
  document.querySelector("#plans tbody").addEventListener("click", ev => {{ const tr = ev.target.closest("tr"); if (tr) detail(PLANS[Number(tr.dataset.i)]); }});
  refresh();
  if (KNEE !== null) detail(PLANS[KNEE]);
}});
</script></body></html>
"""


def write_report(path: Path, plans: list[Plan], baselines: dict[str, Plan], knee: int | None,
                 title: str, subtitle: str, run_dir: Path | None = None) -> Path:
    """report.html at `path`, naming spec files from `run_dir` (default: the page's folder)."""
    run_dir = Path(path).parent if run_dir is None else Path(run_dir)
    figure, key = _svg(plans, baselines, knee)
    runs = _calibrated_runs(plans, run_dir)
    key_html = ""
    if key:
        names = {name: p for name, p in baselines.items()}
        items = []
        for label, members in key:
            p = names[members.split(", ")[0]]
            d = p.predicted
            items.append(f"<li><b>{label}</b> {html.escape(members)}: {d.get('throughput_samples_s', float('nan')):.3g} "
                         f"samples/s, {d.get('cost_usd_h', float('nan')):.4g} $/h, {html.escape(gpu_summary(p))}</li>")
        key_html = f'<ul class="key">{"".join(items)}</ul>'
    text = PAGE.format(
        title=html.escape(title), subtitle=html.escape(subtitle), figure=figure, key=key_html,
        plans=_script_json([_plan_record(p, run_dir, runs=runs) for p in plans]),
        baselines=_script_json([_plan_record(p, run_dir, name) for name, p in baselines.items()]),
        knee="null" if knee is None else int(knee),
        step_labels=_script_json({k: v for k, v in STEP_LABELS.items()
                                  if any(k in step_parts(p.predicted) for p in plans)}),
        mode_words=_script_json(MODE_WORDS), optional=_script_json(list(OPTIONAL_PARTS)),
    )
    atomic_write_text(path, text)
    return path
