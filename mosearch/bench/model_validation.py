"""Validate the placement model's compute formulas against measured GPU timings.

    python -m mosearch.bench.model_validation [--out results/bench/model_validation.md]

Training: per-layer forward+backward time of one micro-batch (Sailor hook profiles; Aceso op
sums), predicted as matmul FLOPs / (tp x dtype peak x eff_c) + element-wise HBM bytes /
(bandwidth x eff_m) + TP all-reduces / eff_link + a floor c (training.py's `layer_fwd_flops` and
`layer_elementwise_bytes`, as in `train_times`); the all-reduce ring runs over the slowest hop
of the GPU type's link topology (2-way NVLink-bridged pairs on RTX-3090, PCIe beyond a pair).
Inference: per-operator kernel time (vidur), predicted by the rollout module's roofline operator
functions with prefill_eff (compute), decode_eff (bandwidth) and a floor c. The script fits those
few bounded parameters per GPU type and reports held-out errors (leave-one-model-out) beside
in-sample ones.
Data: problems/placement/data/measured/ (copied, with sources)."""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from problems.placement.model.comm import ring_allreduce_s  # noqa: E402
from problems.placement.model.rollout import attn_decode_op_s, attn_prefill_op_s, linear_op_s  # noqa: E402
from problems.placement.model.training import layer_elementwise_bytes, layer_fwd_flops  # noqa: E402
from mosearch.bench import publish  # noqa: E402
from mosearch.bench import provenance  # noqa: E402

DATA = ROOT / "problems/placement/data/measured"
GPUS = yaml.safe_load((DATA / "gpus.yaml").read_text())["gpus"]
# vidur architectures (README of the measured set)
INFER_ARCH = {
    "Llama-2-7B": dict(h=4096, heads=32, kv=32, ffn=11008),
    "Llama-3-8B": dict(h=4096, heads=32, kv=8, ffn=14336),
    "Qwen-72B": dict(h=8192, heads=64, kv=64, ffn=24576),
}
LINEAR_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
DECODE_TOKENS_MAX = 128  # linear ops at <= 128 tokens are decode batches, larger ones prefill


def _pct(a):
    return np.percentile(a, 50) * 100, np.percentile(a, 90) * 100


# ---------------------------------------------------------------- training
def _layer_params(h, ffn, gated):
    """Matmul weights of one layer (q, k, v, o and the MLP; MHA in every measured model)."""
    return 4 * h * h + (3 if gated else 2) * h * ffn


# fp32 rows whose matmuls ran on the CUDA cores although the GPU has TF32: Sailor's A100-40 rows of
# unclear provenance (OPT-30B, Llama-3-8B) take 4.9x the time the TF32 peak predicts at the
# efficiency of the same GPU's other rows, about the TF32/FP32 peak ratio (156/19.5 = 8) times
# that efficiency; a run with TF32 matmuls disabled (PyTorch's default since 1.12) explains it.
NO_TF32 = {("sailor", "A100-40", "rounded")}


def peak_tflops(row):
    """The peak a row's matmuls run against. fp16: tensor FP16 with FP32 accumulate (what PyTorch's
    half GEMMs use). fp32: TF32 tensor where the part has it (the Aceso fp32 GEMMs on A100 reach
    ~120 TFLOP/s, above the 19.5 FP32 peak, so TF32 was on), else the CUDA-core FP32 peak."""
    g = GPUS[row["gpu"]]
    if row["dtype"] == "fp16":
        return g["fp16"]
    if (row["src"], row["gpu"], row["flag"]) in NO_TF32:
        return g["fp32"]
    return g["tf32"] or g["fp32"]


