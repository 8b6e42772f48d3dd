"""Build a small model directory of your own, as `save_pretrained` writes one: a byte-level BPE
tokenizer trained on your text (with a chat template) and a randomly initialised Qwen2 decoder.

    python docs/examples/own-model/build_model.py my-run/model

Bring your own directory instead when you have one (a Qwen2/Qwen3/Llama/Mistral causal LM with
its tokenizer): nothing here is specific to mosearch.
"""

from __future__ import annotations

import sys
from pathlib import Path

# ChatML, as Qwen's tokenizers carry it: each turn between <|im_start|>ROLE and <|im_end|>
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SPECIAL = ["<|pad|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def build(out: Path, seed: int = 0) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    corpus = [f"What is {a} plus {b}? {a + b}" for a in range(20) for b in range(20)] + ["system user assistant"]
    core.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=320, special_tokens=SPECIAL,
                                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|pad|>")
    tok.chat_template = CHAT_TEMPLATE
    # head_dim 64: vLLM's CPU attention rejects 16
    config = Qwen2Config(vocab_size=len(tok), hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=2, head_dim=64, intermediate_size=256, max_position_embeddings=256,
                         tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(seed)
    out.mkdir(parents=True, exist_ok=True)
    Qwen2ForCausalLM(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


if __name__ == "__main__":
    print(build(Path(sys.argv[1] if len(sys.argv) > 1 else "model")))
