"""What an exporter may know beyond the plan: node sizes from the cluster, batch sizes from the workload.

The command line fills this from the spec files the plan names; the exporters never read specs
themselves (they stay pure functions of plan and context), so every field is optional and an
exporter falls back to a stated assumption when one is missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The shipped clusters and the common 8-GPU server; used only when no cluster spec is at hand.
DEFAULT_GPUS_PER_NODE = 8


@dataclass(frozen=True)
class ExportContext:
    gpus_per_node: dict[str, int] = field(default_factory=dict)  # pool id -> GPUs per node
    node_sizes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # pool id -> each node's GPUs, if uneven
    cluster_notes: tuple[str, ...] = ()  # what plans assume of the cluster (`Cluster.notes`)
    pool_order: tuple[str, ...] = ()  # pool ids in the cluster file's order
    model: str | None = None
    algorithm: str | None = None  # "grpo" | "ppo"
    prompts_per_step: int | None = None
    samples_per_prompt: int | None = None
    prompt_len: int | None = None
    response_max: int | None = None
    precision: str | None = None  # the workload's training precision (bf16, fp16, fp8, tf32, fp32)
    reference: bool = False  # a frozen reference model for a KL term (PPO always; GRPO when the workload asks)
    elementwise_kernels: str | None = None  # the workload's (names.ELEMENTWISE_KERNELS); None: no switch emitted
    model_dir: str | None = None  # the model's local Hugging Face directory, when the workload named one
    experts: int = 0  # routed experts of a mixture of experts (0: a dense model)

    @classmethod
    def from_specs(cls, cluster=None, workload=None) -> "ExportContext":
        """The fields a loaded Cluster and Workload give (either may be None)."""
        fields: dict = {}
        if cluster is not None:
            fields.update(gpus_per_node={p.id: p.gpus_per_node for p in cluster.pools},
                          node_sizes={p.id: p.node_sizes for p in cluster.pools if p.node_sizes},
                          cluster_notes=tuple(cluster.notes),
                          pool_order=tuple(p.id for p in cluster.pools))
        if workload is not None:
            w = workload
            fields.update(model=w.model.name, algorithm=w.algorithm, prompts_per_step=w.prompts_per_step,
                          samples_per_prompt=w.samples_per_prompt, prompt_len=w.prompt_len,
                          response_max=w.response_max, reference=w.has_reference, precision=w.precision,
                          elementwise_kernels=w.elementwise_kernels, model_dir=w.model_dir, experts=w.model.experts)
        return cls(**fields)

    def node_size(self, pool: str, at_least: int = 1) -> int:
        return max(self.gpus_per_node.get(pool, DEFAULT_GPUS_PER_NODE), at_least)

    def weights_note(self, keys: list[str]) -> str | None:
        """Where the target reads the model's weights: filled from the workload's model directory,
        or left to the user (a workload that names an architecture has no weights)."""
        if not self.has_workload:
            return None
        where = ", ".join(keys)
        if self.model_dir is not None:
            return f"model weights: {where} set to the workload's model directory."
        return (f"model weights: set {where} to {self.model}'s weights (a Hugging Face directory); the workload "
                "names an architecture, not a directory.")

    @property
    def has_cluster(self) -> bool:
        return bool(self.gpus_per_node)

    @property
    def has_workload(self) -> bool:
        return self.prompts_per_step is not None and self.samples_per_prompt is not None