def training_rows():
    rows = []
    for r in csv.DictReader(open(DATA / "training_layers.csv")):
        gated = r["mlp"].lower().startswith("swiglu")
        rows.append(dict(src="sailor", gpu=r["gpu"], model=r["model"].split(" (")[0].split("-like")[0],
                         dtype="fp32", h=int(r["hidden"]), heads=int(r["heads"]), ffn=int(r["ffn"]), gated=gated,
                         s=int(r["seq_len"]), b=int(r["micro_batch"]), tp=int(r["tp"]),
                         y=float(r["transformer_layer_fwd_ms"]) + float(r["transformer_layer_bwd_ms"]),
                         flag=r["quality_flag"].split("_")[0]))
    for r in csv.DictReader(open(DATA / "training_layers_aceso_ops.csv")):
        rows.append(dict(src="aceso", gpu=r["gpu"], model=r["model"].split(" (")[0].split("-like")[0],
                         dtype=r["dtype"], h=int(r["hidden"]), heads=int(r["heads"]), ffn=int(r["ffn"]),
                         gated=False, s=int(r["seq_len"]), b=int(r["micro_batch"]), tp=int(r["tp"]),
                         y=float(r["layer_fwd_ms_sum13ops"]) + float(r["layer_bwd_ms_sum13ops"]), flag="ops"))
    return rows


# Matmul work per layer as multiples of the forward's: forward, input grads, weight grads (3).
# Aceso's per-op backward times of the four linear layers equal their forward times (median
# ratio printed by --explain), i.e. its profiler times one backward GEMM per linear layer, so its
# rows count 2 (`aceso_backward_ratio` measures it); its attention-core backward (two GEMMs per
# forward GEMM, no weights) counts 3.
LINEAR_PASSES = {"sailor": 3.0, "aceso": 2.0}
ATTN_PASSES = 3.0


def aceso_backward_ratio():
    """Median over Aceso tp=1 rows of the four linear layers' backward time / forward time."""
    r = [sum(float(x[f"{op}_bwd_ms"]) for op in ("qkv", "attn_out", "mlp_gemm1", "mlp_gemm2"))
         / sum(float(x[f"{op}_fwd_ms"]) for op in ("qkv", "attn_out", "mlp_gemm1", "mlp_gemm2"))
         for x in csv.DictReader(open(DATA / "training_layers_aceso_ops.csv")) if x["tp"] == "1"]
    return float(np.median(r)), len(r)


def training_features(rows):
    """Per row, ms at unit efficiencies: (matmul FLOPs / tp / dtype peak, element-wise HBM bytes /
    bandwidth, the four TP all-reduces over the datasheet link). Megatron's attention computes and
    stores the full s x s score matrix (no flash attention in either profiler), so its FLOPs use the
    full context and its score traffic is counted; fp32 rows run the unfused softmax."""
    X = []
    for r in rows:
        g = GPUS[r["gpu"]]
        by = 4 if r["dtype"] == "fp32" else 2
        tok = r["b"] * r["s"]
        lin = layer_fwd_flops(_layer_params(r["h"], r["ffn"], r["gated"]), r["h"], r["s"], r["b"], 0)
        att = layer_fwd_flops(0, r["h"], r["s"], r["b"], r["s"])
        flops = (LINEAR_PASSES[r["src"]] * lin + ATTN_PASSES * att) / r["tp"]
        compute = flops / (peak_tflops(r) * 1e12) * 1e3
        fwd_b, bwd_b = layer_elementwise_bytes(tok, r["h"], r["ffn"] / r["tp"], by, gated=r["gated"],
                                               score_elems=r["b"] * r["heads"] / r["tp"] * r["s"] ** 2,
                                               fused_softmax=r["dtype"] != "fp32")
        memory = (fwd_b + bwd_b) / (g["bandwidth_tbs"] * 1e12) * 1e3
        # Megatron TP: two all-reduces of the layer's activations forward, two backward; both
        # profilers' times contain them (Aceso's row-parallel forward ops grow with tp); the ring runs
        # over the slowest hop of the group's link topology (`tp_link`)
        link_bw = tp_link(r["gpu"], r["tp"])[1] * 1e9
        comm = 4 * float(ring_allreduce_s(tok * r["h"] * by, r["tp"], link_bw, 10e-6)) * 1e3
        X.append((compute, memory, comm))
    return np.array(X)


def link_kind(gpu):
    """NVLink parts (hundreds of GB/s per GPU) vs PCIe parts (16 GB/s) in the measured gpus.yaml."""
    return "nvlink" if GPUS[gpu]["intra_gbs"] >= 100 else "pcie"


