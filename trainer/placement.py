"""From a plan to Ray: find the cluster, check the plan fits it, reserve placement groups per role.

GPU types on a Ray cluster (RAY_ADDRESS): a node's GPUs count for type T when the node has the
custom resource `gpu:T` (its value is the device count; it wins over the next rule), or when it has
`GPU` > 0 and the resource `accelerator_type:T` Ray sets on GPU nodes (e.g. `accelerator_type:H100`).
A plan's GPU name matches a cluster's type when their normalised names are equal, else when the
words of one are a subset of the other's (A100-80G ~ A100, H100 ~ 'NVIDIA H100 80GB HBM3'; L4 is
not L40S). Regions: when nodes carry the label `region` (`ray start --labels region=R`), a pool
GPU@R is placed only on nodes of that type labelled R (placement-group bundle label selectors).

On one machine a mixed cluster is emulated with custom resources named `gpu:<TYPE>`; the work then
runs on the CPU (an emulation of the placement, not of the GPUs' speed). This machine with no GPU
is the cluster `cpu-local` with MOSEARCH_LOCAL_DEVICES devices (default 2).
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field

from problems.errors import InputError
from problems.placement.names import COLOCATED, params_sharded_by
from problems.placement.plan import Plan

LOCAL_GPU = "cpu-local"
EMULATE_MAX_ENGINES = 2  # a 2-core machine: more processes would only time-slice
EMULATE_MAX_DP = 2
REGION_LABEL = "region"  # node label naming a plan region
PG_WAIT_S = 120.0  # a joined cluster: how long to wait for room for the placement groups
ACCEL_SHARE = 0.001  # what Ray's own accelerator_type constraint asks of a node's `accelerator_type:T` (1 per node)
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
    resource: dict[str, str] = field(default_factory=dict)  # type -> the Ray resource naming it on the cluster
    regions: dict[str, dict[str, int]] = field(default_factory=dict)  # type -> region label -> devices

    def describe(self) -> str:
        if self.regions:
            parts = []
            for k, n in sorted(self.devices.items()):
                by = self.regions.get(k, {})
                parts += [f"{k} x{v} in {r}" for r, v in sorted(by.items())]
                if n > sum(by.values()):  # nodes without a region label
                    parts.append(f"{k} x{n - sum(by.values())} in no region")
            return ", ".join(parts)
        return ", ".join(f"{k} x{v}" for k, v in sorted(self.devices.items())) or "nothing"


def from_nodes(nodes: list[dict], ray_address: str | None = None) -> Found:
    """GPU types, their Ray resource and regions from `ray.nodes()` (see the module doc for the rules)."""
    devices: dict[str, int] = {}
    resource: dict[str, str] = {}
    regions: dict[str, dict[str, int]] = {}
    cuda = False
    for node in nodes:
        if not node.get("Alive"):
            continue
        res = node.get("Resources", {})
        gpus = int(res.get("GPU", 0))
        cuda = cuda or gpus > 0
        custom = {k[4:]: int(v) for k, v in res.items() if k.startswith("gpu:")}
        here = custom or {k.split(":", 1)[1]: gpus for k in res if k.startswith("accelerator_type:") and gpus}
        region = (node.get("Labels") or {}).get(REGION_LABEL)
        for gpu, n in here.items():
            devices[gpu] = devices.get(gpu, 0) + n
            resource[gpu] = f"gpu:{gpu}" if custom else f"accelerator_type:{gpu}"
            if region:
                regions.setdefault(gpu, {})[region] = regions.get(gpu, {}).get(region, 0) + n
    return Found(devices, ray_address, cuda=cuda, resource=resource, regions=regions)


def detect(ray_address: str | None = None) -> Found:
    """What this process can run on: a Ray cluster (RAY_ADDRESS), local CUDA GPUs, or the CPU."""
    ray_address = ray_address if ray_address is not None else os.environ.get("RAY_ADDRESS")
    if ray_address:
        import ray

        from trainer.cluster import connect

        connect(ray_address)
        return from_nodes(ray.nodes(), ray_address)
    import torch

    if torch.cuda.is_available():
        return Found({torch.cuda.get_device_name(0): torch.cuda.device_count()}, cuda=True)
    return Found({LOCAL_GPU: int(os.environ.get("MOSEARCH_LOCAL_DEVICES", "2"))})


def _words(name: str) -> set[str]:
    words = {re.sub(r"^(\d+)gb$", r"\1g", w) for w in re.findall(r"[a-z0-9]+", name.lower())}
    return words - {"nvidia", "tesla"}


def _match(gpu: str, found: dict[str, int]) -> str | None:
    """The found type a plan GPU name means: equal normalised names first, else one name's words a
    subset of the other's (H100 ~ 'NVIDIA H100 80GB HBM3', A100-80G ~ A100; L4 is not L40S)."""
    for name in found:
        if _norm(name) == _norm(gpu):
            return name
    g = _words(gpu)
    for name in found:
        w = _words(name)
        if g and w and (g <= w or w <= g):
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
    pool_regions: dict[str, str] = field(default_factory=dict)  # pool -> region label its bundles must carry
    tp: int = 1
    pp: int = 1
    ep: int = 1  # expert-parallel size of a mixture-of-experts model (trainer/expert_parallel.py)
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


