"""A training step's learning figures for metrics.jsonl and the loggers (docs/training.md, "Metrics").

From the ranks' statistics (trainer/algorithms.py `reduce_stats`, over the whole global batch):
`loss`, `entropy`, `clip_frac`, `kl` (with a KL reference), `value_loss` (PPO). From the batch's
samples: `reward_std`, each reward function's mean (`reward_fns`), the scores left out because a
reward raised (`reward_errors`, with --reward-errors skip) and the response lengths in tokens.
"""

from __future__ import annotations

import math

import numpy as np

from trainer.batch import Sample
from trainer.rewards import FAILED

FROM_RANKS = ("loss", "entropy", "clip_frac", "kl", "value_loss")


def step_metrics(samples: list[Sample], rank_stats: dict, reward_names: list[str]) -> dict:
    out = {k: rank_stats[k] for k in FROM_RANKS if k in rank_stats}
    rewards = np.array([s.reward for s in samples], dtype=float)
    lengths = [len(s.completion) for s in samples]
    out["reward_std"] = float(rewards.std()) if len(rewards) else 0.0
    parts = [s.reward_parts for s in samples if s.reward_parts]
    if parts:
        out["reward_fns"] = {}
        for name in reward_names:
            vals = [p[name] for p in parts if name in p and not math.isnan(p[name])]
            out["reward_fns"][name] = float(np.mean(vals)) if vals else None
        out["reward_errors"] = sum(p.get(FAILED, 0) for p in parts)
    out["response_len_mean"] = float(np.mean(lengths)) if lengths else 0.0
    out["response_len_max"] = max(lengths, default=0)
    return out
