"""The trainer's training step on a CUDA GPU, measured, beside the performance model's prediction.

`measure` (on a machine with a CUDA GPU; it imports only PyTorch, transformers and the trainer):
- checks the trainer's CUDA path end to end with the tiny model: a step of GRPO, GRPO with a KL
  reference and PPO (value head) under bf16 autocast, the colocated context switch (offload to host,
  reload, the same weights after), the full-state gather, a checkpoint round trip, a weight-sync
  bucket handed to another process as a CUDA IPC handle, and NCCL;
- times `TrainWorker` steps (forward, the RL loss, backward, AdamW) of randomly initialised
  Qwen2.5 architectures of the catalog at several sequence lengths, micro-batches, precisions and
  recomputation, with the peak memory PyTorch's caching allocator reports (allocated and reserved).

`compare` predicts every measured step with `mosearch predict`'s model (`predict_training`: the same
GPU, layout, precision, eager element-wise kernels and `amp_autocast`, as the trainer runs Hugging Face's
modules) and
writes the table of predicted beside measured.

    python -m mosearch.bench.gpu_train measure --out results/bench/gpu_train_h200.jsonl
    python -m mosearch.bench.gpu_train measure --grid probe --out results/bench/gpu_probe_h200.jsonl
    python -m mosearch.bench.gpu_train predict --grid holdout --out results/bench/gpu_holdout_predicted.md
    python -m mosearch.bench.gpu_train measure --grid holdout --steps-only --out results/bench/gpu_holdout_h200.jsonl
    python -m mosearch.bench.gpu_train compare results/bench/gpu_train_h200.jsonl --out results/bench/gpu_train.md
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

from mosearch.bench import provenance

REPO = Path(__file__).resolve().parents[2]


def _repo_relative(text: str) -> str:
    """A traceback as a results file keeps it: the repository's files by their paths inside it, so the file
    says nothing of the machine it ran on."""
    return text.replace(f"{REPO}{os.sep}", "")


# (model, precision, seq_len, micro_batch, micro-batches per step, recompute): the step is one
# optimizer update over micro_batch x micro-batches sequences of seq_len tokens (a quarter prompt)
GRID = (
    [("qwen2.5-0.5b", "bf16", s, mb, 2, rc) for s in (1024, 4096) for mb in (1, 4) for rc in (False, True)]
    + [("qwen2.5-0.5b", p, 1024, 2, 2, False) for p in ("fp32", "tf32")]
    + [("qwen2.5-1.5b", "bf16", s, mb, 2, rc) for s in (1024, 4096) for mb in (1, 4) for rc in (False, True)]
    + [("qwen2.5-1.5b", p, 1024, 2, 2, False) for p in ("fp32", "tf32")]
    + [("qwen2.5-3b", "bf16", s, mb, 2, rc) for s in (2048,) for mb in (1, 4) for rc in (False, True)]
    + [("qwen2.5-3b", "bf16", 4096, 2, 2, True)]
)
# host-bound steps (few tokens): the per-micro-batch and per-step costs that do not scale with tokens
PROBE_GRID = [(m, "bf16", 128, 1, n, rc) for m in ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b")
              for n in (1, 4) for rc in (False, True)] + [("qwen2.5-7b", "bf16", 2048, 1, 2, True)]
# measured after the model took its figures from GRID and PROBE_GRID: configurations neither saw (another
# model, longer and shorter sequences, more micro-batches, TF32 with recomputation)
HOLDOUT_GRID = [("r1-distill-qwen-1.5b", "bf16", 2048, 2, 3, rc) for rc in (False, True)] + [
    ("qwen2.5-0.5b", "bf16", 16384, 1, 2, True), ("qwen2.5-0.5b", "bf16", 8192, 2, 2, False),
    ("qwen2.5-1.5b", "tf32", 2048, 1, 2, True), ("qwen2.5-1.5b", "bf16", 512, 8, 4, False),
    ("qwen2.5-3b", "bf16", 8192, 1, 2, True), ("qwen2.5-3b", "bf16", 1024, 2, 4, False),
    # padded micro-batches (every second sample a quarter shorter), as the trainer's RL steps run: the mask
    # goes to SDPA, k and v are repeated (memory.sdpa_paths); the fp32 one against the main grid's unpadded
    # math-kernel row of the same job
    ("qwen2.5-1.5b", "bf16", 2048, 4, 2, False, True), ("qwen2.5-0.5b", "fp32", 1024, 2, 2, False, True)]
GRIDS = {"main": GRID, "probe": PROBE_GRID, "holdout": HOLDOUT_GRID}
# the loss head alone: tokens of bf16 logits over the Qwen2.5 vocabulary
LOSS_HEAD_TOKENS = (2048, 8192, 16384)
TIMED_STEPS = 3
MODELS_YAML = Path(__file__).resolve().parents[2] / "problems" / "placement" / "data" / "models.yaml"


def _batch(n: int, seq: int, vocab: int, seed: int, padded: bool = False):
    """`n` samples of `seq` tokens (a quarter of them prompt); `padded`: every second one a quarter of `seq`
    shorter, so each micro-batch of two or more is padded to `seq`."""
    import random

    from trainer.batch import Sample

    rnd = random.Random(seed)
    p = seq // 4
    out = []
    for i in range(n):
        c = seq - p - (seq // 4 if padded and i % 2 else 0)
        out.append(Sample(i, [rnd.randrange(8, vocab) for _ in range(p)], [rnd.randrange(8, vocab) for _ in range(c)],
                          [-rnd.random() * 3 for _ in range(c)], rnd.uniform(-1, 1), rnd.uniform(-1.5, 1.5), 0))
    return out


def _shape(r: dict) -> str:
    """A row's micro-batches for the tables: size x count, and whether they are padded."""
    return f"{r['micro_batch']} x {r['n_micro']}" + (" padded" if r.get("padded") else "")


