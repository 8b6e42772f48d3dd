"""From a plan to Ray: find the cluster, check the plan fits it, reserve placement groups per role.

GPU types: on a real cluster Ray's `accelerator_type:<TYPE>` node resources name them. On one
machine a mixed cluster is emulated with custom resources named `gpu:<TYPE>`; the work then runs
on the CPU (an emulation of the placement, not of the GPUs' speed). This machine with no GPU is
the cluster `cpu-local` with MOSEARCH_LOCAL_DEVICES devices (default 2).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from problems.errors import InputError
from problems.placement.plan import Plan

LOCAL_GPU = "cpu-local"
EMULATE_MAX_ENGINES = 2  # a 2-core machine: more processes would only time-slice
EMULATE_MAX_DP = 2
EMULATE_MAX_RANKS = 4  # training ranks (dp * tp * pp) when emulating


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def resource_name(gpu: str) -> str:
    return f"gpu:{gpu}"


@dataclass
class Found:
    """Devices per GPU type in the cluster this process can use."""

    devices: dict[str, int]
    ray_address: str | None = None
    cuda: bool = False

    def describe(self) -> str:
        return ", ".join(f"{k} x{v}" for k, v in sorted(self.devices.items())) or "nothing"


def detect(ray_address: str | None = None) -> Found:
    """What this process can run on: a Ray cluster (RAY_ADDRESS), local CUDA GPUs, or the CPU."""
    ray_address = ray_address if ray_address is not None else os.environ.get("RAY_ADDRESS")
    if ray_address:
        import ray

        if not ray.is_initialized():
            ray.init(address=ray_address, log_to_driver=False)
        devices: dict[str, int] = {}
        for node in ray.nodes():
            if not node.get("Alive"):
                continue
            res = node.get("Resources", {})
            gpus = int(res.get("GPU", 0))
            for key, val in res.items():
                if key.startswith("accelerator_type:") and gpus:
                    devices[key.split(":", 1)[1]] = devices.get(key.split(":", 1)[1], 0) + gpus
                elif key.startswith("gpu:"):
                    devices[key[4:]] = devices.get(key[4:], 0) + int(val)
        return Found(devices, ray_address, cuda=any(n.get("Resources", {}).get("GPU") for n in ray.nodes()))
    import torch

    if torch.cuda.is_available():
        return Found({torch.cuda.get_device_name(0): torch.cuda.device_count()}, cuda=True)
    return Found({LOCAL_GPU: int(os.environ.get("MOSEARCH_LOCAL_DEVICES", "2"))})


def _match(gpu: str, found: dict[str, int]) -> str | None:
    """A plan GPU name matches a found type when one normalised name contains the other (H100 ~ 'NVIDIA H100 80GB HBM3')."""
    g = _norm(gpu)
    for name in found:
        n = _norm(name)
        if g == n or (g and (g in n or n in g)):
            return name
    return None


@dataclass
class EngineSpec:
    pool: str
    gpu: str
    tp: int
    shared: bool


@dataclass
class Layout:
    """What the driver launches: engines and training ranks, each tied to a pool."""

    engines: list[EngineSpec]
    train_pools: list[str]  # pool of each data-parallel replica (a replica spans tp * pp devices)
    colocated: bool
    emulated: bool
    notes: list[str] = field(default_factory=list)  # every way the run deviates from the plan
    tp: int = 1
    pp: int = 1
    sharding: str = "none"
    speeds: dict[str, float] = field(default_factory=dict)  # pool -> replica speed (the plan's train_speed)

    @property
    def replica_weights(self) -> list[float]:
        """Each dp replica's share weight: its pool's speed, or 1 (an even split) when the plan has none."""
        if not all(p in self.speeds for p in self.train_pools):
            return [1.0] * self.dp
        return [self.speeds[p] for p in self.train_pools]

    @property
    def dp(self) -> int:
        return len(self.train_pools)

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def rank_pools(self) -> list[str]:
        """Pool of each training rank, in rank order (pp, dp, tp; tp innermost)."""
        return [self.train_pools[(r // self.tp) % self.dp] for r in range(self.world)]


def layout(plan: Plan, found: Found, emulate: bool, plan_file: str = "plan") -> Layout:
    """Check the plan against the found cluster and decide what to launch; refuse a plan for another cluster."""
    missing = shortfall(plan, found)
    if missing and not emulate:
        where = "this Ray cluster" if found.ray_address else "this machine"
        raise InputError(plan_file, "pools", f"plan for cluster '{plan.cluster.name}' needs {'; '.join(missing)}; "
                         f"{where} has {found.describe()}", "a plan made for this cluster, or --emulate to run it scaled down here")
    emulated = bool(missing)
    notes: list[str] = []
    colocated = plan.execution.mode == "colocated"
    engines = [EngineSpec(p.pool, p.gpu, p.rollout_tp, colocated) for p in plan.pools for _ in range(p.rollout_engines)]
    ranks = [p.pool for p in plan.pools for _ in range((p.train_gpus + p.shared_gpus) // (plan.train.tp * plan.train.pp))]
    if not found.cuda:
        if any(e.tp > 1 for e in engines):
            notes.append("rollout tensor parallelism runs as tp=1 on the CPU")
        engines = [EngineSpec(e.pool, e.gpu, 1, e.shared) for e in engines]
    tp, pp = plan.train.tp, plan.train.pp
    t = plan.train
    if found.cuda and t.optimizer_offload and not (t.sharding in ("zero3", "fsdp") and plan.train.dp > 1):
        notes.append(f"optimizer_offload with sharding={t.sharding}: the optimizer state stays on the GPU "
                     "(offload is implemented through FSDP2, sharding zero3/fsdp with dp > 1)")
    if emulated:
        if len(engines) > EMULATE_MAX_ENGINES:
            notes.append(f"emulated: {len(engines)} rollout engines scaled down to {EMULATE_MAX_ENGINES}")
            engines = _spread(engines, EMULATE_MAX_ENGINES)
        max_dp = max(1, min(EMULATE_MAX_DP, EMULATE_MAX_RANKS // (tp * pp)))
        if len(ranks) > max_dp:
            notes.append(f"emulated: train dp={len(ranks)} scaled down to {max_dp}")
            ranks = _spread(ranks, max_dp)
        notes.append("emulated: GPU types are Ray custom resources; all work runs on the CPU")
    speeds = {p.pool: p.train_speed for p in plan.pools if p.train_speed}
    return Layout(engines, ranks, colocated, emulated, notes, tp, pp, plan.train.sharding, speeds)


def fit_model(lay: Layout, config) -> None:
    """Cut tp/pp to what the model allows (a plan made for a larger model, run here on a small one),
    noting each change: tp must divide the attention heads, kv heads and MLP width, pp <= layers."""
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", heads) or heads
    tp = lay.tp
    while tp > 1 and (heads % tp or kv % tp or config.intermediate_size % tp):
        tp -= 1
    pp = min(lay.pp, config.num_hidden_layers)
    if tp != lay.tp:
        lay.notes.append(f"train tp={lay.tp} runs as tp={tp}: the model has {heads} attention heads / {kv} kv heads")
    if pp != lay.pp:
        lay.notes.append(f"train pp={lay.pp} runs as pp={pp}: the model has {config.num_hidden_layers} layers")
    lay.tp, lay.pp = tp, pp


def shortfall(plan: Plan, found: Found) -> list[str]:
    """One phrase per GPU type the plan needs more of than the cluster has, e.g.
    'H100 x16 (found 0) for 8 rollout + 8 train in H100@us-east'."""
    total: dict[str, int] = {}
    roles: dict[str, dict[str, int]] = {}
    pools: dict[str, list[str]] = {}
    for p in plan.pools:
        total[p.gpu] = total.get(p.gpu, 0) + p.used_gpus
        pools.setdefault(p.gpu, []).append(p.pool)
        r = roles.setdefault(p.gpu, {})
        for role, k in (("rollout", p.rollout_gpus), ("train", p.train_gpus), ("shared", p.shared_gpus)):
            if k:
                r[role] = r.get(role, 0) + k
    out = []
    for gpu, n in total.items():
        have_name = _match(gpu, found.devices)
        have = found.devices.get(have_name, 0) if have_name else 0
        if have < n:
            split = " + ".join(f"{k} {role}" for role, k in roles[gpu].items())
            out.append(f"{gpu} x{n} (found {have}) for {split} in {', '.join(pools[gpu])}")
    return out


def _spread(items: list, k: int) -> list:
    """k items taken evenly across the list, so every pool keeps a share when scaling down."""
    if len(items) <= k:
        return items
    step = len(items) / k
    return [items[int(i * step)] for i in range(k)]


def start_ray(lay: Layout, found: Found) -> bool:
    """Join RAY_ADDRESS or start a local Ray (loopback only) with the emulation resources. True if we started it."""
    import ray

    if ray.is_initialized():
        return False
    if found.ray_address:
        ray.init(address=found.ray_address, log_to_driver=False)
        return False
    # Logical CPUs: actors mostly wait on each other, so they may outnumber cores.
    n_actors = len(lay.engines) + lay.world
    resources: dict[str, float] = {}
    for b in bundles(lay, found)[0] + (bundles(lay, found)[1] or []):
        for k, v in b.items():
            if k != "CPU":
                resources[k] = resources.get(k, 0) + v
    ray.init(num_cpus=max(os.cpu_count() or 1, 2 * n_actors + 1), resources=resources,
             include_dashboard=False, log_to_driver=False, configure_logging=False,
             _node_ip_address="127.0.0.1")
    return True


def actor_options(gpu: str, found: Found, share: float, bundle) -> dict:
    """Ray options pinning an actor to its placement-group bundle and GPU type (`share` of one device)."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    opts: dict = {"num_cpus": 1, "scheduling_strategy": PlacementGroupSchedulingStrategy(*bundle)}
    if found.cuda:
        opts["num_gpus"] = share
    else:
        opts["resources"] = {resource_name(gpu): share}
    return opts


