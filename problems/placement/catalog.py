"""The GPU catalog and the model presets, read from the data files beside this module."""

from __future__ import annotations

import difflib
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import Field

from problems.placement.names import PRECISIONS
from problems.specio import Spec

DATA = Path(__file__).with_name("data")

LinkKind = Literal["nvlink", "pcie", "infinity-fabric", "host-memory"]
# Workload precisions: storage bytes and which peak the matmuls run at (GPUType.peak)
Precision = Literal[PRECISIONS]  # type: ignore[valid-type]
# what a precision runs on besides its own matmul units: fp8 keeps bf16 storage and runs attention and
# the LM head at the bf16 peak (Transformer Engine and torchao float8 convert Linear layers only)
ALSO_NEEDS = {"fp8": ("bf16",)}
# dense peak TFLOP/s per precision: positive and finite (a zero or negative peak gave infinite or
# negative times, and the baseline MILP a solver error)
PeakTFLOPS = dict[Precision, Annotated[float, Field(gt=0, allow_inf_nan=False)]]
MlpKind = Literal["gated", "plain"]


class IntraNodeLink(Spec):
    kind: LinkKind
    bandwidth_gbs: float = Field(gt=0, description="per-GPU bandwidth to the other GPUs of its node, GB/s")


class GPUType(Spec):
    """One GPU type's figures; see data/gpus.yaml for their meaning and sources."""

    name: str
    tflops: float = Field(gt=0)
    memory_gb: float = Field(gt=0)
    usable_memory_gb: float | None = Field(default=None, gt=0, description=(
        "the device memory the runtime reports to PyTorch (total_memory), GB; None: memory_gb"))
    bandwidth_tbs: float = Field(gt=0)
    intra_node: IntraNodeLink
    price_usd_h: float = Field(ge=0)
    mfu: float = Field(gt=0, le=1)
    prefill_eff: float = Field(gt=0, le=1)
    decode_eff: float = Field(gt=0, le=1)
    attn_eff: float | None = Field(default=None, gt=0, le=1, description=(
        "achieved share of the 16-bit peak of the fused (flash) attention kernels in training, forward and "
        "backward; None: at `mfu`"))
    peak_tflops: PeakTFLOPS = Field(
        default_factory=dict, description="dense peak TFLOP/s of the matmul units per precision the type runs: a "
                                          "precision without one it cannot run (V100 has no BF16 units, A100 no FP8); "
                                          "empty: a type known by `tflops` alone, every precision at it")
    train_fit: dict[Literal["layer_s", "elementwise_eff"], float] = Field(
        default_factory=dict, description="training figures fitted on measured per-layer times: the fixed seconds "
                                          "per layer and micro-batch, the achieved share of bandwidth of element-wise kernels")
    infer_fit: dict[Literal["kernel_s"], float] = Field(
        default_factory=dict, description="inference figures fitted on measured operator times: the fixed seconds per "
                                          "kernel (a decode step runs `DECODE_KERNELS_PER_LAYER` per layer)")
    generation: str | None = Field(default=None, description="architecture generation (data/generations.yaml): "
                                                             "where a type without measurements takes its efficiencies")
    aliases: list[str] = Field(default_factory=list)
    sources: dict[str, str] = Field(default_factory=dict)

    @property
    def capacity_gb(self) -> float:
        """What plans must fit in, GB: the memory the runtime reports (data/gpus.yaml usable_memory_gb)."""
        return self.usable_memory_gb or self.memory_gb

    def variant_usable_gb(self, memory_gb: float) -> float | None:
        """usable_memory_gb of a variant of this part with `memory_gb` (96 GB instead of 80): the part's share
        the runtime reports; None where the catalog gives none."""
        return self.usable_memory_gb * memory_gb / self.memory_gb if self.usable_memory_gb else None

    def lacks(self, precision: str) -> list[str]:
        """The precisions a `precision` workload needs that this type has no matmul units for (see
        `peak_tflops`); empty when it can run it."""
        if not self.peak_tflops:
            return []
        return [p for p in (precision, *ALSO_NEEDS.get(precision, ())) if p not in self.peak_tflops]

    def runs(self, precision: str) -> bool:
        return not self.lacks(precision)

    def precision_problem(self, precision: str) -> str | None:
        """Why this type cannot run a `precision` workload, in words, or None when it can."""
        missing = self.lacks(precision)
        return f"{self.name} cannot run {precision}: its peak_tflops has no {' or '.join(missing)} figure" if missing else None

    def peak(self, precision: str) -> float:
        """Dense peak TFLOP/s the matmuls of a `precision` workload run against: BF16/FP16 tensor
        cores, TF32 tensor cores (fp32 storage, TF32 matmuls) or the FP32 units (PyTorch's default
        for fp32 matmuls since 1.12: `torch.backends.cuda.matmul.allow_tf32 = False`). ValueError for
        a precision the type cannot run: callers refuse those first (`precision_problem`)."""
        why = self.precision_problem(precision)
        if why:
            raise ValueError(why)
        return float(self.peak_tflops.get(precision, self.tflops))


