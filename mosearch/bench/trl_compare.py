"""TRL's GRPOTrainer on the same tiny model and task as our trainer: its tokens/s, for the side by side.

    python -m mosearch.bench.trl_compare --steps 12 --json out.json [--vllm]

Same model (the cached `tiny`, warm-started exactly as our driver does), same task and prompts
(`<bos>` + prompt, as our driver encodes them), same batch (prompts x group), response cap,
temperature, learning rate, GRPO loss with group-normalised advantages and no KL. Tokens/s counts
prompt + generated tokens per completion over the steps after the first (the first carries
warm-up), the definition our driver's summary uses. One process, CPU. `--vllm` asks TRL for its
vLLM generation in colocate mode; without it TRL generates with transformers `generate`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def measure(steps: int, prompts_per_step: int, group_size: int, max_new_tokens: int, lr: float,
            temperature: float, warm_start_steps: int, seed: int = 0, use_vllm: bool = False,
            threads: int = 2) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from trainer.models.tiny import load_tokenizer, resolve_model
    from trainer.models.warmstart import warm_start
    from trainer.rewards import exact_match
    from trainer.tasks import load_task

    torch.set_num_threads(threads)
    task = load_task("arithmetic", seed=seed, max_new_tokens=max_new_tokens)
    path = warm_start(resolve_model("tiny"), task, warm_start_steps, seed)
    tok = load_tokenizer(path)
    data = Dataset.from_list([{"prompt": tok.bos_token + ex.prompt, "answer": ex.answer} for ex in task.train])

    def reward(prompts, completions, answer, **_):
        return [exact_match(p, c, a) for p, c, a in zip(prompts, completions, answer)]

    class Clock(TrainerCallback):
        """Wall time and TRL's own prompt+completion token counter at the end of every step."""

        def __init__(self):
            self.marks = []

        def on_step_end(self, args, state, control, **kw):
            self.marks.append((time.perf_counter(), state.num_input_tokens_seen, state.global_step))

    n = prompts_per_step * group_size
    out = tempfile.mkdtemp(prefix="trl-grpo-")
    cfg = GRPOConfig(
        output_dir=out, max_steps=steps, per_device_train_batch_size=n, gradient_accumulation_steps=1,
        steps_per_generation=1, num_generations=group_size, max_completion_length=max_new_tokens,
        temperature=temperature, learning_rate=lr, lr_scheduler_type="constant", warmup_steps=0,
        beta=0.0, loss_type="grpo", scale_rewards="group", num_iterations=1, max_grad_norm=1.0,
        weight_decay=0.0, use_cpu=True, bf16=False, fp16=False, logging_steps=1, report_to=[],
        save_strategy="no", seed=seed, dataloader_num_workers=0,
        use_vllm=use_vllm, vllm_mode="colocate", vllm_max_model_length=64,
        vllm_gpu_memory_utilization=0.3,
    )
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    clock = Clock()
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=cfg, train_dataset=data, processing_class=tok,
                          callbacks=[clock])
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    (t1, tok1, _), (tn, tokn, sn) = clock.marks[0], clock.marks[-1]
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    return {"steps": sn, "wall_s": wall, "tokens_s": (tokn - tok1) / (tn - t1),
            "samples_s": (sn - 1) * n / (tn - t1), "step_s": (tn - t1) / (sn - 1),
            "reward_train_last": rewards[-1] if rewards else None,
            "generation": "vLLM colocate" if use_vllm else "transformers generate", "threads": threads,
            "trl_version": __import__("trl").__version__}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--prompts-per-step", type=int, default=32)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--warm-start-steps", type=int, default=150)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--vllm", action="store_true")
    ap.add_argument("--json", default=None, help="write the figures here")
    a = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    res = measure(a.steps, a.prompts_per_step, a.group_size, a.max_new_tokens, a.lr, a.temperature,
                  a.warm_start_steps, use_vllm=a.vllm, threads=a.threads)
    print(json.dumps(res))
    if a.json:
        Path(a.json).write_text(json.dumps(res))


if __name__ == "__main__":
    main()
