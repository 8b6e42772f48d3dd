"""A vLLM engine: generates n samples per prompt with behaviour log-probs, takes new weights.

Hosted in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0) so that one Ray actor is one engine; with
tensor parallelism its TP workers are processes of vLLM's multiprocessing executor (on the CPU each
bound to its own cores). Weights are synchronised with `collective_rpc` -> `worker.reload_weights`,
fed the FULL state dict of the trainer's model (named_parameters() would omit the tied
lm_head.weight); each TP worker keeps its own shard of every tensor. On CUDA the engine uses
vLLM sleep mode for the colocated context switch; vLLM ignores sleep mode on CPU, so there the
switch only drops the prefix cache and the trainer side does the offload (see workers.py).
"""

from __future__ import annotations

import os
import time

from trainer import weight_sync as WS
from trainer.rollout.common import result, rss_gb


def check_model(config, model_path, cuda: bool) -> None:
    """Refuse, in one line before any engine starts, a model vLLM's CPU attention cannot run: its
    kernels take only some head sizes (a head of 16 fails at the first decode step, deep in vLLM)."""
    if cuda:
        return
    from problems.errors import InputError
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    sizes = CPUAttentionBackend.get_supported_head_sizes()
    if head not in sizes:
        raise InputError(str(model_path), "config.json: head_dim",
                         f"{head} (hidden_size / num_attention_heads) is not a head size vLLM's CPU attention runs",
                         f"one of {', '.join(map(str, sizes))}: fewer heads, or set head_dim")


def _reload(worker, items):
    # Runs inside vLLM's worker: load a full state dict in place (fp32 on CPU, the engine's dtype on GPU).
    # `items` may be a generator (the broadcast receiver) only when the worker is in this process
    # (tp 1): it is then consumed bucket by bucket as vLLM's layer-wise reload asks for it. TP workers
    # are other processes and get a list; one reload call takes the whole state, because vLLM's
    # layer-wise reload re-initialises every layer at its start. A mixture-of-experts model's fused expert
    # tensors (transformers' in-memory naming) go in as the per-expert weights of a saved checkpoint, which
    # vLLM's loader maps onto its fused-MoE layers.
    from trainer.expert_parallel import checkpoint_items

    probes: dict = {}  # MoE layer -> its expert 0's gate_proj weight as sent (for _repack_cpu_moe)

    def tap(pairs):
        for name, t in pairs:
            if name.endswith(".mlp.experts.0.gate_proj.weight"):
                probes[name[: -len(".0.gate_proj.weight")]] = t.detach().clone()
            yield name, t

    worker.reload_weights(weights_iterator=tap(checkpoint_items(items)))
    if probes:
        _repack_cpu_moe(worker, probes)
    return True


