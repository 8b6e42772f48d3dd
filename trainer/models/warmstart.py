"""Optional supervised warm start of a model on a task's train prompts (cached per settings).

A from-scratch 2-layer model almost never samples a correct answer, so RL has no signal; a short
supervised pass on (prompt, answer) pairs teaches it the output format (digits, then end of
sequence) and gets it to a low but non-zero accuracy, and RL then does the rest. Held-out prompts
are never used. The result is a model directory like any other, cached under the model cache
keyed by the settings.

Held-out greedy reward of `tiny` on arithmetic after N steps (batch 64, lr 1e-3, seed 0; the
step-0 evaluations of the trainer benchmark, results/bench/trainer.md): 150 -> 0.125,
200 -> 0.133, 220 -> 0.148 (the demo default), 250 -> 0.234, 300 -> 0.32. Past ~250 steps the
supervised pass itself starts to solve the task, so the demo stops at 220 and leaves that to RL.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from pathlib import Path

import torch

from trainer.models.tiny import cache_dir, load_tokenizer
from trainer.tasks import Task


def warm_start(base: Path, task: Task, steps: int, seed: int = 0, batch: int = 64, lr: float = 1e-3,
               log=None) -> Path:
    if steps <= 0:
        return base
    key = hashlib.sha256(json.dumps([str(base.resolve()), task.name, steps, seed, batch, lr]).encode()).hexdigest()[:12]
    out = cache_dir() / "models" / f"{base.name}-sft-{task.name}-{steps}-{key}"
    if (out / "config.json").is_file():
        return out
    from transformers import AutoModelForCausalLM

    tok = load_tokenizer(base)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a small model on a shared machine: more threads only contend
    torch.manual_seed(seed)
    rng = random.Random(seed)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    bos = [tok.bos_token_id] if tok.bos_token_id is not None else []
    for step in range(steps):
        rows, masks = [], []
        for prompt, answer in ((ex.text, ex.answer or "") for ex in rng.sample(task.train, min(batch, len(task.train)))):
            p = bos + tok.encode(prompt, add_special_tokens=False)
            a = tok.encode(answer, add_special_tokens=False) + [tok.eos_token_id]
            rows.append(p + a)
            masks.append([0] * len(p) + [1] * len(a))
        L = max(map(len, rows))
        ids = torch.tensor([r + [tok.pad_token_id] * (L - len(r)) for r in rows])
        m = torch.tensor([mk + [0] * (L - len(mk)) for mk in masks], dtype=torch.float32)
        attn = torch.tensor([[1] * len(r) + [0] * (L - len(r)) for r in rows])
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
        nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none")
        loss = (nll * m[:, 1:].reshape(-1)).sum() / m.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if log and (step + 1) % 50 == 0:
            log(f"warm start {step + 1}/{steps}: loss {loss.item():.3f}")
    torch.set_num_threads(threads)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    for f in base.iterdir():  # tokenizer files and the tiny marker
        if f.name.startswith("tokenizer") or f.name == "MOSEARCH_TINY.json" or f.name == "special_tokens_map.json":
            shutil.copy(f, tmp / f.name)
    (tmp / "WARM_START.json").write_text(json.dumps({"base": str(base), "task": task.name, "steps": steps,
                                                       "seed": seed, "batch": batch, "lr": lr}))
    if out.exists():
        shutil.rmtree(tmp)
    else:
        os.replace(tmp, out)
    return out
