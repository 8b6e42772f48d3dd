"""What a rollout call returns, shared by the backends."""

from __future__ import annotations

import os
import time

import psutil


def result(version: int, completions: list[list[int]], logprobs: list[list[float]], seconds: float,
           prompt_tokens: int) -> dict:
    """Completions are row-major: prompt i's n samples are rows i*n .. i*n+n-1."""
    return {
        "version": version,
        "completions": completions,
        "logprobs": logprobs,
        "gen_s": seconds,
        "prompt_tokens": prompt_tokens,
        "gen_tokens": sum(len(c) for c in completions),
        "finished_at": time.time(),
        "rss_gb": rss_gb(),
    }


def rss_gb() -> float:
    return psutil.Process(os.getpid()).memory_info().rss / 2**30