def _repack_cpu_moe(worker, probes: dict) -> int:
    """vLLM 0.32's CPU fused-MoE kernel (CPUUnquantizedExperts) runs on expert weights it prepacks into
    its grouped-gemm layout at load, but an in-place reload leaves the new weights unpacked:
    `UnquantizedFusedMoEMethod._setup_kernel` calls the kernel's `process_weights_after_loading` (the
    prepack) only while the MoE kernel is not yet built, i.e. at the first load. After a reload of
    unchanged weights the MoE block's output was off by 3e-2 (max abs, tiny-moe, hidden 128) and the
    sampled tokens' log-probs by 0.13 against transformers'. A layer whose first expert's gate rows read
    exactly as sent is unpacked: it is packed here by that same call. Returns the layers packed. GPU and
    zentorch kernels are left alone."""
    import torch
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return 0
    from vllm.distributed import get_tensor_model_parallel_rank
    from vllm.model_executor.layers.fused_moe.experts.cpu_moe import CPUUnquantizedExperts

    tp_rank, n = get_tensor_model_parallel_rank(), 0
    for name, mod in worker.model_runner.model.named_modules():
        kernel = getattr(getattr(getattr(getattr(mod, "quant_method", None), "moe_kernel", None), "impl", None),
                         "fused_experts", None)
        probe = next((t for prefix, t in probes.items() if name.startswith(prefix + ".") or name == prefix), None)
        if not isinstance(kernel, CPUUnquantizedExperts) or kernel._use_zentorch or probe is None:
            continue
        w13 = mod.w13_weight.data
        k = min(w13.shape[1] // 2, probe.shape[0])  # this TP rank's gate rows of expert 0
        if torch.equal(w13[0, :k], probe[tp_rank * k:(tp_rank + 1) * k].to(w13.dtype)):
            kernel.process_weights_after_loading(mod)
            n += 1
    return n


def _pid(worker) -> int:
    return os.getpid()


# vLLM's TP workers wait for the next call by spinning (sched_yield) for 1 s after their last one
# (shm_broadcast.SpinCondition busy_loop_s); on the CPU that spin takes the cores a colocated
# plan's training ranks use between rollouts. A few milliseconds still spans the gap between two
# decode steps.
CPU_WORKER_SPIN_S = 0.005

# On the CPU, vLLM compiles the model with TorchInductor at every engine start (its compiled-function
# cache fails to load with vLLM 0.32 / PyTorch 2.13 and is rebuilt): 12-40 s per engine for the tiny
# test model, against 3 s eager, for 12% slower decoding (64 x 32 tokens, measured here). With this
# variable set to 1 the CPU engines run eagerly (the test suite sets it: dozens of engines start);
# `mosearch train` says so on its engine line. GPU engines ignore it (CUDA graphs are what the model
# predicts).
CPU_EAGER_ENV = "MOSEARCH_VLLM_CPU_EAGER"


def cpu_eager() -> bool:
    return os.environ.get(CPU_EAGER_ENV, "") == "1"


def _shorten_spin(worker, seconds: float) -> int:
    import gc

    from vllm.distributed.device_communicators.shm_broadcast import SpinCondition

    waits = [o for o in gc.get_objects() if isinstance(o, SpinCondition) and o.is_reader]
    for w in waits:
        w.busy_loop_s = seconds
    return len(waits)


class VLLMEngine(WS.SyncEndpoint):
    def __init__(self, model_path: str, tp: int = 1, kv_mem_frac: float = 0.5, max_num_seqs: int = 64,
                 max_model_len: int = 256, seed: int = 0, eos_id: int | None = None, kv_cpu_gib: int = 1,
                 cpu_eager_mode: bool | None = None, **_unused):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cpu_gib))
        import torch
        from vllm import LLM

        self.cuda = torch.cuda.is_available()
        kwargs = dict(model=str(model_path), tensor_parallel_size=tp, max_num_seqs=max_num_seqs,
                      max_model_len=max_model_len, seed=seed, skip_tokenizer_init=True)
        cpu_tp = tp > 1 and not self.cuda  # TP workers as CPU processes
        if cpu_tp:
            from trainer.placement import cpu_bind

            # without a binding vLLM refuses two CPU workers on one NUMA node
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = cpu_bind(tp)
            kwargs.update(distributed_executor_backend="mp")
        if self.cuda:
            kwargs.update(gpu_memory_utilization=kv_mem_frac, enable_sleep_mode=True, dtype="bfloat16")
        else:
            # fp32: behaviour log-probs match the trainer's; eager: as given, else as CPU_EAGER_ENV says
            kwargs.update(dtype="float32", enforce_eager=cpu_eager() if cpu_eager_mode is None else cpu_eager_mode)
        self.llm = LLM(**kwargs)
        if cpu_tp:
            self.llm.collective_rpc(_shorten_spin, args=(CPU_WORKER_SPIN_S,))
        self.eos_id = eos_id
        self.version = 0
        self.asleep = False
        self.tp = kwargs["tensor_parallel_size"]

    def generate(self, prompts: list[list[int]], n: int, max_new_tokens: int, temperature: float = 1.0,
                 seed: int | None = None) -> dict:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if self.asleep:  # on GPU its weights and KV cache are released; on CPU the same rule holds
            raise RuntimeError("generate called on a sleeping engine (wake_up first)")
        sp = SamplingParams(n=n, temperature=temperature, max_tokens=max_new_tokens, logprobs=0, seed=seed,
                            stop_token_ids=[self.eos_id] if self.eos_id is not None else None, detokenize=False)
        version, t0 = self.version, time.perf_counter()
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sp, use_tqdm=False)
        comps, lps = [], []
        for out in outs:
            for o in sorted(out.outputs, key=lambda o: o.index):
                ids = list(o.token_ids)
                comps.append(ids)
                lps.append([o.logprobs[i][tok].logprob for i, tok in enumerate(ids)])
        return result(version, comps, lps, time.perf_counter() - t0, sum(len(p) for p in prompts),
                      rss_gb(children=self.tp > 1))

    def update_weights(self, items: list, version: int) -> float:
        t0 = time.perf_counter()
        self.llm.collective_rpc(_reload, args=(items,))
        self.llm.reset_prefix_cache()  # cached KV was computed by the old weights
        self.version = version
        return time.perf_counter() - t0

    def sync_capable(self) -> bool:
        """The broadcast receiver runs in this process and hands TP workers the received state; on
        CUDA with tp > 1 that hand-on is not written (it would pickle device tensors), so the object
        store is used there."""
        return not (self.cuda and self.tp > 1)

    def receive_weights(self, version: int, die_after_buckets: int | None = None) -> dict:
        """Take weights `version` from this engine's sync group, streamed into vLLM's in-place reload.
        Returns the receiver's times (transfer, forward, load) and `error` if a peer broke."""
        import torch

        rx = WS.Receiver(self._sync, version, torch.device("cuda", 0) if self.cuda else torch.device("cpu"),
                         die_after_buckets)
        t0 = time.perf_counter()
        if self.tp == 1:
            self.llm.collective_rpc(_reload, args=(rx.stream(),))
        else:  # TP workers are other processes: receive every bucket here (a hand-over's mapped bucket
            # is copied before it is released), then one reload call hands the state to each worker
            shared = rx.member.recv_shared
            items = [(n, t.clone() if shared else t) for n, t in rx.stream()]
            if rx.st["error"] is None:
                self.llm.collective_rpc(_reload, args=(items,))
        st = rx.st | {"load_s": time.perf_counter() - t0 - rx.st["transfer_s"] - rx.st["forward_s"]}
        if st["error"] is None:
            self.llm.reset_prefix_cache()  # cached KV was computed by the old weights
            self.version = version
        return st

    def sleep(self) -> float:
        t0 = time.perf_counter()
        if self.cuda:
            self.llm.sleep(level=1)
        else:
            self.llm.reset_prefix_cache()
        self.asleep = True
        return time.perf_counter() - t0

    def wake_up(self) -> float:
        t0 = time.perf_counter()
        if self.cuda and self.asleep:
            self.llm.wake_up()
        self.asleep = False
        return time.perf_counter() - t0

    def get_version(self) -> int:
        return self.version

    def tp_workers(self) -> int:
        """Processes holding this engine's model: its tensor-parallel degree, as vLLM runs it."""
        return len(set(self.llm.collective_rpc(_pid)))

    def memory(self) -> dict:
        import torch

        if self.cuda:
            return {"rollout_gpu_gb": torch.cuda.max_memory_allocated() / 2**30, "rollout_rss_gb": rss_gb()}
        return {"rollout_rss_gb": rss_gb(children=self.tp > 1)}  # TP workers are child processes