def _cores() -> list[int]:
    """The cores this process may run on (its affinity, not the machine's count)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))  # no affinity on this platform


def cpu_cores() -> int:
    return len(_cores())


def cpu_bind(tp: int) -> str:
    """VLLM_CPU_OMP_THREADS_BIND for `tp` CPU workers: this process's cores in `tp` disjoint sets
    ('0|1' on two cores, '0,1|2,3' on four)."""
    cores = _cores()
    per = len(cores) // tp
    if per < 1:
        raise ValueError(f"tp={tp} CPU workers need {tp} cores, this process has {len(cores)}")
    return "|".join(",".join(map(str, cores[i * per:(i + 1) * per])) for i in range(tp))


def layout(plan: Plan, found: Found, emulate: bool, plan_file: str = "plan") -> Layout:
    """Check the plan against the found cluster and decide what to launch; refuse a plan for another cluster."""
    missing = shortfall(plan, found)
    if missing and found.ray_address:
        if emulate:
            raise InputError(None, "RAY_ADDRESS", f"--emulate runs a plan on this machine's own Ray, not on the "
                             f"Ray cluster at {found.ray_address}, which lacks {'; '.join(missing)}",
                             "unset RAY_ADDRESS to emulate here, or run a plan for that cluster")
        raise InputError(plan_file, "pools", f"plan for cluster '{plan.cluster.name}' needs {'; '.join(missing)}; "
                         f"the Ray cluster at RAY_ADDRESS={found.ray_address} has {found.describe()}",
                         "start nodes offering each GPU type as `--resources '{\"gpu:TYPE\": N}'` (or GPU nodes "
                         "Ray labels accelerator_type:TYPE)" + (" with `--labels region=REGION`" if found.regions else "")
                         + ", or use a plan made for this cluster")
    if missing and not emulate:
        raise InputError(plan_file, "pools", f"plan for cluster '{plan.cluster.name}' needs {'; '.join(missing)}; "
                         f"this machine has {found.describe()}", "a plan made for this cluster, or --emulate to run it scaled down here")
    emulated = bool(missing)
    notes: list[str] = []
    colocated = plan.execution.mode == COLOCATED
    engines = [EngineSpec(p.pool, p.gpu, p.rollout_tp, colocated) for p in plan.pools for _ in range(p.rollout_engines)]
    ranks = [p.pool for p in plan.pools for _ in range((p.train_gpus + p.shared_gpus) // (plan.train.tp * plan.train.pp))]
    pool_regions = {p.pool: p.region for p in plan.pools} if found.regions and not emulated else {}
    plan_regions = sorted({p.region for p in plan.pools})
    if found.ray_address and not found.regions and len(plan_regions) > 1:
        notes.append(f"the Ray cluster's nodes carry no '{REGION_LABEL}' label: pools placed by GPU type only, "
                     f"not by the plan's regions ({', '.join(plan_regions)})")
    cores = cpu_cores()
    if not found.cuda and any(e.tp > cores for e in engines):
        # vLLM's CPU backend binds each TP worker to cores of its own (VLLM_CPU_OMP_THREADS_BIND)
        notes.append(f"rollout tensor parallelism tp={max(e.tp for e in engines)} runs as tp=1: this machine has "
                     f"{cores} CPU cores and vLLM's CPU backend needs one per TP worker")
        engines = [EngineSpec(e.pool, e.gpu, 1 if e.tp > cores else e.tp, e.shared) for e in engines]
    tp, pp = plan.train.tp, plan.train.pp
    t = plan.train
    if found.cuda and t.optimizer_offload and not params_sharded_by(t.sharding, plan.train.dp):
        notes.append(f"optimizer_offload with sharding={t.sharding}: the optimizer state stays on the GPU "
                     "(offload is implemented through FSDP2, sharding zero3/fsdp with dp > 1)")
    if found.ray_address and not found.cuda and not emulated:
        gpus = sorted({p.gpu for p in plan.pools if p.used_gpus})
        notes.append(f"CPU run: the cluster's GPU types ({', '.join(gpus)}) are Ray custom resources on nodes without "
                     "GPUs; all work runs on the CPU, and is predicted for this machine's CPU profile")
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
    ep = getattr(t, "ep", 1)
    if ep > 1 and (len(ranks) * tp) % ep:  # emulation scaled dp below what the EP groups span
        notes.append(f"emulated: train ep={ep} runs as ep=1: dp={len(ranks)} x tp={tp} ranks are not a multiple of it")
        ep = 1
    return Layout(engines, ranks, colocated, emulated, notes, pool_regions=pool_regions, tp=tp, pp=pp, ep=ep,
                  sharding=plan.train.sharding, speeds=speeds)


def fit_model(lay: Layout, config, plan_file: str | None = None) -> None:
    """Cut tp/pp to what the model allows (a plan made for a larger model, run here on a small one),
    noting each change: tp must divide the attention heads, kv heads and MLP width, pp <= layers;
    ep > 1 on a dense model runs as ep=1, and must divide the experts. An EP layout this trainer does
    not run (with TP, PP or ZeRO/FSDP sharding) is refused in one line."""
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
    from trainer.expert_parallel import layout_problem, num_experts

    n = num_experts(config)
    if lay.ep > 1 and n == 0:
        lay.notes.append(f"train ep={lay.ep} runs as ep=1: the model is dense (no experts)")
        lay.ep = 1
    elif lay.ep > 1 and n % lay.ep:
        ep = max(e for e in range(1, lay.ep) if n % e == 0 and lay.world % e == 0)
        lay.notes.append(f"train ep={lay.ep} runs as ep={ep}: the model has {n} experts per layer")
        lay.ep = ep
    why = layout_problem(config, lay.ep, lay.world, lay.tp, lay.pp, lay.sharding)
    if why:
        raise InputError(plan_file, "train.ep", why, "ep = 1, or tp = pp = 1 and sharding none with ep > 1")


def shortfall(plan: Plan, found: Found) -> list[str]:
    """One phrase per GPU type (per type and region when the cluster labels regions) the plan needs
    more of than the cluster has, e.g. 'H100 x16 (found 0) for 8 rollout + 8 train in H100@us-east'."""
    total: dict[tuple, int] = {}
    roles: dict[tuple, dict[str, int]] = {}
    pools: dict[tuple, list[str]] = {}
    for p in plan.pools:
        key = (p.gpu, p.region if found.regions else None)
        total[key] = total.get(key, 0) + p.used_gpus
        pools.setdefault(key, []).append(p.pool)
        r = roles.setdefault(key, {})
        for role, k in (("rollout", p.rollout_gpus), ("train", p.train_gpus), ("shared", p.shared_gpus)):
            if k:
                r[role] = r.get(role, 0) + k
    out = []
    for (gpu, region), n in total.items():
        have_name = _match(gpu, found.devices)
        if not have_name:
            have = 0
        elif region is None:
            have = found.devices.get(have_name, 0)
        else:
            have = found.regions.get(have_name, {}).get(region, 0)
        if have < n:
            split = " + ".join(f"{k} {role}" for role, k in roles[(gpu, region)].items())
            where = f" in region {region}" if region else ""
            out.append(f"{gpu} x{n}{where} (found {have}) for {split} in {', '.join(pools[(gpu, region)])}")
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
        from trainer.cluster import connect

        connect(found.ray_address)
        return False
    # Logical CPUs: actors mostly wait on each other, so they may outnumber cores.
    n_actors = len(lay.engines) + lay.world
    resources: dict[str, float] = {}
    for b in bundles(lay, found)[0] + (bundles(lay, found)[1] or []):
        for k, v in b.items():
            if k != "CPU":
                resources[k] = resources.get(k, 0) + v
    with _loopback_only():
        ray.init(num_cpus=max(os.cpu_count() or 1, 2 * n_actors + 1), resources=resources,
                 include_dashboard=False, log_to_driver=False, configure_logging=False,
                 _node_ip_address="127.0.0.1")
    return True


LOOPBACK_VAR = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextmanager
def _loopback_only():
    """While a local Ray starts: its node address is 127.0.0.1, so every listener of its processes
    (GCS, raylet, object manager, workers, agents, metrics) binds to loopback.

    Ray resolves a given 127.0.0.1 to the machine's routable address (services.resolve_ip_for_localhost)
    unless its multi-node mode is off, which the variable named here turns off (on Linux as on the
    systems it is named for): read by this process's Ray at import (so set on the constant too) and by
    the processes Ray starts now. Restored afterwards: a `ray start --address` later in this process's
    environment would refuse to join a cluster with it set."""
    from ray._private import ray_constants

    before_env, before = os.environ.get(LOOPBACK_VAR), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[LOOPBACK_VAR], ray_constants.ENABLE_RAY_CLUSTER = "0", False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before
        if before_env is None:
            os.environ.pop(LOOPBACK_VAR, None)
        else:
            os.environ[LOOPBACK_VAR] = before_env


def _type_resources(gpu: str, found: Found, devices: float) -> dict:
    """The resources asking for `devices` of plan GPU type `gpu` (CPU not included)."""
    name = _match(gpu, found.devices)
    key = found.resource.get(name) if name else None
    if key and key.startswith("accelerator_type:"):
        return {"GPU": devices, key: ACCEL_SHARE}
    if key:  # gpu:<TYPE>, on GPU nodes or as the emulation of one
        return {"GPU": devices, key: devices} if found.cuda else {key: devices}
    if found.cuda:
        return {"GPU": devices}
    return {resource_name(gpu): devices}


def actor_options(gpu: str, found: Found, share: float, bundle) -> dict:
    """Ray options pinning an actor to its placement-group bundle and GPU type (`share` of one device)."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    opts: dict = {"num_cpus": 1, "scheduling_strategy": PlacementGroupSchedulingStrategy(*bundle)}
    res = _type_resources(gpu, found, share)
    if "GPU" in res:
        opts["num_gpus"] = res.pop("GPU")
    if res:
        opts["resources"] = res
    return opts


