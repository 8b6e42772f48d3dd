"""The `tiny` model: a 2-layer Qwen2-style causal LM and a character-level tokenizer; `tiny-moe`: the
same size in the Qwen3-MoE architecture (4 experts per layer, top-2 routing), for expert parallelism.

Nothing is downloaded: the first use builds the tokenizer with the `tokenizers` library and a
randomly initialised model (seeded), and saves both with `save_pretrained` into the cache
(`$MOSEARCH_CACHE/models/tiny`, default `.mosearch-cache/models/tiny` in the working directory).
Attention head_dim is 64 because vLLM's CPU attention backend rejects head_dim 16.
"""

from __future__ import annotations

import json
import os
import string
from pathlib import Path

from problems.errors import InputError

# The architecture the planner's catalog preset `tiny` must match.
TINY_ARCH = {
    "num_hidden_layers": 2,
    "hidden_size": 128,
    "num_attention_heads": 2,
    "head_dim": 64,
    "num_key_value_heads": 2,
    "intermediate_size": 512,
    "tie_word_embeddings": True,
}
# `tiny-moe`: Qwen3MoeForCausalLM as Qwen3-30B-A3B's config.json lays it out (every layer a MoE layer,
# decoder_sparse_step 1, norm_topk_prob true, q/k RMS norms, no qkv bias), scaled down: 4 experts of
# width 128, 2 per token, so each token's MLP has the dense tiny model's 256 active width.
TINY_MOE_ARCH = {
    "num_hidden_layers": 2,
    "hidden_size": 128,
    "num_attention_heads": 2,
    "head_dim": 64,
    "num_key_value_heads": 2,
    "intermediate_size": 256,  # unused: no dense MLP layer (mlp_only_layers is empty)
    "moe_intermediate_size": 128,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "tie_word_embeddings": True,
}
SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>", "<unk>"]
# One token per character: digits, operators, letters, whitespace and punctuation the tasks use.
CHARS = list(string.digits + "+-*/=<>()[],.:;?!'\" _#" + string.ascii_lowercase + string.ascii_uppercase) + ["\n"]
SEED = 1234
TINY_PRESETS = ("tiny", "tiny-moe")  # the models this module builds


def cache_dir() -> Path:
    root = os.environ.get("MOSEARCH_CACHE")
    return Path(root) if root else Path.cwd() / ".mosearch-cache"


def build_tokenizer():
    """A character-level fast tokenizer; decode concatenates characters."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + CHARS)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>",
        padding_side="left",
    )


def build_tiny(path: Path, moe: bool = False) -> Path:
    """Write the tokenizer and a freshly initialised model (`tiny`, or `tiny-moe` when `moe`) to `path`
    (atomically, via a temp dir)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

    tok = build_tokenizer()
    arch = TINY_MOE_ARCH if moe else TINY_ARCH
    config = (Qwen3MoeConfig if moe else Qwen2Config)(
        vocab_size=len(tok), max_position_embeddings=256, rope_theta=10000.0, rms_norm_eps=1e-6,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        torch_dtype="float32", **arch,
    )
    torch.manual_seed(SEED)
    model = (Qwen3MoeForCausalLM if moe else Qwen2ForCausalLM)(config)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    (tmp / "MOSEARCH_TINY.json").write_text(json.dumps({"seed": SEED, **arch, "vocab_size": len(tok)}))
    if path.exists():  # another process finished first
        import shutil

        shutil.rmtree(tmp)
    else:
        os.replace(tmp, path)
    return path


def tiny_path(name: str = "tiny") -> Path:
    """The cached `tiny` or `tiny-moe` model directory, built on first use."""
    path = cache_dir() / "models" / name
    if not (path / "config.json").is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        build_tiny(path, moe=name == "tiny-moe")
    return path


def resolve_model(name: str, beside: str | Path | None = None) -> Path:
    """`tiny` / `tiny-moe` -> the cached tiny model (built on first use); else a local HF causal-LM directory (relative
    to the file `beside`, then the working directory), its config and tokenizer files checked."""
    from problems.placement import hfmodel

    if name in TINY_PRESETS:
        return tiny_path(name)
    path = hfmodel.find(name, beside)
    if path is None:
        problem = (f"model directory {name!r} not found" if hfmodel.is_path(name) else
                   f"unknown model preset {name!r}: the trainer runs 'tiny', 'tiny-moe' or a model directory")
        raise InputError(None, "model", problem,
                         "'tiny', 'tiny-moe' or a path to a local Hugging Face causal-LM directory")
    hfmodel.architecture(path)  # config.json of a supported architecture, a tokenizer that encodes
    return path


def load_tokenizer(path: str | Path):
    """The tokenizer of a model directory.

    The tiny tokenizer is loaded as the plain fast tokenizer: AutoTokenizer would pick the Qwen2
    tokenizer class from the model type and replace the character-level pre-tokenizer.
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    path = Path(path)
    if (path / "MOSEARCH_TINY.json").is_file():
        return PreTrainedTokenizerFast.from_pretrained(path, padding_side="left")
    try:
        tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    except (OSError, ValueError, TypeError) as err:
        raise InputError(str(path), "tokenizer", f"cannot be loaded: {str(err).splitlines()[0][:200]}",
                         "the tokenizer files save_pretrained writes") from None
    if not tok.encode("Hello, world: 1+1=", add_special_tokens=False):
        raise InputError(str(path), "tokenizer", "encodes text to no tokens", "a tokenizer with a vocabulary")
    if tok.eos_token_id is None:
        raise InputError(str(path), "tokenizer", "has no end-of-sequence token", "eos_token set (generation stops there)")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def architecture(path: Path) -> dict:
    """The fields the catalog preset compares: layers, hidden, heads, kv heads, ffn, vocab, tied."""
    cfg = json.loads((Path(path) / "config.json").read_text())
    keys = ["num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
            "intermediate_size", "vocab_size", "tie_word_embeddings"]
    return {k: cfg.get(k) for k in keys} | {"head_dim": cfg.get("head_dim")}
