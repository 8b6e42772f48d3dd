"""Turning rollout samples into padded tensors for the training workers."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Sample:
    """One completion of one prompt, as it travels from rollout to training."""

    sample_id: int  # globally unique: prompt draw * group_size + index in the group
    prompt: list[int]
    completion: list[int]
    behav_logp: list[float]
    reward: float
    advantage: float  # GRPO: group-normalised; PPO: unused (GAE in the worker)
    version: int  # policy version the rollout engine generated it with
    reward_parts: dict | None = None  # each reward function's score (NaN: none), for the metrics


def collate(samples: list[Sample], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded [B, L] ids and [B, L-1] per-position tensors aligned with next-token targets.

    Position t of a per-position tensor is about predicting token t+1, so response token j of a
    row with prompt length P sits at position P-1+j. `weight` is 1/len(completion) on response
    positions: each sequence contributes the mean over its tokens (the GRPO paper's averaging).
    """
    L = max(len(s.prompt) + len(s.completion) for s in samples)
    B = len(samples)
    ids = torch.full((B, L), pad_id, dtype=torch.long)
    attn = torch.zeros((B, L), dtype=torch.long)
    mask = torch.zeros((B, L - 1))
    behav = torch.zeros((B, L - 1))
    for r, s in enumerate(samples):
        seq = s.prompt + s.completion
        ids[r, : len(seq)] = torch.tensor(seq)
        attn[r, : len(seq)] = 1
        P, C = len(s.prompt), len(s.completion)
        if C:
            mask[r, P - 1 : P - 1 + C] = 1
            behav[r, P - 1 : P - 1 + C] = torch.tensor(s.behav_logp, dtype=torch.float32)
    lengths = mask.sum(dim=1, keepdim=True).clamp(min=1)
    return {
        "input_ids": ids, "attention_mask": attn, "mask": mask, "weight": mask / lengths, "behav_logp": behav,
        "reward": torch.tensor([s.reward for s in samples], dtype=torch.float32),
        "advantage": torch.tensor([s.advantage for s in samples], dtype=torch.float32),
    }


def split_counts(n: int, weights: list[float]) -> list[int]:
    """`n` samples over replicas in proportion to `weights` (largest remainder: every count is within
    one of its exact share n * w / sum(w), and they add up to n)."""
    total = sum(weights)
    exact = [n * w / total for w in weights]
    counts = [int(x) for x in exact]
    for i in sorted(range(len(weights)), key=lambda i: counts[i] - exact[i])[: n - sum(counts)]:
        counts[i] += 1
    return counts


def split(samples: list, weights: list[float]) -> list[list]:
    """Consecutive slices of `samples`, one per replica, sized by `split_counts`."""
    out, a = [], 0
    for c in split_counts(len(samples), weights):
        out.append(samples[a:a + c])
        a += c
    return out
