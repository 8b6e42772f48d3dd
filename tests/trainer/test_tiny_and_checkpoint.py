"""The tiny model's build and tokenizer; atomic checkpoints with verified checksums."""

import json

import pytest

from problems.errors import InputError
from trainer import checkpoint as ckpt
from trainer.models.tiny import architecture, load_tokenizer, resolve_model


def test_tiny_is_built_once_with_the_documented_architecture(tiny_model):
    arch = architecture(tiny_model)
    assert arch == {"num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2, "num_key_value_heads": 2,
                    "intermediate_size": 512, "vocab_size": 89, "tie_word_embeddings": True, "head_dim": 64}
    tok = load_tokenizer(tiny_model)
    assert len(tok) == arch["vocab_size"]
    text = "sort 3 1 2:\n12+7=19"
    ids = tok.encode(text, add_special_tokens=False)
    assert len(ids) == len(text) and tok.decode(ids) == text
    mtime = (tiny_model / "model.safetensors").stat().st_mtime
    assert resolve_model("tiny") == tiny_model and (tiny_model / "model.safetensors").stat().st_mtime == mtime


def test_model_must_be_tiny_or_a_directory(tmp_path):
    with pytest.raises(InputError, match="has no config.json"):
        resolve_model(str(tmp_path))
    with pytest.raises(InputError, match="model directory './nope' not found"):
        resolve_model("./nope")
    with pytest.raises(InputError, match="unknown model preset 'qwen-nope'"):
        resolve_model("qwen-nope")


def test_checkpoint_roundtrip_and_corruption(tmp_path):
    root = tmp_path / "checkpoints"
    tmp = ckpt.staging_dir(root, 4)
    (tmp / "state.pt").write_bytes(b"weights")
    path = ckpt.commit(root, tmp, 4, {"step": 4})
    assert ckpt.latest(root) == path and not tmp.exists()
    assert ckpt.verify(path) == {"step": 4}
    (path / "state.pt").write_bytes(b"weightz")
    with pytest.raises(InputError, match="corrupt"):
        ckpt.verify(path)
    for s in (8, 12, 16):
        t = ckpt.staging_dir(root, s)
        (t / "state.pt").write_bytes(b"x")
        ckpt.commit(root, t, s, {"step": s})
    ckpt.prune(root, keep=2)
    assert sorted(p.name for p in root.glob("step_*")) == ["step_000012", "step_000016"]
    assert json.loads((ckpt.latest(root) / "manifest.json").read_text())["step"] == 16
