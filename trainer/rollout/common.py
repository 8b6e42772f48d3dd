"""What a rollout call returns, shared by the backends."""

from __future__ import annotations

import os
import time

import psutil


def result(version: int, completions: list[list[int]], logprobs: list[list[float]], seconds: float,
           prompt_tokens: int, rss: float | None = None) -> dict:
    """Completions are row-major: prompt i's n samples are rows i*n .. i*n+n-1."""
    return {
        "version": version,
        "completions": completions,
        "logprobs": logprobs,
        "gen_s": seconds,
        "prompt_tokens": prompt_tokens,
        "gen_tokens": sum(len(c) for c in completions),
        "finished_at": time.time(),
        "rss_gb": rss_gb() if rss is None else rss,
    }


def rss_gb(children: bool = False) -> float:
    """This process's resident memory, with its children's if asked (an engine's TP workers)."""
    me = psutil.Process(os.getpid())
    procs = [me] + (me.children(recursive=True) if children else [])
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:  # a child that exited meanwhile
            pass
    return total / 2**30