# Link topology inside a node, per GPU type. Most parts have one link to every other GPU of the node
# (gpus.yaml `intra_gbs`: an NVLink fabric, or PCIe). GPU types listed here pair up over a 2-way
# NVLink bridge and reach any GPU outside their pair over PCIe only. Figure: total bidirectional
# bridge bandwidth, the convention of the NVLink figures in gpus.yaml (A100 600, V100 300 GB/s);
# GeForce RTX 3090: "NVLink 3rd gen, 2-way, 112.5 GB/s" (NVIDIA RTX 3090 product page/spec).
# Whether the profiled machines had bridges is not recorded with the data (measured-set README);
# it is inferred from their times (`link_evidence`, tabled in the report): RTX-3090 all-reduces
# imply an order of magnitude more bandwidth at tp=2 than at tp=4, where they run at the speed of
# the other PCIe parts (a step no single link explains). RTX-2080 and Titan-RTX,
# which also take 2-way bridges, show no such step (tp=2 no faster per all-reduced byte than tp=4),
# so they stay on the single PCIe link.
NVLINK_BRIDGE_GBS = {"RTX-3090": 112.5}
BEYOND_PAIR = "pcie-beyond-pair"


def tp_link(gpu, tp, separate_beyond_pair=False):
    """(link kind, GB/s) of the slowest hop of a ring over `tp` GPUs of type `gpu` on consecutive
    devices of one node: a bridged pair (tp=2) runs over its bridge, an NVLink link; a larger
    group's ring has hops between pairs, over PCIe (gpus.yaml `intra_gbs`), and is limited by them.
    The hops beyond a pair share the PCIe efficiency of the PCIe parts unless `separate_beyond_pair`
    (then they get their own kind, for the check in the report). A GPU type without bridges uses
    its one link."""
    if gpu in NVLINK_BRIDGE_GBS:
        if tp <= 2:
            return "nvlink", NVLINK_BRIDGE_GBS[gpu]
        return (BEYOND_PAIR if separate_beyond_pair else "pcie"), GPUS[gpu]["intra_gbs"]
    return link_kind(gpu), GPUS[gpu]["intra_gbs"]


def row_links(rows, separate_beyond_pair=False):
    """Per row, the kind of link its TP all-reduces are limited by (selects the shared eff_link)."""
    return np.array([tp_link(r["gpu"], r["tp"], separate_beyond_pair)[0] for r in rows])


LINKS = ("nvlink", "pcie", BEYOND_PAIR)  # the last only in the separate-efficiency check
# GPU types that share one set of efficiencies: the A100 40 GB and 80 GB parts are one chip (same
# SMs and clocks, A100 datasheet); their different HBM bandwidths stay in the formula.
CHIP = {"A100-40": "A100", "A100-80": "A100"}


def chip(gpu):
    return CHIP.get(gpu, gpu)


def fit_training(X, y, groups, links):
    """One bounded linear least-squares fit on relative error over all GPU types:
    y ~ compute / eff_c[group] + memory / eff_m[group] + c[group] + comm / eff_link[link], each
    efficiency in (0, 1] (solved for its inverse >= 1) and c >= 0. `groups` names each row's GPU
    type (or chip); `links` each row's link kind (`row_links`). A link efficiency is shared by all
    rows over that kind of link, whatever the GPU type (NCCL's ring reaches a similar share of it),
    so each group has three parameters and each link kind one. A link kind no row exercises stays
    at the datasheet figure. Returns ({group: (1/eff_c, 1/eff_m, c)}, {link kind: 1/eff_link})."""
    from scipy.optimize import lsq_linear

    names = sorted(set(groups))
    col = {g: 3 * i for i, g in enumerate(names)}
    lcol = {k: 3 * len(names) + i for i, k in enumerate(LINKS)}
    A = np.zeros((len(y), 3 * len(names) + len(LINKS)))
    for i, (g, k) in enumerate(zip(groups, links)):
        A[i, col[g]:col[g] + 2] = X[i, :2]
        A[i, col[g] + 2] = 1.0
        A[i, lcol[k]] = X[i, 2]
    A /= y[:, None]
    lo = np.ones(A.shape[1])
    lo[[col[g] + 2 for g in names]] = 0.0
    hi = np.full(A.shape[1], np.inf)
    for j in lcol.values():
        if not A[:, j].any():
            hi[j] = 1.0 + 1e-9
    sol = lsq_linear(A, np.ones(len(y)), bounds=(lo, hi)).x
    return ({g: sol[col[g]:col[g] + 3] for g in names}, {k: sol[j] for k, j in lcol.items()})


