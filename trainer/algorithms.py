"""RL losses on token tensors: GRPO, PPO with a critic, and AReaL's decoupled objective, and the
objective of each algorithm (`OBJECTIVES`) that a training rank runs without knowing its name.

Shapes: B sequences x T positions; `mask` is 0 off the response and a per-token weight on it
(1, or 1/len(sequence) for the GRPO paper's sequence mean). Every loss returns the weighted SUM;
the caller divides by the number of sequences in the whole global batch, so micro-batching, chunked
(pipelined) arrival and data parallelism do not change the gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class AlgoConfig:
    name: str = "grpo"  # a key of OBJECTIVES
    lr: float = 1e-4
    clip_eps: float = 0.2
    kl_coef: float = 0.0  # > 0 keeps a frozen reference model and adds k3 KL
    decoupled: bool = False  # AReaL's objective: weight by pi_prox / pi_behav (async mode)
    # several updates per step: the PPO ratio is to the rollout policy (vLLM's log-probs), so later
    # updates of the same batch are clipped; with one update the ratio is 1 and the clip inert
    ratio_to_behaviour: bool = False
    behav_cap: float = 5.0
    vf_coef: float = 0.5
    gamma: float = 1.0
    lam: float = 0.95
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    # "sgd" (plain, no momentum) makes the step linear in the gradient: the layout-equivalence tests
    # use it, since Adam's first step is ~lr * sign(g) and a CPU's rounding of a near-zero element
    # flips it
    optimizer: str = "adamw"  # adamw | sgd


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
    last = values.new_zeros(B)
    for t in reversed(range(T)):  # T is the response length (tens of tokens): a short loop over time
        next_v = values[:, t + 1] * mask[:, t + 1] if t + 1 < T else values.new_zeros(B)
        delta = token_rewards[:, t] + gamma * next_v - values[:, t]
        last = (delta + gamma * lam * last) * mask[:, t]
        adv[:, t] = last
    return adv, (adv + values) * mask


def terminal_rewards(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Put each sequence's scalar reward on its last real response token (mask may start anywhere)."""
    out = torch.zeros_like(mask, dtype=torch.float32)
    last = ((mask > 0) * torch.arange(1, mask.shape[1] + 1, device=mask.device)).argmax(dim=1)
    out[torch.arange(mask.shape[0], device=mask.device), last] = rewards.to(out)
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


# -- the objective a training rank runs ------------------------------------------------------------
class Objective:
    """One algorithm's loss on a micro-batch: `loss(logp, values, t, ref_logp)` -> (summed loss, sums).

    `t` holds the collated tensors (trainer/batch.py: weight, mask, advantage, behav_logp, reward);
    `values` are the critic's per-position values (None without a critic); `ref_logp` the frozen
    reference's log-probs (None without a KL term). The statistics are sums over the micro-batch
    (tokens, clipped tokens, per-sequence KL and value loss), so a rank adds them over micro-batches
    and data-parallel replicas and divides once.
    """

    name = ""
    critic = False  # needs a value head on the policy's last hidden state
    pipelined = True  # runs under pipeline stages (the loss sees logits only: no values)

    def __init__(self, cfg: AlgoConfig):
        self.cfg = cfg

    def advantages(self, values, t: dict) -> tuple[torch.Tensor, dict]:
        """Per-sequence [B] or per-token [B, T] advantages, and what the loss needs beside them."""
        return t["advantage"], {}

    def extra_loss(self, values, t: dict, aux: dict) -> tuple[torch.Tensor | None, dict]:
        return None, {}

    def loss(self, logp: torch.Tensor, values, t: dict, ref_logp: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
        cfg, w = self.cfg, t["weight"]
        adv, aux = self.advantages(values, t)
        behav = t["behav_logp"] if cfg.decoupled else None
        old = t["behav_logp"] if cfg.ratio_to_behaviour and not cfg.decoupled else logp.detach()
        loss, stats = policy_loss(logp, old, adv, w, cfg.clip_eps, behav, cfg.behav_cap)
        on = (t["mask"] > 0).float()
        with torch.no_grad():
            ratio = torch.exp(logp - old)
            sums = {"tokens": on.sum().item(), "clip_tokens": (((ratio - 1).abs() > cfg.clip_eps).float() * on).sum().item(),
                    "behav_weight_sum": stats["behav_weight"] * on.sum().item(),
                    "sequences": float((on.sum(dim=1) > 0).sum().item())}
        extra, more = self.extra_loss(values, t, aux)
        if extra is not None:
            loss = loss + extra
        sums |= more
        if ref_logp is not None:
            kl = kl_k3(logp, ref_logp, w)  # the per-sequence mean KL, summed over sequences
            loss = loss + cfg.kl_coef * kl
            sums["kl_sum"] = kl.item()
        return loss, sums


class GRPO(Objective):
    """Group-normalised advantages (computed by the driver from the rewards) on the clipped surrogate."""

    name = "grpo"


class PPO(Objective):
    """GAE advantages from a critic (a value head), whitened, plus the clipped value loss."""

    name = "ppo"
    critic = True
    pipelined = False

    def advantages(self, values, t: dict) -> tuple[torch.Tensor, dict]:
        mask = (t["mask"] > 0).float()
        old_v = values.detach() * mask
        adv, ret = gae(terminal_rewards(t["reward"], mask), old_v, mask, self.cfg.gamma, self.cfg.lam)
        return whiten(adv, mask), {"old_values": old_v, "returns": ret}

    def extra_loss(self, values, t: dict, aux: dict) -> tuple[torch.Tensor, dict]:
        vl = value_loss(values, aux["old_values"], aux["returns"], t["weight"])
        return self.cfg.vf_coef * vl, {"value_loss_sum": vl.item()}


OBJECTIVES = {o.name: o for o in (GRPO, PPO)}
ALGORITHMS = tuple(OBJECTIVES)


def objective(cfg: AlgoConfig) -> Objective:
    if cfg.name not in OBJECTIVES:
        raise ValueError(f"algorithm {cfg.name!r} is not one of {', '.join(ALGORITHMS)}")
    return OBJECTIVES[cfg.name](cfg)


@torch.no_grad()
def entropy_sum(log_probs: torch.Tensor, mask: torch.Tensor) -> float:
    """Summed per-token entropy -sum_v p log p of the policy's next-token distributions [B, T, V]
    over the positions where `mask` > 0."""
    ent = -(log_probs.exp() * log_probs).sum(-1)
    return float((ent * (mask > 0)).sum())


def reduce_stats(sums: list[dict]) -> dict:
    """A step's figures from the micro-batches' sums (added over micro-batches and replicas first):
    loss (mean over the global batch), token-weighted entropy, clip fraction and behaviour weight,
    and per-sequence KL and value loss."""
    tot: dict[str, float] = {}
    for s in sums:
        for k, v in s.items():
            tot[k] = tot.get(k, 0.0) + v
    tokens, seqs = max(1.0, tot.get("tokens", 0.0)), max(1.0, tot.get("sequences", 0.0))
    out = {"loss": tot.get("loss", 0.0), "tokens": int(tot.get("tokens", 0)),
           "entropy": tot.get("entropy_sum", 0.0) / tokens, "clip_frac": tot.get("clip_tokens", 0.0) / tokens,
           "behav_weight": tot.get("behav_weight_sum", 0.0) / tokens,
           "behav_abs_diff_mean": tot.get("behav_abs_diff", 0.0) / tokens}
    if "kl_sum" in tot:
        out["kl"] = tot["kl_sum"] / seqs
    if "value_loss_sum" in tot:
        out["value_loss"] = tot["value_loss_sum"] / seqs
    return out
