"""Validate the placement model's compute formulas against measured GPU timings.

    python benchmarks/model_validation.py [--out results/bench/model_validation.md]

Training: per-layer forward+backward time of one micro-batch (Sailor hook profiles; Aceso op
sums), predicted as 3 x layer forward FLOPs / (tp x peak x eff) + TP all-reduces + a fixed floor c.
Inference: per-operator kernel time (vidur), predicted by the rollout module's roofline
operator functions with prefill_eff (compute), decode_eff (bandwidth) and a floor c.
Per GPU type (and source/dtype for training) the script fits those few parameters and reports
held-out errors: leave-one-model-out (fit on the other models of the same GPU, predict this one),
and in-sample errors beside them. Data: problems/placement/data/measured/ (copied, with sources).
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from problems.placement.model.comm import ring_allreduce_s  # noqa: E402
from problems.placement.model.rollout import attn_decode_op_s, attn_prefill_op_s, linear_op_s  # noqa: E402
from problems.placement.model.training import layer_elementwise_bytes, layer_fwd_flops  # noqa: E402

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
# rows count 2; its attention-core backward (two GEMMs per forward GEMM, no weights) counts 3.
LINEAR_PASSES = {"sailor": 3.0, "aceso": 2.0}
ATTN_PASSES = 3.0


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
        # profilers' times contain them (Aceso's row-parallel forward ops grow with tp)
        comm = 4 * float(ring_allreduce_s(tok * r["h"] * by, r["tp"], g["intra_gbs"] * 1e9, 10e-6)) * 1e3
        X.append((compute, memory, comm))
    return np.array(X)


def fit_training(X, y):
    """Bounded linear least squares on relative error: y ~ X @ (1/eff_c, 1/eff_m, 1/eff_link) + c,
    each efficiency in (0, 1] (inverse >= 1; at most 1e3 for a link no row exercises) and c >= 0."""
    from scipy.optimize import lsq_linear

    A = np.column_stack([X / y[:, None], 1 / y])
    used = X.max(axis=0) > 0
    hi = np.array([1e3 if u else 1.0 + 1e-9 for u in used] + [np.inf])
    sol = lsq_linear(A, np.ones(len(y)), bounds=(np.array([1.0, 1.0, 1.0, 0.0]), hi)).x
    return sol


def _predict(X, sol):
    return X @ sol[:3] + sol[3]


def _params_str(sol):
    return (f"eff_c={1 / sol[0]:.2f}, eff_m={1 / sol[1]:.2f}, eff_link={1 / sol[2]:.2f}, c={sol[3]:.2f} ms")


def validate_training():
    rows = training_rows()
    X = training_features(rows)
    y = np.array([r["y"] for r in rows])
    out = []
    for gpu in sorted({r["gpu"] for r in rows}):
        gi = np.array([i for i, r in enumerate(rows) if r["gpu"] == gpu])
        sol = fit_training(X[gi], y[gi])
        err_in = np.full(len(rows), np.nan)
        err_in[gi] = np.abs(_predict(X[gi], sol) / y[gi] - 1)
        held = np.full(len(rows), np.nan)
        models = sorted({rows[i]["model"] for i in gi})
        if len(models) > 1:
            for m in models:
                test = np.array([rows[i]["model"] == m for i in gi])
                s2 = fit_training(X[gi][~test], y[gi][~test])
                held[gi[test]] = np.abs(_predict(X[gi][test], s2) / y[gi][test] - 1)
        for src, dtype in sorted({(rows[i]["src"], rows[i]["dtype"]) for i in gi}):
            idx = np.array([i for i in gi if rows[i]["src"] == src and rows[i]["dtype"] == dtype])
            worst = idx[np.argmax(err_in[idx])]
            out.append(dict(phase="train fwd+bwd", src=src, gpu=gpu, dtype=dtype, n=len(idx),
                            models=len({rows[i]["model"] for i in idx}), params=_params_str(sol), sol=sol,
                            err_in=err_in[idx], err_held=held[idx], worst=rows[worst], worst_err=err_in[worst],
                            rounded=np.array([rows[i]["flag"] == "rounded" for i in idx])))
    return out


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


def report(results) -> str:
    lines = [
        "# Performance-model validation against measured GPU timings",
        "",
        "Made by `python benchmarks/model_validation.py`. Data: `problems/placement/data/measured/`",
        "(Sailor and Aceso per-layer training profiles, vidur per-operator inference profiles; every row",
        "keeps its `source`). Errors are |predicted / measured - 1|.",
        "",
        "**Fitted parameters.** Per GPU type (for training also per source and dtype) the script fits",
        "a few parameters: training `eff` (achieved share of the fp16 tensor peak; for fp32 rows it",
        "absorbs the unknown TF32/FP32 matmul mode) and a per-layer floor `c`; inference `prefill_eff`,",
        "`decode_eff` and a per-kernel floor `c` (grid search on mean squared log error).",
        "**Held-out** columns fit on the other models of the same GPU type and predict this model",
        "(leave-one-model-out); n/a where the GPU type has one model only. **In-sample** columns use the",
        "fit on all rows of the group. The placement model uses the same formulas (training.py",
        "`layer_fwd_flops`, rollout.py operator rooflines); its catalog efficiencies are defaults that",
        "a calibration overrides per GPU type (`PlacementProblem(..., efficiencies=...)`).",
        "",
        "| phase | source | GPU | dtype | rows | models | fitted | median held-out | p90 held-out | median in-sample | p90 in-sample |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        mh, ph = _fmt(r["err_held"])
        mi, pi = _fmt(r["err_in"])
        lines.append(f"| {r['phase']} | {r['src']} | {r['gpu']} | {r['dtype']} | {r['n']} | {r['models']} | "
                     f"{r['params']} | {mh} | {ph} | {mi} | {pi} |")
    lines += ["", "## Summary: median error per GPU type and phase (held-out where available, else in-sample)", "",
              "| GPU | phase | median | p90 | rows | meets 15% |", "|---|---|---|---|---|---|"]
    agg = defaultdict(lambda: [[], []])
    for r in results:
        key = (r["gpu"], r["phase"].split()[0] if r["src"] == "vidur" else "train")
        held = r["err_held"][~np.isnan(r["err_held"])]
        agg[key][0 if len(held) else 1].extend(held if len(held) else r["err_in"])
    for (gpu, phase), (held, ins) in sorted(agg.items()):
        err = np.array(held if held else ins)
        m, p = _pct(err)
        kind = "held-out" if held else "in-sample"
        lines.append(f"| {gpu} | {phase} ({kind}) | {m:.1f}% | {p:.1f}% | {len(err)} | {'yes' if m <= 15 else 'NO'} |")
    lines += ["", "## What drives the errors", "",
              "- Training features are nearly collinear (compute and activation traffic both scale with b*s), so",
              "  the split between `eff` and `act passes` is not identifiable (some fp16 fits show eff > 1 with",
              "  large act passes); only their sum predicts. Held-out errors are largest where a group has few",
              "  models with very different shapes (OPT-350M h=1024 vs OPT-30B h=7168): the 350M rows are",
              "  dominated by launch/elementwise overhead and the 30B rows by GEMMs.",
              "- Sailor 'rounded' rows (A100-80, A100-40 OPT-30B/LLAMA, V100 OPT-30B/LLAMA) have unknown",
              "  provenance (see the data README) and the largest held-out errors; fp32 matmul mode (TF32 or",
              "  not) is unrecorded and absorbed by `eff`.",
              "- Very large micro-batches at high TP on PCIe parts (RTX-3090 b=64 tp=8) include PCIe all-reduces",
              "  the simple ring term underestimates.",
              "- Inference: tiny kernels (<= 0.03 ms) are dominated by launch floors the single `c` per GPU",
              "  cannot fit for both GEMMs and attention; prefill attention at short chunks runs far below",
              "  the roofline (flash-attention tiling overhead), so prefill errors exceed 15% on A100/A40.",
              "", "## Worst cases", ""]
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
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
