"""Training workers: one process per data-parallel rank, hosted in a Ray actor.

DDP over gloo on CPU, NCCL on GPU; FSDP2 (`fully_shard`) on GPU when the plan asks for zero3/fsdp
sharding. A step may arrive in chunks (elastic pipelining): `accumulate` adds one chunk's gradient
(micro-batched, gradient all-reduce only on the last micro-batch of the step), `apply` takes the
optimizer step. With one optimizer step per batch the proximal policy of the decoupled objective
is the current policy, so its log-probs are the detached log-probs of the same forward pass.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from trainer import algorithms as A
from trainer import weight_sync as WS
from trainer.batch import Sample, collate
from trainer.rollout.common import rss_gb


@dataclass
class AlgoConfig:
    name: str = "grpo"  # grpo | ppo
    lr: float = 1e-4
    clip_eps: float = 0.2
    kl_coef: float = 0.0  # > 0 keeps a frozen reference model and adds k3 KL
    decoupled: bool = False  # AReaL's objective: weight by pi_prox / pi_behav (async mode)
    # several updates per step: the PPO ratio is to the rollout policy (vLLM's log-probs), so later
    # updates of the same batch are clipped; with one update the ratio is 1 and the clip inert
    ratio_to_behaviour: bool = False
    behav_cap: float = 5.0
    vf_coef: float = 0.5
    gamma: float = 1.0
    lam: float = 0.95
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0


class TrainWorker(WS.SyncEndpoint):
    def __init__(self, model_path: str, rank: int, world_size: int, master_port: int, algo: dict,
                 micro_batch: int, sharding: str = "none", seed: int = 0, pad_id: int = 0):
        from transformers import AutoModelForCausalLM

        self.rank, self.world = rank, world_size
        self.cfg = AlgoConfig(**algo)
        self.micro_batch, self.pad_id = micro_batch, pad_id
        self.device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
        torch.manual_seed(seed)
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ["MASTER_PORT"] = str(master_port)
        if world_size > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo", rank=rank, world_size=world_size)
        self.module = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).to(self.device)
        self.value_head = None
        params = list(self.module.parameters())
        if self.cfg.name == "ppo":  # critic: a value head on the policy's last hidden state
            self.value_head = torch.nn.Linear(self.module.config.hidden_size, 1).to(self.device)
            torch.nn.init.zeros_(self.value_head.weight)
            torch.nn.init.zeros_(self.value_head.bias)
            params += list(self.value_head.parameters())
        self.ref = None
        if self.cfg.kl_coef > 0:
            self.ref = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).to(self.device).eval()
            self.ref.requires_grad_(False)
        self.sharding = sharding
        self.model = self._wrap(sharding)
        self.opt = torch.optim.AdamW(params, lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)
        self._offloaded: dict | None = None
        self._acc_stats: list[dict] = []
        self.busy_s = 0.0

    def _wrap(self, sharding: str):
        if self.world == 1:
            return self.module
        if self.device.type == "cuda" and sharding in ("zero3", "fsdp"):
            from torch.distributed.fsdp import fully_shard

            for layer in self.module.model.layers:
                fully_shard(layer)
            fully_shard(self.module)
            return self.module
        from torch.nn.parallel import DistributedDataParallel as DDP

        return DDP(self.module, device_ids=[0] if self.device.type == "cuda" else None)

    # -- forward ------------------------------------------------------------------------------
    def _forward(self, t: dict, model=None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per-position log-prob of the next token [B, L-1], and values [B, L-1] for PPO."""
        model = model or self.model
        out = model(input_ids=t["input_ids"], attention_mask=t["attention_mask"],
                    output_hidden_states=self.value_head is not None and model is not self.ref)
        logits = out.logits[:, :-1].float()
        logp = torch.gather(F.log_softmax(logits, -1), 2, t["input_ids"][:, 1:, None]).squeeze(-1)
        values = None
        if self.value_head is not None and model is not self.ref:
            values = self.value_head(out.hidden_states[-1][:, :-1]).squeeze(-1)
        return logp, values

    @torch.no_grad()
    def logprobs(self, samples: list[Sample]) -> list[list[float]]:
        """The trainer's log-probs of each sample's completion tokens (for checks against vLLM)."""
        t = {k: v.to(self.device) for k, v in collate(samples, self.pad_id).items()}
        logp, _ = self._forward(t, self.module)
        out = []
        for r, s in enumerate(samples):
            P = len(s.prompt)
            out.append(logp[r, P - 1 : P - 1 + len(s.completion)].tolist())
        return out

    def _loss(self, t: dict, n_global: int) -> tuple[torch.Tensor, dict]:
        logp, values = self._forward(t)
        w = t["weight"]
        if self.cfg.name == "ppo":
            mask = (t["mask"] > 0).float()
            old_v = values.detach() * mask
            adv, ret = A.gae(A.terminal_rewards(t["reward"], mask), old_v, mask, self.cfg.gamma, self.cfg.lam)
            adv = A.whiten(adv, mask)
        else:
            adv = t["advantage"]
        behav = t["behav_logp"] if self.cfg.decoupled else None
        old = t["behav_logp"] if self.cfg.ratio_to_behaviour and not self.cfg.decoupled else logp.detach()
        loss, stats = A.policy_loss(logp, old, adv, w, self.cfg.clip_eps, behav, self.cfg.behav_cap)
        if self.cfg.name == "ppo":
            vl = A.value_loss(values, old_v, ret, w)
            loss = loss + self.cfg.vf_coef * vl
            stats["value_loss"] = vl.item() / max(1, t["input_ids"].shape[0])
        if self.ref is not None:
            with torch.no_grad():
                ref_logp, _ = self._forward(t, self.ref)
            kl = A.kl_k3(logp, ref_logp, w)
            loss = loss + self.cfg.kl_coef * kl
            stats["kl"] = kl.item() / max(1, t["input_ids"].shape[0])
        with torch.no_grad():
            stats["behav_abs_diff"] = ((logp - t["behav_logp"]).abs() * (t["mask"] > 0)).sum().item()
            stats["tokens"] = (t["mask"] > 0).sum().item()
        # DDP averages gradients over ranks; scale so the result is the sum over the global batch / n_global.
        return loss * self.world / n_global, stats

    # -- a step, possibly in chunks --------------------------------------------------------------
    def accumulate(self, samples: list[Sample], n_global: int, n_micro: int, last: bool) -> float:
        """Add the gradient of this rank's share of one chunk, in exactly `n_micro` micro-batches.

        Every rank runs the same number of micro-batches (DDP needs matching collectives); a rank
        with fewer samples runs a zero-weight micro-batch. Gradients are all-reduced only on the
        last micro-batch of the last chunk of the step (`last`).
        """
        t0 = time.perf_counter()
        self.model.train()
        parts = [samples[i::n_micro] for i in range(n_micro)]
        for i, part in enumerate(parts):
            dummy = not part
            t = collate(part or samples[:1] or [_DUMMY], self.pad_id)
            if dummy:
                t["weight"] = torch.zeros_like(t["weight"])
            t = {k: v.to(self.device) for k, v in t.items()}
            sync = last and i == n_micro - 1
            ctx = self.model.no_sync() if (hasattr(self.model, "no_sync") and not sync) else contextlib.nullcontext()
            with ctx:
                loss, stats = self._loss(t, n_global)
                loss.backward()
            if not dummy:
                self._acc_stats.append(stats)
        dt = time.perf_counter() - t0
        self.busy_s += dt
        return dt

    def apply(self, lr: float | None = None) -> dict:
        """Clip, take the optimizer step (at `lr` when given: the driver owns the schedule), zero grads."""
        t0 = time.perf_counter()
        if lr is not None:
            for g in self.opt.param_groups:
                g["lr"] = lr
        params = [p for g in self.opt.param_groups for p in g["params"]]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm).item()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        st, self._acc_stats = self._acc_stats, []
        tokens = sum(s["tokens"] for s in st)
        out = {"grad_norm": grad_norm, "tokens": tokens, "lr": self.opt.param_groups[0]["lr"],
               "behav_abs_diff_mean": sum(s["behav_abs_diff"] for s in st) / max(1, tokens),
               "clip_frac": sum(s["clip_frac"] for s in st) / max(1, len(st)),
               "behav_weight": sum(s["behav_weight"] for s in st) / max(1, len(st))}
        for k in ("kl", "value_loss"):
            if st and k in st[0]:
                out[k] = sum(s[k] for s in st) / len(st)
        self.busy_s += time.perf_counter() - t0
        out["busy_s"], self.busy_s = self.busy_s, 0.0
        return out | self.memory()

    # -- weights, context switch, checkpoints ----------------------------------------------------------
    def state_items(self) -> list:
        """The full model state dict (tied lm_head included) as (name, tensor) pairs, on CPU."""
        if self.device.type == "cuda" and self.sharding in ("zero3", "fsdp") and self.world > 1:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

            sd = get_model_state_dict(self.module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
            return list(sd.items())
        return [(k, v.detach().to("cpu", copy=True)) for k, v in self.module.state_dict().items()]

    def iter_full_state(self, bucket_bytes: int):
        """The full model state (HF names, tied lm_head.weight included) in buckets of at most
        `bucket_bytes` (a larger tensor is a bucket of its own), as lists of (name, full tensor).

        Sharded parameters (FSDP2 DTensors) are gathered one at a time with `full_tensor()`, a
        collective: every rank must iterate to the end. Only one bucket is materialised at a time.
        """
        full = ((k, v.full_tensor() if hasattr(v, "full_tensor") else v) for k, v in self.module.state_dict().items())
        yield from WS.buckets(((k, v.detach()) for k, v in full), bucket_bytes)

    def broadcast_weights(self, version: int, bucket_bytes: int = WS.BUCKET_BYTES) -> dict:
        """Send weights `version` to the engines over this rank's sync groups (see weight_sync.py).
        Called on every rank: all gather, the group sources (rank 0) also send."""
        return WS.send(self._sync, version, self.iter_full_state(bucket_bytes), self.device)

    def offload(self) -> float:
        """Colocated context switch, training side: move optimizer state (and on GPU the weights) out.

        On GPU the tensors go to host memory. On CPU there is no device memory to free, so the
        optimizer moments are packed into one flat holding buffer and the originals released
        (grads are already None between steps): the measured cost is that copy.
        """
        t0 = time.perf_counter()
        if self._offloaded is None:
            hold = {}
            for p, st in self.opt.state.items():
                for k, v in list(st.items()):
                    if torch.is_tensor(v) and v.dim() > 0:
                        hold[(id(p), k)] = v.to("cpu", copy=True)
                        st[k] = None
            self._offloaded = hold
            if self.device.type == "cuda":
                self.module.to("cpu")
                torch.cuda.empty_cache()
        return time.perf_counter() - t0

    def onload(self) -> float:
        t0 = time.perf_counter()
        if self._offloaded is not None:
            if self.device.type == "cuda":
                self.module.to(self.device)
            for p, st in self.opt.state.items():
                for k in list(st.keys()):
                    if (id(p), k) in self._offloaded:
                        st[k] = self._offloaded[(id(p), k)].to(self.device)
            self._offloaded = None
        return time.perf_counter() - t0

    def save(self, path: str) -> None:
        if self.rank == 0:
            self.onload()
            state = {"model": self.module.state_dict(), "optimizer": self.opt.state_dict(),
                     "value_head": self.value_head.state_dict() if self.value_head is not None else None}
            tmp = path + ".tmp"
            torch.save(state, tmp)
            os.replace(tmp, path)
        if self.world > 1:
            dist.barrier()

    def load(self, path: str) -> None:
        state = torch.load(path, map_location=self.device, weights_only=True)
        self.module.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        if self.value_head is not None and state.get("value_head"):
            self.value_head.load_state_dict(state["value_head"])

    def memory(self) -> dict:
        if self.device.type == "cuda":
            return {"train_gpu_gb": torch.cuda.max_memory_allocated() / 2**30, "train_rss_gb": rss_gb()}
        return {"train_rss_gb": rss_gb()}

    def shutdown(self) -> None:
        self.sync_close()
        if dist.is_initialized():
            dist.destroy_process_group()


_DUMMY = Sample(sample_id=-1, prompt=[0, 0], completion=[0], behav_logp=[0.0], reward=0.0, advantage=0.0, version=0)
