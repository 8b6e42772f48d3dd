"""Where one training step of each executed layout spends its time on CPU (gloo, 2 ranks).

    python -m mosearch.bench.layout_collectives [--repeats 3] [--out results/bench/layout_collectives.md]

Each layout (dp 2, tp 2, pp 2, zero3 dp 2, and one rank alone) runs as plain processes over gloo,
one OpenMP thread each (as the trainer's Ray actors do). Every rank builds a `TrainWorker` on the
tiny model and trains the tiny-grpo step (128 samples, prompt 16, completion 6, micro-batch 4) as
`mosearch train` does: `accumulate` over the rank's micro-batches, then `apply`. Per layout:
- the step's wall time on rank 0 (median of --repeats steps after a warm-up step);
- the collectives rank 0 issues in one step, counted with the torch profiler (c10d ops: DTensor's
  functional collectives, FSDP2's all-gather / reduce-scatter, pipelining's send / recv) and the
  CPU time the profiler gives them, in total and per call;
- CPU time in DTensor dispatch (`DTensor` / `redistribute` / `from_local` frames).
Writes the table and the per-micro-batch collective counts the performance model derives for the
same layouts (problems/placement/model/comm.py::layout_collectives) beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SAMPLES, PROMPT, COMPLETION, MICRO = 128, 16, 6, 4
LAYOUTS = {  # name -> (dp, tp, pp, sharding)
    "single": (1, 1, 1, "none"),
    "dp2": (2, 1, 1, "none"),
    "tp2": (1, 2, 1, "none"),
    "pp2": (1, 1, 2, "none"),
    "zero3-dp2": (2, 1, 1, "zero3"),
}
KINDS = ("all_reduce", "allreduce", "all_gather", "allgather", "reduce_scatter", "broadcast", "send", "recv")


def _batch(vocab: int = 60) -> list:
    from trainer.batch import Sample

    rnd = random.Random(0)
    return [Sample(i, [rnd.randrange(4, vocab) for _ in range(PROMPT)], [rnd.randrange(4, vocab) for _ in range(COMPLETION)],
                   [-rnd.random() for _ in range(COMPLETION)], 0.0, rnd.uniform(-1, 1), 0) for i in range(SAMPLES)]


def _kind(name: str) -> str | None:
    n = name.lower()
    if not any(k in n for k in ("c10d", "gloo", "nccl")):
        return None
    for k in KINDS:
        if k in n:
            return {"allreduce": "all_reduce", "allgather": "all_gather"}.get(k, k)
    return None


def _rank(rank: int, world: int, port: int, layout: tuple, repeats: int, out: str) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)
    from torch.profiler import ProfilerActivity, profile

    from trainer.models.tiny import resolve_model
    from trainer.workers import TrainWorker

    dp, tp, pp, sharding = layout
    w = TrainWorker(str(resolve_model("tiny")), rank, world, port, {"name": "grpo", "lr": 1e-4}, MICRO, sharding,
                    tp=tp, pp=pp)
    batch = _batch()
    mine = batch[w.c.dp_idx::dp]
    n_micro = -(-len(mine) // MICRO)

    def step():
        w.accumulate(mine, len(batch), n_micro=n_micro, last=True)
        w.apply()

    step()  # warm-up (FSDP initialises lazily)
    times = []
    for _ in range(repeats):
        if world > 1:
            torch.distributed.barrier()
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    counts: dict[str, int] = {}
    cpu_us: dict[str, float] = {}
    dtensor_us = 0.0
    for e in prof.key_averages():
        k = _kind(e.key)
        # count each collective once: the c10d op (its gloo work item is a child of it)
        if k and e.key.startswith(("c10d::", "_c10d_functional::")) and "wait" not in e.key:
            counts[k] = counts.get(k, 0) + e.count
            cpu_us[k] = cpu_us.get(k, 0.0) + e.cpu_time_total
        if "redistribute" in e.key.lower() or "dtensor" in e.key.lower():
            dtensor_us = max(dtensor_us, e.cpu_time_total)
    if rank == 0:
        Path(out).write_text(json.dumps({"step_s": statistics.median(times), "n_micro": n_micro, "counts": counts,
                                         "cpu_us": cpu_us, "dtensor_us": dtensor_us,
                                         "keys": sorted({e.key for e in prof.key_averages() if _kind(e.key)}),
                                         "top": [(e.key, e.count, e.self_cpu_time_total) for e in sorted(
                                             prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:12]],
                                         "total_us": sum(e.self_cpu_time_total for e in prof.key_averages())}))
    w.shutdown()


def run_layout(layout: tuple, repeats: int) -> dict:
    import torch.multiprocessing as mp

    from trainer.weight_sync import free_port

    dp, tp, pp, _ = layout
    world = dp * tp * pp
    port = free_port()
    out = tempfile.mktemp(suffix=".json")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_rank, args=(r, world, port, layout, repeats, out)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(900)
    if any(p.exitcode != 0 for p in procs):
        raise SystemExit(f"layout {layout} failed: exit codes {[p.exitcode for p in procs]}")
    return json.loads(Path(out).read_text())


def model_counts(name: str) -> dict:
    """Collectives per micro-batch the performance model derives for the layout (one forward, one
    backward per micro-batch, as the trainer runs GRPO; the tiny model: 2 layers, gated MLP)."""
    from problems.placement.model.comm import fsdp_collectives, tp_collectives

    dp, tp, pp, sharding = LAYOUTS[name]
    out = {}
    if tp > 1:
        out["all_reduce"] = 2 * float(tp_collectives(1.0, 1.0, True, True))  # 2 layers
    if sharding == "zero3" and dp > 1:
        ag, rs = fsdp_collectives(2 + 1, 1.0, 1.0)
        out["all_gather"], out["reduce_scatter"] = float(ag), float(rs)
    if pp > 1:
        out["send"] = out["recv"] = 1.0  # each stage: activations out (or in), gradients back
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--layouts", nargs="*", default=list(LAYOUTS))
    ap.add_argument("--out", default=str(ROOT / "results" / "bench" / "layout_collectives.md"))
    args = ap.parse_args()
    load0 = os.getloadavg()
    res = {}
    for name in args.layouts:
        res[name] = run_layout(LAYOUTS[name], args.repeats)
        print(name, json.dumps(res[name]), flush=True)
    load1 = os.getloadavg()
    lines = ["# One training step per layout on CPU: where the time goes (gloo, 2 ranks)", "",
             f"`python -m mosearch.bench.layout_collectives --repeats {args.repeats}`: the tiny model, the tiny-grpo step "
             f"({SAMPLES} samples, prompt {PROMPT}, completion {COMPLETION}, micro-batch {MICRO}) as `TrainWorker` "
             "runs it (accumulate + apply), one OpenMP thread per rank; step = median of the timed steps on rank 0; "
             "collectives counted on rank 0 over one profiled step (torch profiler, c10d ops; the functional "
             "collectives DTensor issues appear once as `_c10d_functional::all_reduce` and once as the "
             "`c10d::allreduce_` it runs, so all-reduces are halved); "
             f"load average {load0[0]:.1f} before, {load1[0]:.1f} after (2 cores, shared with other work).", "",
             "| layout | step s | micro-batches / rank | collectives / step (rank 0) | per micro-batch | model per micro-batch | "
             "c10d CPU ms / call | profiled step CPU s | top self-CPU frames (ms) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, r in res.items():
        counts = dict(r["counts"])
        cpu = dict(r["cpu_us"])
        if LAYOUTS[name][1] > 1 or LAYOUTS[name][3] == "zero3":  # functional + c10d op: each all-reduce twice
            counts["all_reduce"] = counts.get("all_reduce", 0) // 2
        m = r["n_micro"]
        per = ", ".join(f"{k} {v / m:.2f}" for k, v in sorted(counts.items())) or "-"
        model = ", ".join(f"{k} {v:g}" for k, v in sorted(model_counts(name).items())) or "-"
        call = ", ".join(f"{k} {cpu[k] / 1e3 / max(r['counts'][k], 1):.2f}" for k in sorted(cpu)) or "-"
        top = "; ".join(f"{k} {us / 1e3:.0f}" for k, _, us in r["top"][:4])
        lines.append(f"| {name} | {r['step_s']:.3f} | {m} | {', '.join(f'{k} {v}' for k, v in sorted(counts.items())) or '-'} | "
                     f"{per} | {model} | {call} | {r['total_us'] / 1e6:.2f} | {top} |")
    lines += ["", "Per micro-batch the step-level collectives (gradient all-reduce of dp, the norm's all-reduces over "
              "DTensor shards, the tied embedding's pp all-reduce, the loss broadcast) are spread over the "
              "micro-batches, so the measured rate sits slightly above the model's per-micro-batch count.", "",
              "Findings (the performance model follows them, problems/placement/model/comm.py):",
              "- tp 2 issues one all-reduce per row-parallel output in forward (2 per layer) and one per column-parallel "
              "projection's input gradient in backward (q, k, v, gate, up: 5 per layer): 14 per micro-batch of the "
              "2-layer model, each a small message (micro-batch x tokens x hidden x 4 bytes); its time is the gloo "
              "latency plus DTensor's dispatch around every op (`PythonSubclass`, `_FromTorchTensor`, redistribute), "
              "not bandwidth.",
              "- zero3 (FSDP2) all-gathers each unit (2 layers + the root) in forward, the 2 layers again in backward, "
              "and reduce-scatters each unit every micro-batch (no gradient accumulation without sync): 5 + 3 per "
              "micro-batch; FSDP's per-unit copy-in/copy-out and hooks (`FSDP::all_gather`, "
              "`FSDP::post_backward_reduce`) cost more CPU than the collectives themselves.",
              "- pp 2 sends one activation and one gradient per micro-batch per boundary (plus the schedule's "
              "shape-inference pass each step); the sends are cheap next to the stages' compute.",
              "- `mosearch profile` measures the constants on this machine: the gloo small-message time of all-reduce, "
              "all-gather and broadcast (alpha), and the per-collective cost of a DTensor column/row-parallel pair and of "
              "two FSDP2 units beyond their bare collectives (`tp_op_s`, `fsdp_op_s` in profiles/local.yaml)."]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
