"""The response-length distribution of a workload, and its integrals the rollout model reads.

Lengths are log-normal with log-space standard deviation `sigma`, cut at `max` (a response that
reaches the limit stops there, as `max_new_tokens` does), located so that the mean of the cut
lengths is the workload's `mean` (what a run logs as `response_length/mean` counts cut responses at
the limit). sigma = 0: every response is `mean` tokens long (fixed-length generation).

Default sigma, from a published RL length statistic: in Seer's synchronous GRPO baselines (Moonshot
AI and Tsinghua, arXiv 2511.14617, section 2), the last 10% of requests to finish take up to 50% of
the rollout time. A cohort that starts together decodes one token per step, so the 90th-percentile
length is then about half the longest of the batch; with 400 prompts x 8 responses (its Moonlight
task), the longest of 3,200 log-normal lengths sits at z = 3.42 and the 90th percentile at z = 1.28,
so exp(-sigma (3.42 - 1.28)) = 0.5 gives sigma = 0.32 (`specs.DEFAULT_SIGMA`). Heavier tails (a larger
sigma) lengthen a synchronous rollout's drain; a workload file may set `response_len.sigma`.

All integrals are closed forms of the log-normal's partial moments, computed once per workload.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr, ndtri

# survival levels where the rollout integral splits the length axis: finer towards the tail, where
# the batch is small and each step's fixed cost (reading the weights) dominates
LEVELS = (0.25, 0.5, 0.75, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999)
# cohort sizes where `longest_of` is tabulated (interpolated in log m between them: the planner's hot path)
_M_GRID = np.geomspace(1.0, 1e7, 141)


@dataclass(frozen=True)
class Lengths:
    mean: float
    max: float
    sigma: float
    mu: float  # log-space location (inf: all at max)
    edges: np.ndarray  # (K + 1,) segment edges on the length axis, 0 ... max
    steps: np.ndarray  # (K,) decode steps in each segment (edges' differences)
    alive: np.ndarray  # (K,) integral of the survival over each segment: sequence-steps per sequence
    second: np.ndarray  # (K,) integral of s x survival over each segment (for the KV read)
    cap_share: float  # share of responses cut at max
    mean_age: float  # mean tokens a running sequence has generated under steady continuous batching
    grid: np.ndarray  # (G,) lengths 0 ... max, and below the survival there: for the KV peak
    surv: np.ndarray
    longest_table: np.ndarray | None = None  # longest_of at _M_GRID

    def mean_square(self, prompt: float = 0.0) -> float:
        """E[(prompt + L)^2]: what a sequence's causal attention work scales with (its square), averaged over
        the lengths; above (prompt + mean)^2 by the variance."""
        return float(prompt ** 2 + 2.0 * prompt * self.mean + 2.0 * self.second.sum())

    def kv_peak(self, prompt: float) -> float:
        """KV tokens per started sequence of a cohort at its peak: max over s of survival(s) x (prompt + s)."""
        return float(np.max(self.surv * (prompt + self.grid)))

    def quantile(self, q):
        """Length at CDF level q (array), capped at max."""
        if self.sigma == 0 or not np.isfinite(self.mu):
            return np.full(np.shape(q), self.mean if self.sigma == 0 else self.max)
        return np.minimum(np.exp(self.mu + self.sigma * ndtri(np.clip(q, 1e-12, 1 - 1e-12))), self.max)

    def longest_of(self, m):
        """Expected longest of m responses (m >= 1, array): the level 1 - 1/(m + 1) (at least the mean: one
        response is on average `mean` long), or the cap once m responses are likely to reach it. Read from
        a table over log m (exact at its 141 points)."""
        if self.longest_table is not None:
            return np.interp(np.log(np.maximum(m, 1.0)), np.log(_M_GRID), self.longest_table)
        return self._longest(m)

    def _longest(self, m):
        m = np.maximum(m, 1.0)
        return np.where(self.cap_share * m >= 0.5, self.max,
                        np.maximum(self.quantile(1.0 - 1.0 / (m + 1.0)), self.mean))

    def sample(self, n: int, seed: int = 0) -> np.ndarray:
        rng = np.random.default_rng(seed)
        if self.sigma == 0 or not np.isfinite(self.mu):
            return np.full(n, self.mean if self.sigma == 0 else self.max)
        return np.minimum(np.exp(self.mu + self.sigma * rng.standard_normal(n)), self.max)


def _partial(mu: float, sigma: float, b, power: int):
    """E[min(L, b)^power] for L log-normal(mu, sigma), power 1 or 2, b > 0 (array)."""
    b = np.asarray(b, dtype=float)
    with np.errstate(divide="ignore"):
        lb = np.log(np.maximum(b, 1e-300))
    z = (lb - mu) / sigma
    below = np.exp(power * mu + power ** 2 * sigma ** 2 / 2) * ndtr(z - power * sigma)
    return np.where(b > 0, below + b ** power * (1.0 - ndtr(z)), 0.0)


def _locate(mean: float, cap: float, sigma: float) -> float:
    """mu with E[min(L, cap)] = mean (bisection: the cut mean grows with mu)."""
    lo, hi = np.log(mean) - 10 * sigma - 10, np.log(cap) + 10 * sigma + 10
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _partial(mid, sigma, cap, 1) < mean:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def build(mean: float, cap: float, sigma: float) -> Lengths:
    L = _build(mean, cap, sigma)
    return dataclasses.replace(L, longest_table=L._longest(_M_GRID))


def _build(mean: float, cap: float, sigma: float) -> Lengths:
    mean, cap = float(max(mean, 1e-9)), float(max(cap, mean))
    if sigma == 0 or mean >= cap * (1 - 1e-9):  # fixed length: one segment, everyone alive throughout
        length = mean if sigma == 0 else cap
        edges = np.array([0.0, length])
        return Lengths(mean, cap, float(sigma), np.inf if sigma else 0.0, edges, np.array([length]),
                       np.array([length]), np.array([length ** 2 / 2]), float(sigma != 0 or length >= cap),
                       length / 2, np.array([0.0, length]), np.array([1.0, 1.0]))
    mu = _locate(mean, cap, sigma)
    inner = np.exp(mu + sigma * ndtri(np.array(LEVELS)))
    edges = np.unique(np.concatenate([[0.0], np.minimum(inner, cap), [cap]]))
    first = _partial(mu, sigma, edges, 1)
    second = _partial(mu, sigma, edges, 2)
    cap_share = float(1.0 - ndtr((np.log(cap) - mu) / sigma))
    s = np.linspace(0.0, cap, 257)
    surv = np.where(s < cap, 1.0 - ndtr((np.log(np.maximum(s, 1e-300)) - mu) / sigma), 0.0)
    return Lengths(mean, cap, float(sigma), float(mu), edges, np.diff(edges), np.diff(first), np.diff(second) / 2,
                   cap_share, float(second[-1] / (2 * first[-1])), s, surv)
