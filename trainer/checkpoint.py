"""Checkpoints written atomically (temp dir + rename) with a sha256 manifest verified on load.

A run directory keeps the newest `prune(keep=2)` checkpoints, `step_NNNNNN/`, each with the
ranks' `state.pt`, the driver's `driver.json` and `manifest.json` (sha256 of both). Loading
takes the newest checkpoint that verifies; a corrupt one is skipped with a warning naming the
file, and only when none verifies is the load refused (one-line InputError).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from problems.errors import InputError


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def staging_dir(root: Path, step: int) -> Path:
    tmp = root / f".step_{step:06d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def commit(root: Path, tmp: Path, step: int, driver_state: dict) -> Path:
    """Write driver state and the manifest into `tmp`, then rename it to step_N and point `latest` at it."""
    (tmp / "driver.json").write_text(json.dumps(driver_state))
    files = {p.name: sha256(p) for p in sorted(tmp.iterdir()) if p.is_file()}
    (tmp / "manifest.json").write_text(json.dumps({"step": step, "sha256": files}, indent=1))
    final = root / f"step_{step:06d}"
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    latest_tmp = root / "latest.tmp"
    latest_tmp.write_text(final.name)
    os.replace(latest_tmp, root / "latest")
    return final


def latest(root: Path) -> Path | None:
    pointer = root / "latest"
    if not pointer.is_file():
        return None
    path = root / pointer.read_text().strip()
    return path if path.is_dir() else None


def verify(path: Path) -> dict:
    """Check every file against the manifest; return the driver state. A mismatch is an InputError."""
    manifest_file = path / "manifest.json"
    if not manifest_file.is_file():
        raise InputError(str(path), "manifest.json", "missing", "a checkpoint written by `mosearch train`")
    try:
        manifest = json.loads(manifest_file.read_text())
        digests = dict(manifest["sha256"])
    except (ValueError, KeyError, TypeError):
        raise InputError(str(manifest_file), "sha256", "manifest is not valid JSON with a sha256 table", "a checkpoint written by `mosearch train`") from None
    if "driver.json" not in digests:
        raise InputError(str(manifest_file), "sha256", "driver.json is not covered", "a checkpoint written by `mosearch train`")
    for name, digest in digests.items():
        f = path / name
        if not f.is_file() or sha256(f) != digest:
            raise InputError(str(f), "sha256", "checkpoint file is missing or corrupt", f"sha256 {digest[:12]}...")
    return json.loads((path / "driver.json").read_text())


def steps(root: Path) -> list[tuple[int, Path]]:
    """(step, dir) of the checkpoint directories under `root`, newest first (half-written `.tmp` ones excluded)."""
    out = []
    for p in root.glob("step_*"):
        if p.is_dir() and p.name[5:].isdigit():
            out.append((int(p.name[5:]), p))
    return sorted(out, reverse=True)


def load_newest_valid(root: Path, max_step: int | None = None, warn=print) -> tuple[Path | None, dict | None]:
    """The newest checkpoint at or before `max_step` whose files match its manifest, and its driver state.

    Corrupt ones are skipped (each named in one warning line). None when there is no checkpoint;
    an InputError naming the newest corrupt file when there are some but none verifies.
    """
    first_err = None
    for step, path in steps(root):
        if max_step is not None and step > max_step:
            continue
        try:
            return path, verify(path)
        except InputError as err:
            first_err = first_err or err
            warn(f"warning: skipping checkpoint {path.name}: {err.line()}")
    if first_err is not None:
        raise first_err
    return None, None


def prune(root: Path, keep: int = 2) -> None:
    steps = sorted(p for p in root.glob("step_*") if p.is_dir())
    for old in steps[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