def bundle_resources(gpu: str, found: Found, devices: float) -> dict:
    return {"CPU": 2, **_type_resources(gpu, found, devices)}


def _bundle_pools(lay: Layout) -> tuple[list[str], list[str] | None]:
    """The pool behind each bundle of the rollout and train groups (colocated: one group)."""
    if lay.colocated:
        pools = [e.pool for e in lay.engines] + lay.rank_pools
        return [pools[i % len(pools)] for i in range(max(len(lay.engines), lay.world))], None
    return [e.pool for e in lay.engines], lay.rank_pools


def bundles(lay: Layout, found: Found) -> tuple[list[dict], list[dict] | None]:
    """Bundles of the rollout and the train placement groups; colocated: one group (None for train).

    Colocated: each bundle is one shared device; an engine and a rank each take half of it (as
    verl's colocated worker groups do with fractional GPUs).
    """
    gpu_of = {e.pool: e.gpu for e in lay.engines}
    tp_of = {e.pool: e.tp for e in lay.engines}
    gpu = lambda pool: gpu_of.get(pool) or pool.split("@")[0]  # noqa: E731
    p_r, p_t = _bundle_pools(lay)
    if lay.colocated:
        return [bundle_resources(gpu(p), found, 1) for p in p_r], None
    return ([bundle_resources(gpu(p), found, tp_of[p]) for p in p_r],
            [bundle_resources(gpu(p), found, 1) for p in p_t])


