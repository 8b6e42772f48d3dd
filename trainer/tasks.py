"""Verifiable tasks: prompts with exact-match rewards, train and held-out sets, seeded.

Built-in: `arithmetic` (a+b, a-b), `sorting` (sort a few digits), `counting` (count a letter).
`arithmetic` draws both operands from 0-19 and orders a-b so results are non-negative: 610
distinct prompts (482 train / 128 held-out with the defaults), answers of 1-2 digits. The range
is what the 2-layer `tiny` model can learn in minutes on a CPU: with operands 0-49 the same
supervised pass reaches only 0.05 held-out after 300 steps against 0.32 with 0-19.
A user task is a data source (trainer/data.py: JSONL, parquet, a Hugging Face datasets directory, in
TRL's, verl's or mosearch's column layout) with reward functions in TRL's, verl's or mosearch's
signature (trainer/rewards.py), exact match against the row's answer by default.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from problems.errors import InputError
from trainer import data as D
from trainer.data import Example
from trainer.rewards import RewardSet, Scored


@dataclass
class Task:
    name: str
    train: list[Example]
    heldout: list[Example]
    rewards: RewardSet = field(default_factory=lambda: RewardSet(None))
    max_new_tokens: int = 8

    def score(self, examples: list[Example], completions: list[str], completion_ids: list | None = None) -> Scored:
        return self.rewards.score(examples, completions, completion_ids)

    def prompt_ids(self, examples: list[Example], tok, chat_template: bool = True) -> list[list[int]]:
        """Token ids of each prompt (chat messages through the tokenizer's template)."""
        return D.render(examples, tok, chat_template, self.name)


ARITHMETIC_MAX = 19  # largest operand


def _arithmetic(rng: random.Random, hi: int = ARITHMETIC_MAX) -> tuple[str, str]:
    a, b = rng.randint(0, hi), rng.randint(0, hi)
    if rng.random() < 0.5:
        return f"{a}+{b}=", str(a + b)
    a, b = max(a, b), min(a, b)  # non-negative results keep the vocabulary small
    return f"{a}-{b}=", str(a - b)


def _sorting(rng: random.Random) -> tuple[str, str]:
    xs = [rng.randint(0, 9) for _ in range(rng.randint(3, 5))]
    return f"sort {' '.join(map(str, xs))}:", " ".join(map(str, sorted(xs)))


def _counting(rng: random.Random) -> tuple[str, str]:
    letters = "abc"
    s = "".join(rng.choice(letters) for _ in range(rng.randint(4, 8)))
    target = rng.choice(letters)
    return f"count {target} in {s}:", str(s.count(target))


GENERATORS = {"arithmetic": (_arithmetic, 4), "sorting": (_sorting, 10), "counting": (_counting, 2)}
BUILTIN = sorted(GENERATORS)


def _split(gen, seed: int, n_train: int, n_heldout: int) -> tuple[list, list]:
    """Distinct prompts; held-out prompts never appear in the train set."""
    rng = random.Random(seed)
    seen: dict[str, str] = {}
    tries = 0
    while len(seen) < n_train + n_heldout and tries < 50 * (n_train + n_heldout):
        p, a = gen(rng)
        seen.setdefault(p, a)
        tries += 1
    items = list(seen.items())
    return items[n_heldout:], items[:n_heldout]


def load_task(name: str, seed: int = 0, n_train: int = 4000, n_heldout: int = 128,
              reward: str | list[str] | None = None, max_new_tokens: int | None = None,
              reward_weights: list[float] | None = None, reward_errors: str = "raise") -> Task:
    """A built-in task by name, or a data source (`jsonl:PATH`, `parquet:PATH`, `hf:DIR` or a bare path),
    with its reward functions (default: exact match against each row's answer). Every check that can
    be made without the model is made here, before any process starts: the data's rows, the columns
    each reward needs, and one call of each reward on the first prompt with an empty completion."""
    rewards = RewardSet([reward] if isinstance(reward, str) else reward, reward_weights, reward_errors)
    source = D.parse_source(name)
    if source is not None:
        train, held = D.load_examples(name, seed)
        default_len = 32
    elif name in GENERATORS:
        gen, default_len = GENERATORS[name]
        pairs_train, pairs_held = _split(gen, seed, n_train, n_heldout)
        train, held = ([Example(p, {"answer": a}) for p, a in pairs] for pairs in (pairs_train, pairs_held))
    else:
        raise InputError(None, "task", f"unknown task {name!r}", f"one of {', '.join(BUILTIN)}, or a data file "
                         "(PATH.jsonl, PATH.parquet, a datasets directory; or jsonl:, parquet:, hf: PATH)")
    where = str(source[1]) if source else name
    rewards.check(train + held, where)
    rewards.score(train[:1], [""])  # a reward that cannot run at all says so now, not after start-up
    return Task(name, train, held, rewards, max_new_tokens or default_len)


class PromptSampler:
    """Deterministic epoch-shuffled stream of train prompt indices; its state is checkpointed."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed, self.epoch, self.pos = n, seed, 0, 0
        self._order = self._perm()

    def _perm(self) -> list[int]:
        order = list(range(self.n))
        random.Random(self.seed * 1_000_003 + self.epoch).shuffle(order)
        return order

    def take(self, k: int) -> list[int]:
        out = []
        while len(out) < k:
            if self.pos >= self.n:
                self.epoch, self.pos = self.epoch + 1, 0
                self._order = self._perm()
            out.append(self._order[self.pos])
            self.pos += 1
        return out

    def state(self) -> dict:
        return {"epoch": self.epoch, "pos": self.pos}

    def load(self, state: dict) -> None:
        self.epoch, self.pos = int(state["epoch"]), int(state["pos"])
        self._order = self._perm()
