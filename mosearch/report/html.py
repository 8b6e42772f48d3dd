"""report.html: the front as an interactive page that works offline.

plotly.js is inlined in the file (no network needed). Hovering or clicking a point shows its
plan: what every GPU pool does, the parallel layout, the execution mode and the predicted
step breakdown. Four inputs filter the front by limits (cost, throughput, staleness,
memory); a table lists the plans that pass.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import plotly.io as pio

from mosearch.report.terminal import step_parts
from problems.atomic import atomic_write_text
from problems.placement.plan import Plan

MODE_COLOURS = {"colocated": "#1f77b4", "disaggregated": "#2ca02c", "async": "#d62728"}


def _plan_record(p: Plan, baseline: str | None = None) -> dict:
    d = p.model_dump(mode="json")
    d["baseline"] = baseline
    return d


def _script_json(data) -> str:
    # "</" inside a <script> would end it early
    return json.dumps(data).replace("</", "<\\/")


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>mosearch front: {title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.2em; color: #222; }}
h1 {{ font-size: 1.3em; margin-bottom: .2em; }}
.sub {{ color: #666; margin-top: 0; }}
.row {{ display: flex; gap: 1.2em; align-items: flex-start; flex-wrap: wrap; }}
#front {{ width: 760px; height: 540px; }}
#detail {{ min-width: 360px; max-width: 520px; font-size: .9em; }}
table {{ border-collapse: collapse; font-size: .88em; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 2px 8px; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
.filters label {{ margin-right: 1em; }}
.filters input {{ width: 6em; }}
tr.sel {{ background: #fff3b0; }}
#plans tbody tr {{ cursor: pointer; }}
.warn {{ color: #a00; }}
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
<div class="row"><div>{figure}</div><div id="detail"><p>Hover or click a point to see its plan.</p></div></div>
<h2 style="font-size:1.1em">Plans within the limits</h2>
<table id="plans"><thead><tr><th>plan</th><th>samples/s</th><th>tokens/s</th><th>$/h</th><th>$/1k samples</th>
<th>peak mem</th><th>staleness</th><th>mode</th><th>GPUs</th></tr></thead><tbody></tbody></table>
<script>
const PLANS = {plans};
const BASELINES = {baselines};
const KNEE = {knee};
const STEP_KEYS = {step_keys};
function fmt(v, d) {{ if (v === undefined || v === null || Number.isNaN(v)) return "-"; return Number(v).toFixed(d); }}
function esc(s) {{ return String(s).replace(/[&<>"]/g, c => ({{"&":"&amp;","<":"&lt;",">":"&gt;","\\"":"&quot;"}})[c]); }}
function usedGpus(p) {{ return p.pools.reduce((a, q) => a + q.rollout_gpus + q.train_gpus + q.shared_gpus, 0); }}
function detail(p) {{
  const pr = p.predicted;
  let h = `<h3>${{esc(p.baseline ? "baseline " + p.baseline : p.plan_id)}}${{p.plan_id === (PLANS[KNEE]||{{}}).plan_id ? " (knee)" : ""}}</h3>`;
  h += `<p><b>${{fmt(pr.throughput_samples_s,2)}}</b> samples/s (${{fmt(pr.throughput_tokens_s,0)}} tokens/s), ` +
       `<b>${{fmt(pr.cost_usd_h,2)}}</b> $/h (${{fmt(pr.usd_per_1k_samples,3)}} $/1k samples), ` +
       `peak memory <b>${{fmt(pr.peak_mem_frac,3)}}</b>, staleness <b>${{fmt(pr.staleness,2)}}</b></p>`;
  h += "<table><tr><th>pool</th><th>rollout</th><th>train</th><th>shared</th><th>rollout TP</th><th>engines</th></tr>";
  for (const q of p.pools) {{
    const eng = Math.floor((q.rollout_gpus + q.shared_gpus) / q.rollout_tp);
    h += `<tr><td>${{esc(q.pool)}}</td><td>${{q.rollout_gpus}}</td><td>${{q.train_gpus}}</td><td>${{q.shared_gpus}}</td><td>${{q.rollout_tp}}</td><td>${{eng}}</td></tr>`;
  }}
  h += "</table>";
  const t = p.train, e = p.execution, r = p.rollout;
  h += `<p>training: DP ${{t.dp}} x TP ${{t.tp}} x PP ${{t.pp}}, ${{esc(t.sharding)}}, micro-batch ${{t.micro_batch}}` +
       `${{t.recompute ? ", recompute" : ""}}${{t.optimizer_offload ? ", optimizer offload" : ""}}<br>` +
       `rollout: KV memory ${{fmt(r.kv_mem_frac,2)}}, ${{r.max_num_seqs}} concurrent sequences per engine<br>` +
       `execution: <b>${{esc(e.mode)}}</b>, staleness bound ${{e.staleness_bound}}, ${{e.pipeline_chunks}} pipeline chunk(s); ` +
       `weight sync ${{esc(p.weight_sync.route)}}</p>`;
  const steps = STEP_KEYS.filter(k => k in pr);
  if (steps.length) {{
    h += "<table><tr><th>step part (s) / memory (GB)</th><th>value</th></tr>";
    for (const k of steps) h += `<tr><td>${{esc(k)}}</td><td>${{fmt(pr[k],3)}}</td></tr>`;
    h += "</table>";
  }}
  document.getElementById("detail").innerHTML = h;
}}
function num(id) {{ const v = document.getElementById(id).value; return v === "" ? null : Number(v); }}
function passes(p) {{
  const pr = p.predicted, c = num("f-cost"), t = num("f-thr"), s = num("f-stale"), m = num("f-mem");
  return (c === null || pr.cost_usd_h <= c) && (t === null || pr.throughput_samples_s >= t) &&
         (s === null || pr.staleness <= s) && (m === null || pr.peak_mem_frac <= m);
}}
function refresh() {{
  const keep = PLANS.map(passes);
  const op = keep.map(k => k ? 0.9 : 0.07);
  Plotly.restyle("front", {{"marker.opacity": [op]}}, [0]);
  const n = keep.filter(Boolean).length;
  document.getElementById("f-count").innerHTML = n ? `${{n}} of ${{PLANS.length}} plans` : `<span class="warn">no plan meets these limits</span>`;
  const rows = PLANS.map((p, i) => [p, i]).filter(([p, i]) => keep[i]).sort((a, b) => b[0].predicted.throughput_samples_s - a[0].predicted.throughput_samples_s);
  document.querySelector("#plans tbody").innerHTML = rows.map(([p, i]) => {{
    const pr = p.predicted;
    return `<tr data-i="${{i}}" class="${{i === KNEE ? "sel" : ""}}"><td>${{esc(p.plan_id)}}${{i === KNEE ? " (knee)" : ""}}</td><td>${{fmt(pr.throughput_samples_s,2)}}</td><td>${{fmt(pr.throughput_tokens_s,0)}}</td>` +
      `<td>${{fmt(pr.cost_usd_h,2)}}</td><td>${{fmt(pr.usd_per_1k_samples,3)}}</td><td>${{fmt(pr.peak_mem_frac,3)}}</td>` +
      `<td>${{fmt(pr.staleness,2)}}</td><td>${{esc(p.execution.mode)}}</td><td>${{usedGpus(p)}}</td></tr>`;
  }}).join("");
}}
window.addEventListener("load", () => {{
const fig = document.getElementById("front");
fig.on("plotly_hover", ev => {{ const pt = ev.points[0]; detail(pt.curveNumber === 0 ? PLANS[pt.pointIndex] : BASELINES[pt.pointIndex]); }});
fig.on("plotly_click", ev => {{ const pt = ev.points[0]; detail(pt.curveNumber === 0 ? PLANS[pt.pointIndex] : BASELINES[pt.pointIndex]); }});
for (const id of ["f-cost", "f-thr", "f-stale", "f-mem"]) document.getElementById(id).addEventListener("input", refresh);
document.getElementById("f-clear").addEventListener("click", () => {{ for (const id of ["f-cost", "f-thr", "f-stale", "f-mem"]) document.getElementById(id).value = ""; refresh(); }});
document.querySelector("#plans tbody").addEventListener("click", ev => {{ const tr = ev.target.closest("tr"); if (tr) detail(PLANS[Number(tr.dataset.i)]); }});
refresh();
if (KNEE !== null) detail(PLANS[KNEE]);
}});
</script></body></html>
"""


