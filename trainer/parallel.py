"""The training layout of a plan on one rank: a dp x tp x pp device mesh and the model cut to fit it.

Rank order is (pp, dp, tp), tp innermost, so a tensor-parallel group sits on neighbouring devices
(one node) as the planner assumes. What each piece does:

- tensor parallelism (Megatron layout): q/k/v and gate/up projections column-parallel, o and down
  projections row-parallel (`parallelize_module`); embeddings, norms and the tied lm_head stay
  replicated, so their gradients are equal on every tp rank without communication.
- pipeline parallelism: the decoder layers are cut into `pp` contiguous stages (`stage_bounds`);
  stage 0 also holds the embedding, the last stage the final norm and lm_head. Micro-batches run
  under `torch.distributed.pipelining` (1F1B; GPipe when there are fewer micro-batches than stages).
  With tied embeddings the first and last stage hold the same matrix: their gradients are summed
  over the pp group before the update, so both copies stay identical (as Megatron does).
- sharding over the dp group: `zero3`/`fsdp` = FSDP2 `fully_shard` per decoder layer and on the
  stage (weights, gradients and optimizer state sharded); `zero1` = gradients all-reduced, each
  rank keeps Adam state for and updates only the parameters it owns, then broadcasts them; `zero2`
  = as zero1 but gradients are reduced to their owner only; `none` = gradients all-reduced.

Gradients are summed (not averaged) over dp: the loss is already divided by the global batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch



@dataclass(frozen=True)
class Coords:
    """Where a global rank sits in the (pp, dp, tp) mesh."""

    dp: int
    tp: int
    pp: int
    dp_idx: int
    tp_idx: int
    pp_idx: int

    @classmethod
    def of(cls, rank: int, dp: int, tp: int, pp: int) -> "Coords":
        return cls(dp, tp, pp, (rank // tp) % dp, rank % tp, rank // (tp * dp))

    def rank(self, dp_idx: int | None = None, tp_idx: int | None = None, pp_idx: int | None = None) -> int:
        d = self.dp_idx if dp_idx is None else dp_idx
        t = self.tp_idx if tp_idx is None else tp_idx
        p = self.pp_idx if pp_idx is None else pp_idx
        return (p * self.dp + d) * self.tp + t

    @property
    def first(self) -> bool:
        return self.pp_idx == 0

    @property
    def last(self) -> bool:
        return self.pp_idx == self.pp - 1


def stage_bounds(n_layers: int, pp: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) layer ranges of the pp stages, as even as possible (earlier stages
    take the remainder: they also hold the embedding's activations)."""
    if pp > n_layers:
        raise ValueError(f"pp={pp} exceeds the model's {n_layers} layers")
    base, extra = divmod(n_layers, pp)
    out, a = [], 0
    for s in range(pp):
        b = a + base + (1 if s < extra else 0)
        out.append((a, b))
        a = b
    return out


def check_layout(config, tp: int, pp: int) -> str | None:
    """Why the model cannot be cut as asked (None when it can)."""
    heads, kv = config.num_attention_heads, getattr(config, "num_key_value_heads", config.num_attention_heads)
    if tp > 1 and (heads % tp or kv % tp or config.intermediate_size % tp):
        return f"tp={tp} does not divide the model's {heads} attention heads / {kv} kv heads / {config.intermediate_size} MLP width"
    if pp > config.num_hidden_layers:
        return f"pp={pp} exceeds the model's {config.num_hidden_layers} layers"
    return None


class Groups:
    """The process groups of one rank: its dp group, its pp group (same dp, tp coordinate), and the mesh."""

    def __init__(self, rank: int, dp: int, tp: int, pp: int, device_type: str):
        from torch.distributed.device_mesh import init_device_mesh

        self.c = Coords.of(rank, dp, tp, pp)
        self.mesh = init_device_mesh(device_type, (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))
        self.dp_group = self.mesh.get_group("dp")
        self.pp_group = self.mesh.get_group("pp")
        self.tp_group = self.mesh.get_group("tp")
        self.dp_mesh = self.mesh["dp"]
        self.tp_mesh = self.mesh["tp"]


def apply_tp(layers, tp_mesh) -> None:
    """Megatron-style tensor parallelism on Qwen2/Llama-style decoder layers, in place."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    plan = {"self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
            "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(), "mlp.down_proj": RowwiseParallel()}
    for layer in layers:
        parallelize_module(layer, tp_mesh, plan)


class Stage(torch.nn.Module):
    """Pipeline stage `idx` of a causal LM: [embedding] + layers[a:b] + [final norm, lm_head].

    Inputs are right-padded, so causal attention alone keeps real tokens from seeing padding and the
    position of token t is t: no padding mask is needed (padded positions carry zero loss weight).
    """

    def __init__(self, lm, bounds: tuple[int, int], first: bool, last: bool):
        super().__init__()
        a, b = bounds
        inner = lm.model
        self.first, self.last = first, last
        self.embed_tokens = inner.embed_tokens if first else None
        self.layers = torch.nn.ModuleList(inner.layers[a:b])
        self.rotary_emb = inner.rotary_emb
        self.norm = inner.norm if last else None
        self.lm_head = lm.lm_head if last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed_tokens(x) if self.first else x
        L = h.shape[1]
        pos = torch.arange(L, device=h.device)[None].expand(h.shape[0], L)
        pe = self.rotary_emb(h, pos)
        mask = torch.full((L, L), torch.finfo(h.dtype).min, device=h.device, dtype=h.dtype).triu(1)[None, None]
        for layer in self.layers:
            h = layer(h, attention_mask=mask, position_ids=pos, position_embeddings=pe)
            h = h[0] if isinstance(h, tuple) else h
        if self.last:
            h = self.lm_head(self.norm(h))
        return h


def shard(module, layers, dp_mesh, cuda_offload: bool = False) -> None:
    """FSDP2 over the dp mesh: each decoder layer its own unit, the rest (embedding, norm, head) the root's."""
    from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

    kw = {"mesh": dp_mesh}
    if cuda_offload:
        kw["offload_policy"] = CPUOffloadPolicy()
    for layer in layers:
        fully_shard(layer, **kw)
    fully_shard(module, **kw)


def local(t: torch.Tensor) -> torch.Tensor:
    """The rank's own piece of a (possibly distributed) tensor."""
    return t.to_local() if hasattr(t, "to_local") else t


def count_params(module) -> int:
    """Parameters this rank holds (each shared tensor once), after TP/PP cutting and FSDP sharding."""
    seen, n = set(), 0
    for p in module.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        n += local(p).numel()
    return n


def owners(params: list, dp: int) -> list[int]:
    """ZeRO-1/2 partition: each parameter's owning dp index, greedily balancing element counts."""
    load, out = [0] * dp, []
    for p in sorted(range(len(params)), key=lambda i: -local(params[i]).numel()):
        d = min(range(dp), key=lambda k: load[k])
        load[d] += local(params[p]).numel()
        out.append((p, d))
    return [d for _, d in sorted(out)]


def sq_norm(grads: list) -> torch.Tensor:
    """Sum of squares of gradients over their full (unsharded) tensors, in float64 on the gradients'
    device: one value, read once by the caller (a read per tensor would stall a GPU's queue once per
    parameter tensor, hundreds of times a step)."""
    squares = []
    for g in grads:
        n = torch.linalg.vector_norm(g, 2, dtype=torch.float32)
        if hasattr(n, "full_tensor"):  # a norm over shards: reduce it before squaring
            n = n.full_tensor()
        squares.append(n.double() ** 2)
    return torch.stack(squares).sum() if squares else torch.zeros((), dtype=torch.float64)
