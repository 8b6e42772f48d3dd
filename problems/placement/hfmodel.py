"""A workload's `model:` as a local Hugging Face model directory: its architecture from config.json.

Checked here, without loading the model (the planner never imports transformers): the directory has
a config.json of a supported architecture and a tokenizer that encodes text to tokens (a
`tokenizer.json` is run through the `tokenizers` library; a sentencepiece or vocab/merges tokenizer
must be present, and is run by the trainer before anything starts). Every problem is one line.

A relative path is looked up beside the workload file first, then in the working directory.
"""

from __future__ import annotations

import json
from pathlib import Path

from problems.errors import InputError
from problems.placement.catalog import Architecture

# The decoder layouts the trainer cuts (trainer/parallel.py: q/k/v/o and gate/up/down projections
# under model.layers) and vLLM and transformers both run. The tests build Qwen2 models.
DENSE = ("Qwen2ForCausalLM", "Qwen3ForCausalLM", "LlamaForCausalLM", "MistralForCausalLM")
# mixture-of-experts layouts the planner reads (their config.json keys below)
MOE = ("Qwen3MoeForCausalLM", "DeepseekV3ForCausalLM", "GptOssForCausalLM", "MixtralForCausalLM")
SUPPORTED = DENSE + MOE
EXPECTED = "a Hugging Face causal-LM directory (config.json, weights, tokenizer) as save_pretrained writes"
# tokenizer files as save_pretrained writes them: fast (tokenizer.json), sentencepiece, BPE vocab + merges
_TOKENIZER_FILES = (("tokenizer.json",), ("tokenizer.model",), ("vocab.json", "merges.txt"), ("vocab.txt",))


def is_path(name: str) -> bool:
    """A `model:` value meant as a path (a preset name has no slash and does not start with '.' or '~')."""
    return "/" in name or "\\" in name or name.startswith((".", "~"))


def find(name: str, beside: str | Path | None = None) -> Path | None:
    """The directory `name` names: absolute, else beside the file `beside`, else in the working
    directory; None when none of them is a directory."""
    p = Path(name).expanduser()
    cands = [p] if p.is_absolute() else [*([Path(beside).resolve().parent / p] if beside else []), Path.cwd() / p]
    return next((c for c in cands if c.is_dir()), None)


def check_tokenizer(path: Path, where: str | None = None) -> None:
    """The directory holds a tokenizer; a tokenizer.json must encode text to at least one token."""
    if not any(all((path / f).is_file() for f in group) for group in _TOKENIZER_FILES):
        raise InputError(where or str(path), "tokenizer", f"no tokenizer files in {path}",
                         "tokenizer.json, tokenizer.model or vocab.json + merges.txt, as the tokenizer's "
                         "save_pretrained writes them")
    if (path / "tokenizer.json").is_file():
        try:
            from tokenizers import Tokenizer
        except ImportError:  # the trainer checks it with transformers instead
            return
        try:
            ids = Tokenizer.from_file(str(path / "tokenizer.json")).encode("Hello, world: 1+1=").ids
        except Exception as err:  # noqa: BLE001 (the tokenizers library raises its own exception type)
            raise InputError(str(path / "tokenizer.json"), None, f"cannot be loaded: {err}",
                             "a tokenizer saved by the tokenizers/transformers library") from None
        if not ids:
            raise InputError(str(path / "tokenizer.json"), None, "encodes text to no tokens",
                             "a tokenizer with a vocabulary")


