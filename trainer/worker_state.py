"""A training rank's state: its weights gathered in Hugging Face naming (for weight sync and export),
sent to the engines, moved out and back for a colocated context switch, and saved and loaded as
checkpoints. A mixin of `TrainWorker` (trainer/workers.py), which sets up what it reads: the model
(`model`, `module`), the layout (`c`, `g`, `tp`, `pp`, `dp`, `ep`, `epg`, `expert_names`, `tied`, `fsdp`,
`zero`), `_full_meta`
and `_names` (the full model's tensors and this rank's names for them), `opt`, `value_head`.
"""

from __future__ import annotations

import json
import os
import time

import torch
import torch.distributed as dist

from trainer import expert_parallel as EP
from trainer import parallel as PL
from trainer import weight_sync as WS


class WorkerState(WS.SyncEndpoint):
    @property
    def replicated(self) -> bool:
        """Every rank holds the whole model as plain tensors (no TP/PP cut, no FSDP, no EP)."""
        return self.tp == 1 and self.pp == 1 and not self.fsdp and self.ep == 1

    def iter_full_state(self, bucket_bytes: int):
        """The full model state in HF naming (tied lm_head included), bucket by bucket: lists of
        (name, full tensor) of about `bucket_bytes`. A collective when the model is cut or sharded:
        every rank must iterate it together; each yields the same full tensors. A rank materialises
        at most one bucket beyond its own shard: TP/FSDP pieces are gathered per tensor inside the
        stage that holds it, and that stage's rank broadcasts it over the pp group; EP-sharded experts
        are all-gathered over the EP group (trainer/expert_parallel.py)."""
        held = {self._names[k]: v for k, v in self.model.state_dict().items()}
        if self.pp > 1 and self.tied and self.c.last:
            held["model.embed_tokens.weight"] = held.get("lm_head.weight")
        bucket, size = [], 0
        for name, (shape, dtype) in self._full_meta.items():
            t = held.get(name)
            if t is not None:
                t = t.detach()
                t = t.full_tensor() if hasattr(t, "full_tensor") else t
                if name in self.expert_names:
                    t = EP.gather(t, self.epg)
            if self.pp > 1:
                src = self._stage_of(name)
                if t is None or self.c.pp_idx != src:
                    t = torch.empty(shape, dtype=dtype, device=self.device)
                dist.broadcast(t, src=self.c.rank(pp_idx=src), group=self.g.pp_group)
            bucket.append((name, t.to("cpu", copy=True)))
            size += t.numel() * t.element_size()
            if size >= bucket_bytes:
                yield bucket
                bucket, size = [], 0
        if bucket:
            yield bucket

    def _stage_of(self, name: str) -> int:
        """The pp stage that holds the HF tensor `name` (the tied embedding: stage 0)."""
        if name.startswith("model.layers."):
            i = int(name.split(".")[2])
            return next(s for s, (a, b) in enumerate(PL.stage_bounds(len(self._layer_names()), self.pp)) if a <= i < b)
        return 0 if name.startswith("model.embed_tokens") else self.pp - 1

    def _layer_names(self) -> set[int]:
        return {int(k.split(".")[2]) for k in self._full_meta if k.startswith("model.layers.")}

    def state_items(self) -> list:
        """The full model state dict (tied lm_head included) as (name, tensor) pairs, on CPU. When the
        model is cut or sharded this is a collective: call it on every rank; rank 0 returns the items,
        the others an empty list."""
        if self.replicated:
            return [(k, v.detach().to("cpu", copy=True)) for k, v in self.module.state_dict().items()]
        items = [x for b in self.iter_full_state(64 << 20) for x in b]
        return items if self.rank == 0 else []

    def broadcast_weights(self, version: int, bucket_bytes: int = WS.BUCKET_BYTES) -> dict:
        """Send weights `version` to the engines over this rank's sync groups (see weight_sync.py).
        Called on every rank: all gather, the group sources (rank 0) also send. A replica that sources
        no group has nothing to gather with the others, so it copies nothing (on two CPU cores its copy
        took a core from an engine's reload; on a GPU it would be a full device-to-host copy)."""
        if self.replicated and (self._sync is None or not self._sync.send):
            return WS.send(None, version, iter(()), self.device)
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
                self.model.to("cpu")
                torch.cuda.empty_cache()
        return time.perf_counter() - t0

    def onload(self) -> float:
        t0 = time.perf_counter()
        if self._offloaded is not None:
            if self.device.type == "cuda":
                self.model.to(self.device)
            for p, st in self.opt.state.items():
                for k in list(st.keys()):
                    if (id(p), k) in self._offloaded:
                        st[k] = self._offloaded[(id(p), k)].to(self.device)
            self._offloaded = None
        return time.perf_counter() - t0

    def _own_file(self, path: str) -> str | None:
        """Where this rank's checkpoint state goes: replicated ranks share rank 0's file; a cut or
        sharded layout (or ZeRO-1/2 optimizer state) keeps one file per rank."""
        per_rank = not self.replicated or self.zero
        if self.rank == 0:
            return path
        return path.replace(".pt", f".rank{self.rank}.pt") if per_rank else None

    def save(self, path: str) -> None:
        """This rank's state (see `_own_file`); rank 0 also writes layout.json beside it: the layout and
        base model that `mosearch export-model` rebuilds to merge the ranks' files."""
        out = self._own_file(path)
        if self.rank == 0:
            meta = os.path.join(os.path.dirname(path), "layout.json")
            with open(meta + ".tmp", "w") as f:
                json.dump({**self.layout, "files": self.world if not self.replicated or self.zero else 1}, f)
            os.replace(meta + ".tmp", meta)
        if out is not None:
            self.onload()
            state = {"model": self.model.state_dict(), "optimizer": self.opt.state_dict(),
                     "value_head": self.value_head.state_dict() if self.value_head is not None else None}
            tmp = out + ".tmp"
            torch.save(state, tmp)
            os.replace(tmp, out)
        if self.world > 1:
            dist.barrier()

    def load(self, path: str) -> None:
        own = self._own_file(path) or path
        # a cut or sharded layout's files hold DTensors, which the weights-only unpickler refuses
        state = torch.load(own, map_location=self.device, weights_only=self.replicated)
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        if self.value_head is not None and state.get("value_head"):
            self.value_head.load_state_dict(state["value_head"])
