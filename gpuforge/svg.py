"""The SVG frame and file writer that every gpuforge plot shares (`validate report --plot`, `usage --plot`).

One frame so the plots look alike and one writer so a plot is written atomically, with the
same error for an unwritable path, whichever command draws it.
"""

from __future__ import annotations

from pathlib import Path

from gpuforge.atomic import write_text_atomic
from gpuforge.errors import InputError


def document(width: int, height: int, parts: list[str]) -> str:
    """A standalone SVG document of `width` x `height` holding the drawn `parts` in order."""
    body = "\n  ".join(parts)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12">\n  {body}\n</svg>\n'
    )


def write_plot(path: Path, svg: str) -> None:
    """Write `svg` to `path` atomically; an unwritable `--plot` path is bad input (exit 2), not a traceback."""
    try:
        write_text_atomic(path, svg)
    except OSError as error:
        raise InputError(
            f"--plot {path}: cannot write the file ({error.strerror}). Fix: pass a path in a folder you can write to."
        ) from None
