"""The published RL-step and vLLM generation rows and how the model scores one: shared by
mosearch/bench/rl_validation.py (the check) and mosearch/bench/rl_fit.py (the fit).

Data: benchmarks/data/rl_published.csv (RL steps; a source per row: document, table, address; its header
gives the rules for values a source does not publish) and benchmarks/data/vllm_published.csv (generation).
"""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import numpy as np
import yaml

from problems.placement.problem import PlacementProblem

ROOT = Path(__file__).resolve().parents[2]
RL_DATA = ROOT / "benchmarks" / "data" / "rl_published.csv"
GEN_DATA = ROOT / "benchmarks" / "data" / "vllm_published.csv"


def load(path: Path) -> list[dict]:
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    rows = []
    for r in csv.DictReader(lines):
        assumed = [k for k, v in r.items() if isinstance(v, str) and v.endswith("*")]
        rows.append({k: v.rstrip("*") if isinstance(v, str) else v for k, v in r.items()} | {"assumed": assumed})
    return rows


def _plan_vector(prob: PlacementProblem, r: dict) -> np.ndarray:
    from problems.placement.names import MODES, SHARDINGS

    lay = prob.layout
    P = lay.n_pools
    x = np.zeros(prob.n_var)
    colo = r["mode"] == "colocated"
    x[0] = int(r["rollout_gpus"])
    x[P] = int(r["rollout_gpus"]) if colo else int(r["train_gpus"])
    x[2 * P] = list(lay.rtp_options[0]).index(int(r["rollout_tp"]))
    x[lay.g("kv_mem_frac")] = float(r["kv_mem_frac"])
    x[lay.g("log2_max_num_seqs")] = np.log2(int(r["max_num_seqs"]))
    x[lay.g("train_tp_idx")] = list(lay.tp_options).index(int(r["tp"]))
    x[lay.g("train_pp_idx")] = list(lay.pp_options).index(int(r["pp"]))
    x[lay.g("sharding")] = SHARDINGS.index(r["sharding"])
    x[lay.g("log2_micro_batch")] = np.log2(int(r["micro_batch"]))
    x[lay.g("recompute")] = int(r["recompute"])
    x[lay.g("optimizer_offload")] = int(r["offload"])
    x[lay.g("mode")] = MODES.index(r["mode"])
    x[lay.g("staleness_bound")] = int(r["k"])
    x[lay.g("log2_pipeline_chunks")] = np.log2(int(r["chunks"]))
    return x


def published(r: dict) -> bool:
    """A row of the headline table: its samples per step, mean and maximum response length are published."""
    return not {"samples", "resp_mean", "resp_max"} & set(r["assumed"])


def load_steps() -> list[dict]:
    """The RL-step rows; a row that publishes tokens per GPU and second but no step gets the step those tokens
    take with its lengths (samples x (prompt_len + resp_mean) / (tokens_gpu_s x GPUs)), marked `step_derived`."""
    rows = load(RL_DATA)
    for r in rows:
        r["step_derived"] = not r["step_s"]
        if r["step_derived"]:
            gpus = int(r["nodes"]) * int(r["gpus_per_node"])
            r["step_s"] = str(int(r["samples"]) * (float(r["prompt_len"]) + float(r["resp_mean"]))
                              / (float(r["tokens_gpu_s"]) * gpus))
    return rows


def row_pairs(r: dict) -> list[tuple[str, str]]:
    """(pair, role) of a row: the CSV may list several, ';'-separated."""
    if not r.get("pair"):
        return []
    return list(zip(r["pair"].split(";"), r["pair_role"].split(";")))


def pairs_by_name(rows) -> dict[str, tuple]:
    """{pair: (row a, row b)} for every pair both of whose rows are in `rows` (`row_pairs`)."""
    roles: dict[str, dict] = {}
    for r in rows:
        for name, role in row_pairs(r):
            roles.setdefault(name, {})[role] = r
    return {name: (p["a"], p["b"]) for name, p in roles.items() if "a" in p and "b" in p}


def build_problem(r: dict, tmp: Path):
    """(problem, plan vector) of one row: its cluster (one pool), workload and layout, scored with the step work
    of the row's executor and version (`executor` column, model/executor_costs.py); an engine run without CUDA
    graphs (`eager`) pays the per-layer launch cost of `params.EAGER_DECODE_LAYER_S`."""
    from problems.placement.model import fitted
    from problems.placement.model.executor_costs import step_costs
    from problems.placement.model.params import EAGER_DECODE_LAYER_S

    cluster, workload = tmp / f"{r['id']}-cluster.yaml", tmp / f"{r['id']}-workload.yaml"
    cluster.write_text(yaml.safe_dump({
        "name": r["id"], "regions": {"r": {"inter_node_gbs": float(r["inter_node_gbs"])}},
        "node_groups": [{"gpu": r["gpu"], "nodes": int(r["nodes"]), "gpus_per_node": int(r["gpus_per_node"]),
                         "region": "r"}]}))
    workload.write_text(yaml.safe_dump({
        "name": r["id"], "model": r["model"], "algorithm": r["algorithm"], "prompts_per_step": int(r["samples"]) // int(r["group"]),
        "samples_per_prompt": int(r["group"]), "prompt_len": int(r["prompt_len"]),
        "response_len": {"mean": int(float(r["resp_mean"])), "max": int(r["resp_max"]),
                         **({"sigma": r["sigma"]} if "sigma" in r else {})},
        "max_staleness": max(int(r["k"]), 1), "precision": "bf16", "kl_reference": r["kl_reference"] == "1",
        "sequence_packing": r["packing"] == "1", "elementwise_kernels": r["kernels"],
        "optimizer_states": r.get("optimizer_states") or "fp32"}))
    eager = {r["gpu"]: {"decode_layer_s": EAGER_DECODE_LAYER_S}} if r["eager"] == "1" else None
    prob = PlacementProblem.from_files(cluster, workload, efficiencies=eager)
    prob.ctx.updates = int(r["updates"])
    prob.ctx.micro_batch_tokens = float(r["micro_batch_tokens"]) if r.get("micro_batch_tokens") else None
    name, _, version = (r.get("executor") or "mosearch").partition(" ")
    prob.ctx.steps = dataclasses.replace(step_costs(name, version or None),
                                         reference_on_host=r.get("ref_offload") == "1")
    prob.ctx.fitted_steps = fitted.step_terms(prob.ctx.steps.family)
    return prob, _plan_vector(prob, r)


