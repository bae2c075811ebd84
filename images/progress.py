"""Show packer's progress: one live status line on a terminal, plain lines otherwise.

A build prints hundreds of lines; on a terminal only the latest step and the
elapsed time matter, while CI logs need every line. Errors are always printed
in full. Packer's lines carry names from the matrix and from AWS, so they are
written through `gpuforge.display` (escape sequences shown, not obeyed).
"""

from __future__ import annotations

import shutil
import sys
import time
from typing import TextIO

from gpuforge.display import printable, printable_lines


class Progress:
    def __init__(self, stream: TextIO | None = None, *, tty: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.started = time.monotonic()
        self._status_shown = False

    def _elapsed(self) -> str:
        seconds = int(time.monotonic() - self.started)
        return f"{seconds // 60:02d}:{seconds % 60:02d}"

    def _clear(self) -> None:
        if self._status_shown:
            self.stream.write("\r\033[K")
            self._status_shown = False

    def step(self, text: str) -> None:
        """A progress message: replaces the status line on a terminal, one line otherwise."""
        lines = [line for line in text.splitlines() if line.strip()]
        if not lines:
            return
        if not self.tty:
            for line in lines:
                self.stream.write(printable(line.rstrip()) + "\n")
            self.stream.flush()
            return
        width = max(20, shutil.get_terminal_size((100, 20)).columns - 10)
        status = printable(lines[-1].strip())[:width]
        self.stream.write(f"\r\033[K[{self._elapsed()}] {status}")
        self._status_shown = True
        self.stream.flush()

    def error(self, text: str) -> None:
        self._clear()
        self.stream.write(printable_lines(text.rstrip()) + "\n")
        self.stream.flush()

    def done(self) -> None:
        """Leave the terminal on a fresh line."""
        if self._status_shown:
            self.stream.write("\n")
            self._status_shown = False
            self.stream.flush()