class Architecture(Spec):
    """A decoder-only transformer, enough to count parameters, FLOPs and bytes."""

    name: str = "custom"
    layers: int = Field(gt=0)
    hidden: int = Field(gt=0)
    heads: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    ffn: int = Field(gt=0, description="MLP intermediate size (gated: gate and up each this wide)")
    mlp: MlpKind = Field(default="gated", description="gated: SwiGLU/GeGLU, 3 matrices (Llama, Qwen); plain: 2 (GPT, OPT)")
    vocab: int = Field(gt=0)
    tied_embeddings: bool = False
    hidden_dropout: float = Field(default=0.0, ge=0, lt=1, description=(
        "dropout probability after attention and after the MLP in training (config.json resid_pdrop / "
        "hidden_dropout; Megatron's --hidden-dropout): Llama, Qwen and DeepSeek configs have none"))
    qkv_bias: bool = False
    head_dim: int | None = Field(default=None, gt=0, description="defaults to hidden / heads")
    published_params: float | None = Field(default=None, description="the count the model card states")
    max_context: int | None = Field(default=None, gt=0, description=(
        "the longest sequence (prompt + response) the model takes, tokens: its config.json "
        "max_position_embeddings; None: not known, not checked"))
    # ---- mixture of experts (0 experts: a dense model). Names as the configs of Qwen3-MoE, DeepSeek-V3,
    # gpt-oss and Mixtral give them (hfmodel.py reads them)
    experts: int = Field(default=0, ge=0, description="routed experts per MoE layer (num_experts, n_routed_experts, "
                                                       "num_local_experts); 0: dense")
    experts_per_token: int = Field(default=0, ge=0, description="routed experts each token runs (num_experts_per_tok)")
    moe_ffn: int | None = Field(default=None, gt=0, description="intermediate size of one expert (moe_intermediate_size; "
                                                                "gpt-oss and Mixtral: intermediate_size)")
    shared_experts: int = Field(default=0, ge=0, description="experts every token runs besides the routed ones, each "
                                                             "moe_ffn wide (DeepSeek n_shared_experts)")
    dense_layers: int = Field(default=0, ge=0, description="leading layers with a dense MLP `ffn` wide "
                                                           "(DeepSeek first_k_dense_replace)")
    expert_bias: bool = Field(default=False, description="experts' projections and the router carry biases (gpt-oss)")
    # ---- attention variants
    attn_out_bias: bool = Field(default=False, description="the attention output projection has a bias (gpt-oss's "
                                                           "attention_bias covers q, k, v and o)")
    qk_norm: bool = Field(default=False, description="RMSNorm of q and k per head (Qwen3: q_norm, k_norm)")
    q_lora_rank: int | None = Field(default=None, gt=0, description="MLA: rank of the query down-projection")
    kv_lora_rank: int | None = Field(default=None, gt=0, description=(
        "MLA (multi-head latent attention, DeepSeek-V2/V3): rank of the compressed KV; the cache keeps "
        "kv_lora_rank + qk_rope_head_dim values per token and layer"))
    qk_nope_head_dim: int | None = Field(default=None, gt=0)
    qk_rope_head_dim: int | None = Field(default=None, gt=0)
    v_head_dim: int | None = Field(default=None, gt=0)
    sliding_window: int | None = Field(default=None, gt=0, description="tokens a sliding-window layer attends to")
    sliding_layers: int = Field(default=0, ge=0, description="layers with sliding-window attention (gpt-oss: every "
                                                             "second one)")
    attention_sinks: bool = Field(default=False, description="a learned sink logit per head (gpt-oss)")
    published_active_params: float | None = Field(default=None, description="the active count the model card states")

    def variant_problem(self) -> tuple[str, str] | None:
        """(key, what is wrong) when the mixture-of-experts, MLA or sliding-window fields contradict each
        other, else None (checked where a workload is read: specs.load_workload)."""
        if self.experts and not (0 < self.experts_per_token <= self.experts):
            return "experts_per_token", f"must be in 1..{self.experts} for {self.experts} experts"
        if self.dense_layers > self.layers or self.sliding_layers > self.layers:
            return "dense_layers", "dense_layers and sliding_layers cannot exceed layers"
        if self.kv_lora_rank and not (self.qk_nope_head_dim and self.qk_rope_head_dim and self.v_head_dim):
            return "kv_lora_rank", "MLA needs qk_nope_head_dim, qk_rope_head_dim and v_head_dim"
        if self.sliding_layers and (not self.sliding_window or self.sliding_layers >= self.layers):
            return "sliding_layers", "needs sliding_window and at least one full-attention layer"
        return None

    # ---- mixture-of-experts counts
    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def expert_ffn(self) -> int:
        return self.moe_ffn or self.ffn

    @property
    def expert_params_each(self) -> int:
        """One expert's weights (gated: gate, up, down), with gpt-oss's biases."""
        f, h = self.expert_ffn, self.hidden
        return self.mlp_matrices * h * f + ((self.mlp_matrices - 1) * f + h if self.expert_bias else 0)

    @property
    def router_params(self) -> int:
        return self.experts * self.hidden + (self.experts if self.expert_bias else 0)

    @property
    def routed_expert_params(self) -> int:
        """All routed experts' weights over all MoE layers: what expert parallelism splits."""
        return self.moe_layers * self.experts * self.expert_params_each

    @property
    def attn_params(self) -> int:
        """One layer's attention weights: GQA q/k/v/o (biases, Qwen3's per-head q/k norms, gpt-oss's sinks)
        or MLA's down- and up-projections with their norms (DeepSeek-V3 modeling: q_a_proj, q_a_layernorm,
        q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj)."""
        h = self.hidden
        if self.kv_lora_rank:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            ql, kl = self.q_lora_rank, self.kv_lora_rank
            q = (h * ql + ql + ql * self.heads * qk) if ql else h * self.heads * qk
            kv = h * (kl + self.qk_rope_head_dim) + kl + kl * self.heads * (self.qk_nope_head_dim + self.v_head_dim)
            return q + kv + self.heads * self.v_head_dim * h
        q, kv = self.heads * self.hd, self.kv_heads * self.hd
        bias = ((q + 2 * kv) if self.qkv_bias else 0) + (h if self.attn_out_bias else 0)
        return (h * q + 2 * h * kv + q * h + bias + (2 * self.hd if self.qk_norm else 0)
                + (self.heads if self.attention_sinks else 0))

    def _moe_layer_params(self, experts: int) -> int:
        return self.attn_params + self.router_params + (experts + self.shared_experts) * self.expert_params_each + 2 * self.hidden

    @property
    def _dense_layer_params(self) -> int:
        return self.attn_params + self.mlp_matrices * self.hidden * self.ffn + 2 * self.hidden

    @property
    def active_params_per_layer(self) -> float:
        """Weights one token multiplies per layer, averaged over the layers (= params_per_layer when dense)."""
        if not self.is_moe:
            return float(self.params_per_layer)
        return (self.dense_layers * self._dense_layer_params
                + self.moe_layers * self._moe_layer_params(self.experts_per_token)) / self.layers

    @property
    def active_params(self) -> int:
        """Parameters one token's forward uses: the layers' active weights, both embeddings and the final norm
        (as Qwen3's and DeepSeek-V3's cards count activated parameters)."""
        return round(self.layers * self.active_params_per_layer) + self.embedding_params + self.hidden

    def kv_values_per_token_layer(self) -> int:
        """Cached values per token and attention layer: K and V of the KV heads, or MLA's compressed latent and
        its decoupled RoPE key (DeepSeek-V2 paper, section 2.1: (d_c + d_h^R) per token and layer)."""
        if self.kv_lora_rank:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.kv_heads * self.hd

    @property
    def full_attention_layers(self) -> int:
        """Layers whose attention spans the whole context (not sliding-window)."""
        return self.layers - self.sliding_layers

    @property
    def hd(self) -> int:
        if self.kv_lora_rank:  # MLA: scores over nope + rope dims, values of v_head_dim; their mean keeps
            # attention's 4 * q_dim FLOPs per context token (2 * heads * (qk + v))
            return (self.qk_nope_head_dim + self.qk_rope_head_dim + self.v_head_dim) // 2
        return self.head_dim or self.hidden // self.heads

    def tp_problem(self, tp: int, kv_replicas: bool) -> str | None:
        """Why `tp` cannot shard this model's attention, or None. Both vLLM and Megatron give each
        rank heads/tp query heads; Megatron also needs kv_heads/tp KV heads (num_query_groups a
        multiple of TP), while vLLM replicates KV heads when TP exceeds them (`kv_replicas`: TP a
        multiple of kv_heads is then enough)."""
        if self.heads % tp:
            return f"{self.heads} attention heads of {self.name} are not divisible by TP {tp}"
        if self.kv_heads % tp and not (kv_replicas and tp % self.kv_heads == 0):
            return f"{self.kv_heads} KV heads of {self.name} are not divisible by TP {tp}"
        return None

    @property
    def params_per_layer(self) -> float:
        if self.is_moe or self.kv_lora_rank or self.qk_norm or self.attention_sinks:  # mean over the layers
            return (self.dense_layers * self._dense_layer_params if self.is_moe else 0) / self.layers + (
                (self.moe_layers * self._moe_layer_params(self.experts)) / self.layers if self.is_moe
                else self._dense_layer_params)
        h, q, kv = self.hidden, self.heads * self.hd, self.kv_heads * self.hd
        attn = h * q + 2 * h * kv + q * h + ((q + 2 * kv) if self.qkv_bias else 0)
        mlp = self.mlp_matrices * h * self.ffn
        norms = 2 * h
        return attn + mlp + norms

    @property
    def tp_sharded_tensors(self) -> int:
        """Weights Megatron-style TP shards, per layer q, k, v (and their biases), o and the MLP's."""
        if self.is_moe or self.kv_lora_rank:  # MLA's five projections; each expert's matrices and the router
            attn = 5 if self.kv_lora_rank else 4 + (3 if self.qkv_bias else 0)
            return (self.layers * attn + self.dense_layers * self.mlp_matrices
                    + self.moe_layers * ((self.experts + self.shared_experts) * self.mlp_matrices + 1))
        return self.layers * (4 + (3 if self.qkv_bias else 0) + self.mlp_matrices)

    @property
    def state_tensors(self) -> int:
        """Tensors of the full state dict in HF naming, as a weight sync sends it: the layers'
        sharded weights and two norms each, plus the embedding, the final norm and the LM head (sent
        even when tied: the engines load it by name)."""
        return self.tp_sharded_tensors + 2 * self.layers + 3

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.mlp == "gated" else 2  # gated: gate, up, down; plain: up, down

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def params(self) -> int:
        return round(self.layers * self.params_per_layer) + self.embedding_params + self.hidden

    def kv_bytes_per_token(self, bytes_per_elem: int) -> int:
        # KV cache = 2 (K and V) * layers * kv_heads * head_dim * bytes (systems.md); MLA caches its latent
        # (kv_values_per_token_layer); sliding-window layers keep only their window, whatever the context, so
        # the per-token figure counts the full-attention layers (vLLM's hybrid KV cache manager allocates so)
        if not (self.kv_lora_rank or self.sliding_layers):
            return 2 * self.layers * self.kv_heads * self.hd * bytes_per_elem
        return self.full_attention_layers * self.kv_values_per_token_layer() * bytes_per_elem

    def kv_window_bytes_per_seq(self, bytes_per_elem: int) -> int:
        """KV bytes a sequence holds in its sliding-window layers at most (their window's tokens)."""
        return self.sliding_layers * (self.sliding_window or 0) * self.kv_values_per_token_layer() * bytes_per_elem