def predict_training(X, groups, links, fit):
    """ms per row from `fit_training`'s parameters."""
    per_group, per_link = fit
    p = np.array([per_group[g] for g in groups])
    inv_l = np.array([per_link[k] for k in links])
    return X[:, 0] * p[:, 0] + X[:, 1] * p[:, 1] + X[:, 2] * inv_l + p[:, 2]


def _params_str(fit, group, kinds):
    inv_c, inv_m, c = fit[0][group]
    link = ", ".join(f"eff_link[{k}]={1 / fit[1][k]:.2f}" for k in LINKS if k in kinds)
    return f"eff_c={1 / inv_c:.2f}, eff_m={1 / inv_m:.2f}, {link}, c={c:.2f} ms"


def validate_training():
    rows = training_rows()
    X = training_features(rows)
    y = np.array([r["y"] for r in rows])
    gpus = np.array([r["gpu"] for r in rows])
    chips = np.array([chip(g) for g in gpus])
    links = row_links(rows)
    models = np.array([r["model"] for r in rows])
    fit = fit_training(X, y, chips, links)
    pred = predict_training(X, chips, links, fit)
    err_in = np.abs(pred / y - 1)
    # held out: leave one model out of every GPU type sharing the parameters, refit, predict it
    held = np.full(len(rows), np.nan)
    for c in sorted(set(chips)):
        for m in sorted(set(models[chips == c])):
            test = (chips == c) & (models == m)
            if test.sum() == (chips == c).sum():
                continue  # the only model: nothing to fit it on
            f2 = fit_training(X[~test], y[~test], chips[~test], links[~test])
            held[test] = np.abs(predict_training(X[test], chips[test], links[test], f2) / y[test] - 1)
    out = []
    for gpu in sorted(set(gpus)):
        kinds = set(links[(gpus == gpu) & (X[:, 2] > 0)])
        for src, dtype in sorted({(r["src"], r["dtype"]) for r in rows if r["gpu"] == gpu}):
            idx = np.array([i for i, r in enumerate(rows) if r["gpu"] == gpu and r["src"] == src and r["dtype"] == dtype])
            worst = idx[np.argmax(err_in[idx])]
            g = chip(gpu)
            out.append(dict(phase="train fwd+bwd", src=src, gpu=gpu, dtype=dtype, n=len(idx),
                            models=len({rows[i]["model"] for i in idx}), params=_params_str(fit, g, kinds),
                            sol=np.append(fit[0][g], [fit[1][k] for k in sorted(kinds)]),
                            err_in=err_in[idx], err_held=held[idx], worst=rows[worst], worst_err=err_in[worst],
                            ratio=y[idx] / pred[idx], tp=np.array([rows[i]["tp"] for i in idx]),
                            tp1=np.array([rows[i]["tp"] == 1 for i in idx])))
    return out


def link_evidence():
    """The data pattern behind `tp_link`, from the fit on all rows. Per GPU type on PCIe or a bridge
    and tp degree: the median all-reduce bandwidth the measured times imply (bytes of the four ring
    all-reduces / (measured - predicted compute, element-wise and floor time)), beside the median
    held-out error; and the link efficiencies when the hops beyond a pair get their own."""
    rows = training_rows()
    X = training_features(rows)
    y = np.array([r["y"] for r in rows])
    chips = np.array([chip(r["gpu"]) for r in rows])
    links = row_links(rows)
    per_group, _ = fit_training(X, y, chips, links)
    implied = defaultdict(list)
    for i, r in enumerate(rows):
        if r["tp"] < 2 or link_kind(r["gpu"]) != "pcie":
            continue
        inv_c, inv_m, c = per_group[chips[i]]
        left = y[i] - (X[i, 0] * inv_c + X[i, 1] * inv_m + c)  # ms left for the all-reduces
        nbytes = 4 * 2 * (r["tp"] - 1) / r["tp"] * r["b"] * r["s"] * r["h"] * (4 if r["dtype"] == "fp32" else 2)
        implied[(r["gpu"], r["tp"])].append(nbytes / (left * 1e-3) / 1e9 if left > 0 else np.inf)
    sep = row_links(rows, separate_beyond_pair=True)
    _, sep_links = fit_training(X, y, chips, sep)
    return {k: float(np.median(v)) for k, v in sorted(implied.items())}, {k: 1 / v for k, v in sep_links.items()
                                                                         if k in set(sep)}