def bundle_resources(gpu: str, found: Found, devices: float) -> dict:
    if found.cuda:
        return {"CPU": 2, "GPU": devices}
    return {"CPU": 2, resource_name(gpu): devices}


def bundles(lay: Layout, found: Found) -> tuple[list[dict], list[dict] | None]:
    """Bundles of the rollout and the train placement groups; colocated: one group (None for train).

    Colocated: each bundle is one shared device; an engine and a rank each take half of it (as
    verl's colocated worker groups do with fractional GPUs).
    """
    if lay.colocated:
        gpus = [e.gpu for e in lay.engines] + [p.split("@")[0] for p in lay.rank_pools]
        n = max(len(lay.engines), lay.world)
        return [bundle_resources(gpus[i % len(gpus)], found, 1) for i in range(n)], None
    return ([bundle_resources(e.gpu, found, e.tp) for e in lay.engines],
            [bundle_resources(p.split("@")[0], found, 1) for p in lay.rank_pools])


def placement_groups(lay: Layout, found: Found):
    """One placement group per role (rollout, train), one bundle per engine/rank; colocated shares one."""
    import ray
    from ray.util.placement_group import placement_group

    b_r, b_t = bundles(lay, found)
    pg_r = placement_group(b_r, strategy="PACK")
    pg_t = placement_group(b_t, strategy="PACK") if b_t else pg_r
    ray.get([pg_r.ready(), pg_t.ready()])
    return pg_r, pg_t
