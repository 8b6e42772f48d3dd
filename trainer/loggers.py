"""Where a run's metrics rows go besides metrics.jsonl (which the driver always writes):
TensorBoard event files (`RUN/tensorboard/`, through PyTorch's SummaryWriter and the tensorboard
package) and Weights & Biases in offline mode (`RUN/wandb/`, `wandb sync` uploads it later).

Each row's numbers are logged as scalars at its step, nested keys joined by "/" (`time/rollout`,
`reward_fns/exact_match`); lists (sample ids) and strings are left to metrics.jsonl.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from problems.errors import InputError

LOGGERS = ("jsonl", "tensorboard", "wandb")
_PACKAGE = {"tensorboard": "tensorboard", "wandb": "wandb"}


def parse(spec: str | list[str] | None) -> list[str]:
    """Logger names from `a,b` (jsonl is always on); an unknown name or a missing package is one line."""
    names = spec if isinstance(spec, list) else [x.strip() for x in (spec or "").split(",") if x.strip()]
    for n in names:
        if n not in LOGGERS:
            raise InputError(None, "logger", f"unknown logger {n!r}", ", ".join(LOGGERS) + " (comma-separated)")
        pkg = _PACKAGE.get(n)
        if pkg and importlib.util.find_spec(pkg) is None:
            raise InputError(None, "logger", f"{n} needs the {pkg} package, which is not installed",
                             f"pip install {pkg} (./setup.sh installs it)")
    return [n for n in dict.fromkeys(names) if n != "jsonl"]


def scalars(row: dict, prefix: str = "") -> dict[str, float]:
    """The row's numbers, nested keys joined by '/' (booleans and lists left out)."""
    out = {}
    for k, v in row.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out |= scalars(v, key + "/")
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step":
            out[key] = float(v)
    return out


class Loggers:
    """The run's TensorBoard and wandb writers, opened on the first row."""

    def __init__(self, spec: str | list[str] | None, out: Path, config: dict, name: str | None = None):
        self.names = parse(spec)
        self.out, self.config, self.name = Path(out), config, name or Path(out).name
        self._tb = self._wandb = None

    def _open(self) -> None:
        if "tensorboard" in self.names and self._tb is None:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(self.out / "tensorboard"))
        if "wandb" in self.names and self._wandb is None:
            import wandb

            os.environ.setdefault("WANDB_SILENT", "true")
            (self.out / "wandb").mkdir(parents=True, exist_ok=True)
            self._wandb = wandb.init(project="mosearch", name=self.name, dir=str(self.out), mode="offline",
                                     config={k: v for k, v in self.config.items() if v is not None},
                                     settings=wandb.Settings(console="off", silent=True))

    def log(self, row: dict) -> None:
        if not self.names:
            return
        self._open()
        step, values = int(row.get("step", 0)), scalars(row)
        if self._tb is not None:
            for k, v in values.items():
                self._tb.add_scalar(k, v, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(values, step=step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None
