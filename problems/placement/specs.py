"""Cluster and workload specs: validated models and the resolved objects the model works on.

`load_cluster(path)` and `load_workload(path)` read YAML (safe_load only), validate it and raise
`InputError` with `FILE: KEY: problem (expected)` on the first problem found.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from problems.errors import InputError
from problems.placement.catalog import (
    Architecture,
    GPUType,
    IntraNodeLink,
    PeakTFLOPS,
    Precision,
    generation_priors,
    gpu_aliases,
    gpu_catalog,
    model_presets,
    nearest,
    with_prior,
)
from problems.placement.names import (AMP_AUTOCAST_HELP, ELEMENTWISE_KERNELS, ELEMENTWISE_KERNELS_HELP,
                                      OPTIMIZER_STATES_HELP, PRECISIONS)
from problems.specio import Spec, load_model

ElementwiseKernels = Literal[ELEMENTWISE_KERNELS]  # type: ignore[valid-type]

# storage bytes per element of weights and activations; fp8 keeps bf16 storage and runs its matmuls in
# FP8 (Transformer Engine), tf32 keeps fp32 storage and runs its matmuls on TF32 tensor cores
PRECISION_BYTES = {"bf16": 2, "fp16": 2, "fp8": 2, "tf32": 4, "fp32": 4}


# ---------------------------------------------------------------- cluster.yaml


class RegionSpec(Spec):
    inter_node_gbs: float = Field(gt=0, description="per-node network bandwidth between nodes of the region, GB/s")
    inter_node_latency_ms: float = Field(default=0.01, ge=0)


class RegionLinkSpec(Spec):
    between: tuple[str, str]
    bandwidth_gbs: float = Field(gt=0)
    latency_ms: float = Field(ge=0)
    egress_usd_per_gb: float = Field(ge=0)


class NodeGroupSpec(Spec):
    name: str | None = None
    gpu: str
    nodes: int = Field(gt=0)
    gpus_per_node: int = Field(gt=0)
    region: str
    intra_node: IntraNodeLink | None = None
    inter_node_gbs: float | None = Field(default=None, gt=0, description=(
        "this group's per-node network, GB/s, when it differs from its region's (desktops on 10 GbE beside "
        "servers on InfiniBand)"))


class GPUTypeSpec(Spec):
    """An override of a catalog GPU (any subset of fields) or a new GPU type (core fields required)."""

    tflops: float | None = Field(default=None, gt=0)
    peak_tflops: PeakTFLOPS | None = None
    memory_gb: float | None = Field(default=None, gt=0)
    usable_memory_gb: float | None = Field(default=None, gt=0, description=(
        "the memory the runtime reports (torch.cuda.get_device_properties().total_memory / 1e9), GB; default: "
        "memory_gb for a new type, the catalog part's share of memory_gb for an override"))
    bandwidth_tbs: float | None = Field(default=None, gt=0)
    intra_node: IntraNodeLink | None = None
    price_usd_h: float | None = Field(default=None, ge=0)
    mfu: float | None = Field(default=None, gt=0, le=1)
    prefill_eff: float | None = Field(default=None, gt=0, le=1)
    decode_eff: float | None = Field(default=None, gt=0, le=1)
    attn_eff: float | None = Field(default=None, gt=0, le=1, description=(
        "achieved share of the 16-bit peak of flash attention in training (default: the generation's prior)"))
    generation: str | None = Field(default=None, description="architecture generation (problems/placement/data/"
                                                             "generations.yaml): efficiencies not given come from its prior")
    source: str | None = None


class ClusterSpec(Spec):
    name: str
    regions: dict[str, RegionSpec] = Field(min_length=1)
    links: list[RegionLinkSpec] = Field(default_factory=list)
    node_groups: list[NodeGroupSpec]
    gpu_types: dict[str, GPUTypeSpec] = Field(default_factory=dict)
    profiles: dict[str, str] = Field(default_factory=dict, description="GPU type -> profile file from `mosearch profile`")
    calibration: str | None = Field(default=None, description="corrections fitted on this cluster's runs by "
                                                              "`mosearch calibrate` (relative to the cluster file)")


@dataclass(frozen=True)
class Pool:
    """All GPUs of one type in one region: the unit a plan assigns roles to."""

    id: str
    gpu: GPUType
    region: str
    count: int
    gpus_per_node: int  # the node size plans are made for: every node's size where they are one size
    intra_gbs: float
    inter_gbs: float
    intra_kind: str | None = None  # the link of intra_gbs where a node group gives its own (else the GPU type's)
    node_sizes: tuple[int, ...] = ()  # each real node's GPUs, in the cluster file's order, where sizes differ

    @property
    def max_tp(self) -> int:
        return self.gpus_per_node

    @property
    def link_kind(self) -> str:
        """The kind of link between the GPUs of a node (nvlink, pcie, ...), as its figure intra_gbs."""
        return self.intra_kind or self.gpu.intra_node.kind


@dataclass
class Cluster:
    name: str
    path: str
    pools: list[Pool]
    regions: list[str]
    # region x region matrices over the widest path: bandwidth GB/s, latency s, egress $/GB
    region_bw: np.ndarray
    region_latency: np.ndarray
    region_egress: np.ndarray
    profiles: dict[str, str] = field(default_factory=dict)  # GPU type -> profile path used
    # per GPU type, model parameters fitted by calibration that are not catalog figures
    efficiencies: dict[str, dict[str, float]] = field(default_factory=dict)
    # per GPU type, corrections fitted on the cluster's runs (problems/placement/corrections.py) and their file
    corrections: dict[str, dict[str, float]] = field(default_factory=dict)
    calibration: str | None = None

    @property
    def notes(self) -> list[str]:
        """One line per pool whose nodes differ in size: what plans assume of them."""
        out = []
        for p in self.pools:
            if p.node_sizes:
                sizes = " and ".join(str(n) for n in sorted(set(p.node_sizes), reverse=True))
                out.append(f"{self.path}: {p.id} has nodes of {sizes} GPUs: plans treat them as nodes of "
                           f"{p.gpus_per_node} (the sizes' common divisor), so no TP group or engine straddles two "
                           "machines; the faster links inside the larger nodes are not counted")
        return out

    @property
    def total_gpus(self) -> int:
        return sum(p.count for p in self.pools)

    @property
    def total_memory_gb(self) -> float:
        return sum(p.count * p.gpu.memory_gb for p in self.pools)

    def region_index(self, region: str) -> int:
        return self.regions.index(region)


def _resolve_gpu_types(path: str, spec: ClusterSpec) -> dict[str, GPUType]:
    types = dict(gpu_catalog())
    aliases = gpu_aliases(types)
    for name, over in spec.gpu_types.items():
        key = f"gpu_types.{name}"
        canonical = aliases.get(name.lower())
        given = over.model_dump(exclude_none=True, exclude={"source"})
        if canonical is not None:  # override some fields of a catalog type
            base = types[canonical].model_dump()
            if over.generation not in (None, base["generation"]):
                # a generation only supplies a new type's missing efficiencies: a catalog type has its own
                raise InputError(path, f"{key}.generation", f"{over.generation!r} for catalog type {canonical}, of "
                                 f"generation {base['generation']}", "no generation for a catalog type (it picks a new "
                                 "type's efficiencies); mfu, prefill_eff or decode_eff to change this one's")
            peaks = base["peak_tflops"]
            if "tflops" in given:  # a figure given here replaces the catalog's for every precision it runs
                peaks = {k: given["tflops"] for k in peaks}
            # peaks given replace those of their precisions: the others (and which precisions the type
            # runs, see GPUType.peak_tflops) stay the catalog's
            if "memory_gb" in given and "usable_memory_gb" not in given and base["usable_memory_gb"]:
                given["usable_memory_gb"] = types[canonical].variant_usable_gb(given["memory_gb"])
                base["sources"] = {**base["sources"], "usable_memory_gb": f"the catalog {canonical}'s share of its "
                                   f"memory_gb ({base['sources'].get('usable_memory_gb', 'catalog')})"}
            base.update(given, peak_tflops={**peaks, **given.get("peak_tflops", {})})
            if over.source:
                base["sources"] = {**base["sources"], **{k: over.source for k in given}}
            if name.lower() != canonical.lower():
                # overridden under one of its aliases: a type of that name, so that its pools are named as the
                # node groups name it ("A100@dc" with memory_gb 40, not "A100-80G@dc"); the alias now means
                # it, the catalog type's other names still the catalog's figures
                types[canonical] = types[canonical].model_copy(
                    update={"aliases": [a for a in types[canonical].aliases if a.lower() != name.lower()]})
                base.update(name=name, aliases=[])
                canonical = name
            types[canonical] = GPUType(**base)
            continue
        missing = [f for f in ("tflops", "memory_gb", "bandwidth_tbs", "price_usd_h") if f not in given]
        if missing:
            raise InputError(path, f"{key}.{missing[0]}", "missing for a GPU type not in the catalog",
                             "tflops, memory_gb, bandwidth_tbs and price_usd_h for a new type")
        gens = generation_priors()
        if over.generation is not None and over.generation not in gens:
            raise InputError(path, f"{key}.generation", f"unknown generation {over.generation!r}", ", ".join(gens))
        if over.generation is None and any(f not in given for f in ("mfu", "prefill_eff", "decode_eff")):
            raise InputError(path, f"{key}.generation", "missing for a GPU type not in the catalog",
                             f"its architecture generation ({', '.join(gens)}), or mfu, prefill_eff and decode_eff")
        given.setdefault("intra_node", IntraNodeLink(kind="pcie", bandwidth_gbs=64).model_dump())
        src = over.source or f"given in {Path(path).name}"
        types[name] = GPUType(name=name, **with_prior({**given, "sources": {k: src for k in given}}))
    return types


def _widest_paths(n: int, links: list[tuple[int, int, float, float, float]]):
    """All-pairs widest (max-bottleneck) paths; latency and egress summed along the chosen path."""
    bw = np.zeros((n, n))
    lat = np.full((n, n), np.inf)
    egr = np.full((n, n), np.inf)
    np.fill_diagonal(bw, np.inf)
    np.fill_diagonal(lat, 0.0)
    np.fill_diagonal(egr, 0.0)
    for a, b, gbs, ms, usd in links:
        if gbs > bw[a, b]:
            bw[a, b] = bw[b, a] = gbs
            lat[a, b] = lat[b, a] = ms / 1e3
            egr[a, b] = egr[b, a] = usd
    for k in range(n):  # Floyd-Warshall on (bottleneck, then latency)
        via_bw = np.minimum(bw[:, k : k + 1], bw[k : k + 1, :])
        via_lat = lat[:, k : k + 1] + lat[k : k + 1, :]
        better = (via_bw > bw) | ((via_bw == bw) & (via_lat < lat))
        bw = np.where(better, via_bw, bw)
        lat = np.where(better, via_lat, lat)
        egr = np.where(better, egr[:, k : k + 1] + egr[k : k + 1, :], egr)
    return bw, lat, egr


def _apply_profiles(path: str, spec: ClusterSpec, types: dict[str, GPUType]):
    """Replace catalog figures with those fitted by `mosearch profile` for each profiled GPU type."""
    from problems.placement import machine
    from problems.placement.profile import RUN_FITTED, load_profile

    aliases = gpu_aliases(types)
    used, efficiencies = {}, {}
    for gpu_type, ref in spec.profiles.items():
        key = f"profiles.{gpu_type}"
        canonical = aliases.get(gpu_type.lower())
        if canonical is None:
            raise InputError(path, key, f"unknown GPU type {gpu_type!r}", "a GPU type of this cluster")
        file = Path(ref) if Path(ref).is_absolute() else Path(path).parent / ref
        profile = load_profile(file)
        # a profile of a device this machine has, measured on another machine: this machine's own
        use, note = machine.resolve(file, profile.machine, profile.device_type,
                                    machine.is_local(profile.device_type, lambda n: aliases.get(n.lower())))
        if note:
            machine.say(note)
        if use != file:
            file, profile = use, load_profile(use)
        catalog = gpu_aliases(gpu_catalog())  # a type overridden under an alias is still its catalog part
        if aliases.get(profile.device_type.lower()) != canonical and (
                catalog.get(profile.device_type.lower()) is None
                or catalog.get(profile.device_type.lower()) != catalog.get(gpu_type.lower())):
            raise InputError(path, key, f"{file} profiles {profile.device_type!r}, not {canonical!r}",
                             "a profile measured on this GPU type")
        f = profile.fitted
        gpu = types[canonical].model_dump()
        intra = dict(gpu["intra_node"], bandwidth_gbs=f.intra_gbs or gpu["intra_node"]["bandwidth_gbs"])
        measured = dict(tflops=f.tflops, bandwidth_tbs=f.bandwidth_tbs, mfu=min(1.0, f.mfu / f.train_compute),
                        prefill_eff=f.prefill_eff,
                        decode_eff=f.decode_eff, intra_node=intra)
        gpu.update(measured)
        # the profile measured the peak in the precision it ran: that figure for every precision the type runs
        gpu["peak_tflops"] = {k: f.tflops for k in gpu["peak_tflops"]}
        gpu["train_fit"] = {}  # and its fit reads element-wise traffic at decode_eff, with its own overheads
        gpu["sources"] = {**gpu["sources"], **{k: f"profile {file.name}" for k in measured}}
        types[canonical] = GPUType(**gpu)
        efficiencies[canonical] = {"microbatch_s": f.train_overhead_s * f.train_compute, "decode_step_s": f.decode_step_overhead_s,
                                   **{k: getattr(f, k) for k in RUN_FITTED}, "sync_load_gbs": f.sync_gbs,
                                   "sync_overhead_s": f.sync_overhead_s,
                                   # a profiled device is run by mosearch's trainer: TP on separate projections
                                   "tp_split_projections": 1.0, "sync_send_gbs": f.bcast_gbs or 0.0,
                                   **{k: getattr(f, k) for k in ("collective_latency_s", "p2p_latency_s", "tp_op_s",
                                                                 "fsdp_op_s") if getattr(f, k) is not None}}
        used[canonical] = str(file)
    return used, efficiencies


def build_cluster(path: str, spec: ClusterSpec) -> Cluster:
    types = _resolve_gpu_types(path, spec)
    profiles, efficiencies = _apply_profiles(path, spec, types)
    aliases = gpu_aliases(types)
    regions = list(spec.regions)
    if not spec.node_groups:
        raise InputError(path, "node_groups", "empty cluster", "at least one node group with GPUs")

    grouped: dict[tuple[str, str], list[NodeGroupSpec]] = {}
    named: dict[str, int] = {}
    for i, g in enumerate(spec.node_groups):
        key = f"node_groups[{i}]"
        if g.name is not None and g.name in named:
            raise InputError(path, f"{key}.name", f"{g.name!r} names node_groups[{named[g.name]}] too",
                             "a name of its own for each node group")
        if g.name is not None:
            named[g.name] = i
        canonical = aliases.get(g.gpu.lower())
        if canonical is None:
            hint = ", ".join(nearest(g.gpu, list(types))) or ", ".join(types)
            raise InputError(path, f"{key}.gpu", f"unknown GPU type {g.gpu!r}",
                             f"a catalog type or one defined under gpu_types; nearest: {hint}")
        if g.region not in spec.regions:
            raise InputError(path, f"{key}.region", f"unknown region {g.region!r}",
                             f"one of the regions: {', '.join(regions)}")
        grouped.setdefault((canonical, g.region), []).append(g)

    index = {r: i for i, r in enumerate(regions)}
    links = []
    for i, link in enumerate(spec.links):
        for j, r in enumerate(link.between):
            if r not in index:
                raise InputError(path, f"links[{i}].between[{j}]", f"unknown region {r!r}",
                                 f"one of the regions: {', '.join(regions)}")
        a, b = (index[r] for r in link.between)
        if a == b:
            raise InputError(path, f"links[{i}].between", "a link joins a region to itself", "two different regions")
        links.append((a, b, link.bandwidth_gbs, link.latency_ms, link.egress_usd_per_gb))
    bw, lat, egr = _widest_paths(len(regions), links)
    # within a region traffic goes over the nodes' network, not a region link
    np.fill_diagonal(bw, [spec.regions[r].inter_node_gbs for r in regions])
    np.fill_diagonal(lat, [spec.regions[r].inter_node_latency_ms / 1e3 for r in regions])

    used = sorted({index[r] for _, r in grouped})
    for a in used:
        for b in used:
            if bw[a, b] == 0:
                raise InputError(path, "links", f"region {regions[b]!r} is unreachable from {regions[a]!r}",
                                 "links connecting every region that has GPUs")

    pools = []
    for (gpu_name, region), groups in grouped.items():
        gpu = types[gpu_name]
        # a pool's GPUs talk over the slowest node link among its groups: its figure and its kind
        link = min((g.intra_node or gpu.intra_node for g in groups), key=lambda link: link.bandwidth_gbs)
        sizes = tuple(g.gpus_per_node for g in groups for _ in range(g.nodes))
        pools.append(Pool(
            id=f"{gpu_name}@{region}",
            gpu=gpu,
            region=region,
            count=sum(sizes),
            # nodes of different sizes: planned as nodes of their common divisor, which every real node
            # holds a whole number of (TP groups and engines then fit inside a machine)
            gpus_per_node=math.gcd(*sizes),
            intra_gbs=link.bandwidth_gbs,
            intra_kind=link.kind,
            # a pool's nodes talk over the slowest network among its groups
            inter_gbs=min(g.inter_node_gbs or spec.regions[region].inter_node_gbs for g in groups),
            node_sizes=sizes if len(set(sizes)) > 1 else (),
        ))
    corrections, calibration = _calibration(path, spec, aliases)
    return Cluster(spec.name, path, pools, regions, bw, lat, egr, profiles, efficiencies, corrections, calibration)


def _calibration(path: str, spec: ClusterSpec, aliases: dict[str, str]):
    """The corrections of the calibration file the cluster names (none: {}, None)."""
    if not spec.calibration:
        return {}, None
    from problems.placement.corrections import load_calibration

    file = Path(spec.calibration) if Path(spec.calibration).is_absolute() else Path(path).parent / spec.calibration
    if not file.is_file():
        raise InputError(path, "calibration", f"{spec.calibration}: no such file", "a file `mosearch calibrate` wrote")
    cal = load_calibration(file)
    if cal.cluster != spec.name:
        raise InputError(str(file), "cluster", f"fitted on cluster {cal.cluster!r}, not {spec.name!r}",
                         "the calibration of this cluster")
    out = {}
    for gpu, corr in cal.gpu_types.items():
        if gpu.lower() not in aliases:
            raise InputError(str(file), f"gpu_types.{gpu}", "not a GPU type of this cluster", ", ".join(sorted(set(aliases.values()))))
        out[aliases[gpu.lower()]] = corr.model_dump()
    return out, str(file)


def load_cluster(path: str | Path) -> Cluster:
    path = str(path)
    spec = load_model(path, ClusterSpec, "a cluster spec (see problems/clusters/)")
    return build_cluster(path, spec)


# ---------------------------------------------------------------- workload.yaml


# log-space standard deviation of response lengths when a workload does not give one: from Seer's
# synchronous RL rollouts, where the last 10% of requests take up to half the rollout (derivation in
# problems/placement/model/lengths.py)
DEFAULT_SIGMA = 0.32


class ResponseLength(Spec):
    mean: int = Field(gt=0)
    max: int = Field(gt=0)
    sigma: float = Field(default=DEFAULT_SIGMA, ge=0, le=3, description=(
        "log-space standard deviation of the (log-normal, cut at max) response lengths; 0: every response "
        "`mean` tokens. Default from Seer's RL rollouts (problems/placement/model/lengths.py)"))

    @model_validator(mode="after")
    def _max_at_least_mean(self) -> "ResponseLength":
        if self.max < self.mean:
            raise ValueError(f"max ({self.max}) is below mean ({self.mean})")
        return self


class ModelSpec(Architecture):
    """An explicit architecture given in the workload file."""


class WorkloadSpec(Spec):
    name: str
    model: str | ModelSpec
    algorithm: Literal["grpo", "ppo"]
    prompts_per_step: int = Field(gt=0)
    samples_per_prompt: int = Field(gt=0)
    prompt_len: int = Field(gt=0)
    response_len: ResponseLength
    max_staleness: int = Field(ge=0)
    precision: Precision = "bf16"
    attention: Literal["flash", "unfused"] = Field(
        default="flash", description="flash: fused kernels, no s x s score matrix (FlashAttention, SDPA); "
                                     "unfused: scores computed and stored (Megatron's default before --use-flash-attn)")
    kl_reference: bool = Field(default=False, description="GRPO: keep a reference model for a KL term")
    elementwise_kernels: ElementwiseKernels = Field(default="fused", description=ELEMENTWISE_KERNELS_HELP)
    amp_autocast: bool = Field(default=False, description=AMP_AUTOCAST_HELP)
    optimizer_states: Literal["fp32", "bf16"] = Field(default="fp32", description=OPTIMIZER_STATES_HELP)
    sequence_packing: bool = Field(default=False, description="training packs sequences without padding (verl "
                                                              "use_remove_padding, AReaL): micro-batches of mean length")


@dataclass(frozen=True)
class Workload:
    name: str
    path: str
    model: Architecture
    algorithm: str
    prompts_per_step: int
    samples_per_prompt: int
    prompt_len: int
    response_mean: int
    response_max: int
    max_staleness: int
    precision: str
    has_reference: bool
    has_critic: bool
    attention: str = "flash"
    model_dir: str | None = None  # the model's local Hugging Face directory, when `model:` named one
    response_sigma: float = DEFAULT_SIGMA
    sequence_packing: bool = False
    elementwise_kernels: str = "fused"
    amp_autocast: bool = False
    optimizer_states: str = "fp32"

    @property
    def samples_per_step(self) -> int:
        return self.prompts_per_step * self.samples_per_prompt

    @property
    def bytes_per_param(self) -> int:
        return PRECISION_BYTES[self.precision]

    @property
    def weight_bytes(self) -> float:
        return self.model.params * self.bytes_per_param


def resolve_architecture(model, where: str | None) -> Architecture:
    """A spec's `model`: a preset name (one-line error naming the nearest presets), a local Hugging Face
    model directory (problems/placement/hfmodel.py; relative to the spec file `where`, then the working
    directory) or an architecture mapping."""
    if isinstance(model, str):
        from problems.placement import hfmodel

        directory = hfmodel.find(model, where)
        if directory is not None:
            return hfmodel.architecture(directory, where)
        if hfmodel.is_path(model):
            raise InputError(where, "model", f"model directory {model!r} not found (looked beside the file and in "
                             "the working directory)", "a preset name or a local Hugging Face model directory")
        presets = model_presets()
        arch = presets.get(model.lower())
        if arch is None:
            hint = ", ".join(nearest(model, list(presets))) or ", ".join(presets)
            raise InputError(where, "model", f"unknown model preset {model!r}",
                             f"a preset name, a local Hugging Face model directory or an architecture mapping; "
                             f"nearest: {hint}")
        return arch
    return Architecture(**model.model_dump())


def load_workload(path: str | Path) -> Workload:
    path = str(path)
    spec = load_model(path, WorkloadSpec, "a workload spec (see problems/workloads/)")
    arch = resolve_architecture(spec.model, path)
    model_dir = None
    if isinstance(spec.model, str):
        from problems.placement import hfmodel

        found = hfmodel.find(spec.model, path)
        model_dir = str(found) if found is not None else None
    variant = arch.variant_problem()
    if variant is not None:
        raise InputError(path, f"model.{variant[0]}", variant[1], "a consistent mixture-of-experts / attention layout")
    if arch.heads % arch.kv_heads:
        raise InputError(path, "model.kv_heads", f"{arch.heads} heads are not divisible by {arch.kv_heads} kv_heads",
                         "a divisor of heads")
    if arch.head_dim is None and arch.hidden % arch.heads:
        raise InputError(path, "model.heads", f"hidden {arch.hidden} is not divisible by {arch.heads} heads",
                         "a divisor of hidden, or give head_dim")
    if spec.algorithm == "grpo" and spec.samples_per_prompt < 2:
        # GRPO's advantage is a sample's reward less its group's mean: a group of one learns nothing
        # (the trainer refuses it too), so no plan for it is worth searching
        raise InputError(path, "samples_per_prompt", f"{spec.samples_per_prompt} with algorithm grpo",
                         "at least 2 (GRPO scores each sample against its group), or algorithm ppo")
    if spec.response_len.max + spec.prompt_len <= 0:
        raise InputError(path, "response_len.max", "no tokens per sample")
    if spec.optimizer_states == "bf16" and (spec.precision not in ("bf16", "fp16", "fp8") or spec.amp_autocast):
        # bf16 states replace a 16-bit run's fp32 master copy; fp32 weights (tf32, fp32, autocast) have none
        raise InputError(path, "optimizer_states", f"bf16 with precision {spec.precision}"
                         + (" and amp_autocast" if spec.amp_autocast else ""),
                         "fp32, or a 16-bit precision without amp_autocast")
    if arch.max_context is not None and spec.prompt_len + spec.response_len.max > arch.max_context:
        # the engines refuse a longer sequence (vLLM's max_model_len is at most the model's)
        raise InputError(path, "response_len.max", f"prompt_len {spec.prompt_len} + response_len.max "
                         f"{spec.response_len.max} = {spec.prompt_len + spec.response_len.max} tokens, beyond the "
                         f"{arch.max_context} of {arch.name}'s context (max_position_embeddings)",
                         f"at most {arch.max_context - spec.prompt_len}" if spec.prompt_len < arch.max_context
                         else f"a prompt_len below {arch.max_context}")
    ppo = spec.algorithm == "ppo"
    return Workload(
        name=spec.name, path=path, model=arch, algorithm=spec.algorithm,
        prompts_per_step=spec.prompts_per_step, samples_per_prompt=spec.samples_per_prompt,
        prompt_len=spec.prompt_len, response_mean=spec.response_len.mean, response_max=spec.response_len.max,
        max_staleness=spec.max_staleness, precision=spec.precision,
        has_reference=ppo or spec.kl_reference, has_critic=ppo, attention=spec.attention, model_dir=model_dir,
        response_sigma=spec.response_len.sigma, sequence_packing=spec.sequence_packing,
        elementwise_kernels=spec.elementwise_kernels, amp_autocast=spec.amp_autocast,
        optimizer_states=spec.optimizer_states,
    )


def for_precision(cluster: Cluster, workload: Workload) -> tuple[Cluster, str | None]:
    """The cluster less the pools whose GPU type cannot run the workload's precision (no BF16 on V100 or
    T4, no FP8 before Ada and Hopper: `GPUType.runs`), and one line naming those left out (None when
    none was). InputError naming the pools and the precision when no pool is left."""
    precision = workload.precision
    out = [p for p in cluster.pools if not p.gpu.runs(precision)]
    if not out:
        return cluster, None
    missing = " or ".join(dict.fromkeys(m for p in out for m in p.gpu.lacks(precision)))
    names = ", ".join(f"{p.id} ({p.count} GPUs)" for p in out)
    keep = [p for p in cluster.pools if p.gpu.runs(precision)]
    if not keep:
        common = [q for q in PRECISIONS if all(p.gpu.runs(q) for p in cluster.pools)]
        raise InputError(workload.path, "precision", f"{precision} runs on no pool of cluster {cluster.name!r}: "
                         f"{names} (no {missing} figure in peak_tflops)",
                         (f"a precision every pool runs ({', '.join(common)}), or " if common else "")
                         + f"GPUs that run {precision}")
    return (dataclasses.replace(cluster, pools=keep),
            f"pools left out: {names} cannot run {precision} (no {missing} figure in peak_tflops)")


def check_fits(cluster: Cluster, workload: Workload) -> None:
    """The weights alone must fit in the memory of the whole cluster."""
    need = workload.weight_bytes / 1e9
    have = cluster.total_memory_gb
    if need > have:
        raise InputError(
            workload.path, "model",
            f"weights of {workload.model.name} need {need:.1f} GB in {workload.precision}; "
            f"the whole cluster {cluster.name!r} has {have:.1f} GB",
            "a smaller model or a larger cluster",
        )

