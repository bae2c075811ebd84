"""Atomic file writes: a reader sees the old file or the new one, never half of one.

Catalogs, locks and generated data all go through `write_text_atomic`, so a
crash or Ctrl-C mid-write leaves the previous version in place. A target that
cannot be written (a read-only folder, a file where a folder should be, a full
disk) is an InputError (exit 2) naming the path and the fix, never a traceback.

The rename that makes a write atomic replaces whatever the name points at, so a
target that exists and is not a regular file is refused before anything is written:
a device (as root, `--plot /dev/full` replaced the device with a file), a FIFO, a
directory, and a symbolic link. A link is refused rather than followed: replacing it
would silently cut it from the file it names (a `slurm.conf` linked into /etc/slurm
would stop being the one Slurm reads), and following it would write wherever the link
points. The fix is to pass the real path. The check is on the name itself, just before
the temporary file is made; a name swapped for a device after the check is out of scope.
"""

from __future__ import annotations

import os
import stat
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


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket"


def _existing_mode(path: Path) -> int | None:
    """The permission bits of the regular file at `path`, None if nothing is there; anything else refused."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        raise InputError(
            f"{path}: cannot write the file: it is {_kind(info.st_mode)}, not a regular file, and writing "
            "would replace it. Fix: pass the path of a regular file or of a new one (for a link, the path "
            "it points to)."
        )
    return info.st_mode & 0o777


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    existing = _existing_mode(path)
    mode = NEW_FILE_MODE if existing is None else existing
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