def _variant_fields(arch: str, cfg: dict) -> dict:
    """The Architecture fields of Qwen3's q/k norms, the mixtures of experts, MLA and sliding windows, read
    from the keys each architecture's config.json names them by (transformers' Qwen3Config, Qwen3MoeConfig,
    DeepseekV3Config, GptOssConfig, MixtralConfig)."""
    out: dict = {}
    if arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM"):
        out["qk_norm"] = True
    if arch == "Qwen3MoeForCausalLM":
        if int(cfg.get("decoder_sparse_step", 1)) != 1 or cfg.get("mlp_only_layers"):
            raise ValueError("decoder_sparse_step other than 1 or mlp_only_layers (dense layers between MoE "
                             "layers) are not modelled")
        out.update(experts=int(cfg["num_experts"]), experts_per_token=int(cfg["num_experts_per_tok"]),
                   moe_ffn=int(cfg["moe_intermediate_size"]))
    elif arch == "DeepseekV3ForCausalLM":
        out.update(experts=int(cfg["n_routed_experts"]), experts_per_token=int(cfg["num_experts_per_tok"]),
                   moe_ffn=int(cfg["moe_intermediate_size"]), shared_experts=int(cfg.get("n_shared_experts") or 0),
                   dense_layers=int(cfg.get("first_k_dense_replace") or 0), kv_lora_rank=int(cfg["kv_lora_rank"]),
                   q_lora_rank=int(cfg["q_lora_rank"]) if cfg.get("q_lora_rank") else None,
                   qk_nope_head_dim=int(cfg["qk_nope_head_dim"]), qk_rope_head_dim=int(cfg["qk_rope_head_dim"]),
                   v_head_dim=int(cfg["v_head_dim"]), head_dim=None, qkv_bias=False)
    elif arch == "GptOssForCausalLM":
        types = cfg.get("layer_types") or []
        out.update(experts=int(cfg["num_local_experts"]),
                   experts_per_token=int(cfg.get("num_experts_per_tok") or cfg["experts_per_token"]),
                   expert_bias=True, attention_sinks=True, qkv_bias=True, attn_out_bias=True)
        if cfg.get("sliding_window"):
            out.update(sliding_window=int(cfg["sliding_window"]),
                       sliding_layers=sum(t == "sliding_attention" for t in types))
    elif arch == "MixtralForCausalLM":
        # Mixtral-8x7B's sliding_window is null; a window set on every layer is not read (its KV is then
        # counted over the whole context, an upper bound)
        out.update(experts=int(cfg["num_local_experts"]), experts_per_token=int(cfg["num_experts_per_tok"]))
    return out


def architecture(path: Path, where: str | None = None) -> Architecture:
    """The Architecture of the model in directory `path` (its config.json), its tokenizer checked."""
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise InputError(where, "model", f"{path} has no config.json", EXPECTED)
    try:
        cfg = json.loads(cfg_file.read_text())
    except json.JSONDecodeError as err:
        raise InputError(str(cfg_file), None, f"invalid JSON: {err.msg}", "the config.json save_pretrained writes") from None
    arch = (cfg.get("architectures") or [None])[0]
    if arch not in SUPPORTED:
        raise InputError(str(cfg_file), "architectures", f"{arch!r} is not supported",
                         f"one of {', '.join(SUPPORTED)}")
    try:
        heads = int(cfg["num_attention_heads"])
        fields = dict(
            name=path.name, layers=int(cfg["num_hidden_layers"]), hidden=int(cfg["hidden_size"]), heads=heads,
            kv_heads=int(cfg.get("num_key_value_heads") or heads), ffn=int(cfg["intermediate_size"]),
            vocab=int(cfg["vocab_size"]), tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=arch == "Qwen2ForCausalLM" or bool(cfg.get("attention_bias", False)),
            head_dim=int(cfg["head_dim"]) if cfg.get("head_dim") else None,
            max_context=int(cfg["max_position_embeddings"]) if cfg.get("max_position_embeddings") else None)
        fields.update(_variant_fields(arch, cfg))
    except KeyError as err:
        raise InputError(str(cfg_file), err.args[0], "missing", f"a {arch} config") from None
    except (TypeError, ValueError) as err:
        what = str(err) if "not modelled" in str(err) else f"a size is not an integer: {err}"
        raise InputError(str(cfg_file), None, what, f"a {arch} config") from None
    check_tokenizer(path, where)
    try:
        return Architecture(**fields)
    except ValueError as err:  # pydantic: a size <= 0
        raise InputError(str(cfg_file), None, str(err).splitlines()[-1].strip(), f"a {arch} config") from None
