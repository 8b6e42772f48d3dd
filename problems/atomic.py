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


def _cannot_write(path: Path, err: OSError) -> InputError:
    """A result that cannot be written (no such place, no permission, a read-only or full disk): the
    path and the OS's own reason, one line."""
    return InputError(str(path), None, f"cannot write it: {err.strerror or err}", "a writable path with free space")


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    path = Path(path)
    # an output path the user gave that names a folder, or lies under a file: one line, not OSError
    if path.is_dir():
        raise InputError(str(path), None, "is a directory", "a file path to write")
    if path.exists() and not path.is_file():
        # a device, pipe or socket: the rename would put a file in its place, not write to it
        raise InputError(str(path), None, "is not a regular file", "a file path to write")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise InputError(str(path), None, "a folder on its path is a file", "a path under folders") from None
    except OSError as err:
        raise _cannot_write(path, err) from None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as err:
        raise _cannot_write(path, err) from None
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~_UMASK)  # mkstemp makes 0600; results are ordinary files
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)  # never a partial file, nor a temporary one left behind
        if isinstance(err, OSError):
            raise _cannot_write(path, err) from None
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode())
