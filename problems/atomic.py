"""Atomic file writes: a temporary file in the same folder, fsync, then rename over the target.

A reader (or a run killed at any moment) sees either the previous complete file or the new one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from problems.errors import InputError


def _umask() -> int:
    old = os.umask(0o022)
    os.umask(old)
    return old


_UMASK = _umask()


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    path = Path(path)
    # an output path the user gave that names a folder, or lies under a file: one line, not OSError
    if path.is_dir():
        raise InputError(str(path), None, "is a directory", "a file path to write")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise InputError(str(path), None, "a folder on its path is a file", "a path under folders") from None
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; results are ordinary files
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode())