def selectors(lay: Layout) -> tuple[list[dict] | None, list[dict] | None]:
    """Node-label selectors per bundle (the pool's region), or None where the cluster labels no regions."""
    if not lay.pool_regions:
        return None, None
    p_r, p_t = _bundle_pools(lay)
    sel = lambda pools: [{REGION_LABEL: lay.pool_regions[p]} for p in pools]  # noqa: E731
    return sel(p_r), (sel(p_t) if p_t is not None else None)


def placement_groups(lay: Layout, found: Found):
    """One placement group per role (rollout, train), one bundle per engine/rank; colocated shares one."""
    import ray
    from ray.util.placement_group import placement_group

    b_r, b_t = bundles(lay, found)
    s_r, s_t = selectors(lay)
    # label selectors only where regions are labelled (a Ray without label support still runs the rest)
    sel = lambda s: {"bundle_label_selector": s} if s else {}  # noqa: E731
    pg_r = placement_group(b_r, strategy="PACK", **sel(s_r))
    pg_t = placement_group(b_t, strategy="PACK", **sel(s_t)) if b_t else pg_r
    if not found.ray_address:
        ray.get([pg_r.ready(), pg_t.ready()])
        return pg_r, pg_t
    # A joined cluster may have the GPU types but not the room (CPUs, busy devices): say so, do not hang.
    try:
        ray.get([pg_r.ready(), pg_t.ready()], timeout=PG_WAIT_S)
    except ray.exceptions.GetTimeoutError:
        from ray.util.placement_group import remove_placement_group

        free = {k: v for k, v in ray.available_resources().items() if k == "CPU" or k in _keys(b_r + (b_t or []))}
        for pg in {id(pg_r): pg_r, id(pg_t): pg_t}.values():
            remove_placement_group(pg)
        raise InputError(None, "RAY_ADDRESS", f"the Ray cluster at {found.ray_address} did not place the plan's "
                         f"{len(b_r) + len(b_t or [])} bundles within {PG_WAIT_S:g} s (free: {_fmt(free)})",
                         "free its nodes, or give each engine and rank 2 CPUs on a node of its GPU type") from None
    return pg_r, pg_t


