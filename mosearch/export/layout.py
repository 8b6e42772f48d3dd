"""Where each GPU of a plan sits: pools cut into nodes, nodes in a stable order, global GPU indices.

Every exporter describes the same physical layout: a pool (one GPU type in one region) is cut into
nodes of its cluster's GPUs-per-node; inside a pool the rollout GPUs come first, then training
(colocated plans have only shared GPUs). Nodes are ordered rollout-only, mixed, training-only so
that each role gets one contiguous index range whenever the plan allows it (RLinf requires that).
"""

from __future__ import annotations

from dataclasses import dataclass

from problems.placement.plan import Plan, PoolRoles
from mosearch.export.context import ExportContext

ROLLOUT, TRAIN, SHARED = "rollout", "train", "shared"


@dataclass(frozen=True)
class Node:
    pool: str
    gpu: str
    region: str
    size: int  # GPUs the node has
    roles: tuple[str, ...]  # role of local GPU 0, 1, ...; GPUs past the end are idle

    def count(self, role: str) -> int:
        return sum(r == role for r in self.roles)

    @property
    def kind(self) -> int:
        has_r, has_t = ROLLOUT in self.roles or SHARED in self.roles, TRAIN in self.roles
        return 0 if has_r and not has_t else (1 if has_r else 2)


def used_pools(plan: Plan, ctx: ExportContext) -> list[PoolRoles]:
    """The plan's pools that use GPUs, in the cluster file's order (then the plan's)."""
    rank = {pid: i for i, pid in enumerate(ctx.pool_order)}
    pools = [p for p in plan.pools if p.used_gpus > 0]
    return sorted(pools, key=lambda p: (rank.get(p.pool, len(rank)), plan.pools.index(p)))


def nodes(plan: Plan, ctx: ExportContext) -> list[Node]:
    out: list[Node] = []
    for p in used_pools(plan, ctx):
        roles = [ROLLOUT] * p.rollout_gpus + [TRAIN] * p.train_gpus + [SHARED] * p.shared_gpus
        real = ctx.node_sizes.get(p.pool)
        if real:  # nodes of different sizes: the machines as they are, largest first (every size is a
            # multiple of the plan's node size, so no TP group or engine is cut)
            start = 0
            for size in sorted(real, reverse=True):
                if start >= len(roles):
                    break
                out.append(Node(p.pool, p.gpu, p.region, size, tuple(roles[start:start + size])))
                start += size
            continue
        size = ctx.node_size(p.pool, at_least=p.rollout_tp)
        out += [Node(p.pool, p.gpu, p.region, size, tuple(roles[i:i + size])) for i in range(0, len(roles), size)]
    # full nodes before partial ones among rollout-only nodes (the idle gap then sits at the
    # rollout/training boundary), partial training-only nodes last (the gap sits at the end)
    def key(n: Node):
        partial = len(n.roles) < n.size
        return (n.kind, partial if n.kind == 0 else (partial if n.kind == 2 else 0))
    return sorted(out, key=key)


def gpu_indices(layout: list[Node], role: str) -> list[int]:
    """Global GPU indices (node by node, every GPU of a node counted) that hold `role`."""
    out, base = [], 0
    for n in layout:
        out += [base + i for i, r in enumerate(n.roles) if r == role]
        base += n.size
    return out


def ranges(indices: list[int]) -> str:
    """[0,1,2,5,6] -> '0-2,5-6' (the inclusive range syntax RLinf parses)."""
    parts: list[str] = []
    for i in sorted(indices):
        if parts and int(parts[-1].split("-")[-1]) == i - 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{i}"
        else:
            parts.append(str(i))
    return ",".join(p if "-" in p else f"{p}-{p}" for p in parts)


def contiguous(indices: list[int]) -> bool:
    return not indices or indices == list(range(indices[0], indices[-1] + 1))


def role_gpus(plan: Plan, role: str) -> int:
    return sum(getattr(p, f"{role}_gpus") for p in plan.pools)


def rollout_tp(plan: Plan) -> tuple[int, bool]:
    """The rollout TP size, and whether every engine uses it (frameworks take one TP per role)."""
    sizes = {p.rollout_tp for p in plan.pools if p.rollout_engines > 0}
    weight = {tp: sum(p.rollout_engines * p.rollout_tp for p in plan.pools if p.rollout_tp == tp and p.rollout_engines)
              for tp in sizes}
    best = max(sorted(sizes), key=lambda tp: weight[tp])
    return best, len(sizes) == 1


def per_node(layout: list[Node], role: str) -> list[int]:
    """GPUs of `role` on each node that has any (verl's resource_pool_spec list)."""
    return [n.count(role) for n in layout if n.count(role)]


def uniform(counts: list[int]) -> tuple[int, int] | None:
    """(nnodes, gpus per node) when every node gives the role the same number of GPUs."""
    if counts and len(set(counts)) == 1:
        return len(counts), counts[0]
    return None


def label(pool: str) -> str:
    """'L40S@eu-west' -> 'l40s-eu-west': a node-group label without '@'."""
    return pool.lower().replace("@", "-")
