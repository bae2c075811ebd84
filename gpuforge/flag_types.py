"""argparse types for numeric flags: numbers written in ASCII, as a person means them.

Python's int() and float() take more than a person means by a number: digits of any script (`--nodes ٣` is
3, `--timeout ١٢٠` is 120), `1_000`, surrounding blanks, and for float() `nan`, `inf` and `1e308`. A flag
value that looks like one number and is read as another, or as none, is a silent accept; these types read
plain ASCII and refuse the rest, quoting the value escaped (gpuforge.display.cut shows a non-ASCII digit by
its code): `plain(int)` / `plain(float)` where the command checks the range with its own message, `seconds`
where the type does (decimal only: no nan, inf or exponent).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import TypeVar

from gpuforge.display import cut

N = TypeVar("N", int, float)
_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")


def plain(kind: Callable[[str], N]) -> Callable[[str], N]:
    """An argparse type: `kind` (int or float) of text written in ASCII, without the digits of other scripts,
    `_` separators or surrounding blanks that int() and float() also take; the command checks the range."""

    def parse(text: str) -> N:
        if not text.isascii() or "_" in text or text != text.strip():
            raise argparse.ArgumentTypeError(
                f"{cut(text)} is not a number written in ASCII digits 0-9 (no other script's digits, '_' or blanks)"
            )
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{cut(text)} is not a number") from None

    return parse


def seconds(low: float, high: float) -> Callable[[str], float]:
    """An argparse type: a number of seconds from `low` to `high`, decimal ASCII (`90`, `2.5`)."""

    def parse(text: str) -> float:
        if not _DECIMAL.fullmatch(text):
            raise argparse.ArgumentTypeError(
                f"{cut(text)} is not a number of seconds written in ASCII digits (e.g. 90 or 2.5; "
                f"from {low:g} to {high:g})"
            )
        value = float(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{cut(text)} seconds is outside {low:g} to {high:g}")
        return value

    return parse
