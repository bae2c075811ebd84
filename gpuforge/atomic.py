"""Atomic file writes: a reader sees the old file or the new one, never half of one.

Catalogs, locks and generated data all go through `write_text_atomic`, so a
crash or Ctrl-C mid-write leaves the previous version in place. A target that
cannot be written (a read-only folder, a file where a folder should be, a full
disk) is an InputError (exit 2) naming the path and the fix, never a traceback.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from gpuforge.errors import InputError

NEW_FILE_MODE = 0o644


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, fsync it, then rename over `path`.

    The file keeps the mode of the one it replaces (a new file gets 0644): mkstemp's
    private 0600 would otherwise lock other readers out of a shared catalog.
    """
    try:
        _write(path, text)
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the path
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise InputError(
            f"{path}: cannot write the file ({reason}). Fix: choose a path in a folder that exists or "
            "can be created, that you may write to, on a disk with free space."
        ) from None


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else NEW_FILE_MODE
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
