"""Training workers: one process per device of the plan's dp x tp x pp layout, hosted in a Ray actor.

gloo on CPU, NCCL on GPU; the model is cut and sharded by `trainer.parallel` (TP, PP stages, FSDP2,
ZeRO-1/2), a mixture-of-experts model's experts by `trainer.expert_parallel` (EP). A step may arrive
in chunks (elastic pipelining): `accumulate` adds one chunk's gradient (micro-batched), `apply`
synchronises gradients over dp, clips and takes the optimizer step. With one
optimizer step per batch the proximal policy of the decoupled objective is the current policy, so
its log-probs are the detached log-probs of the same forward pass.
"""

from __future__ import annotations

import contextlib
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from problems.placement.names import params_sharded_by
from trainer import algorithms as A
from trainer import expert_parallel as EP
from trainer import parallel as PL
from trainer import weight_sync as WS
from trainer.batch import Sample, collate
from trainer.rollout.common import rss_gb
from trainer.worker_state import WorkerState


class TrainWorker(WorkerState):
    """One training rank of a dp x tp x pp layout (see `trainer.parallel`): the model cut to the layout,
    the loss (trainer/algorithms.py), micro-batches and the pipeline schedule, the optimizer step.
    Its weights, context switch and checkpoints are `WorkerState`'s (trainer/worker_state.py)."""

    def __init__(self, model_path: str, rank: int, world_size: int, master_port: int, algo: dict,
                 micro_batch: int, sharding: str = "none", seed: int = 0, pad_id: int = 0, tp: int = 1, pp: int = 1,
                 recompute: bool = False, optimizer_offload: bool = False, master_addr: str = "127.0.0.1",
                 precision: str = "fp32", ep: int = 1):
        from transformers import AutoModelForCausalLM

        self.rank, self.world = rank, world_size
        self.tp, self.pp, self.ep = tp, pp, ep
        # what a checkpoint's reader needs to rebuild this layout (trainer/export_model.py)
        self.layout = {"model_path": str(model_path), "world": world_size, "tp": tp, "pp": pp, "ep": ep,
                       "sharding": sharding,
                       "algo": dict(algo), "micro_batch": micro_batch, "pad_id": pad_id,
                       "optimizer_offload": optimizer_offload}
        self.dp = world_size // (tp * pp)
        self.cfg = A.AlgoConfig(**algo)
        self.objective = A.objective(self.cfg)
        self.micro_batch, self.pad_id = micro_batch, pad_id
        self.device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
        self.set_precision(run_precision(precision, self.device.type)[0])
        torch.manual_seed(seed)
        # rank 0's node address (TrainGroup.spawn finds it), so ranks on other machines meet there
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = master_addr, str(master_port)
        if world_size > 1 and not dist.is_initialized():
            # the rendezvous store listens on MASTER_ADDR only (torch's binds every interface)
            store = WS.tcp_store(os.environ["MASTER_ADDR"], master_port, world_size, rank == 0,
                                 dist.constants.default_pg_timeout)
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo", store=store, rank=rank,
                                    world_size=world_size)
        module = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).to(self.device)
        why = EP.layout_problem(module.config, ep, world_size, tp, pp, sharding)
        if why:
            raise ValueError(why)
        if recompute:  # activation recomputation: HF's layers checkpoint themselves once enabled
            module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        # every tensor of the full model, in HF naming (tied lm_head included), for gathering it back
        self._full_meta = {k: (tuple(v.shape), v.dtype) for k, v in module.state_dict().items()}
        self.tied = bool(getattr(module.config, "tie_word_embeddings", False))
        # activation shapes between pipeline stages: hidden states (fp32: the residual stream stays fp32 under
        # autocast), and logits after the last (in `work_dtype`, as the lm_head gives them)
        self.hidden, self.vocab, self.dtype = module.config.hidden_size, module.lm_head.out_features, torch.float32
        self.sharding = sharding
        self.g = PL.Groups(rank, self.dp, tp, pp, self.device.type) if world_size > 1 else None
        self.c = self.g.c if self.g else PL.Coords.of(0, 1, 1, 1)
        if tp > 1:
            PL.apply_tp(module.model.layers, self.g.tp_mesh)
        # EP: this rank keeps 1/ep of every MoE layer's experts (names in the module's state-dict naming)
        self.epg = EP.EPGroups(rank, world_size, ep) if ep > 1 else None
        self.expert_names = set(EP.apply_ep(module, self.epg)) if ep > 1 else set()
        self.bounds = PL.stage_bounds(module.config.num_hidden_layers, pp)[self.c.pp_idx]
        if pp > 1:
            stage = PL.Stage(module, self.bounds, self.c.first, self.c.last)
            self.module, self.model = None, stage  # the layers of other stages are dropped
            self._names = self._stage_names()
        else:
            self.module = self.model = module
            self._names = {k: k for k in module.state_dict()}
        self.fsdp = params_sharded_by(sharding, self.dp)
        if self.fsdp:
            PL.shard(self.model, self.model.layers if pp > 1 else self.model.model.layers, self.g.dp_mesh,
                     cuda_offload=optimizer_offload and self.device.type == "cuda")
        self.value_head = None
        params = _unique(self.model.parameters())
        if self.objective.critic:  # a value head on the policy's last hidden state
            self.value_head = torch.nn.Linear(module.config.hidden_size, 1).to(self.device)
            torch.nn.init.zeros_(self.value_head.weight)
            torch.nn.init.zeros_(self.value_head.bias)
            params += list(self.value_head.parameters())
        self.ref = None
        if self.cfg.kl_coef > 0:  # frozen: kept in the working dtype (2 bytes per parameter in bf16, as the model
            # counts a reference), which autocast would run its matmuls in anyway
            self.ref = AutoModelForCausalLM.from_pretrained(model_path, dtype=self.work_dtype).to(self.device).eval()
            self.ref.requires_grad_(False)
        self.params = params
        named = dict(self.model.named_parameters())
        self.expert_ids = {id(named[n]) for n in self.expert_names}  # EP-sharded parameters
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
        out = {"rank": self.rank, "dp_idx": self.c.dp_idx, "tp_idx": self.c.tp_idx, "pp_idx": self.c.pp_idx,
               "layers": list(self.bounds), "params": self.params_held}
        if self.epg is not None:  # the experts [first, end) of every MoE layer this rank holds
            n = self._experts() // self.ep
            out |= {"ep_idx": self.epg.ep_idx, "experts": [self.epg.ep_idx * n, (self.epg.ep_idx + 1) * n]}
        return out

    def _experts(self) -> int:
        return next(m.num_experts for m in self.model.modules() if isinstance(m, EP.EPExperts))

    # -- forward ------------------------------------------------------------------------------
    def _forward(self, t: dict, model=None) -> tuple[torch.Tensor, torch.Tensor | None, float]:
        """Per-position log-prob of the next token [B, L-1], the summed entropy of the next-token
        distributions over the response, and values [B, L-1] with a critic (else None)."""
        model = model or self.model
        with self.amp():
            out = model(input_ids=t["input_ids"], attention_mask=t["attention_mask"],
                        output_hidden_states=self.value_head is not None and model is not self.ref)
            values = (self.value_head(out.hidden_states[-1][:, :-1]).squeeze(-1).float()
                      if self.value_head is not None and model is not self.ref else None)
        return self._token_logp(out.logits, t) + (values,)

    def set_precision(self, precision: str) -> None:
        """Train in `precision` (one `run_precision` gives): the dtype autocast computes in (the logits'
        between pipeline stages, the reference's), and TF32 matmuls on or off (process-wide switches: this
        process is one rank)."""
        self.precision = self.layout["precision"] = precision
        self.work_dtype = AUTOCAST.get(precision, torch.float32)
        if self.device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision == "tf32"

    def amp(self):
        """Mixed precision as the plan's workload asks (`run_precision`): bf16 autocast over fp32 master
        weights, as PyTorch AMP and FSDP's MixedPrecision run it (16 bytes per parameter with Adam)."""
        dtype = AUTOCAST.get(self.precision)
        return torch.autocast(self.device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()

    @staticmethod
    def _token_logp(logits: torch.Tensor, t: dict, targets: torch.Tensor | None = None) -> tuple:
        """(log-prob of each next token [B, L-1], the summed entropy over the response positions), a chunk
        of positions at a time: autograd keeps each chunk's fp32 log-softmax (4 bytes per logit), while the
        fp32 copy of the logits and the entropy's temporaries exist for one chunk only (all at once, they
        took 14 bytes per bf16 logit at the forward's end, on top of every layer's activations)."""
        ids = t["input_ids"][:, 1:] if targets is None else targets
        rows, n = ids.shape
        step = max(1, LOSS_CHUNK_LOGITS // max(1, rows * logits.shape[-1]))
        parts, entropy = [], 0.0
        for a, piece in zip(range(0, n, step), logits[:, :-1].split(step, dim=1)):
            lsm = F.log_softmax(piece.float(), -1)
            parts.append(torch.gather(lsm, 2, ids[:, a:a + step, None]).squeeze(-1))
            with torch.no_grad():  # a statistic: no graph through it
                entropy += A.entropy_sum(lsm, t["mask"][:, a:a + step])
        return torch.cat(parts, 1), entropy

    @torch.no_grad()
    def logprobs(self, samples: list[Sample]) -> list[list[float]]:
        """The trainer's log-probs of each sample's completion tokens (for checks against vLLM)."""
        t = {k: v.to(self.device) for k, v in collate(samples, self.pad_id).items()}
        if self.module is None:
            raise NotImplementedError("log-probs for checks run on a pp=1 layout")
        logp, _, _ = self._forward(t, self.module)
        out = []
        for r, s in enumerate(samples):
            P = len(s.prompt)
            out.append(logp[r, P - 1 : P - 1 + len(s.completion)].tolist())
        return out

    def _loss(self, t: dict, n_global: int) -> tuple[torch.Tensor, dict]:
        logp, ent, values = self._forward(t)
        loss, stats = self._objective(logp, values, t, ent)
        stats["loss"] = loss.item() / n_global
        # gradients are summed over dp ranks (FSDP2's reduce-scatter averages: undo that), so dividing
        # by the global batch gives the mean over it
        return loss * (self.dp if self.fsdp else 1) / n_global, stats

    def _objective(self, logp: torch.Tensor, values, t: dict, entropy: float) -> tuple[torch.Tensor, dict]:
        """The summed (not averaged) loss of a micro-batch (the algorithm's, trainer/algorithms.py) and
        its statistics' sums, from the policy's per-position log-probs."""
        ref_logp = None
        if self.ref is not None:
            with torch.no_grad():
                ref_logp, _, _ = self._forward(t, self.ref)
        loss, stats = self.objective.loss(logp, values, t, ref_logp)
        with torch.no_grad():
            stats["behav_abs_diff"] = ((logp - t["behav_logp"]).abs() * (t["mask"] > 0)).sum().item()
            stats["entropy_sum"] = entropy
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

        if not self.objective.pipelined or self.ref is not None:
            raise NotImplementedError(f"pipeline parallelism runs {self.cfg.name} without a critic or a KL reference")
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
            tt = {"weight": tgt[..., 1], "advantage": tgt[:, 0, 2], "behav_logp": tgt[..., 3], "mask": tgt[..., 4],
                  "input_ids": logits}
            logp, ent = self._token_logp(logits, tt, tgt[..., 0].long())
            loss, stats = self._objective(logp, None, tt, ent)
            stats["loss"] = loss.item() / n_global
            seen.append((stats, bool(tt["mask"].sum() > 0)))
            return loss * scale

        # Each micro-batch's shapes are known here, so the stage is given them (meta tensors): without
        # them the schedule infers them every step with a real forward and backward of a stand-in batch.
        n, seq = len(parts), ids.shape[1]
        # (requires_grad marks the activations whose gradients travel back between stages)
        hidden = torch.empty(rows, seq, self.hidden, dtype=self.dtype, device="meta", requires_grad=True)
        logits = torch.empty(rows, seq, self.vocab, dtype=self.work_dtype, device="meta", requires_grad=True)
        stage = PipelineStage(
            self.model, self.c.pp_idx, self.pp, self.device, group=self.g.pp_group,
            input_args=torch.empty(rows, seq, dtype=ids.dtype, device="meta") if self.c.first else hidden,
            output_args=logits if self.c.last else hidden)
        sched = (Schedule1F1B if n >= self.pp else ScheduleGPipe)(stage, n, loss_fn=loss_fn, scale_grads=False)
        with self.amp():
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
                if id(p) in self.expert_ids:  # an expert: summed over the ranks holding the same experts
                    if self.epg.edp_size > 1:
                        dist.all_reduce(p.grad, group=self.epg.edp_group)
                elif self.zero and self.sharding == "zero2":  # reduce to the owner only
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
        if self.epg is None:
            sq = PL.sq_norm(grads).to(self.device)  # NCCL reduces device tensors only
        else:  # each EP rank holds its experts' part of the norm; the rest is replicated
            mine = {id(p.grad) for p in self.params if id(p) in self.expert_ids}
            sq = PL.sq_norm([g for g in grads if id(g) in mine]).to(self.device)
            dist.all_reduce(sq, group=self.epg.ep_group)
            sq += PL.sq_norm([g for g in grads if id(g) not in mine]).to(self.device)
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
        out = {"grad_norm": grad_norm, "lr": self.opt.param_groups[0]["lr"], **A.reduce_stats(self._global_sums(st))}
        self.busy_s += time.perf_counter() - t0
        out["busy_s"], self.busy_s = self.busy_s, 0.0
        return out | self.memory()

    def _global_sums(self, st: list[dict]) -> list[dict]:
        """The micro-batches' statistic sums of the whole global batch: this replica's added up, then
        summed over the dp group (tp ranks of a replica saw the same samples; pp: the last stage's)."""
        if self.dp == 1:
            return st
        keys = [k for k in _SUM_KEYS if k not in ("kl_sum", "value_loss_sum")
                or (k == "kl_sum" and self.ref is not None) or (k == "value_loss_sum" and self.objective.critic)]
        v = torch.tensor([[s.get(k, 0.0) for k in keys] for s in st], dtype=torch.float64).sum(0) if st else \
            torch.zeros(len(keys), dtype=torch.float64)
        v = v.to(self.device)  # NCCL reduces device tensors only
        dist.all_reduce(v, group=self.g.dp_group)
        return [dict(zip(keys, v.tolist()))]

    def memory(self) -> dict:
        if self.device.type == "cuda":  # GB (1e9), as the model counts: PyTorch's peaks, allocated and reserved
            return {"train_gpu_gb": torch.cuda.max_memory_allocated() / 1e9,
                    "train_gpu_reserved_gb": torch.cuda.max_memory_reserved() / 1e9, "train_rss_gb": rss_gb()}
        return {"train_rss_gb": rss_gb()}

    def shutdown(self) -> None:
        self.sync_close()
        if dist.is_initialized():
            dist.destroy_process_group()


# logits per chunk of the loss's log-softmax (`TrainWorker._token_logp`): 128 MB of fp32 temporaries
LOSS_CHUNK_LOGITS = 1 << 25
# autocast dtypes of the precisions that train under autocast (the rest run fp32 storage and matmuls)
AUTOCAST = {"bf16": torch.bfloat16}


def run_precision(requested: str, device: str) -> tuple[str, str | None]:
    """The precision a training rank runs for the workload's `requested` one, and one line for the run's
    notes when that differs. On CPU every rank trains in fp32 (what the CPU runs and is predicted in); on
    GPU bf16 trains under autocast, tf32 and fp32 as fp32 with TF32 matmuls allowed or not; fp16 and fp8
    train as bf16 (this trainer has no fp16 loss scaling and no fp8 matmuls)."""
    if device != "cuda":
        return "fp32", None if requested == "fp32" else f"precision: the workload's {requested} trains in fp32 on CPU"
    if requested in ("fp16", "fp8"):
        return "bf16", (f"precision: the workload's {requested} trains as bf16 autocast (this trainer has no "
                        + ("fp16 loss scaling)" if requested == "fp16" else "fp8 matmuls)"))
    if requested not in ("bf16", "tf32", "fp32"):
        raise ValueError(f"precision: {requested!r} is not one of bf16, fp16, fp8, tf32, fp32")
    return requested, None


_SUM_KEYS = ("loss", "tokens", "clip_tokens", "behav_weight_sum", "sequences", "entropy_sum", "behav_abs_diff",
             "kl_sum", "value_loss_sum")
_DUMMY = Sample(sample_id=-1, prompt=[0, 0], completion=[0], behav_logp=[0.0], reward=0.0, advantage=0.0, version=0)


def _unique(params) -> list:
    seen, out = set(), []
    for p in params:
        if id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out
