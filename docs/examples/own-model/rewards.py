"""Reward functions in the two conventions users bring (pass the file path: no PYTHONPATH needed).

    --reward docs/examples/own-model/rewards.py                 verl's compute_score (the default name)
    --reward docs/examples/own-model/rewards.py:accuracy \
    --reward docs/examples/own-model/rewards.py:brevity --reward-weights 1,0.1   TRL's, weighted
"""

from __future__ import annotations


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """verl's signature: one response, its row's ground truth; 1 for the right number first."""
    words = solution_str.strip().split()
    return 1.0 if words and words[0].rstrip(".") == ground_truth else 0.0


def accuracy(completions, solution, **kwargs):
    """TRL's signature: a batch; chat completions are [{"role": "assistant", "content": ...}] lists."""
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [1.0 if t.strip().startswith(s) else 0.0 for t, s in zip(texts, solution)]


def brevity(completions, **kwargs):
    """A second TRL reward: shorter answers score higher (weighted down with --reward-weights)."""
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [-len(t) / 32 for t in texts]
