"""`mosearch inspect`: what a cluster has and what a workload needs, before any search."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.table import Table

from problems.placement.specs import Cluster, Workload, check_fits, for_precision, load_cluster, load_workload

GB = 1e9


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="show a cluster's GPUs and links and a workload's memory needs")
    p.add_argument("--cluster", required=True, help="cluster spec YAML (see problems/clusters/)")
    p.add_argument("--workload", help="workload spec YAML (see problems/workloads/)")
    p.set_defaults(func=run)


def _num(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def cluster_tables(cluster: Cluster) -> list[Table]:
    pools = Table(title=f"cluster {cluster.name}: {cluster.total_gpus} GPUs in {len(cluster.regions)} region(s)")
    for col in ("pool", "GPUs", "per node", "TFLOPS (dense bf16)", "memory GB", "HBM TB/s", "intra-node", "$/h"):
        pools.add_column(col, justify="left" if col in ("pool", "intra-node") else "right")
    total_usd = total_tf = total_mem = total_bw = 0.0
    for p in cluster.pools:
        g = p.gpu
        usd, tf, mem, bw = p.count * g.price_usd_h, p.count * g.tflops, p.count * g.memory_gb, p.count * g.bandwidth_tbs
        total_usd, total_tf, total_mem, total_bw = total_usd + usd, total_tf + tf, total_mem + mem, total_bw + bw
        per_node = (f"{'+'.join(map(str, p.node_sizes))} (planned as {p.gpus_per_node})" if p.node_sizes
                    else str(p.gpus_per_node))
        pools.add_row(p.id, str(p.count), per_node, _num(tf), _num(mem), _num(bw),
                      f"{p.link_kind} {p.intra_gbs:g} GB/s", f"{usd:,.2f}")
    pools.add_row("total", str(cluster.total_gpus), "", _num(total_tf), _num(total_mem), _num(total_bw),
                  "", f"{total_usd:,.2f}", style="bold")

    links = Table(title="network (widest path between regions)")
    for col in ("from", "to", "GB/s", "latency ms", "egress $/GB"):
        links.add_column(col)
    n = len(cluster.regions)
    for a in range(n):
        for b in range(a, n):
            kind = "inside region" if a == b else ""
            links.add_row(cluster.regions[a], cluster.regions[b] if a != b else kind,
                          f"{cluster.region_bw[a, b]:g}", f"{cluster.region_latency[a, b] * 1e3:g}",
                          f"{cluster.region_egress[a, b]:g}")
    return [pools, links]


def workload_table(workload: Workload) -> Table:
    m, b = workload.model, workload.bytes_per_param
    t = Table(title=f"workload {workload.name}: {m.name}, {workload.algorithm.upper()}, {workload.precision}")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    rows = [
        ("parameters", f"{m.params / 1e9:,.3f} B" if m.params > 1e8 else f"{m.params:,}"),
        ("layers x hidden (heads / kv heads)", f"{m.layers} x {m.hidden} ({m.heads} / {m.kv_heads})"),
        ("weights", f"{m.params * b / GB:,.2f} GB"),
        ("gradients", f"{m.params * b / GB:,.2f} GB"),
        # mixed-precision Adam keeps an fp32 master copy and two fp32 moments: 12 B/param
        ("optimizer states (Adam, fp32 master + moments)", f"{m.params * 12 / GB:,.2f} GB"),
        ("training state before sharding (all trained models)", f"{training_state_gb(workload):,.2f} GB"),
        ("KV cache per token", f"{m.kv_bytes_per_token(b) / 1024:,.1f} KiB"),
        ("samples per step", f"{workload.prompts_per_step} prompts x {workload.samples_per_prompt}"),
        ("tokens per sample (prompt + mean / max response)",
         f"{workload.prompt_len} + {workload.response_mean} / {workload.response_max}"),
        ("response length spread (log-normal sigma, cut at max)", f"{workload.response_sigma:g}"),
        ("extra models", ", ".join(n for n, on in (("critic", workload.has_critic), ("reference", workload.has_reference)) if on) or "none"),
        ("max staleness allowed", str(workload.max_staleness)),
    ]
    rows[2:2] = moe_rows(m)
    for k, v in rows:
        t.add_row(k, v)
    return t


def moe_rows(m) -> list[tuple[str, str]]:
    """A mixture of experts' counts (none for a dense model): active parameters as the model cards count them
    (every weight a token's forward uses, both embeddings: Qwen3's, DeepSeek-V3's) and without the input
    embedding (a lookup, not a matmul: gpt-oss's card), the experts, MLA's cache and the sliding layers."""
    rows = []
    if m.is_moe:
        no_embed = m.active_params - m.vocab * m.hidden
        rows += [("active parameters per token", f"{m.active_params / 1e9:,.3f} B ({no_embed / 1e9:,.3f} B without "
                                                 "the input embedding)"),
                 ("routed experts (per token) / shared",
                  f"{m.experts} ({m.experts_per_token}) / {m.shared_experts} in {m.moe_layers} MoE layers"
                  + (f", {m.dense_layers} dense" if m.dense_layers else "")),
                 ("routed expert parameters (split by expert parallelism)", f"{m.routed_expert_params / 1e9:,.3f} B")]
    if m.kv_lora_rank:
        rows.append(("attention", f"MLA: latent KV cache of {m.kv_lora_rank} + {m.qk_rope_head_dim} values per "
                                  "token and layer"))
    if m.sliding_layers:
        rows.append(("sliding-window layers", f"{m.sliding_layers} of {m.layers} (window {m.sliding_window} tokens)"))
    return rows


def training_state_gb(workload: Workload) -> float:
    """Weights + gradients + Adam states of every trained model, plus frozen reference weights."""
    m, b = workload.model, workload.bytes_per_param
    trained = 1 + int(workload.has_critic)
    return (m.params * (2 * b + 12) * trained + m.params * b * int(workload.has_reference)) / GB


def verdict(cluster: Cluster, workload: Workload) -> tuple[bool, str]:
    """Whether some plan can fit memory: the planner's own proof (`structural_infeasibility`: the widest
    engine, and the smallest training footprint of any layout, optimizer offload included)."""
    from problems.placement.explain import structural_infeasibility

    reason = structural_infeasibility(cluster, workload, cluster.efficiencies or None)
    if reason is not None:
        return False, reason
    weights = workload.model.params * workload.bytes_per_param / GB
    return True, (f"fits: some layout holds {workload.model.name} (weights {weights:.3g} GB; training state "
                  f"{training_state_gb(workload):,.3g} GB before sharding and offload; cluster "
                  f"{cluster.total_memory_gb:,.0f} GB); `mosearch plan` finds which")


def run(args: argparse.Namespace) -> int:
    # rich falls back to 80 columns when piped; the tables need more
    console = Console(width=None if sys.stdout.isatty() else 120)
    # validate everything before printing anything, so a bad file leaves no half report
    cluster = load_cluster(args.cluster)
    workload = load_workload(args.workload) if args.workload else None
    left_out = None
    if workload is not None:
        # the pools a plan can use: those whose GPUs run the workload's precision (no pool left: exit 2)
        usable, left_out = for_precision(cluster, workload)
        check_fits(usable, workload)  # weights larger than the whole cluster: bad input, exit 2
    for table in cluster_tables(cluster):
        console.print(table)
    from problems.placement.predict import prior_notes

    for note in prior_notes(cluster):  # efficiencies no measurement gives: the generation's prior
        console.print(f"assumption: {note}", soft_wrap=True)
    if workload is None:
        return 0
    console.print(workload_table(workload))
    if left_out:
        console.print(f"note: {left_out}", soft_wrap=True)
    ok, reason = verdict(usable, workload)
    console.print(f"[bold {'green' if ok else 'red'}]verdict:[/] {reason}")
    return 0 if ok else 1
