"""Micro-benchmarks of the local device, each returning plain rows (dicts) for the profile file.

Every function measures one thing the performance model has a parameter for: dense matmul
throughput (peak TFLOP/s), memory bandwidth, a training step of the model (MFU and per-step
overhead), vLLM prefill and decode (efficiencies and per-step overhead), collective bandwidth
between two worker processes (gloo on CPU, NCCL on GPU) and the colocated context switch.
"""

from __future__ import annotations

import os
import time
from typing import Callable

import torch


def _device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _time(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Fastest of `repeats` timed runs after `warmup` runs: on a shared machine other work only
    ever adds time, so the minimum is the estimate least disturbed by it."""
    for _ in range(warmup):
        fn()
    _sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        _sync()
        times.append(time.perf_counter() - t0)
    return min(times)


def matmul(sizes=(256, 512, 1024, 2048), repeats: int = 5) -> list[dict]:
    dev = _device()
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    rows = []
    for n in sizes:
        a = torch.randn(n, n, device=dev, dtype=dtype)
        b = torch.randn(n, n, device=dev, dtype=dtype)
        s = _time(lambda: a @ b, repeats)
        rows.append({"n": n, "dtype": str(dtype).removeprefix("torch."), "seconds": s, "tflops": 2 * n**3 / s / 1e12})
    return rows


def memory_bandwidth(mib=(64, 256), repeats: int = 5) -> list[dict]:
    dev = _device()
    rows = []
    for m in mib:
        x = torch.empty(m * 2**20 // 4, device=dev, dtype=torch.float32).normal_()
        y = torch.empty_like(x)
        s = _time(lambda: y.copy_(x), repeats)
        moved = 2 * x.numel() * 4  # read + write
        rows.append({"mib": m, "seconds": s, "gbs": moved / s / 1e9})
    return rows


def train_steps(model_path: str, micro_batches=(1, 4, 8), seq_lens=(32, 64, 128), repeats: int = 3) -> list[dict]:
    """Forward + backward + AdamW step of the model on random tokens; forward + backward alone beside it."""
    from transformers import AutoModelForCausalLM

    dev = _device()
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    vocab = model.config.vocab_size
    params = sum(p.numel() for p in model.parameters())
    rows = []
    for mb in micro_batches:
        for seq in seq_lens:
            ids = torch.randint(0, vocab, (mb, seq), device=dev)

            def fwd_bwd():
                loss = model(input_ids=ids, labels=ids).loss
                loss.backward()

            def step():
                fwd_bwd()
                opt.step()
                opt.zero_grad(set_to_none=True)

            s = _time(step, repeats)
            # the trainer updates once per step over many micro-batches: time the micro-batch alone too
            fb = _time(lambda: (fwd_bwd(), opt.zero_grad(set_to_none=True)), repeats)
            rows.append({"micro_batch": mb, "seq_len": seq, "tokens": mb * seq, "params": params, "seconds": s,
                         "fwd_bwd_seconds": fb})
    return rows


def rollout(model_path: str, batches=(1, 8, 32), prompt_lens=(16, 64), decode_tokens: int = 32,
            repeats: int = 3) -> dict:
    """vLLM prefill and decode: prefill = one-token generations; decode = the extra tokens' time."""
    from trainer.rollout.vllm_engine import VLLMEngine

    # no stop token: every sequence decodes exactly decode_tokens tokens
    engine = VLLMEngine(model_path, max_num_seqs=max(batches), max_model_len=max(prompt_lens) + decode_tokens + 8,
                        eos_id=None)
    engine.generate([[5] * 8], n=1, max_new_tokens=4, temperature=1.0, seed=0)  # warm-up
    prefill, decode = [], []
    for b in batches:
        for p in prompt_lens:
            prompts = [[(7 * i + j) % 50 + 4 for j in range(p)] for i in range(b)]
            one = min(engine.generate(prompts, n=1, max_new_tokens=1, temperature=1.0, seed=1)["gen_s"]
                      for _ in range(repeats))
            full = min(engine.generate(prompts, n=1, max_new_tokens=decode_tokens, temperature=1.0, seed=1)["gen_s"]
                       for _ in range(repeats))
            prefill.append({"batch": b, "prompt_len": p, "tokens": b * p, "seconds": one, "tokens_s": b * p / one})
            step = max(full - one, 1e-9) / (decode_tokens - 1)
            decode.append({"batch": b, "context": p + decode_tokens // 2, "step_seconds": step, "tokens_s": b / step})
    # weight sync: the full state dict reloaded into the engine, as the trainer does every step
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    items = list(model.state_dict().items())
    nbytes = sum(t.numel() * t.element_size() for _, t in items)
    sync = min(engine.update_weights(items, version=i + 1) for i in range(3))
    switch = min(engine.sleep() + engine.wake_up() for _ in range(3))
    return {"prefill": prefill, "decode": decode,
            "weight_sync": [{"bytes": nbytes, "copies": 0, "seconds": sync}],  # the load alone: no broadcast
            "engine_switch": [{"what": "vllm sleep+wake" if torch.cuda.is_available() else "prefix-cache reset (CPU: no sleep mode)",
                               "seconds": switch}]}


def _collective_worker(rank: int, world: int, port: int, sizes, repeats: int, out) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(backend, rank=rank, world_size=world)
    dev = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    rows = []
    # the per-op share of the wire: ring all-reduce 2(n-1)/n of the buffer, all-gather (n-1)/n of the
    # gathered buffer, broadcast (a send to each other rank, as gloo does) (n-1) copies (systems.md)
    share = {"all_reduce": 2 * (world - 1) / world, "all_gather": (world - 1) / world, "broadcast": world - 1.0}
    for nbytes in sizes:
        x = torch.ones(nbytes // 4, device=dev)
        outs = torch.empty(nbytes // 4, device=dev)
        ops = {"all_reduce": lambda: dist.all_reduce(x),
               "all_gather": lambda: dist.all_gather_into_tensor(outs, x[: x.numel() // world]),
               "broadcast": lambda: dist.broadcast(x, src=0)}
        for op, fn in ops.items():
            dist.barrier()
            s = _time(fn, repeats)
            rows.append({"op": op, "bytes": nbytes, "world": world, "backend": backend, "seconds": s,
                         "bus_gbs": share[op] * nbytes / s / 1e9})
    rows += _layout_ops(world, dev, repeats)
    if rank == 0:
        out.put(rows)
    dist.destroy_process_group()


def _layout_ops(world: int, dev: torch.device, repeats: int, hidden: int = 128, tokens: int = 88) -> list[dict]:
    """The per-collective cost of the parallel wrappers the trainer uses, beyond the collective:
    - tp: a column-parallel then a row-parallel Linear (DTensor `parallelize_module`), forward +
      backward, against the same local shards as plain tensors; the difference is 2 collectives
      (the row-parallel output's all-reduce, the column-parallel input gradient's) and DTensor's
      dispatch around them;
    - fsdp: two FSDP2 `fully_shard` Linear units under a root, forward + backward, against the plain
      unsharded module; the difference is the all-gathers and reduce-scatters FSDP issues (counted
      here with the profiler) and FSDP's per-unit copies and hooks around them.
    Rows: {"op": "tp_layer" | "fsdp_units", "seconds": wrapped, "plain_seconds", "collectives", "bytes"}.
    """
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    from torch.profiler import ProfilerActivity, profile

    mesh = init_device_mesh(dev.type, (world,))
    x = torch.randn(tokens, hidden, device=dev)

    def pair(width: int) -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(hidden, width, bias=False),
                                   torch.nn.Linear(width, hidden, bias=False)).to(dev)

    def fwd_bwd(m):
        def run():
            m(x).sum().backward()
            m.zero_grad(set_to_none=True)
        return run

    rows = []
    tp = pair(4 * hidden)
    parallelize_module(tp, mesh, {"0": ColwiseParallel(), "1": RowwiseParallel()})
    dist.barrier()
    t_tp = _time(fwd_bwd(tp), repeats, warmup=2)
    t_local = _time(fwd_bwd(pair(4 * hidden // world)), repeats, warmup=2)
    rows.append({"op": "tp_layer", "seconds": t_tp, "plain_seconds": t_local, "collectives": 2,
                 "bytes": tokens * hidden * 4})
    fs = pair(4 * hidden)
    for layer in fs:
        fully_shard(layer, mesh=mesh)
    fully_shard(fs, mesh=mesh)
    run = fwd_bwd(fs)
    dist.barrier()
    t_fsdp = _time(run, repeats, warmup=2)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    n = sum(e.count for e in prof.key_averages() if e.key in ("c10d::_allgather_base_", "c10d::_reduce_scatter_base_"))
    t_plain = _time(fwd_bwd(pair(4 * hidden)), repeats, warmup=2)
    rows.append({"op": "fsdp_units", "seconds": t_fsdp, "plain_seconds": t_plain, "collectives": n,
                 "bytes": hidden * 4 * hidden * 4})
    for r in rows:
        r.update(world=world, backend=dist.get_backend())
    return rows


def collective(sizes=(2**12, 2**16, 2**20, 2**23, 2**25), repeats: int = 5, world: int = 2) -> list[dict]:
    import torch.multiprocessing as mp

    from trainer.weight_sync import free_port

    if torch.cuda.is_available():
        world = min(world, torch.cuda.device_count())
        if world < 2:
            return []
    port = free_port()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_collective_worker, args=(r, world, port, sizes, repeats, out)) for r in range(world)]
    for p in procs:
        p.start()
    rows = out.get(timeout=600)
    for p in procs:
        p.join(timeout=60)
    return rows


def offload(model_path: str, repeats: int = 3) -> list[dict]:
    """Colocated context switch on the training side: move the model and Adam state off the device and back."""
    from transformers import AutoModelForCausalLM

    dev = _device()
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).to(dev)
    tensors = [p.data for p in model.parameters()]
    nbytes = sum(t.numel() * t.element_size() for t in tensors) * 4  # weights + grads + 2 Adam moments
    state = [torch.empty(t.numel() * 4, dtype=t.dtype, device=dev) for t in tensors]
    host = [torch.empty(s.numel(), dtype=s.dtype, pin_memory=dev.type == "cuda") for s in state]

    def round_trip():
        for h, s in zip(host, state):
            h.copy_(s, non_blocking=True)
        _sync()
        for h, s in zip(host, state):
            s.copy_(h, non_blocking=True)

    return [{"bytes": nbytes, "seconds": _time(round_trip, repeats)}]
