"""Which machine a profile was measured on, and which profile of a local device a cluster's stands for.

A profile's figures belong to the machine that measured them: the same `cpu-local` device type is a
2-core AMD EPYC on one machine and a 2-core Intel Xeon on another, with different matmul rates,
per-call overheads and training-loop costs. A profile records its machine (`machine:`); when a
cluster names a profile of a device this machine has, measured on another machine, the cluster
uses this machine's own profile instead, cached per machine in the user's cache directory
(`$XDG_CACHE_HOME/mosearch/profiles/<machine-key>.yaml`, else `~/.cache/...`), measured the first
time it is needed (the commands that predict for this machine, `plan`, `train`, `demo`, register
the measurement; nothing else measures).

`MOSEARCH_PROFILE` (or `--profile PATH` of those commands, which sets it): a path pins the profile of
this machine's device; the word `cluster` uses the cluster's profiles as named, on any machine
(what the test suite sets, so its predictions do not depend on the machine it runs on).
Stdlib only: reading a cluster does not import torch.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

# what makes another machine: a different CPU model or core count, another PyTorch build, another GPU
# or CUDA; the thread count and the driver are recorded, not compared (the profile measures one thread)
MACHINE_KEYS = ("cpu", "cores", "torch", "gpu", "cuda")
ENV = "MOSEARCH_PROFILE"
AS_NAMED = "cluster"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _gpu() -> tuple[str | None, str | None]:
    """(name, driver) of the first NVIDIA GPU, from nvidia-smi (None, None without one)."""
    if shutil.which("nvidia-smi") is None or os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return None, None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return None, None
    if not out or "," not in out[0]:
        return None, None
    name, driver = (s.strip() for s in out[0].split(",", 1))
    return name, driver


_HERE: dict | None = None


def detect() -> dict:
    """This machine's record (cached for the process)."""
    global _HERE
    if _HERE is None:
        try:
            torch = importlib.metadata.version("torch")
        except importlib.metadata.PackageNotFoundError:
            torch = None
        gpu, driver = _gpu()
        cuda = None
        if torch and "+cu" in torch:  # the CUDA the wheel was built for: 2.9.0+cu128 -> 12.8
            digits = torch.split("+cu", 1)[1]
            cuda = f"{digits[:-1]}.{digits[-1]}" if digits.isdigit() and len(digits) >= 2 else digits
        _HERE = {"cpu": _cpu_model(), "cores": _cores(), "threads": 1, "torch": torch,
                 "gpu": gpu, "driver": driver, "cuda": cuda if gpu else None}
    return dict(_HERE)


def same_machine(a: dict, b: dict) -> bool:
    return all(a.get(k) == b.get(k) for k in MACHINE_KEYS)


def describe(m: dict) -> str:
    parts = [f"{m.get('cpu') or 'unknown CPU'} ({m.get('cores', '?')} cores)", f"torch {m.get('torch')}"]
    if m.get("gpu"):
        parts.append(f"{m['gpu']} (driver {m.get('driver')}, CUDA {m.get('cuda')})")
    return ", ".join(parts)


def machine_key(device_type: str, m: dict | None = None) -> str:
    """File name stem of a machine's profile of one device type: readable, plus a hash of the record."""
    m = m or detect()
    ident = json.dumps({k: m.get(k) for k in MACHINE_KEYS}, sort_keys=True)
    slug = re.sub(r"[^a-z0-9.]+", "-", f"{device_type} {m.get('cpu')} {m.get('cores')}c {m.get('gpu') or ''}".lower())
    return f"{slug.strip('-')}-{hashlib.sha256(ident.encode()).hexdigest()[:8]}"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mosearch" / "profiles"


def cached_profile(device_type: str) -> Path:
    return cache_dir() / f"{machine_key(device_type)}.yaml"


# (named profile, where to write this machine's) -> None; registered by the commands that may measure
_measure: Callable[[Path, Path], None] | None = None
_said: set[str] = set()


def set_measurer(fn: Callable[[Path, Path], None] | None) -> None:
    global _measure
    _measure = fn


def say(message: str) -> None:
    """One line on stderr, once per process."""
    if message not in _said:
        _said.add(message)
        print(f"mosearch: {message}", file=sys.stderr, flush=True)


def is_local(device_type: str, canonical_of: Callable[[str], str | None]) -> bool:
    """Whether this machine has the device: `cpu-local` always (the CPU), a GPU type when this
    machine's GPU is of it (`canonical_of`: a name -> the cluster's GPU type, None if not one)."""
    if device_type == "cpu-local":
        return True
    gpu = detect().get("gpu")
    if not gpu:
        return False
    want = canonical_of(device_type)
    return want is not None and any(canonical_of(t) == want for t in gpu.replace("NVIDIA", "").split())


def resolve(file: Path, recorded: dict, device_type: str, local: bool) -> tuple[Path, str | None]:
    """(the profile file to use for `file`, a note or None). `recorded`: `file`'s machine record."""
    pin = os.environ.get(ENV)
    if pin == AS_NAMED or not local:
        return file, None
    if pin:
        return Path(pin), f"profile of {device_type}: {pin} (pinned)"
    here = detect()
    cached = cached_profile(device_type)
    if cached.is_file():
        if cached.resolve() == file.resolve():
            return file, None
        return cached, (f"profile of {device_type}: this machine's, {cached} ({describe(here)}); the cluster "
                        f"names {file.name}" + (f", measured on {describe(recorded)}" if recorded and not
                                                 same_machine(recorded, here) else ""))
    if recorded and same_machine(recorded, here):
        return file, None
    if _measure is not None:
        what = f"measured on {describe(recorded)}" if recorded else "which records no machine"
        say(f"{file.name} was {what}; this machine is {describe(here)}: measuring its {device_type} profile "
            f"(about a minute on 2 cores, once; cached in {cached}; --profile PATH pins one)")
        try:
            _measure(file, cached)
        except Exception as err:  # a failed measurement leaves the named profile in use, said
            cached.unlink(missing_ok=True)
            return file, f"could not measure this machine ({err}); predictions use {file.name}, of another machine"
        if cached.is_file():
            return cached, f"profile of {device_type}: this machine's, measured now -> {cached}"
    if not recorded:
        return file, None
    return file, (f"{file.name} was measured on {describe(recorded)}, not this machine ({describe(here)}): "
                  f"predictions are for that machine; `mosearch plan`, `train` or `demo` measure this one")