# ---------------------------------------------------------------- inference
def inference_rows():
    rows = []
    for r in csv.DictReader(open(DATA / "inference_ops.csv")):
        op = r["op"]
        if op not in LINEAR_OPS + ("attn_decode", "attn_prefill"):
            continue  # elementwise ops and KV writes are folded into the efficiencies
        a = INFER_ARCH[r["model"]]
        tokens = int(r["num_tokens"])
        if op in LINEAR_OPS:
            phase = "decode" if tokens <= DECODE_TOKENS_MAX else "prefill"
        else:
            phase = op.split("_")[1]
        rows.append(dict(gpu=r["gpu"], model=r["model"], op=op, phase=phase, tokens=tokens,
                         batch=int(r["batch_size"] or 1), kv_len=int(r["kv_len"] or 0),
                         chunk=int(r["prefill_chunk"] or 0), tp=int(r["tp"]), y=float(r["time_ms"]), **a))
    return rows


def predict_inference(rows, pe, de, c):
    """(R,) rows x (K,) parameter grids -> (K, R) predicted ms."""
    pe, de, c = (np.asarray(v, dtype=float)[:, None] for v in (pe, de, c))
    out = []
    for r in rows:
        g = GPUS[r["gpu"]]
        fl, bw = g["fp16"] * 1e12, g["bandwidth_tbs"] * 1e12
        h, hd, tp = r["h"], r["h"] // r["heads"], r["tp"]
        if r["op"] == "attn_pre_proj":
            t = linear_op_s(r["tokens"], h, (r["heads"] + 2 * r["kv"]) * hd, tp, fl, bw, pe, de)
        elif r["op"] == "attn_post_proj":  # row-parallel: the input dimension is sharded
            t = linear_op_s(r["tokens"], r["heads"] * hd / tp, h, 1, fl, bw, pe, de)
        elif r["op"] == "mlp_up_proj":
            t = linear_op_s(r["tokens"], h, 2 * r["ffn"], tp, fl, bw, pe, de)
        elif r["op"] == "mlp_down_proj":
            t = linear_op_s(r["tokens"], r["ffn"] / tp, h, 1, fl, bw, pe, de)
        elif r["op"] == "attn_decode":
            t = attn_decode_op_s(r["batch"], r["kv_len"], _kvh(r), hd, r["heads"], tp, fl, bw, pe, de)
        else:
            t = attn_prefill_op_s(r["chunk"], r["kv_len"], _kvh(r), hd, r["heads"], tp, fl, bw, pe, de)
        out.append(t * 1e3 + c)
    return np.hstack(out)


def _kvh(r):
    return INFER_ARCH[r["model"]]["kv"]


GRID_PE = np.linspace(0.10, 1.0, 46)
GRID_DE = np.linspace(0.10, 1.0, 46)
GRID_C = np.linspace(0.0, 0.02, 21)


def fit_inference(rows):
    pe, de, c = (g.ravel() for g in np.meshgrid(GRID_PE, GRID_DE, GRID_C, indexing="ij"))
    y = np.array([r["y"] for r in rows])
    pred = predict_inference(rows, pe, de, c)
    loss = np.mean(np.log(pred / y) ** 2, axis=1)
    best = int(np.argmin(loss))
    return pe[best], de[best], c[best]