def _case(g: tuple) -> dict:
    """A grid entry (model, precision, seq, micro-batch, micro-batches, recompute[, padded]) as a row's keys."""
    return {"model": g[0], "precision": g[1], "seq_len": g[2], "micro_batch": g[3], "n_micro": g[4],
            "recompute": g[5], "padded": g[6] if len(g) > 6 else False}


def build_model(name: str, path: Path) -> Path:
    """A randomly initialised Qwen2 model of the catalog's architecture `name`, saved in bf16."""
    import torch
    import yaml
    from transformers import Qwen2Config, Qwen2ForCausalLM

    a = yaml.safe_load(MODELS_YAML.read_text())["models"][name]
    cfg = Qwen2Config(vocab_size=a["vocab"], hidden_size=a["hidden"], intermediate_size=a["ffn"],
                      num_hidden_layers=a["layers"], num_attention_heads=a["heads"], num_key_value_heads=a["kv_heads"],
                      tie_word_embeddings=a["tied_embeddings"], max_position_embeddings=32768, rope_theta=1e6)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(path, safe_serialization=True)
    del model
    return path


# -- the CUDA path, checked --------------------------------------------------------------------------
def _ipc_child(blob: bytes, q) -> None:
    import torch

    from trainer import weight_sync as WS

    flat = WS.open_handle(blob)
    q.put((int(flat.numel()), int(flat.to(torch.int64).sum().item()), str(flat.device)))


