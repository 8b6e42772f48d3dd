"""Where a training step's time went: one counter per phase, filled by a context manager."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass


@dataclass
class StepTimes:
    rollout: float = 0.0
    reward: float = 0.0
    train: float = 0.0
    weight_sync: float = 0.0
    switch: float = 0.0
    eval: float = 0.0
    checkpoint: float = 0.0
    wall: float = 0.0

    @contextmanager
    def phase(self, name: str):
        """Add the time spent in the block to phase `name`."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            setattr(self, name, getattr(self, name) + time.perf_counter() - t0)

    def with_idle(self) -> dict:
        d = asdict(self)
        d["idle"] = max(0.0, self.wall - sum(v for k, v in d.items() if k != "wall"))
        return d
