"""Mixtures of experts and Qwen3 in the catalog and from a Hugging Face config.json: total and active
parameters against the model cards, MLA's cache, sliding-window layers."""

from __future__ import annotations

import json

import pytest

from problems.placement.catalog import Architecture, model_presets
from problems.placement.hfmodel import architecture

MOE = ["qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "gpt-oss-20b", "gpt-oss-120b", "mixtral-8x7b"]
QWEN3 = ["qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b", "qwen3-14b", "qwen3-32b"]


@pytest.mark.parametrize("name", MOE + QWEN3)
def test_total_parameters_match_the_card(name):
    """Within 2% as the dense presets (models.yaml): Qwen's cards cut to two digits (1.72B reads 1.7B)."""
    m = model_presets()[name]
    assert m.params == pytest.approx(m.published_params, rel=0.02)


@pytest.mark.parametrize("name", MOE)
def test_active_parameters_match_the_card(name):
    """Cards count active parameters with both embeddings (Qwen3, DeepSeek-V3, Mixtral) or without the input
    embedding (gpt-oss); each stated figure lies within 1% of the span the two conventions give."""
    m = model_presets()[name]
    without_input = m.active_params - m.vocab * m.hidden
    assert without_input * 0.99 <= m.published_active_params <= m.active_params * 1.01
    assert m.active_params < m.params / 3  # a sparse model: most of it sits in experts a token skips


def test_deepseek_v3_total_and_active_from_its_config():
    m = model_presets()["deepseek-v3"]
    assert m.params / 1e9 == pytest.approx(671, rel=0.01)
    # 37B activated: between the two conventions, 36.63B and 37.55B
    assert 36.5e9 < m.active_params - m.vocab * m.hidden < 37e9 < m.active_params < 37.6e9
    # MLA caches the latent (512) and the RoPE key (64) per token and layer, not 2 x 128 heads x 128
    assert m.kv_bytes_per_token(2) == 61 * (512 + 64) * 2
    assert m.moe_layers == 58 and m.routed_expert_params == 58 * 256 * 3 * 7168 * 2048


def test_a_doubled_expert_count_shows_in_the_total_not_the_active():
    m = model_presets()["qwen3-30b-a3b"]
    twice = m.model_copy(update={"experts": 2 * m.experts})
    router = m.moe_layers * m.experts * m.hidden  # the router's rows for the new experts
    assert twice.params - m.params == m.routed_expert_params + router
    assert twice.active_params - m.active_params == router  # the router alone grows
    more = m.model_copy(update={"experts_per_token": m.experts_per_token + 1})
    assert more.active_params - m.active_params == m.moe_layers * m.expert_params_each
    assert more.params == m.params


def test_sliding_window_layers_leave_the_per_token_cache():
    m = model_presets()["gpt-oss-20b"]
    assert m.sliding_layers == 12 and m.full_attention_layers == 12
    assert m.kv_bytes_per_token(2) == 12 * 2 * 8 * 64 * 2
    assert m.kv_window_bytes_per_seq(2) == 12 * 128 * 2 * 8 * 64 * 2


def test_dense_presets_unchanged():
    """The dense models count as before the mixture-of-experts fields (Qwen2.5-7B's 7.616B)."""
    m = model_presets()["qwen2.5-7b"]
    assert not m.is_moe and m.active_params == m.params == 7615616512
    assert m.kv_bytes_per_token(2) == 2 * 28 * 4 * 128 * 2


def _hf_dir(tmp_path, cfg):
    from tokenizers import Tokenizer, models

    d = tmp_path / cfg["architectures"][0]
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    Tokenizer(models.WordLevel({"<unk>": 0, "hello": 1}, unk_token="<unk>")).save(str(d / "tokenizer.json"))
    return d


def _same_counts(a: Architecture, b: Architecture):
    assert (a.params, a.active_params, a.kv_bytes_per_token(2)) == (b.params, b.active_params, b.kv_bytes_per_token(2))


CONFIGS = {
    "qwen3-30b-a3b": {"architectures": ["Qwen3MoeForCausalLM"], "num_hidden_layers": 48, "hidden_size": 2048,
                      "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144,
                      "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
                      "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936,
                      "tie_word_embeddings": False, "max_position_embeddings": 40960},
    "deepseek-v3": {"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 61, "hidden_size": 7168,
                    "num_attention_heads": 128, "num_key_value_heads": 128, "intermediate_size": 18432,
                    "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
                    "num_experts_per_tok": 8, "first_k_dense_replace": 3, "q_lora_rank": 1536, "kv_lora_rank": 512,
                    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
                    "tie_word_embeddings": False, "max_position_embeddings": 163840, "attention_bias": False},
    "gpt-oss-20b": {"architectures": ["GptOssForCausalLM"], "num_hidden_layers": 24, "hidden_size": 2880,
                    "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880,
                    "num_local_experts": 32, "num_experts_per_tok": 4, "experts_per_token": 4, "vocab_size": 201088,
                    "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 12,
                    "attention_bias": True, "tie_word_embeddings": False, "max_position_embeddings": 131072},
    "mixtral-8x7b": {"architectures": ["MixtralForCausalLM"], "num_hidden_layers": 32, "hidden_size": 4096,
                     "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
                     "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000, "sliding_window": None,
                     "tie_word_embeddings": False, "max_position_embeddings": 32768},
    "qwen3-8b": {"architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 36, "hidden_size": 4096,
                 "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288,
                 "vocab_size": 151936, "tie_word_embeddings": False, "max_position_embeddings": 40960},
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_hugging_face_directory_reads_as_its_preset(tmp_path, name):
    _same_counts(architecture(_hf_dir(tmp_path, CONFIGS[name])), model_presets()[name])


def test_dense_layers_between_experts_are_refused_in_one_line(tmp_path):
    from problems.errors import InputError

    cfg = dict(CONFIGS["qwen3-30b-a3b"], mlp_only_layers=[0, 1])
    with pytest.raises(InputError, match="mlp_only_layers"):
        architecture(_hf_dir(tmp_path, cfg))


def test_inspect_gives_deepseek_v3_counts(tmp_path, capsys):
    from mosearch.cli import main

    w = tmp_path / "w.yaml"
    w.write_text("name: w\nmodel: deepseek-v3\nalgorithm: grpo\nprompts_per_step: 4\nsamples_per_prompt: 2\n"
                 "prompt_len: 16\nresponse_len: {mean: 16, max: 48}\nmax_staleness: 1\n")
    main(["inspect", "--cluster", "problems/clusters/h100-64.yaml", "--workload", str(w)])
    out = capsys.readouterr().out
    assert "671.026 B" in out and "37.552 B (36.626 B without the input embedding)" in out
    assert "256 (8) / 1 in 58 MoE layers, 3 dense" in out