@lru_cache(maxsize=1)
def gpu_catalog() -> dict[str, GPUType]:
    raw = yaml.safe_load((DATA / "gpus.yaml").read_text())["gpus"]
    return {name: GPUType(name=name, **with_prior(fields)) for name, fields in raw.items()}


def with_prior(fields: dict) -> dict:
    """A GPU type's fields with what it does not give taken from its generation's prior (sources noted)."""
    gen = fields.get("generation")
    if gen is None:
        return fields
    prior, source = prior_efficiencies(gen)
    missing = {k: v for k, v in prior.items() if k not in fields}
    attn = f"prior of generation {gen}: {generation_priors()[gen].get('attn_source', '')}"
    return {**fields, **missing, "sources": {**fields.get("sources", {}),
                                             **{k: attn if k == "attn_eff" else source for k in missing}}}


# efficiency fields a generation prior supplies
PRIOR_FIELDS = ("mfu", "prefill_eff", "decode_eff", "attn_eff", "train_fit", "infer_fit")


@lru_cache(maxsize=1)
def generation_priors() -> dict[str, dict]:
    """Architecture generation -> efficiencies of a GPU type with no measurements of its own, with the
    reason (data/generations.yaml)."""
    return yaml.safe_load((DATA / "generations.yaml").read_text())["generations"]


def prior_efficiencies(generation: str) -> tuple[dict, str]:
    """(efficiency fields, source line) of a generation's prior; KeyError for an unknown generation."""
    g = generation_priors()[generation]
    return {k: g[k] for k in PRIOR_FIELDS if k in g}, f"prior of generation {generation}: {g['source']}"


@lru_cache(maxsize=1)
def model_presets() -> dict[str, Architecture]:
    raw = yaml.safe_load((DATA / "models.yaml").read_text())["models"]
    return {name: Architecture(name=name, **fields) for name, fields in raw.items()}


def gpu_aliases(types: dict[str, GPUType]) -> dict[str, str]:
    """Every accepted spelling (case-insensitive) -> canonical name."""
    table = {}
    for name, gpu in types.items():
        for alias in [name, *gpu.aliases]:
            table[alias.lower()] = name
    return table


def nearest(name: str, choices: list[str], n: int = 3) -> list[str]:
    by_lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=n, cutoff=0.3)
    return [by_lower[c] for c in close]