def _keys(bundle_list: list[dict]) -> set[str]:
    return {k for b in bundle_list for k in b}


def _fmt(res: dict) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in sorted(res.items())) or "nothing"


def _here(_actor) -> dict:
    """Run inside an actor: the node it runs on and the resources Ray gave it."""
    import ray

    ctx = ray.get_runtime_context()
    labels = (ctx.get_node_labels() if hasattr(ctx, "get_node_labels") else None) or {}
    return {"node_id": ctx.get_node_id(), "resources": ctx.get_assigned_resources(),
            "region": labels.get(REGION_LABEL)}


def where(actors: list) -> list[dict]:
    """Where each actor landed, as reported from inside it (node id, assigned resources, region label)."""
    import ray

    return ray.get([a.__ray_call__.remote(_here) for a in actors])


# -- node loss ------------------------------------------------------------------------------------
NODE_WAIT_S = 300.0  # a safety net: how long the GCS may take to declare a lost actor dead (its health checks)


def _node_record(node: dict) -> dict:
    return {"node_id": node["NodeID"], "address": node.get("NodeManagerAddress"),
            "resources": {k: v for k, v in node.get("Resources", {}).items() if k.startswith(("gpu:", "GPU"))}}


def dead_node_of(actor_id: str, wait_s: float = NODE_WAIT_S) -> dict | None:
    """The node an actor of ours went down with: after the GCS has the actor DEAD (waited for,
    polling: an actor on a lost node is declared dead once the node's health checks fail), the
    node it ran on, when Ray's node table says that node is no longer alive; None when only the
    actor died (or the GCS cannot say)."""
    import time

    import ray

    try:
        from ray._private.state import state
    except ImportError:  # another Ray layout: the actor error alone decides
        return None
    end = time.monotonic() + wait_s
    while True:
        try:
            info = state.actor_table(actor_id) or {}
        except Exception:  # noqa: BLE001 - the GCS cannot say: treat as an actor loss
            return None
        if info.get("State") == "DEAD" or time.monotonic() > end:
            break
        time.sleep(0.2)
    node_id = (info.get("Address") or {}).get("NodeID")
    node = next((n for n in ray.nodes() if n["NodeID"] == node_id), None)
    return None if node is None or node.get("Alive") else _node_record(node)


