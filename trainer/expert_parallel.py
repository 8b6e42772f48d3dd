"""Expert parallelism (EP) of mixture-of-experts layers over the training ranks, as Megatron-core and
DeepSpeed-MoE lay it out: with `ep` = E, consecutive groups of E data-parallel ranks form an
expert-parallel group, and rank i of a group holds experts [i * n/E, (i + 1) * n/E) of every MoE layer.

- dispatch and combine: each rank routes its own tokens (the router is replicated), sends every
  (token, expert) pair to the rank holding that expert with one `all_to_all_single` over the EP group,
  the owner runs its experts on what it received, and a second all-to-all brings the outputs back, where
  they are weighted by the routing probabilities and summed per token. Backward runs the same two
  exchanges in reverse (`_AllToAll`), so an expert's gradient on its owner covers every token of the
  EP group routed to it. gloo runs `all_to_all_single` with uneven splits on CPU (torch 2.13; checked
  by the equivalence test, tests/trainer/test_expert_parallel.py).
- gradients: the non-expert parameters (attention, norms, router, embeddings) are replicated and
  all-reduced over every data-parallel rank, as in plain DP; an expert's gradient is all-reduced only over
  its expert-data-parallel group, the ranks at the same position of every EP group (they hold the same
  experts and saw the rest of the batch).
- gathering (weight sync, checkpoint export): each expert tensor is all-gathered over the EP group and
  concatenated in expert order, giving the full Hugging Face tensor.

This runs Qwen3-MoE-style blocks (`mlp.experts` holding fused `gate_up_proj` [n, 2f, h] and `down_proj`
[n, h, f], `mlp.gate` the top-k router), as transformers 5 builds Qwen3MoeForCausalLM.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

# the fused expert tensors of a Qwen3-MoE block in transformers' in-memory naming
EXPERT_TENSORS = ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")


def num_experts(config) -> int:
    """Routed experts per MoE layer (0: a dense model)."""
    return int(getattr(config, "num_experts", 0) or 0)


def is_expert(name: str) -> bool:
    return name.endswith(EXPERT_TENSORS)


def layout_problem(config, ep: int, world: int, tp: int, pp: int, sharding: str) -> str | None:
    """Why `ep` cannot run with this model and layout (None when it can)."""
    if ep == 1:
        return None
    n = num_experts(config)
    if n == 0:
        return f"ep={ep} needs a mixture-of-experts model; {getattr(config, 'model_type', 'this model')} is dense"
    if n % ep:
        return f"ep={ep} does not divide the model's {n} experts"
    if tp > 1 or pp > 1:
        return f"ep={ep} runs with tp=1 and pp=1 in this trainer (the plan has tp={tp} pp={pp})"
    if sharding != "none":
        return f"ep={ep} runs with sharding none in this trainer (the plan has {sharding})"
    if world % ep:
        return f"ep={ep} does not divide the {world} training ranks"
    return None


class EPGroups:
    """The EP and expert-data-parallel groups of one rank (every rank creates every group, in order)."""

    def __init__(self, rank: int, world: int, ep: int):
        self.ep, self.ep_idx = ep, rank % ep
        self.ep_group = self.edp_group = None
        for g in range(world // ep):  # EP groups: consecutive ranks
            ranks = list(range(g * ep, (g + 1) * ep))
            pg = dist.new_group(ranks)
            if rank in ranks:
                self.ep_group = pg
        self.edp_size = world // ep
        for i in range(ep):  # expert-DP groups: the same position in every EP group
            ranks = list(range(i, world, ep))
            pg = dist.new_group(ranks)
            if rank in ranks:
                self.edp_group = pg


class _AllToAll(torch.autograd.Function):
    """`all_to_all_single` along dim 0 with autograd: the backward sends the gradients back the way
    the rows came."""

    @staticmethod
    def forward(ctx, x, out_splits: list[int], in_splits: list[int], group):
        ctx.splits, ctx.group = (out_splits, in_splits), group
        out = x.new_empty((sum(out_splits), *x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        out_splits, in_splits = ctx.splits
        back = grad.new_empty((sum(in_splits), *grad.shape[1:]))
        dist.all_to_all_single(back, grad.contiguous(), in_splits, out_splits, group=ctx.group)
        return back, None, None, None


class EPExperts(torch.nn.Module):
    """This rank's share of one layer's experts, in place of transformers' `Qwen3MoeExperts` (same
    parameter names and call: hidden [T, h], top-k expert indices and weights [T, k])."""

    def __init__(self, full, groups: EPGroups):
        super().__init__()
        n = full.num_experts
        self.num_experts, self.local = n, n // groups.ep
        self.first = groups.ep_idx * self.local
        self.group, self.ep = groups.ep_group, groups.ep
        sl = slice(self.first, self.first + self.local)
        self.gate_up_proj = torch.nn.Parameter(full.gate_up_proj.detach()[sl].clone())
        self.down_proj = torch.nn.Parameter(full.down_proj.detach()[sl].clone())
        self.act_fn = full.act_fn

    def forward(self, hidden: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor) -> torch.Tensor:
        T, k = top_k_index.shape
        expert = top_k_index.reshape(-1)
        # (token, expert) pairs sorted by expert: the rows for each owner are contiguous, experts in order
        order = torch.argsort(expert, stable=True)
        expert = expert[order]
        token = torch.div(order, k, rounding_mode="floor")
        weight = top_k_weights.reshape(-1)[order]
        send = torch.bincount(torch.div(expert, self.local, rounding_mode="floor"), minlength=self.ep)
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=self.group)  # how many rows each rank sends here
        send_l, recv_l = send.tolist(), recv.tolist()
        x = _AllToAll.apply(hidden[token], recv_l, send_l, self.group)
        got = torch.empty(sum(recv_l), dtype=expert.dtype, device=expert.device)
        dist.all_to_all_single(got, expert.contiguous(), recv_l, send_l, group=self.group)  # their experts (no grad)
        got -= self.first
        # tied to x's graph even when no row comes here (x[:0].sum() is 0): a rank must run the backward
        # all-to-alls whatever its routing, or the EP group's collectives fall out of step
        y = torch.zeros_like(x) + x[:0].sum()
        for j in range(self.local):
            rows = (got == j).nonzero().squeeze(1)
            if rows.numel() == 0:
                continue
            gate, up = torch.nn.functional.linear(x[rows], self.gate_up_proj[j]).chunk(2, dim=-1)
            y = y.index_add(0, rows, torch.nn.functional.linear(self.act_fn(gate) * up, self.down_proj[j]))
        back = _AllToAll.apply(y, send_l, recv_l, self.group)
        out = torch.zeros_like(hidden)
        return out.index_add(0, token, (back * weight[:, None]).to(hidden.dtype))


def apply_ep(module, groups: EPGroups) -> list[str]:
    """Replace every MoE layer's experts by this rank's share, in place; the names (in the module's
    state-dict naming) of the expert tensors, now sharded over the EP group."""
    names = []
    for name, sub in list(module.named_modules()):
        if name.endswith("mlp.experts") and hasattr(sub, "gate_up_proj"):
            parent = module.get_submodule(name.rsplit(".", 1)[0])
            parent.experts = EPExperts(sub, groups)
            names += [f"{name}.gate_up_proj", f"{name}.down_proj"]
    return names


def gather(t: torch.Tensor, groups: EPGroups) -> torch.Tensor:
    """The full expert tensor from each EP rank's share (concatenated in expert order)."""
    parts = [torch.empty_like(t) for _ in range(groups.ep)]
    dist.all_gather(parts, t.contiguous(), group=groups.ep_group)
    return torch.cat(parts, 0)


def checkpoint_items(items):
    """(name, tensor) pairs in the naming of a saved Hugging Face checkpoint, which vLLM's loader
    reads: transformers 5 holds a Qwen3-MoE layer's experts fused (`experts.gate_up_proj` [n, 2f, h],
    `experts.down_proj` [n, h, f]) but saves, and vLLM loads, one `experts.{i}.gate_proj` / `up_proj` /
    `down_proj` weight per expert. Other tensors pass unchanged."""
    for name, t in items:
        if name.endswith(".mlp.experts.gate_up_proj"):
            base = name[: -len("gate_up_proj")]
            gate, up = t.chunk(2, dim=1)
            for i in range(t.shape[0]):
                yield f"{base}{i}.gate_proj.weight", gate[i]
                yield f"{base}{i}.up_proj.weight", up[i]
        elif name.endswith(".mlp.experts.down_proj"):
            base = name[: -len("down_proj")]
            for i in range(t.shape[0]):
                yield f"{base}{i}.down_proj.weight", t[i]
        else:
            yield name, t
