"""`gpuforge scheduler render --out DIR`: the rendered set written whole, for one cluster only.

The rule: DIR may be missing (it is created), empty, or hold only files gpuforge rendered
for the same cluster (`RENDERED_NAMES`, each starting with the header `render._header`
writes, naming the cluster). Anything else in DIR (another cluster's files, a file gpuforge
did not write, a folder, a link, a temporary file left by a crash) stops the render with
exit 2 before anything is written, naming what was found: slurmctld reads every file in
/etc/slurm it is told about, so a stale topology.conf or a second cluster's gres.conf
beside fresh files would be read as this cluster's.

Within that rule the set is replaced: every file is rendered in memory and DIR is checked
first; then each file is written atomically (gpuforge.atomic), and a file of the set this
render no longer produces (topology.conf of a type that has none now) is removed, so DIR
ends holding exactly the new set.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path

from gpuforge.atomic import write_text_atomic
from gpuforge.display import cut
from gpuforge.errors import InputError
from gpuforge.scheduler.render import REGISTRATION_FILE

RENDERED_NAMES = ("slurm.conf", "gres.conf", "cgroup.conf", "topology.conf", REGISTRATION_FILE)
# The first line of every rendered file (render._header): which file, for which cluster.
_HEADER = re.compile(
    r"# (?P<file>[a-z.-]+) for cluster (?P<cluster>[a-z0-9-]+), rendered by gpuforge for Slurm "
)
# Enough of a file to read its header line, and no more: DIR may hold anything.
_HEADER_BYTES = 512
_LISTED = 10


def _rendered_for(path: Path, cluster: str) -> bool:
    """Whether `path` is a regular file of the set, rendered by gpuforge for `cluster`."""
    if path.name not in RENDERED_NAMES:
        return False
    try:
        if not stat.S_ISREG(path.lstat().st_mode):  # never open a FIFO, a device or a link
            return False
        with path.open("rb") as handle:
            first = handle.read(_HEADER_BYTES).split(b"\n", 1)[0].decode("ascii")
    except (OSError, UnicodeDecodeError):
        return False
    match = _HEADER.match(first)
    return match is not None and match["file"] == path.name and match["cluster"] == cluster


def _nearest_folder(out: Path) -> Path:
    """`out` or its nearest ancestor that exists (where the folders to create would start)."""
    for candidate in (out, *out.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path("/")


def check_out(out: Path, cluster: str) -> list[Path]:
    """Refuse an `out` the set cannot be written into whole; return the stale files of the set in it."""
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
    try:
        entries = sorted(out.iterdir())
    except OSError as error:
        raise InputError(
            f"--out {out}: cannot list the folder ({error.strerror}). Fix: choose a readable folder."
        ) from None
    foreign = [entry for entry in entries if not _rendered_for(entry, cluster)]
    if foreign:
        shown = ", ".join(cut(entry.name) for entry in foreign[:_LISTED])
        more = f" and {len(foreign) - _LISTED} more" if len(foreign) > _LISTED else ""
        raise InputError(
            f"--out {out}: the folder holds {len(foreign)} entr{'y' if len(foreign) == 1 else 'ies'} that gpuforge "
            f"did not render for cluster {cluster} ({shown}{more}); Slurm would read stale or foreign files beside "
            f"the new ones. Nothing was written. Fix: render into an empty or new folder, or into the folder this "
            f"cluster was rendered into before, or remove those entries."
        )
    return entries


def write_set(out: Path, files: Mapping[str, str], cluster: str) -> tuple[list[Path], list[Path]]:
    """Check `out` whole, write every file of `files` atomically, remove the set's stale files.

    Returns the paths written and the paths removed.
    """
    unknown = sorted(set(files) - set(RENDERED_NAMES))
    assert not unknown, f"not files of the rendered set: {unknown}"
    stale = [path for path in check_out(out, cluster) if path.name not in files]
    written = []
    for name, text in files.items():
        target = out / name
        write_text_atomic(target, text)
        written.append(target)
    for path in stale:
        try:
            path.unlink()
        except OSError as error:
            raise InputError(
                f"{path}: a file of the previous render that this one no longer produces could not be removed "
                f"({error.strerror}). Fix: remove it by hand; Slurm would read it as this cluster's."
            ) from None
    return written, stale