def check_path(workdir: Path) -> list[dict]:
    """One row per check of the trainer's CUDA path: {check, ok, detail}."""
    import torch
    import torch.multiprocessing as mp

    from trainer import weight_sync as WS
    from trainer.models.tiny import build_tiny
    from trainer.workers import TrainWorker

    rows = []

    def check(name, fn):
        t0 = time.perf_counter()
        try:
            detail = fn()
            rows.append({"check": name, "ok": True, "detail": detail, "s": time.perf_counter() - t0})
        except Exception as e:  # a failed check is a result: it is reported, the others still run
            rows.append({"check": name, "ok": False, "detail": f"{type(e).__name__}: {e}",
                         "traceback": _repo_relative(traceback.format_exc()), "s": time.perf_counter() - t0})
        print(("ok   " if rows[-1]["ok"] else "FAIL ") + name + ": " + str(rows[-1]["detail"])[:300], flush=True)

    tiny = build_tiny(workdir / "tiny")
    batch = _batch(8, 24, 80, 1)

    def step(algo):
        def run():
            w = TrainWorker(str(tiny), 0, 1, 0, algo, 2, precision="bf16")
            before = {k: v.detach().clone() for k, v in w.module.state_dict().items()}
            outs = []
            for _ in range(2):
                w.accumulate(batch, len(batch), n_micro=2, last=True)
                outs.append(w.apply())
            moved = max(float((v - before[k]).abs().max()) for k, v in w.module.state_dict().items())
            dev = {str(p.device) for p in w.module.parameters()}
            assert all(torch.isfinite(torch.tensor(o["grad_norm"])) for o in outs), outs
            assert moved > 0, "the weights did not change"
            return {"device": sorted(dev), "grad_norm": [o["grad_norm"] for o in outs], "max_weight_change": moved,
                    "train_gpu_gb": outs[-1].get("train_gpu_gb"), "precision": w.precision}
        return run

    check("step grpo bf16", step({"name": "grpo", "lr": 1e-3}))
    check("step grpo+kl bf16", step({"name": "grpo", "lr": 1e-3, "kl_coef": 0.05}))
    check("step ppo bf16 (value head)", step({"name": "ppo", "lr": 1e-3}))

    def offload():
        import gc

        gc.collect()  # the earlier checks' workers: their device memory would blur the figures below
        torch.cuda.empty_cache()
        w = TrainWorker(str(tiny), 0, 1, 0, {"name": "grpo", "lr": 1e-3}, 2, precision="bf16")
        w.accumulate(batch, len(batch), n_micro=2, last=True)
        w.apply()
        torch.cuda.synchronize()
        state = {k: v.detach().clone().cpu() for k, v in w.module.state_dict().items()}
        moments = {(id(p), k): v.detach().clone().cpu() for p, st in w.opt.state.items() for k, v in st.items()
                   if torch.is_tensor(v) and v.dim() > 0}
        held = torch.cuda.memory_allocated()
        t_off = w.offload()
        after_off = torch.cuda.memory_allocated()
        t_on = w.onload()
        same_w = all(torch.equal(v.cpu(), state[k]) for k, v in w.module.state_dict().items())
        same_m = all(torch.equal(w.opt.state[p][k].cpu(), moments[(id(p), k)]) for p in w.opt.state
                     for k in w.opt.state[p] if (id(p), k) in moments)
        on_gpu = {str(p.device) for p in w.module.parameters()}
        w.accumulate(batch, len(batch), n_micro=2, last=True)
        st = w.apply()
        assert same_w and same_m, "weights or moments changed in the round trip"
        assert after_off < held, "offload freed no device memory"
        return {"allocated_before_mb": held / 2**20, "allocated_offloaded_mb": after_off / 2**20,
                "offload_s": t_off, "onload_s": t_on, "weights_and_moments_identical": same_w and same_m,
                "devices_after": sorted(on_gpu), "next_grad_norm": st["grad_norm"]}

    check("colocated offload / onload", offload)

    def gather_and_checkpoint():
        w = TrainWorker(str(tiny), 0, 1, 0, {"name": "grpo", "lr": 1e-3}, 2, precision="bf16")
        w.accumulate(batch, len(batch), n_micro=2, last=True)
        w.apply()
        full = {k: v for b in w.iter_full_state(1 << 16) for k, v in b}
        sd = w.module.state_dict()
        assert set(full) >= set(sd) and all(torch.equal(full[k].cpu(), sd[k].cpu()) for k in sd), "gather differs"
        path = str(workdir / "ckpt" / "state.pt")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        w.save(path)
        saved = {k: v.detach().clone() for k, v in sd.items()}
        with torch.no_grad():
            for p in w.module.parameters():
                p.add_(1.0)
        w.load(path)
        same = all(torch.equal(v, saved[k]) for k, v in w.module.state_dict().items())
        assert same, "the checkpoint did not restore the weights"
        return {"tensors": len(full), "restored": same}

    check("full-state gather and checkpoint", gather_and_checkpoint)

    def ipc():
        b = WS.SharedBucket(torch.device("cuda", 0))
        flat = b.alloc(3 << 20)
        flat.copy_(torch.randint(0, 256, (flat.numel(),), dtype=torch.uint8, device=flat.device))
        torch.cuda.synchronize()
        want = int(flat.to(torch.int64).sum().item())
        blob = bytes(b.handle().numpy().tobytes())
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        p = ctx.Process(target=_ipc_child, args=(blob, q))
        p.start()
        n, got, dev = q.get(timeout=120)
        p.join(60)
        b.close()
        assert (n, got) == (flat.numel(), want), (n, got, want)
        return {"bytes": n, "checksum_match": True, "receiver_device": dev, "transport": "cuda_ipc"}

    check("weight-sync bucket over CUDA IPC", ipc)

    def nccl():
        import torch.distributed as dist

        host, port = WS.free_address()
        store = torch.distributed.TCPStore(host, port, 1, True)
        dist.init_process_group("nccl", store=store, rank=0, world_size=1)
        x = torch.ones(1 << 20, device="cuda")
        dist.all_reduce(x)
        torch.cuda.synchronize()
        v = torch.cuda.nccl.version() if hasattr(torch.cuda, "nccl") else None
        dist.destroy_process_group()
        return {"nccl": ".".join(map(str, v)) if isinstance(v, tuple) else str(v), "sum_ok": bool((x == 1).all())}

    check("NCCL (one rank)", nccl)
    return rows


