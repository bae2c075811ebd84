"""A rendered set of files written into `--out DIR` whole, for one cluster only.

`gpuforge scheduler render` and `gpuforge monitoring render` both write a set of files that a
daemon reads as one cluster's (slurmctld every file of /etc/slurm it is told about, Prometheus
every rule file of its rules folder), so both follow this one rule:

DIR may be missing (it is created), empty, or hold only files gpuforge rendered for the same
cluster, in the set's own folders (`rules/`, `dashboards/`). A file is recognised as such by its
first line, which every renderer writes naming the file and the cluster; what recognises it is
the renderer's (`Recognise`), as each has its own header (a `#` comment, a JSON key). Anything
else in DIR (another cluster's files, a file gpuforge did not write, a folder the set has not,
a link, a FIFO, a temporary file left by a crash) stops the render with exit 2 before anything
is written, naming what was found: a stale or foreign file beside fresh ones would be read as
this cluster's.

Within that rule the set is replaced: the set is rendered in memory and DIR checked first; then
each file is written atomically (gpuforge.atomic), and a file this cluster's earlier render wrote
that this one no longer produces is removed, so DIR ends holding exactly the new set.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath

from gpuforge.atomic import write_text_atomic
from gpuforge.display import cut
from gpuforge.errors import InputError

Recognise = Callable[[PurePosixPath, str], bool]
"""(path relative to DIR, the file's first line) -> whether gpuforge rendered that file for the cluster."""

# Enough of a file to read its header line, and no more: DIR may hold anything.
_HEADER_BYTES = 512
_LISTED = 10


def _first_line(path: Path) -> str | None:
    """The first line of the regular file at `path`; None for anything else or an unreadable file."""
    try:
        if not stat.S_ISREG(path.lstat().st_mode):  # never open a FIFO, a device or a link
            return None
        with path.open("rb") as handle:
            return handle.read(_HEADER_BYTES).split(b"\n", 1)[0].decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _nearest_folder(out: Path) -> Path:
    """`out` or its nearest ancestor that exists (where the folders to create would start)."""
    for candidate in (out, *out.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path("/")


def _entries(out: Path, folders: set[PurePosixPath]) -> list[PurePosixPath]:
    """Every entry below `out`, relative to it; the set's own real folders are walked, not listed."""
    found: list[PurePosixPath] = []
    pending = [PurePosixPath()]
    while pending:  # bounded: each of the set's folders is walked once
        folder = pending.pop()
        try:
            names = sorted(entry.name for entry in (out / folder).iterdir())
        except OSError as error:
            raise InputError(
                f"--out {out}: cannot list {out / folder} ({error.strerror}). Fix: choose a readable folder."
            ) from None
        for name in names:
            relative = folder / name
            if relative in folders and (out / relative).is_dir() and not (out / relative).is_symlink():
                pending.append(relative)
            else:
                found.append(relative)
    return sorted(found)


def check_out(out: Path, files: Mapping[str, str], cluster: str, recognise: Recognise) -> list[PurePosixPath]:
    """Refuse an `out` the set cannot be written into whole; return this cluster's earlier files in it."""
    existing = _nearest_folder(out)
    if not existing.is_dir():
        raise InputError(
            f"--out {out}: {existing} exists and is not a folder, so the files cannot be written there. "
            "Fix: give the path of a folder (it is created if missing)."
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(
            f"--out {out}: {existing} is not writable by this user. Fix: choose a folder you may write to, "
            "or run as a user who may write there."
        )
    if existing != out:
        return []  # out is created: nothing in it yet
    folders = {
        parent for name in files for parent in PurePosixPath(name).parents if parent != PurePosixPath()
    }
    entries = _entries(out, folders)
    foreign = [entry for entry in entries if not _recognised(out, entry, recognise)]
    if foreign:
        shown = ", ".join(cut(str(entry)) for entry in foreign[:_LISTED])
        more = f" and {len(foreign) - _LISTED} more" if len(foreign) > _LISTED else ""
        raise InputError(
            f"--out {out}: the folder holds {len(foreign)} entr{'y' if len(foreign) == 1 else 'ies'} that gpuforge "
            f"did not render for cluster {cluster} ({shown}{more}), which would be read as this cluster's beside "
            "the new files, so this render did not write any. Fix: render into an empty or new folder, or into "
            "the folder this cluster was rendered into before, or remove those entries."
        )
    return entries


def _recognised(out: Path, relative: PurePosixPath, recognise: Recognise) -> bool:
    first = _first_line(out / relative)
    return first is not None and recognise(relative, first)


def write_set(
    out: Path, files: Mapping[str, str], cluster: str, recognise: Recognise
) -> tuple[list[Path], list[Path]]:
    """Check `out` whole, write every file of `files` (relative POSIX path -> text) atomically,
    remove this cluster's earlier files that the set no longer has.

    Returns the paths written and the paths removed.
    """
    for name, text in files.items():
        relative = PurePosixPath(name)
        # A file its own renderer would not recognise would make the next render refuse this one's output.
        if (
            relative.is_absolute()
            or ".." in relative.parts
            or not recognise(relative, text.split("\n", 1)[0])
        ):
            raise ValueError(f"{name}: not a relative path the renderer recognises as its own for {cluster}")
    names = {PurePosixPath(name) for name in files}
    stale = [entry for entry in check_out(out, files, cluster, recognise) if entry not in names]
    written = []
    for name, text in files.items():
        target = out / name
        write_text_atomic(target, text)
        written.append(target)
    removed = []
    for entry in stale:
        path = out / entry
        try:
            path.unlink()
        except OSError as error:
            raise InputError(
                f"{path}: a file of the previous render that this one no longer produces could not be removed "
                f"({error.strerror}). Fix: remove it by hand; it would be read as this cluster's."
            ) from None
        removed.append(path)
    return written, removed