def alive_nodes() -> dict[str, dict]:
    """Ray's alive nodes now: node id -> (node id, address, GPU resources)."""
    import ray

    return {n["NodeID"]: _node_record(n) for n in ray.nodes() if n.get("Alive")}


def dead_nodes(known: dict[str, dict]) -> list[dict]:
    """The nodes of `known` (alive_nodes() of earlier: a dead node's record no longer lists its
    resources) that Ray's node table no longer has alive."""
    import ray

    dead = {n["NodeID"] for n in ray.nodes() if not n.get("Alive")}
    return [rec for nid, rec in known.items() if nid in dead]


def alive() -> Found:
    """The cluster as it is now (its alive nodes), for re-placing or re-planning after a node loss."""
    import ray

    return from_nodes(ray.nodes(), os.environ.get("RAY_ADDRESS") or "the current Ray cluster")


def wait_placed(pgs: list, wait_s: float = PG_WAIT_S) -> bool:
    """Wait until Ray has re-placed every bundle of these placement groups (it reschedules the
    bundles of a lost node on the others when they have room); False if not within `wait_s`."""
    import time

    from ray.util import placement_group_table

    end = time.monotonic() + wait_s
    while any(placement_group_table(pg).get("state") != "CREATED" for pg in pgs):
        if time.monotonic() > end:
            return False
        time.sleep(0.2)
    return True


def _raylet(_actor) -> tuple[str, int]:
    import ray

    return ray.get_runtime_context().get_node_id(), os.getppid()


def raylet_of(actor) -> tuple[str, int]:
    """(node id, pid of the raylet) hosting an actor: the actor process's parent (test hook: the
    fault injection kills a node by that pid)."""
    import ray

    return ray.get(actor.__ray_call__.remote(_raylet))


def dead_actors(actors: list) -> list[int]:
    """Indices of the actors the GCS has dead."""
    from ray._private.state import state

    return [i for i, a in enumerate(actors) if (state.actor_table(a._actor_id.hex()) or {}).get("State") == "DEAD"]
