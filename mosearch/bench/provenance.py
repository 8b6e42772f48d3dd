"""Where a committed results file came from: the commit, the date, the machine and the command.

Every file under results/bench/ that the README links states these (tests/docs/ checks it), so a reader
can tell whether the code it measured is the code they run.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def commit() -> str:
    """The short hash of HEAD, with `+changes` when the tree differs from it (measured on uncommitted
    code); `unknown` outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, check=True,
                               capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> str:
    """The machine in words: CPU model, cores, architecture, Python and torch (and the GPU, if one is seen)."""
    parts = [f"{cpu_model()} ({os.cpu_count()} cores, {platform.machine()})", f"Python {platform.python_version()}"]
    try:
        import torch

        parts.append(f"torch {torch.__version__}")
        if torch.cuda.is_available():
            parts.append(torch.cuda.get_device_name(0))
    except ImportError:
        pass
    return ", ".join(parts)


def line(command: str | None = None) -> str:
    """One line for the top of a results file (the command, where the file does not name it elsewhere)."""
    today = _dt.date.today().isoformat()
    return f"Measured at commit {commit()} on {today}, on {machine()}" + (f", by `{command}`." if command else ".")
