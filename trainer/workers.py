"""Training workers: one process per device of the plan's dp x tp x pp layout, hosted in a Ray actor.

gloo on CPU, NCCL on GPU; the model is cut and sharded by `trainer.parallel` (TP, PP stages, FSDP2,
ZeRO-1/2). A step may arrive in chunks (elastic pipelining): `accumulate` adds one chunk's gradient
(micro-batched), `apply` synchronises gradients over dp, clips and takes the optimizer step. With one
optimizer step per batch the proximal policy of the decoupled objective is the current policy, so
its log-probs are the detached log-probs of the same forward pass.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from trainer import algorithms as A
from trainer import parallel as PL
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
    # "sgd" (plain, no momentum) makes the step linear in the gradient: the layout-equivalence tests
    # use it, since Adam's first step is ~lr * sign(g) and a CPU's rounding of a near-zero element
    # flips it
    optimizer: str = "adamw"  # adamw | sgd


class TrainWorker(WS.SyncEndpoint):
    """One training rank of a dp x tp x pp layout (see `trainer.parallel`)."""

    def __init__(self, model_path: str, rank: int, world_size: int, master_port: int, algo: dict,
                 micro_batch: int, sharding: str = "none", seed: int = 0, pad_id: int = 0, tp: int = 1, pp: int = 1,
                 recompute: bool = False, optimizer_offload: bool = False):
        from transformers import AutoModelForCausalLM

        self.rank, self.world = rank, world_size
        self.tp, self.pp = tp, pp
        self.dp = world_size // (tp * pp)
        self.cfg = AlgoConfig(**algo)
        self.micro_batch, self.pad_id = micro_batch, pad_id
        self.device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
        torch.manual_seed(seed)
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ["MASTER_PORT"] = str(master_port)
        if world_size > 1 and not dist.is_initialized():
            # the rendezvous store listens on MASTER_ADDR only (torch's binds every interface)
            store = WS.tcp_store(os.environ["MASTER_ADDR"], master_port, world_size, rank == 0,
                                 dist.constants.default_pg_timeout)
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo", store=store, rank=rank,
                                    world_size=world_size)
        module = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).to(self.device)
        if recompute:  # activation recomputation: HF's layers checkpoint themselves once enabled
            module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        # every tensor of the full model, in HF naming (tied lm_head included), for gathering it back
        self._full_meta = {k: (tuple(v.shape), v.dtype) for k, v in module.state_dict().items()}
        self.tied = bool(getattr(module.config, "tie_word_embeddings", False))
        # activation shapes between pipeline stages: hidden states, and logits after the last
        self.hidden, self.vocab, self.dtype = module.config.hidden_size, module.lm_head.out_features, torch.float32
        self.sharding = sharding
        self.g = PL.Groups(rank, self.dp, tp, pp, self.device.type) if world_size > 1 else None
        self.c = self.g.c if self.g else PL.Coords.of(0, 1, 1, 1)
        if tp > 1:
            PL.apply_tp(module.model.layers, self.g.tp_mesh)
        self.bounds = PL.stage_bounds(module.config.num_hidden_layers, pp)[self.c.pp_idx]
        if pp > 1:
            stage = PL.Stage(module, self.bounds, self.c.first, self.c.last)
            self.module, self.model = None, stage  # the layers of other stages are dropped
            self._names = self._stage_names()
        else:
            self.module = self.model = module
            self._names = {k: k for k in module.state_dict()}
        self.fsdp = sharding in ("zero3", "fsdp") and self.dp > 1
        if self.fsdp:
            PL.shard(self.model, self.model.layers if pp > 1 else self.model.model.layers, self.g.dp_mesh,
                     cuda_offload=optimizer_offload and self.device.type == "cuda")
        self.value_head = None
        params = _unique(self.model.parameters())
        if self.cfg.name == "ppo":  # critic: a value head on the policy's last hidden state
            self.value_head = torch.nn.Linear(module.config.hidden_size, 1).to(self.device)
            torch.nn.init.zeros_(self.value_head.weight)
            torch.nn.init.zeros_(self.value_head.bias)
            params += list(self.value_head.parameters())
        self.ref = None
        if self.cfg.kl_coef > 0:
            self.ref = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).to(self.device).eval()
            self.ref.requires_grad_(False)
        self.params = params
        # ZeRO-1/2: this rank keeps optimizer state only for the parameters it owns in its dp group
        self.zero = sharding in ("zero1", "zero2") and self.dp > 1
        self.owner = PL.owners(params, self.dp) if self.zero else [self.c.dp_idx] * len(params)
        mine = [p for p, o in zip(params, self.owner) if o == self.c.dp_idx]
        if self.cfg.optimizer == "sgd":
            self.opt = torch.optim.SGD(mine, lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)
        elif self.cfg.optimizer == "adamw":
            self.opt = torch.optim.AdamW(mine, lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)
        else:
            raise ValueError(f"optimizer: {self.cfg.optimizer!r} is not one of adamw, sgd")
        self.params_held = PL.count_params(self.model)
        self._offloaded: dict | None = None
        self._acc_stats: list[dict] = []
        self.busy_s = 0.0

    def _stage_names(self) -> dict[str, str]:
        """Stage-local state-dict name -> HF name (layer j of the stage is layer a + j of the model)."""
        a = self.bounds[0]
        out = {}
        for k in self.model.state_dict():
            if k.startswith("layers."):
                j, rest = k[len("layers."):].split(".", 1)
                out[k] = f"model.layers.{a + int(j)}.{rest}"
            elif k.startswith(("embed_tokens.", "norm.")):
                out[k] = "model." + k
            else:
                out[k] = k
        return out

    def layout_info(self) -> dict:
        """What this rank runs: its mesh coordinates, stage layers and the parameters it holds."""
        return {"rank": self.rank, "dp_idx": self.c.dp_idx, "tp_idx": self.c.tp_idx, "pp_idx": self.c.pp_idx,
                "layers": list(self.bounds), "params": self.params_held}

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
        if self.module is None:
            raise NotImplementedError("log-probs for checks run on a pp=1 layout")
        logp, _ = self._forward(t, self.module)
        out = []
        for r, s in enumerate(samples):
            P = len(s.prompt)
            out.append(logp[r, P - 1 : P - 1 + len(s.completion)].tolist())
        return out

    def _loss(self, t: dict, n_global: int) -> tuple[torch.Tensor, dict]:
        logp, values = self._forward(t)
        loss, stats = self._objective(logp, values, t)
        stats["loss"] = loss.item() / n_global
        # gradients are summed over dp ranks (FSDP2's reduce-scatter averages: undo that), so dividing
        # by the global batch gives the mean over it
        return loss * (self.dp if self.fsdp else 1) / n_global, stats

    def _objective(self, logp: torch.Tensor, values, t: dict) -> tuple[torch.Tensor, dict]:
        """The summed (not averaged) loss of a micro-batch, from the policy's per-position log-probs."""
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
        return loss, stats

    # -- a step, possibly in chunks --------------------------------------------------------------
    def accumulate(self, samples: list[Sample], n_global: int, n_micro: int, last: bool) -> float:
        """Add the gradient of this rank's share of one chunk, in exactly `n_micro` micro-batches.

        Every rank of a dp group runs the same number of micro-batches (FSDP's collectives must
        match); a rank with fewer samples runs zero-weight rows. Gradients are synchronised over dp
        in `apply`, once per optimizer step.
        """
        t0 = time.perf_counter()
        self.model.train()
        parts = [samples[i::n_micro] for i in range(n_micro)]
        if self.pp > 1:
            self._pipeline(parts, n_global)
        else:
            for part in parts:
                t = self._tensors(part)
                loss, stats = self._loss(t, n_global)
                loss.backward()
                if part:
                    self._acc_stats.append(stats)
        dt = time.perf_counter() - t0
        self.busy_s += dt
        return dt

    def _tensors(self, part: list[Sample], rows: int | None = None) -> dict:
        """Collated tensors of `part`, padded with zero-weight rows to `rows` (or one row when empty)."""
        rows = rows or max(1, len(part))
        t = collate(part + [_DUMMY] * (rows - len(part)), self.pad_id)
        if rows > len(part):
            t["weight"][len(part):] = 0.0
            t["mask"][len(part):] = 0.0
        return {k: v.to(self.device) for k, v in t.items()}

    def _pipeline(self, parts: list[list[Sample]], n_global: int) -> None:
        """Run the micro-batches through the pipeline stages (1F1B; GPipe if fewer than pp of them)."""
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        if self.cfg.name == "ppo" or self.ref is not None:
            raise NotImplementedError("pipeline parallelism runs GRPO without a KL reference")
        rows = max(1, max(map(len, parts)))
        # equal micro-batches (the schedule splits the batch evenly): each part padded to `rows`
        t = collate([x for p in parts for x in p + [_DUMMY] * (rows - len(p))], self.pad_id)
        real = torch.tensor([i < len(p) for p in parts for i in range(rows)])
        t["weight"][~real] = 0.0
        t["mask"][~real] = 0.0
        ids = t["input_ids"].to(self.device)
        # the loss target, one float tensor the schedule can split: next token, weight, advantage, behaviour log-prob, mask
        target = torch.stack([t["input_ids"][:, 1:].float(), t["weight"], t["advantage"][:, None].expand_as(t["weight"]),
                              t["behav_logp"], t["mask"]], -1).to(self.device)
        scale = (self.dp if self.fsdp else 1) / n_global
        seen: list[tuple[dict, bool]] = []

        def loss_fn(logits, tgt):
            logp = torch.gather(F.log_softmax(logits[:, :-1].float(), -1), 2, tgt[..., 0].long()[..., None]).squeeze(-1)
            tt = {"weight": tgt[..., 1], "advantage": tgt[:, 0, 2], "behav_logp": tgt[..., 3], "mask": tgt[..., 4],
                  "input_ids": logits}
            loss, stats = self._objective(logp, None, tt)
            stats["loss"] = loss.item() / n_global
            seen.append((stats, bool(tt["mask"].sum() > 0)))
            return loss * scale

        # Each micro-batch's shapes are known here, so the stage is given them (meta tensors): without
        # them the schedule infers them every step with a real forward and backward of a stand-in batch.
        n, seq = len(parts), ids.shape[1]
        # (requires_grad marks the activations whose gradients travel back between stages)
        hidden = torch.empty(rows, seq, self.hidden, dtype=self.dtype, device="meta", requires_grad=True)
        logits = torch.empty(rows, seq, self.vocab, dtype=self.dtype, device="meta", requires_grad=True)
        stage = PipelineStage(
            self.model, self.c.pp_idx, self.pp, self.device, group=self.g.pp_group,
            input_args=torch.empty(rows, seq, dtype=ids.dtype, device="meta") if self.c.first else hidden,
            output_args=logits if self.c.last else hidden)
        sched = (Schedule1F1B if n >= self.pp else ScheduleGPipe)(stage, n, loss_fn=loss_fn, scale_grads=False)
        if self.c.first:
            sched.step(ids)
        elif self.c.last:
            sched.step(target=target)
        else:
            sched.step()
        assert len(seen) == (n if self.c.last else 0), "the schedule ran a micro-batch that is not the batch's"
        self._acc_stats += [st for st, real in seen if real]

    def _sync_grads(self) -> list:
        """Make every rank's gradients those of the whole global batch; returns the gradients that
        count once toward the norm on this rank (its own ZeRO-2 share; not the tied head's twin)."""
        pairs = [(p, o) for p, o in zip(self.params, self.owner)]
        if self.pp > 1 and self.tied:  # first and last stage each hold a copy of the tied embedding
            if self.c.first:
                emb = self.model.embed_tokens.weight
            elif self.c.last:
                emb = self.model.lm_head.weight
            else:
                emb = None
            shape, dtype = self._full_meta["model.embed_tokens.weight"]
            g = PL.local(emb.grad) if emb is not None and emb.grad is not None else None
            buf = g if g is not None else torch.zeros(PL.local(emb).shape if emb is not None else shape, dtype=dtype,
                                                      device=self.device)
            dist.all_reduce(buf, group=self.g.pp_group)
            if emb is not None and emb.grad is None:
                emb.grad = buf
        if self.dp > 1 and not self.fsdp:
            for p, o in pairs:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                if self.zero and self.sharding == "zero2":  # reduce to the owner only
                    dist.reduce(PL.local(p.grad), dst=self.c.rank(dp_idx=o), group=self.g.dp_group)
                    if o != self.c.dp_idx:
                        p.grad = None
                else:
                    dist.all_reduce(PL.local(p.grad), group=self.g.dp_group)
        twin = self.model.lm_head.weight if self.pp > 1 and self.tied and self.c.last and not self.c.first else None
        return [p.grad for p in self.params if p.grad is not None and p is not twin]

    def apply(self, lr: float | None = None) -> dict:
        """Synchronise gradients, clip, take the optimizer step (at `lr` when given: the driver owns
        the schedule), zero grads."""
        t0 = time.perf_counter()
        if lr is not None:
            for g in self.opt.param_groups:
                g["lr"] = lr
        grads = self._sync_grads()
        sq = PL.sq_norm(grads)
        if self.g is not None:
            if self.zero and self.sharding == "zero2":
                dist.all_reduce(sq, group=self.g.dp_group)
            if self.pp > 1:
                dist.all_reduce(sq, group=self.g.pp_group)
        grad_norm = float(sq.sqrt())
        coef = self.cfg.max_grad_norm / (grad_norm + 1e-6)
        if coef < 1.0:  # as clip_grad_norm_, over the full (unsharded) gradient
            # every gradient this rank steps with, the tied head's twin included (the norm counts it
            # once; left unclipped, the last stage's copy of a tied embedding drifts from the first's)
            for p in self.params:
                if p.grad is not None:
                    p.grad.mul_(coef)
        self.opt.step()
        if self.zero:  # each owner's update goes to the rest of its dp group
            with torch.no_grad():
                for p, o in zip(self.params, self.owner):
                    dist.broadcast(PL.local(p.data), src=self.c.rank(dp_idx=o), group=self.g.dp_group)
        self.opt.zero_grad(set_to_none=True)
        for p in self.params:
            p.grad = None
        st, self._acc_stats = self._acc_stats, []
        if self.pp > 1:  # the loss (and its statistics) lives on the last stage
            box = [st]
            dist.broadcast_object_list(box, src=self.c.rank(pp_idx=self.pp - 1), group=self.g.pp_group)
            st = box[0]
        tokens = sum(s["tokens"] for s in st)
        out = {"grad_norm": grad_norm, "tokens": tokens, "loss": sum(s["loss"] for s in st), "lr": self.opt.param_groups[0]["lr"],
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
    @property
    def replicated(self) -> bool:
        """Every rank holds the whole model as plain tensors (no TP/PP cut, no FSDP)."""
        return self.tp == 1 and self.pp == 1 and not self.fsdp

    def iter_full_state(self, bucket_bytes: int):
        """The full model state in HF naming (tied lm_head included), bucket by bucket: lists of
        (name, full tensor) of about `bucket_bytes`. A collective when the model is cut or sharded:
        every rank must iterate it together; each yields the same full tensors. A rank materialises
        at most one bucket beyond its own shard: TP/FSDP pieces are gathered per tensor inside the
        stage that holds it, and that stage's rank broadcasts it over the pp group."""
        held = {self._names[k]: v for k, v in self.model.state_dict().items()}
        if self.pp > 1 and self.tied and self.c.last:
            held["model.embed_tokens.weight"] = held.get("lm_head.weight")
        bucket, size = [], 0
        for name, (shape, dtype) in self._full_meta.items():
            t = held.get(name)
            if t is not None:
                t = t.detach()
                t = t.full_tensor() if hasattr(t, "full_tensor") else t
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
        out = self._own_file(path)
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

    def memory(self) -> dict:
        if self.device.type == "cuda":
            return {"train_gpu_gb": torch.cuda.max_memory_allocated() / 2**30, "train_rss_gb": rss_gb()}
        return {"train_rss_gb": rss_gb()}

    def shutdown(self) -> None:
        self.sync_close()
        if dist.is_initialized():
            dist.destroy_process_group()


_DUMMY = Sample(sample_id=-1, prompt=[0, 0], completion=[0], behav_logp=[0.0], reward=0.0, advantage=0.0, version=0)


def _unique(params) -> list:
    seen, out = set(), []
    for p in params:
        if id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out