def loss_head(workdir: Path, vocab: int = 151936) -> list[dict]:
    """Peak memory of the trainer's loss head per logit element: bf16 logits (as the lm_head gives them
    under autocast) through `TrainWorker`'s log-probs, entropy and GRPO loss, and the backward to the
    logits. `bytes_per_logit`: the peak allocated over the step, logits and their gradient included,
    divided by tokens x vocabulary."""
    import torch

    from trainer.models.tiny import build_tiny
    from trainer.workers import TrainWorker

    w = TrainWorker(str(build_tiny(workdir / "tiny")), 0, 1, 0, {"name": "grpo", "lr": 1e-3}, 1, precision="bf16")
    rows = []
    for n in LOSS_HEAD_TOKENS:
        b = _batch(1, n + 1, 80, n)
        t = w._tensors(b)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        logits = torch.randn(1, n + 1, vocab, device=w.device, dtype=torch.bfloat16, requires_grad=True)
        logp, ent = w._token_logp(logits, t)
        after_fwd = torch.cuda.memory_allocated() - base
        fwd_peak = torch.cuda.max_memory_allocated() - base
        loss, _ = w.objective.loss(logp, None, t, None)
        loss.backward()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        el = (n + 1) * vocab
        rows.append({"kind": "loss_head", "tokens": n + 1, "vocab": vocab, "bytes_per_logit": peak / el,
                     "forward_peak_per_logit": fwd_peak / el, "held_after_forward_per_logit": after_fwd / el})
        print(f"loss head {n + 1} tokens: peak {peak / el:.2f} B per logit (forward {fwd_peak / el:.2f}, "
              f"held for backward {after_fwd / el:.2f})", flush=True)
        del logits, logp, ent, loss, t
    del w
    torch.cuda.empty_cache()
    return rows


# -- step time and memory ---------------------------------------------------------------------------
def _set(w, precision: str, recompute: bool) -> None:
    """Switch a worker's precision and recomputation between measurements (as its __init__ sets them)."""
    w.set_precision(precision)
    if recompute:
        w.module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        w.module.gradient_checkpointing_disable()


