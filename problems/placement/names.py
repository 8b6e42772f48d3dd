"""The name sets every part of the project reads, each defined once: execution modes, sharding
levels, weight-sync routes and the objectives (with their sense, resolution, unit and colour).

The plan schema, the vector encoding (a name's index is its value in the plan vector), the
performance model, the planner, the reports, the exporters and the trainer all import these;
adding a mode or an objective starts here (docs/extending.md lists the rest). Plain data with no
imports beyond the standard library, so the plan schema can read it without the model or pymoo.
"""

from __future__ import annotations

from dataclasses import dataclass

# -- execution modes ------------------------------------------------------------------------------
MODES: tuple[str, ...] = ("colocated", "disaggregated", "async")
COLOCATED, DISAGGREGATED, ASYNC = MODES
# the value of each mode in the plan vector and the model's arrays
MODE_COLOCATED, MODE_DISAGGREGATED, MODE_ASYNC = range(len(MODES))
MODE_COLOURS = {COLOCATED: "#1f77b4", DISAGGREGATED: "#2ca02c", ASYNC: "#d62728"}
MODE_WORDS = {COLOCATED: "colocated (rollout and training share GPUs in turn)",
              DISAGGREGATED: "disaggregated (separate GPUs, in step)",
              ASYNC: "asynchronous (separate GPUs, bounded staleness)"}
OTHER_COLOUR = "#7f7f7f"

# -- the executors a front is searched for (problems/placement/executors.py holds their rules) ---------
EXECUTOR_NAMES: tuple[str, ...] = ("mosearch", "verl", "areal", "rlinf")

# -- precisions of a workload or training job ------------------------------------------------------
# storage bytes and the matmul units each runs on: problems/placement/specs.py PRECISION_BYTES and the
# GPU catalog's peak_tflops (catalog.GPUType.peak)
PRECISIONS: tuple[str, ...] = ("bf16", "fp16", "tf32", "fp32", "fp8")

# -- element-wise kernels of the training layers ---------------------------------------------------
# how the training layers run their element-wise operations (model/training.py `eager_elementwise_bytes`)
ELEMENTWISE_KERNELS: tuple[str, ...] = ("fused", "eager", "eager-fused-norm", "eager-activation")
FUSED_KERNELS, EAGER_KERNELS = ELEMENTWISE_KERNELS[:2]
# which of (RMSNorm, RoPE, the gated MLP's activation) each setting runs as eager PyTorch ops
EAGER_PARTS = {"fused": (False, False, False), "eager": (True, True, True), "eager-fused-norm": (False, True, True),
               "eager-activation": (False, False, True)}
ELEMENTWISE_KERNELS_HELP = (
    "fused: RMSNorm, RoPE and the gated MLP's activation as one kernel each (Megatron / Transformer Engine, "
    "torch.compile, Liger); eager: PyTorch eager modules (Hugging Face layers as verl's FSDP workers run them, "
    "torchtitan without torch.compile), each of them several kernels with fp32 intermediates; eager-fused-norm: "
    "eager with a fused RMSNorm kernel (torchtitan's fused_rmsnorm; Megatron-core's defaults without "
    "apply_rope_fusion and bias_activation_fusion, as verl's Megatron workers run it); eager-activation: only the "
    "gated MLP's activation unfused (Megatron-core with apply_rope_fusion on, bias_activation_fusion off)")

# optimizer states of a 16-bit training run: fp32 (mixed precision: an fp32 master copy, m and v; Megatron,
# DeepSpeed, FSDP's MixedPrecision) or bf16 (bf16 weights, gradients, m and v, no master copy: EasyR1's bf16
# recipes, optim.strategy adamw_bf16)
OPTIMIZER_STATES: tuple[str, ...] = ("fp32", "bf16")
OPTIMIZER_STATES_HELP = (
    "fp32: mixed precision, an fp32 master copy of the 16-bit weights with fp32 Adam moments (16 bytes per "
    "parameter with weights and gradients); bf16: weights, gradients and both moments in bf16, no master copy "
    "(8 bytes per parameter: EasyR1's bf16 recipes, adamw_bf16); only with a 16-bit precision")

AMP_AUTOCAST_HELP = (
    "the trainer runs Hugging Face modules under PyTorch autocast over fp32 weights, with PyTorch's AdamW and a "
    "loss over the full vocabulary's fp32 log-softmax and entropy, as this project's trainer (and TRL) do: memory "
    "counts what those keep (the autocast casts of the weights, the optimizer step's temporaries, the modules' "
    "saved tensors, the loss's fp32 copies) and the optimizer step's time its foreach passes' traffic; false: as "
    "Megatron / DeepSpeed / FSDP frameworks with fused kernels")

# -- sharding levels over the data-parallel group --------------------------------------------------
SHARDINGS: tuple[str, ...] = ("none", "zero1", "zero2", "zero3", "fsdp")
SHARD_NONE, SHARD_Z1, SHARD_Z2, SHARD_Z3, SHARD_FSDP = range(len(SHARDINGS))
# levels that shard the parameters themselves (FSDP's all-gathers); ZeRO-1/2 shard only the
# optimizer state (and ZeRO-2 the gradients)
PARAM_SHARDINGS = frozenset({"zero3", "fsdp"})

# -- activation recomputation of a training job (`mosearch predict`) ----------------------------------
# each name a job file or --recompute may give (hyphen or underscore alike) -> the job's value: true for
# full recomputation, selective_op for torchtitan's selective op checkpointing
RECOMPUTE = {"full": True, "selective_op": "selective_op", "selective-op": "selective_op"}

# -- weight-sync routes ----------------------------------------------------------------------------
ROUTES: tuple[str, ...] = ("direct", "staged")


def params_sharded_by(sharding: str, dp: int = 2) -> bool:
    """A layout whose parameters are sharded over its data-parallel ranks (FSDP / ZeRO-3, dp > 1)."""
    return sharding in PARAM_SHARDINGS and dp > 1


# -- objectives ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Objective:
    name: str  # on the command line (--resolution throughput=..., pick's --weights)
    column: str  # front.csv column and the model's result key, in natural units
    sense: float  # -1: maximised (minimised as its negative), +1: minimised
    # the difference a person decides at: plans closer than this count as equal in it (mosearch/decide.py)
    resolution: float
    relative: bool  # resolution as a share of the value, else absolute
    unit: str
    label: str  # axis title (two lines)


# Resolutions: throughput and cost 5% relative, half the model's error after calibration
# (results/bench/predictor_accuracy.md); memory 0.15 of a GPU (a front's spread in peak memory is
# mostly vLLM's memory setting, searched over 0.30-0.95); staleness one policy version. Memory and
# staleness were set with the 5% so that the default front stays at ~60 plans or fewer on the
# shipped clusters and three of our own (mosearch/bench/front_size.py, results/bench/front_size.md).
OBJECTIVES: tuple[Objective, ...] = (
    Objective("throughput", "throughput_samples_s", -1.0, 0.05, True, "samples/s", "throughput\n(samples/s)"),
    Objective("cost", "cost_usd_h", 1.0, 0.05, True, "$/h", "cost ($/h)"),
    Objective("memory", "peak_mem_frac", 1.0, 0.15, False, "fraction", "peak memory\n(fraction)"),
    Objective("staleness", "staleness", 1.0, 1.0, False, "versions", "staleness\n(versions)"),
)
OBJECTIVE_NAMES: tuple[str, ...] = tuple(o.name for o in OBJECTIVES)
OBJECTIVE_COLUMNS: tuple[str, ...] = tuple(o.column for o in OBJECTIVES)
