"""The plan: the artifact `mosearch plan` writes and `mosearch train` runs.

A plan names its cluster and workload (path and content hash), gives every GPU pool
(GPU type x region) its roles, the rollout and training layouts, the execution mode and the
weight-sync route, and carries the objectives the model predicted for it. The trainer imports
only this module from `problems.placement`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, field_validator, model_serializer, model_validator

from problems.placement.names import ASYNC, COLOCATED, EXECUTOR_NAMES, MODES, ROUTES, SHARDINGS
from problems.specio import Spec, load_model

SCHEMA_VERSION = 1

ExecutionMode = Literal[MODES]
Sharding = Literal[SHARDINGS]
SyncRoute = Literal[ROUTES]
ExecutorName = Literal[EXECUTOR_NAMES]


class SpecRef(Spec):
    """Where a spec file was and what it held when the plan was made."""

    name: str
    path: str
    sha256: str


class PoolRoles(Spec):
    """What the GPUs of one pool (one GPU type in one region) do."""

    pool: str = Field(description="pool id, '<gpu>@<region>'")
    gpu: str
    region: str
    rollout_gpus: int = Field(ge=0, description="GPUs that only generate")
    train_gpus: int = Field(ge=0, description="GPUs that only train")
    shared_gpus: int = Field(ge=0, description="GPUs that do both, switching context between phases")
    rollout_tp: int = Field(ge=1, description="tensor-parallel size of each rollout engine in this pool")
    train_speed: float | None = Field(default=None, gt=0, description=(
        "effective training TFLOP/s of one data-parallel replica in this pool (the performance model's); "
        "each step's samples are split over replicas in proportion to it (absent: evenly)"))

    @property
    def rollout_engines(self) -> int:
        return (self.rollout_gpus + self.shared_gpus) // self.rollout_tp

    @property
    def used_gpus(self) -> int:
        return self.rollout_gpus + self.train_gpus + self.shared_gpus


class RolloutLayout(Spec):
    kv_mem_frac: float = Field(gt=0.0, le=0.98, description="share of GPU memory the engine may use (vLLM gpu_memory_utilization)")
    max_num_seqs: int = Field(ge=1, description="concurrent sequences per engine")


class TrainLayout(Spec):
    dp: int = Field(ge=1)
    tp: int = Field(ge=1)
    pp: int = Field(ge=1)
    sharding: Sharding = "none"
    micro_batch: int = Field(ge=1, description="sequences per micro-batch per data-parallel rank")
    recompute: bool = False
    optimizer_offload: bool = False
    ep: int = Field(default=1, ge=1, description=(
        "expert-parallel size (mixture-of-experts models): each expert layer's experts are split over this "
        "many ranks of the dp x tp grid, as Megatron-core's expert_model_parallel_size; 1 for dense models"))

    @model_validator(mode="after")
    def _ep_fits_the_grid(self) -> "TrainLayout":
        if (self.dp * self.tp) % self.ep:
            raise ValueError(f"ep = {self.ep} must divide dp*tp = {self.dp * self.tp} (expert-parallel groups "
                             "are carved from the data- and tensor-parallel ranks of one pipeline stage)")
        return self

    @model_serializer(mode="wrap")
    def _without_dense_ep(self, handler):
        out = handler(self)
        if isinstance(out, dict) and out.get("ep") == 1:  # dense plans' files stay as they were
            out.pop("ep", None)
        return out


class Execution(Spec):
    mode: ExecutionMode
    staleness_bound: int = Field(ge=0, description="k: the oldest policy version a trained sample may come from, counted back")
    pipeline_chunks: int = Field(ge=1, description="elastic pipelining: rollout streams the step's batch to training in this many chunks")

    @model_validator(mode="after")
    def _sync_modes_are_on_policy(self) -> "Execution":
        if self.mode != ASYNC and self.staleness_bound != 0:
            raise ValueError(f"staleness_bound must be 0 in {self.mode} mode (only async trains on stale samples)")
        return self


class WeightSync(Spec):
    route: SyncRoute = Field(description="direct: trainer ranks send to engines; staged: one copy per region, then fan out")


class Selection(Spec):
    """How `mosearch pick` chose the plan (its rule and limits, and the search's limits), so that a
    re-plan after a node loss (`mosearch train --on-node-loss replan`) searches and chooses the same way."""

    rule: Literal["knee", "fastest", "cheapest", "weights"]
    limits: dict[str, float | None] = Field(default_factory=dict, description=(
        "pick's: max_cost, min_throughput, max_staleness, max_mem_frac"))
    search_limits: dict[str, float | None] = Field(default_factory=dict, description=(
        "mosearch plan's: max_cost_usd_h, min_throughput, max_staleness, max_mem_frac"))
    weights: list[float] | None = None
    resolution: list[float] | None = None


class Plan(Spec):
    schema_version: int = SCHEMA_VERSION

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, v: int) -> int:
        if v != SCHEMA_VERSION:  # a later schema may mean its keys otherwise: read none of it
            raise ValueError(f"got {v}, a version this mosearch does not know (it reads and writes version "
                             f"{SCHEMA_VERSION}: pick the plan again with this mosearch)")
        return v

    plan_id: str
    cluster: SpecRef
    workload: SpecRef
    pools: list[PoolRoles]
    rollout: RolloutLayout
    train: TrainLayout
    execution: Execution
    weight_sync: WeightSync
    predicted: dict[str, float] = Field(default_factory=dict, description="objectives and step breakdown the model predicted")
    chosen_by: Selection | None = None
    executor: ExecutorName | None = Field(
        default=None, description="the executor whose front the plan is from (`mosearch plan --executor`): "
                                  "its figures are scored as that executor runs the workload")

    @model_serializer(mode="wrap")
    def _without_unset_choice(self, handler):
        out = handler(self)
        for key in ("chosen_by", "executor"):  # unset: the files of plans without them stay as they were
            if isinstance(out, dict) and out.get(key) is None:
                out.pop(key, None)
        return out

    @model_validator(mode="after")
    def _layout_matches_pools(self) -> "Plan":
        train = sum(p.train_gpus + p.shared_gpus for p in self.pools)
        engines = sum(p.rollout_engines for p in self.pools)
        t = self.train
        if train != t.dp * t.tp * t.pp:
            raise ValueError(f"train.dp*tp*pp = {t.dp * t.tp * t.pp} but the pools give {train} training GPUs")
        if engines < 1:
            raise ValueError("no rollout engine: at least one pool needs rollout_gpus + shared_gpus >= rollout_tp")
        if self.execution.mode == COLOCATED and any(p.rollout_gpus or p.train_gpus for p in self.pools):
            raise ValueError("colocated mode puts every used GPU in shared_gpus")
        if self.execution.mode != COLOCATED and any(p.shared_gpus for p in self.pools):
            raise ValueError(f"{self.execution.mode} mode gives each GPU one role (shared_gpus must be 0)")
        return self

    @property
    def rollout_engines(self) -> int:
        return sum(p.rollout_engines for p in self.pools)

    @property
    def used_gpus(self) -> int:
        return sum(p.used_gpus for p in self.pools)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def load_plan(path: str | Path) -> Plan:
    """Read a plan file (yaml.safe_load only); a bad file raises InputError naming the key."""
    return load_model(path, Plan, "a plan written by `mosearch pick`")