def measure_steps(workdir: Path, grid, budget_s: float, out) -> list[dict]:
    import torch

    from trainer.workers import TrainWorker

    t_start = time.perf_counter()
    rows = []
    by_model: dict[str, list] = {}
    for g in grid:
        by_model.setdefault(g[0], []).append(g)
    for name, cases in by_model.items():
        if time.perf_counter() - t_start > budget_s:
            for c in cases:
                rows.append(_case(c) | {"status": "skipped (time budget)"})
                print(json.dumps(rows[-1]), file=out, flush=True)
            continue
        path = build_model(name, workdir / name)
        torch.cuda.empty_cache()
        w = TrainWorker(str(path), 0, 1, 0, {"name": "grpo", "lr": 1e-6}, 1, precision="bf16")
        vocab = w.vocab
        params = sum(p.numel() for p in w.module.parameters())
        attn = getattr(w.module.config, "_attn_implementation", None)
        for c in cases:
            row = _case(c) | {"params": params, "attn_implementation": attn}
            prec, seq, mb, n_micro, rc = (row[k] for k in
                                          ("precision", "seq_len", "micro_batch", "n_micro", "recompute"))
            if time.perf_counter() - t_start > budget_s:
                rows.append(row | {"status": "skipped (time budget)"})
                print(json.dumps(rows[-1]), file=out, flush=True)
                continue
            _set(w, prec, rc)
            batch = _batch(mb * n_micro, seq, vocab, seq + mb, row["padded"])
            times = []
            try:
                w.accumulate(batch, len(batch), n_micro=n_micro, last=True)  # warm-up: kernels, AdamW moments
                w.apply()
                torch.cuda.synchronize()
                states = torch.cuda.memory_allocated()  # weights + moments between steps (grads are freed)
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
                for _ in range(TIMED_STEPS):
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    w.accumulate(batch, len(batch), n_micro=n_micro, last=True)
                    w.apply()
                    torch.cuda.synchronize()
                    times.append(time.perf_counter() - t0)
                row |= {"status": "ok", "step_s": statistics.median(times), "step_s_all": times,
                        "states_gb": states / 1e9, "allocated_gb": torch.cuda.max_memory_allocated() / 1e9,
                        "reserved_gb": torch.cuda.max_memory_reserved() / 1e9,
                        "tokens_s": sum(len(x.prompt) + len(x.completion) for x in batch) / statistics.median(times)}
            except torch.cuda.OutOfMemoryError as e:
                w.opt.zero_grad(set_to_none=True)
                for p in w.params:
                    p.grad = None
                row |= {"status": "out of memory", "detail": str(e).splitlines()[0][:300],
                        "reserved_gb": torch.cuda.max_memory_reserved() / 1e9}
            torch.cuda.empty_cache()
            rows.append(row)
            print(json.dumps(row), file=out, flush=True)
            print(f"{name:13} {prec:5} seq {seq:5} mb {mb} x{n_micro} rc {int(rc)}: {row['status']:8} "
                  + (f"{row['step_s']:.3f} s  alloc {row['allocated_gb']:.1f} GB  reserved {row['reserved_gb']:.1f} GB"
                     if row["status"] == "ok" else ""), flush=True)
        del w
        torch.cuda.empty_cache()
    return rows