def predict_step(r: dict, tmp: Path) -> dict:
    """The model's RL step for one row (`build_problem`)."""
    prob, x = build_problem(r, tmp)
    out = {k: float(v[0]) for k, v in prob.evaluate_matrix(x[None, :]).items()}
    if out["repaired"]:
        raise ValueError(f"{r['id']}: the layout is not one the encoding holds as given")
    return out


def predict_generation(r: dict) -> float:
    from problems.placement.model.rollout import fixed_batch_s

    ctx, tp = generation_context(r)
    return fixed_batch_s(ctx, tp, int(r["batch"]), int(r["prompt_len"]), int(r["output_len"])) * float(r["waves"])


def load_generation() -> list[dict]:
    """The vLLM generation rows, with the keys the fit reads: the measured seconds as `step_s`, one source."""
    rows = load(GEN_DATA)
    for r in rows:
        r.update(step_s=r["measured_s"], source_key="vllm-generation", complete="1", held_out="0", kind="generation")
    return rows


def generation_context(r: dict):
    """(model context, TP) of one generation row: one engine of the row's GPU type and TP."""
    from problems.placement.model import build_context
    from problems.placement.specs import Cluster, Pool, Workload, resolve_architecture, gpu_catalog

    gpu = gpu_catalog()[r["gpu"]]
    tp = int(r["tp"])
    pool = Pool(id="p", gpu=gpu, region="r", count=tp, gpus_per_node=max(tp, 8), intra_gbs=gpu.intra_node.bandwidth_gbs,
                inter_gbs=50.0)
    cl = Cluster("gen", "<gen>", [pool], ["r"], np.array([[50.0]]), np.array([[1e-5]]), np.zeros((1, 1)))
    arch = resolve_architecture(r["model"], None)
    out = int(r["output_len"])
    wl = Workload("gen", "<gen>", arch, "grpo", 1, 1, max(int(r["prompt_len"]), 1), out, out, 0, "bf16", False,
                  False, response_sigma=0.0)
    from problems.placement.model.params import EAGER_DECODE_LAYER_S

    ctx = build_context(cl, wl, {gpu.name: {"decode_layer_s": EAGER_DECODE_LAYER_S}} if r["eager"] == "1" else None)
    return ctx, tp


# EasyR1's device peaks for its MFU (verl/utils/flops_counter.py get_device_flops, v0.3.0 and v0.3.2 alike; dense
# BF16 tensor FLOP/s): what its `perf/mfu_actor` divides by, so what reading it back multiplies by
EASYR1_PEAK_FLOPS = {"H100": 989e12, "H800": 989e12, "A100": 312e12, "A800": 312e12, "L40": 181.05e12,
                     "L20": 119.5e12, "H20": 148e12}


def published_update_s(r: dict, ctx) -> float | None:
    """The update phase's seconds a row's published actor MFU stands for (column `actor_mfu`): EasyR1's
    FlopsCounter estimate (6 x the dense parameters x the step's tokens, plus 12 x the sum of squared sequence
    lengths x head_dim x heads x layers) over MFU x its device peak x the GPUs. The tokens are the row's samples x
    (prompt + mean response), as its throughput column counts them; the squared lengths come from the workload's
    length distribution (`ctx.lengths`; the attention term is 2-4% of the estimate here). None without a figure."""
    mfu = r.get("actor_mfu")
    if not mfu:
        return None
    head_dim = ctx.hidden // ctx.heads
    dense = ctx.layers * (ctx.hidden * ctx.ffn * 3 + ctx.hidden * (2 * ctx.heads * head_dim + 2 * ctx.kv_dim)) \
        + 2 * ctx.vocab * ctx.hidden
    tok = ctx.prompt_len + ctx.resp_mean
    sq = tok ** 2 if ctx.lengths is None else ctx.lengths.mean_square(ctx.prompt_len)
    flops = 6.0 * dense * ctx.samples * tok + 12.0 * ctx.samples * sq * head_dim * ctx.heads * ctx.layers
    gpus = int(r["nodes"]) * int(r["gpus_per_node"])
    return flops / (float(mfu) * EASYR1_PEAK_FLOPS[r["gpu"]] * gpus)


def predict_update_s(r: dict, tmp: Path) -> tuple[float, float | None]:
    """(the model's update phase, the published one) for one row: the training stage with the forward-only
    passes (old log-probs, reference) and the executor's per-step and per-sample seconds taken out, as the
    source's update timer counts it (EasyR1 times `update_policy`: the micro-batches' forward and backward, and
    the optimizer steps, with the parameters already loaded)."""
    prob, x = build_problem(r, tmp)
    ctx = prob.ctx
    pub = published_update_s(r, ctx)
    ctx.has_reference = False
    ctx.steps = dataclasses.replace(ctx.steps, old_logprob_pass=False)
    ctx.fitted_steps = {k: v for k, v in ctx.fitted_steps.items() if k == "microbatch_s"}
    ctx.__dict__.pop("_unit_costs", None)
    return float(prob.evaluate_matrix(x[None, :])["train_s"][0]), pub
