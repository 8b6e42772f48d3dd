"""Checkpoints written atomically (temp dir + rename) with a sha256 manifest verified on load."""

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
    manifest = json.loads(manifest_file.read_text())
    for name, digest in manifest["sha256"].items():
        f = path / name
        if not f.is_file() or sha256(f) != digest:
            raise InputError(str(f), "sha256", "checkpoint file is missing or corrupt", f"sha256 {digest[:12]}...")
    return json.loads((path / "driver.json").read_text())


def prune(root: Path, keep: int = 2) -> None:
    steps = sorted(p for p in root.glob("step_*") if p.is_dir())
    for old in steps[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