def validate_inference():
    rows = inference_rows()
    out = []
    for gpu in sorted({r["gpu"] for r in rows}):
        sub = [r for r in rows if r["gpu"] == gpu]
        pe, de, c = fit_inference(sub)
        err_in = np.abs(predict_inference(sub, [pe], [de], [c])[0] / np.array([r["y"] for r in sub]) - 1)
        held = np.full(len(sub), np.nan)
        models = sorted({r["model"] for r in sub})
        if len(models) > 1:
            for m in models:
                train = [r for r in sub if r["model"] != m]
                test_i = [i for i, r in enumerate(sub) if r["model"] == m]
                p2 = fit_inference(train)
                test = [sub[i] for i in test_i]
                held[test_i] = np.abs(predict_inference(test, [p2[0]], [p2[1]], [p2[2]])[0]
                                      / np.array([r["y"] for r in test]) - 1)
        for phase in ("decode", "prefill"):
            for kind in ("linear", "attention"):
                sel = np.array([r["phase"] == phase and (r["op"] in LINEAR_OPS) == (kind == "linear") for r in sub])
                if not sel.any():
                    continue
                worst_i = np.flatnonzero(sel)[np.argmax(err_in[sel])]
                out.append(dict(phase=f"{phase} {kind}", src="vidur", gpu=gpu, dtype="fp16", n=int(sel.sum()),
                                models=len({sub[i]['model'] for i in np.flatnonzero(sel)}),
                                params=f"prefill_eff={pe:.2f}, decode_eff={de:.2f}, c={c:.3f} ms",
                                err_in=err_in[sel], err_held=held[sel], worst=sub[worst_i],
                                worst_err=err_in[sel].max()))
    return out


# ---------------------------------------------------------------- report
def _fmt(err):
    err = err[~np.isnan(err)]
    if not len(err):
        return "n/a", "n/a"
    m, p = _pct(err)
    return f"{m:.1f}%", f"{p:.1f}%"


def _by_tp(results, gpu):
    """(tp, held-out errors) of one GPU type's training rows."""
    err = np.concatenate([r["err_held"] for r in results if r["gpu"] == gpu and "tp" in r])
    tp = np.concatenate([r["tp"] for r in results if r["gpu"] == gpu and "tp" in r])
    return [(t, err[(tp == t) & ~np.isnan(err)]) for t in sorted(set(tp))]