def _figure(plans: list[Plan], baselines: dict[str, Plan], knee: int | None) -> dict:
    """The plotly figure as a plain dict (validating a go.Figure of hundreds of points costs seconds)."""
    pr = [p.predicted for p in plans]
    n = len(plans)
    front = dict(
        type="scatter", mode="markers", name="front",
        x=[d.get("cost_usd_h") for d in pr], y=[d.get("throughput_samples_s") for d in pr],
        marker=dict(size=[16 if i == knee else 9 for i in range(n)],
                    symbol=["star" if i == knee else "circle" for i in range(n)],
                    color=[MODE_COLOURS.get(p.execution.mode, "#7f7f7f") for p in plans],
                    line=dict(width=[1.5 if i == knee else 0 for i in range(n)], color="black")),
        customdata=[[p.plan_id, p.execution.mode, d.get("peak_mem_frac"), d.get("staleness")] for p, d in zip(plans, pr)],
        hovertemplate="%{customdata[0]} (%{customdata[1]})<br>%{y:.2f} samples/s, %{x:.2f} $/h<br>"
                      "peak memory %{customdata[2]:.3f}, staleness %{customdata[3]:.2f}<extra></extra>",
    )
    data = [front]
    if baselines:
        bp = [p.predicted for p in baselines.values()]
        data.append(dict(
            type="scatter", mode="markers+text", name="baselines",
            x=[d.get("cost_usd_h") for d in bp], y=[d.get("throughput_samples_s") for d in bp],
            text=list(baselines), textposition="top center",
            marker=dict(size=12, symbol="square-open", color="black", line=dict(width=2)),
            hovertemplate="baseline %{text}<br>%{y:.2f} samples/s, %{x:.2f} $/h<extra></extra>",
        ))
    layout = dict(
        xaxis=dict(title=dict(text="cost ($/h)")), yaxis=dict(title=dict(text="throughput (samples/s)")),
        width=760, height=540, margin=dict(l=60, r=20, t=30, b=50), legend=dict(orientation="h", y=1.06),
        hovermode="closest", plot_bgcolor="white",
    )
    return dict(data=data, layout=layout)


def write_report(path: Path, plans: list[Plan], baselines: dict[str, Plan], knee: int | None,
                 title: str, subtitle: str) -> Path:
    fig = _figure(plans, baselines, knee)
    figure = pio.to_html(fig, include_plotlyjs=True, full_html=False, div_id="front", validate=False,
                         config={"displaylogo": False})
    step_keys = list(dict.fromkeys(k for p in plans for k in step_parts(p.predicted)))
    text = PAGE.format(
        title=html.escape(title), subtitle=html.escape(subtitle), figure=figure,
        plans=_script_json([_plan_record(p) for p in plans]),
        baselines=_script_json([_plan_record(p, name) for name, p in baselines.items()]),
        knee="null" if knee is None else int(knee), step_keys=_script_json(step_keys),
    )
    atomic_write_text(path, text)
    return path