def measure(args) -> int:
    import torch
    import transformers

    if not torch.cuda.is_available():
        print("gpu_train measure: no CUDA device here", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu-train-"))
    os.environ.setdefault("MOSEARCH_CACHE", str(work / "cache"))
    from trainer.workers import LOSS_CHUNK_LOGITS

    head = {"kind": "machine", "grid": args.grid, "loss_chunk_logits": LOSS_CHUNK_LOGITS,
            "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "cuda": torch.version.cuda, "transformers": transformers.__version__,
            "memory_gb": torch.cuda.get_device_properties(0).total_memory / 1e9,
            "commit": provenance.commit(), "date": time.strftime("%Y-%m-%d")}
    print(json.dumps(head), flush=True)
    with open(out, "w") as f:
        print(json.dumps(head), file=f, flush=True)
        if not args.steps_only:
            for r in check_path(work):
                print(json.dumps({"kind": "check", **r}), file=f, flush=True)
        if args.grid == "probe":
            for r in loss_head(work):
                print(json.dumps(r), file=f, flush=True)
        measure_steps(work, GRIDS[args.grid], args.budget_s, f)
    return 0


# -- predicted beside measured ----------------------------------------------------------------------
def read(path) -> list[dict]:
    return [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]


# the trainer took the loss over all positions at once before it chunked them (files without
# `loss_chunk_logits`): 8 bytes more per logit, as the probe's loss head measured (model/params.py)
UNCHUNKED_LOSS = {"loss_head_bytes": 8.0}


def predicted(steps: list[dict], gpu: str = "H200"):
    """(measured row, the model's `predict_training` of the same job) for each measured or failed step, with
    the loss head of the trainer that ran (`UNCHUNKED_LOSS` for the files measured before it chunked)."""
    from problems.placement.predict import TrainingJob, predict_training

    head = next((r for r in steps if r.get("kind") == "machine"), None)  # none: the trainer as it is now
    eff = {gpu: UNCHUNKED_LOSS} if head is not None and "loss_chunk_logits" not in head else {}
    for r in steps:
        if r.get("kind") or r["status"] == "skipped (time budget)":
            continue
        job = TrainingJob(model=r["model"], gpu=gpu, precision=r["precision"], attention="flash",
                          elementwise_kernels="eager", amp_autocast=True, seq_len=r["seq_len"],
                          global_batch=r["micro_batch"] * r["n_micro"], micro_batch=r["micro_batch"],
                          recompute=r["recompute"], padded=r.get("padded", False), efficiencies=eff)
        yield r, predict_training(job)


def errors(r: dict, p: dict) -> dict[str, float]:
    """Predicted / measured - 1 of a measured step: time, and peak memory allocated and reserved (the
    model's runtime share taken out: PyTorch's counters do not see the CUDA context and libraries)."""
    m = p["memory_gb"]
    return {"step": p["step_s"] / r["step_s"] - 1, "alloc": (m["allocated"] - m["runtime"]) / r["allocated_gb"] - 1,
            "reserved": (m["reserved"] - m["runtime"]) / r["reserved_gb"] - 1}


def _measured_at(head: dict, path: str) -> str:
    """The commit a measurement ran at: recorded by `measure`, else (files measured before it recorded one)
    the commit that added the file, whose code it measured."""
    if head.get("commit"):
        return f"Measured at commit {head['commit']} on {head.get('date', '?')}."
    import subprocess

    log = subprocess.run(["git", "log", "--diff-filter=A", "--format=%h %ad", "--date=short", "--", path],
                         cwd=provenance.ROOT, capture_output=True, text=True).stdout.split()
    return (f"Added in commit {log[-2]} ({log[-1]}): measured on that commit's code or its parent's." if len(log) >= 2
            else "The commit it was measured at is not recorded.")


def compare(args) -> int:
    from mosearch.bench import publish

    rows = read(args.file)
    head = next(r for r in rows if r.get("kind") == "machine")
    checks = [r for r in rows if r.get("kind") == "check"]
    steps = [r for r in rows if "kind" not in r]
    heads = [r for r in rows if r.get("kind") == "loss_head"]
    gpu = args.gpu
    grid = head.get("grid") or ("probe" if heads else "main")
    grid = "" if grid == "main" else f" --grid {grid}" + (" --steps-only" if not checks else "")
    lines = [f"# The trainer's step on {head['gpu']}, measured, beside the model's prediction", "",
             _measured_at(head, args.file) + f" Predicted by the model at commit {provenance.commit()} on "
             f"{_dt.date.today().isoformat()}.", "",
             f"PyTorch {head['torch']} (CUDA {head['cuda']}), transformers {head['transformers']}. Measured with "
             f"`python -m mosearch.bench.gpu_train measure{grid} --out {args.file}`; this table: "
             f"`python -m mosearch.bench.gpu_train compare {args.file} --out {args.out}`.", "",
             "Each step is one `TrainWorker` update (forward, the GRPO loss, backward, AdamW) of a randomly "
             "initialised model of the catalog's architecture on one GPU, over micro-batch x micro-batches "
             "sequences; the time is the median of 3 steps after a warm-up step; the memory is PyTorch's "
             "peak allocated and reserved over those steps. Predicted: `predict_training` for the same job "
             f"on {gpu} (eager element-wise kernels, `amp_autocast`: the trainer's autocast, AdamW and loss, and "
             "attention as PyTorch's SDPA runs it: flash in bf16, the math kernel for fp32 and tf32 grouped-query "
             "attention, `memory.sdpa_paths`); the predicted memory is shown without "
             "the model's runtime share (CUDA context and libraries, which PyTorch's counters do not see).", ""]
    if checks:
        lines += ["## The trainer's CUDA path", "", "| check | result | detail |", "| --- | --- | --- |"]
        for c in checks:
            d = c["detail"] if isinstance(c["detail"], str) else ", ".join(f"{k} {v}" for k, v in c["detail"].items())
            lines.append(f"| {c['check']} | {'ok' if c['ok'] else 'FAILED'} | {d[:220]} |")
        lines.append("")
    lines += ["## Step time and peak memory", "",
              "| model | prec | seq | mb x n | recompute | step s meas | pred | err | alloc GB meas | pred | err "
              "| reserved GB meas | pred | err |", "| --- " * 14 + "|"]
    if "loss_chunk_logits" not in head:
        lines += ["Measured with the trainer before its loss took the log-softmax a chunk of positions at a time: "
                  f"predicted with that loss (`loss_head_bytes` {UNCHUNKED_LOSS['loss_head_bytes']:g}).", ""]
    errs = {"step": [], "alloc": [], "reserved": []}
    for r, p in predicted([head, *steps], gpu):
        m = p["memory_gb"]
        pa, pr = m["allocated"] - m["runtime"], m["reserved"] - m["runtime"]
        if r["status"] != "ok":
            lines.append(f"| {r['model']} | {r['precision']} | {r['seq_len']} | {_shape(r)} | "
                         f"{'yes' if r['recompute'] else 'no'} | {r['status']} | {p['step_s']:.3f} | | | {pa:.1f} | | "
                         f"{head['memory_gb']:.0f} usable | {pr:.1f} ({'fits' if p['fits'] else 'does not fit'}) | |")
            continue
        e = errors(r, p)
        for k in errs:
            errs[k].append(e[k])
        lines.append(f"| {r['model']} | {r['precision']} | {r['seq_len']} | {_shape(r)} | "
                     f"{'yes' if r['recompute'] else 'no'} | {r['step_s']:.3f} | {p['step_s']:.3f} | {e['step']:+.0%} | "
                     f"{r['allocated_gb']:.1f} | {pa:.1f} | {e['alloc']:+.0%} | {r['reserved_gb']:.1f} | {pr:.1f} | "
                     f"{e['reserved']:+.0%} |")
    lines.append("")
    if heads:
        lines += ["## The loss head alone", "",
                  "bf16 logits through the trainer's log-probs, entropy and GRPO loss and back: peak allocated bytes "
                  "per logit element (tokens x vocabulary), the logits and their gradient included.", "",
                  "| tokens | vocab | peak B/logit | forward peak | held for backward |", "| --- | --- | --- | --- | --- |"]
        lines += [f"| {h['tokens']} | {h['vocab']} | {h['bytes_per_logit']:.2f} | {h['forward_peak_per_logit']:.2f} | "
                  f"{h['held_after_forward_per_logit']:.2f} |" for h in heads]
        lines.append("")
    for k, v in errs.items():
        if v:
            a = sorted(abs(x) for x in v)
            lines.append(f"- {k}: median |error| {statistics.median(a):.1%}, worst {max(v, key=abs):+.1%}, "
                         f"{sum(x < 0 for x in v)} of {len(v)} predicted below the measurement")
    publish(args.out, "\n".join(lines) + "\n")
    return 0


def predict_grid(args) -> int:
    """The model's figures for a grid before it is measured (committed first, so the measurement checks
    predictions made without it)."""
    from mosearch.bench import publish

    rows = [_case(g) | {"status": "ok"} for g in GRIDS[args.grid]]
    lines = [f"# The model's figures for the {args.grid} grid on {args.gpu}, before it is measured", "",
             f"Made by `python -m mosearch.bench.gpu_train predict --grid {args.grid} --out {args.out}`; the "
             "memory without the model's runtime share, as PyTorch's counters see it.", "",
             "| model | prec | seq | mb x n | recompute | step s | allocated GB | reserved GB | fits |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r, p in predicted(rows, args.gpu):
        m = p["memory_gb"]
        lines.append(f"| {r['model']} | {r['precision']} | {r['seq_len']} | {_shape(r)} | "
                     f"{'yes' if r['recompute'] else 'no'} | {p['step_s']:.3f} | {m['allocated'] - m['runtime']:.1f} | "
                     f"{m['reserved'] - m['runtime']:.1f} | {'yes' if p['fits'] else 'no'} |")
    publish(args.out, "\n".join(lines) + "\n")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mosearch.bench.gpu_train", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="on a CUDA machine: check the trainer's CUDA path, time steps")
    m.add_argument("--out", required=True, help="JSON-lines file of the measurements")
    m.add_argument("--budget-s", type=float, default=330.0, help="start no new step measurement after this")
    m.add_argument("--steps-only", action="store_true", help="skip the CUDA-path checks")
    m.add_argument("--grid", choices=tuple(GRIDS), default="main",
                   help="main: the steps compared with the model; probe: the loss head alone and host-bound steps; "
                        "holdout: configurations measured after the model's changes")
    c = sub.add_parser("compare", help="predicted beside measured, from a measure file")
    c.add_argument("file")
    c.add_argument("--gpu", default="H200", help="catalog GPU the measurement ran on")
    c.add_argument("--out", default="results/bench/gpu_train.md")
    q = sub.add_parser("predict", help="the model's figures for a grid, before it is measured")
    q.add_argument("--grid", choices=tuple(GRIDS), default="holdout")
    q.add_argument("--gpu", default="H200")
    q.add_argument("--out", default="results/bench/gpu_holdout_predicted.md")
    args = ap.parse_args(argv)
    return {"measure": measure, "compare": compare, "predict": predict_grid}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