def report(results) -> str:
    ratio, n_ratio = aceso_backward_ratio()
    lines = [
        "# Performance-model validation against measured GPU timings",
        "", provenance.line(), "",
        "Made by `python -m mosearch.bench.model_validation`. Data: `problems/placement/data/measured/`",
        "(Sailor and Aceso per-layer training profiles, vidur per-operator inference profiles; every row",
        "keeps its `source`). Errors are |predicted / measured - 1|.",
        "",
        "**Training model** (the same terms as `train_times` in problems/placement/model/training.py):",
        "per-layer forward+backward time = matmul FLOPs / (tp x peak x eff_c) + element-wise HBM bytes /",
        "(bandwidth x eff_m) + 4 TP all-reduces (ring over the slowest hop of the tp group, datasheet",
        "link / eff_link; see the link topology section) + floor c.",
        "- Matmul FLOPs: `layer_fwd_flops` with the full s x s attention context (both profilers run",
        "  Megatron's unfused attention) times 3 (forward, input grads, weight grads). Aceso's linear",
        f"  layers count 2: their backward op time is {ratio:.2f}x their forward time (median of {n_ratio} tp=1",
        "  rows), so its profiler times one backward GEMM per layer.",
        "- Peak per row's dtype (measured gpus.yaml): fp16 rows use the tensor FP16 peak with FP32",
        "  accumulate; fp32 rows the TF32 tensor peak where the part has one (Aceso's fp32 GEMMs on A100",
        "  run at ~120 TFLOP/s, above the 19.5 FP32 peak), else the FP32 peak. Exception: Sailor's",
        "  A100-40 rows flagged `rounded` (OPT-30B, Llama-3-8B) take ~4.9x the TF32 prediction, about the",
        "  TF32/FP32 peak ratio (8) times the fitted efficiency: they ran with TF32 off and use the FP32 peak.",
        "- Element-wise bytes: `layer_elementwise_bytes` (layer norms, bias-dropout-residual adds with",
        "  1-byte masks, GeLU/SwiGLU, and for unfused attention the softmax/dropout passes over the",
        "  b x heads/tp x s^2 scores; fp32 rows run the unfused softmax with extra scale and mask passes).",
        "  These are the tensors Korthikanti et al. 2022 list as stored activations, with each kernel's",
        "  reads and writes counted. The placement model does the same for a workload with",
        "  `attention: unfused`, and drops the score term for flash attention (the default).",
        "",
        "**Fitted parameters**, by bounded linear least squares on relative error: per GPU type eff_c,",
        "eff_m in (0, 1] and c >= 0; eff_link in (0, 1] shared by all rows on the same kind of link",
        "(NVLink: A100, GH-96, V100 and the RTX-3090's bridged pairs; PCIe: RTX-2080, Titan-RTX and the",
        "RTX-3090 beyond a pair), so the topology adds no parameter; A100-40 and A100-80 (one",
        "chip) share eff_c, eff_m, c. Sources and dtypes of one GPU type share them. In the placement",
        "model eff_c is the catalog `mfu`, eff_m its `train_fit.elementwise_eff` and c its `train_fit.layer_s`",
        "(gpus.yaml source LAYERS; mosearch/bench/e2e_validation.py checks them on whole published iterations).",
        "Inference: `prefill_eff`, `decode_eff` and a per-kernel floor `c` per GPU (grid search on mean",
        "squared log error) with rollout.py's operator rooflines.",
        "**Held-out** columns leave one model out of every GPU type that shares its parameters, refit on",
        "the rest, and predict it (a model measured by both profilers leaves with both). **In-sample**",
        "columns use the fit on all rows.",
        "",
        "| phase | source | GPU | dtype | rows | models | fitted | median held-out | p90 held-out | median in-sample | p90 in-sample |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        mh, ph = _fmt(r["err_held"])
        mi, pi = _fmt(r["err_in"])
        lines.append(f"| {r['phase']} | {r['src']} | {r['gpu']} | {r['dtype']} | {r['n']} | {r['models']} | "
                     f"{r['params']} | {mh} | {ph} | {mi} | {pi} |")
    lines += ["", "## Summary: error per GPU type and phase (held-out where available, else in-sample)", "",
              "Target: median at most 15% for training and decode (prefill is reported, not targeted).",
              "For training, the last column gives the held-out median over the tp=1 rows alone (no",
              "all-reduce in the time).", "",
              "| GPU | phase | median | p90 | rows | meets 15% | tp=1 median |", "|---|---|---|---|---|---|---|"]
    agg = defaultdict(lambda: [[], [], []])
    for r in results:
        key = (r["gpu"], r["phase"].split()[0] if r["src"] == "vidur" else "train")
        held = r["err_held"][~np.isnan(r["err_held"])]
        agg[key][0 if len(held) else 1].extend(held if len(held) else r["err_in"])
        if "tp1" in r:
            agg[key][2].extend(r["err_held"][r["tp1"] & ~np.isnan(r["err_held"])])
    for (gpu, phase), (held, ins, tp1) in sorted(agg.items()):
        err = np.array(held if held else ins)
        m, p = _pct(err)
        kind = "held-out" if held else "in-sample"
        target = "n/a (not targeted)" if phase == "prefill" else ("yes" if m <= 15 else "NO")
        t1 = f"{np.median(tp1) * 100:.1f}%" if tp1 else ""
        lines.append(f"| {gpu} | {phase} ({kind}) | {m:.1f}% | {p:.1f}% | {len(err)} | {target} | {t1} |")
    implied, sep = link_evidence()
    lines += ["", "## Link topology of the tensor-parallel all-reduces", "",
              "Rule (`tp_link`): a GPU type with a 2-way NVLink bridge pairs up over it; a tp group of 2 is",
              "a bridged pair and its all-reduce runs over the bridge (NVLink, 112.5 GB/s total bidirectional",
              "for the RTX 3090, NVIDIA's product page; same convention as the NVLink figures in gpus.yaml);",
              "a ring over more GPUs has hops between pairs over PCIe and is limited by them. Other GPU types",
              "have one link to every GPU of their node.",
              "Evidence: the measured-set README records nothing about the profiled machines' interconnect,",
              "so the bridges are an inference from the times, consistent with the RTX 3090's 2-way NVLink",
              "support. All-reduce bandwidth implied by the measured times (bytes of the four ring",
              "all-reduces / (measured - fitted compute, element-wise and floor time); median over rows,",
              "in-sample fit), per GPU type on PCIe or bridges and tp degree:", "",
              "| GPU | " + " | ".join(f"tp={t}" for t in sorted({t for _, t in implied})) + " | modelled as |",
              "|---|" + "---|" * (len({t for _, t in implied}) + 1)]
    for gpu in sorted({g for g, _ in implied}):
        cells = [f"{implied[(gpu, t)]:.1f} GB/s" if (gpu, t) in implied else ""
                 for t in sorted({t for _, t in implied})]
        how = "bridged pairs, PCIe beyond" if gpu in NVLINK_BRIDGE_GBS else "one PCIe link"
        lines.append(f"| {gpu} | " + " | ".join(cells) + f" | {how} |")
    lines += ["",
              "RTX-3090 pairs move an order of magnitude more per second than its groups of 4, which run",
              "at the speed of the other PCIe parts: that step is the bridge. RTX-2080 and Titan-RTX also",
              "take 2-way bridges, but their tp=2 all-reduces are no faster than their tp=4 ones, so their",
              "machines show no bridge and keep one PCIe link. Fitting the hops beyond a pair with their own",
              f"efficiency gives {sep[BEYOND_PAIR]:.2f} against {sep['pcie']:.2f} for the PCIe parts (and "
              f"{sep['nvlink']:.2f} for NVLink, which the",
              "bridged pairs share): the same, so they share the PCIe efficiency. RTX-3090 held-out median",
              "error per tp degree: " + ", ".join(
                  f"tp={t}: {np.median(e) * 100:.1f}% ({len(e)} rows)" for t, e in _by_tp(results, "RTX-3090")) + ".",
              ]
    tp8_ratio = max(float(np.max(r["ratio"][r["tp"] == 8])) for r in results
                    if r["gpu"] == "RTX-3090" and "tp" in r and (r["tp"] == 8).any())
    lines += ["", "## What drives the worst cases", "",
              "- RTX-3090 at tp=8 (Sailor OPT-350M, the only tp=8 rows of that GPU): measured up to "
              f"{tp8_ratio:.1f}x the",
              f"  prediction. Its all-reduces imply {implied[('RTX-3090', 8)]:.1f} GB/s against "
              f"{implied[('RTX-3090', 4)]:.1f} GB/s at tp=4 (table above), a slower",
              "  path than the one PCIe hop between pairs that limits tp=4. Unmodelled: a likely cause is a",
              "  ring that crosses CPU sockets at 8 GPUs (an inference, nothing in the data records it), and",
              "  one rule for tp=8 alone would be a parameter fitted to one tp degree of one model.",
              "- Small layers on fast GPUs (GH-96 and A100, OPT-350M at b <= 2 and tp >= 2, 3-5 ms measured):",
              "  fixed per-kernel cost (the floor c) against ~0.1 ms of matmul; the floor is one constant per",
              "  GPU while the number of kernels and their launch gaps vary with tp. GH-96 fp16 rows at small",
              "  b are over-predicted by up to ~25% for the same reason in reverse (the floor fitted on all rows).",
              "- Aceso OPT-30B b=1 tp=4 on every GPU: its attention-core ops take 3-4.5x the per-score-element",
              "  time of every other Aceso row (an outlier of that profile, not a shape effect).",
              "- fp16 GEMM efficiency varies with shape (A100, tp=1 forward GEMMs: ~0.33 of peak for OPT-350M",
              "  at b=1, ~0.8 for OPT-30B), a single eff_c per GPU averages them. On RTX-2080 and RTX-3090 the best",
              "  fp16 GEMMs exceed the datasheet peak by up to 5% (boost clocks above the rated boost), so",
              "  eff_c sits near its bound of 1.",
              "- Inference: tiny kernels (<= 0.03 ms) are dominated by launch floors the single `c` per GPU",
              "  cannot fit for both GEMMs and attention; prefill attention at short chunks runs far below",
              "  the roofline (flash-attention tiling overhead), so prefill errors exceed 15% on A100/A40.",
              "", "## Worst cases (in-sample)", ""]
    for r in sorted(results, key=lambda r: -r["worst_err"])[:8]:
        w = r["worst"]
        shape = (f"b={w['b']} s={w['s']} tp={w['tp']} h={w['h']}" if "s" in w
                 else f"op={w['op']} tokens={w['tokens']} batch={w['batch']} kv={w['kv_len']} chunk={w['chunk']} tp={w['tp']}")
        lines.append(f"- {r['phase']}, {r['src']} {r['gpu']} {w['model']}: {shape}: measured {w['y']:.3f} ms, "
                     f"error {r['worst_err'] * 100:.0f}%")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "results/bench/model_validation.md"))
    args = ap.parse_args(argv)
    results = validate_training() + validate_inference()
    text = report(results)
    publish(args.out, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
