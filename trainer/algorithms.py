"""RL losses on token tensors: GRPO, PPO with a critic, and AReaL's decoupled objective.

Shapes: B sequences x T positions; `mask` is 0 off the response and a per-token weight on it
(1, or 1/len(sequence) for the GRPO paper's sequence mean). Every loss returns the weighted SUM;
the caller divides by the number of sequences in the whole global batch, so micro-batching, chunked
(pipelined) arrival and data parallelism do not change the gradient.
"""

from __future__ import annotations

import torch


def grpo_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """(r - mean of its group) / (std of its group + eps); groups are consecutive `group_size` rows.

    Std is the unbiased sample std, as DeepSeekMath's GRPO and TRL compute it; a group whose
    samples all got the same reward gets advantage 0 (no signal).
    """
    r = rewards.reshape(-1, group_size).to(torch.float32)
    mean = r.mean(dim=1, keepdim=True)
    std = r.std(dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(mean)
    return ((r - mean) / (std + eps)).reshape(-1)


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
                clip_eps: float = 0.2, behav_logp: torch.Tensor | None = None,
                behav_cap: float | None = 5.0) -> tuple[torch.Tensor, dict]:
    """Clipped surrogate, summed over tokens.

    Synchronous (behav_logp None): ratio = pi / pi_old, the PPO/GRPO objective.
    Decoupled (AReaL, for stale samples): `old_logp` is the proximal policy (the trainer's policy
    before this update, recomputed), `behav_logp` the rollout engine's. The clip is taken relative
    to the proximal policy and the whole term is weighted by pi_prox / pi_behav (detached, capped).
    `adv` is per sequence [B] or per token [B, T].
    """
    if adv.dim() == 1:
        adv = adv[:, None].expand_as(logp)
    ratio = torch.exp(logp - old_logp)
    surr = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * adv)
    weight = torch.ones_like(logp)
    if behav_logp is not None:
        weight = torch.exp(old_logp - behav_logp).detach()
        if behav_cap is not None:
            weight = torch.clamp(weight, max=behav_cap)
    per_token = -weight * surr * mask
    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        stats = {"clip_frac": (((ratio - 1).abs() > clip_eps).float() * mask).sum().item() / n.item(),
                 "behav_weight": (weight * mask).sum().item() / n.item()}
    return per_token.sum(), stats


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Summed k3 estimator of KL(pi || ref): exp(ref - logp) - (ref - logp) - 1 (Schulman's note)."""
    d = ref_logp - logp
    return ((torch.exp(d) - d - 1) * mask).sum()


def gae(token_rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
        gamma: float = 1.0, lam: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over response tokens (right-padded; mask 1 on real ones).

    delta_t = r_t + gamma V_{t+1} - V_t, A_t = delta_t + gamma lam A_{t+1}; V past the end is 0.
    Returns (advantages, returns = advantages + values), zero where masked.
    """
    B, T = token_rewards.shape
    adv = torch.zeros_like(values)
    last = torch.zeros(B, dtype=values.dtype)
    for t in reversed(range(T)):  # T is the response length (tens of tokens): a short loop over time
        next_v = values[:, t + 1] * mask[:, t + 1] if t + 1 < T else torch.zeros(B, dtype=values.dtype)
        delta = token_rewards[:, t] + gamma * next_v - values[:, t]
        last = (delta + gamma * lam * last) * mask[:, t]
        adv[:, t] = last
    return adv, (adv + values) * mask


def terminal_rewards(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Put each sequence's scalar reward on its last real response token (mask may start anywhere)."""
    out = torch.zeros_like(mask, dtype=torch.float32)
    last = ((mask > 0) * torch.arange(1, mask.shape[1] + 1)).argmax(dim=1)
    out[torch.arange(mask.shape[0]), last] = rewards.to(torch.float32)
    return out * mask


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
               clip: float = 0.2) -> torch.Tensor:
    """Clipped value loss 0.5 * max((V - R)^2, (clip(V, V_old +- c) - R)^2), summed over tokens."""
    clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    return (0.5 * torch.maximum((values - returns) ** 2, (clipped - returns) ** 2) * mask).sum()


def whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    n = mask.sum().clamp(min=1)
    mean = (x * mask).sum() / n
    var = (((x - mean) ** 2) * mask).sum() / n
    return (x - mean) * torch.rsqrt(var + eps) * mask
