"""SIGTERM taken like Ctrl-C: one exception, so every cleanup that runs for Ctrl-C runs for it too.

A CI runner cancels a job with SIGTERM (then SIGKILL after a grace period); its
default action ends Python at once, skipping every `finally` and `with` exit,
so packer's builder and the `--local` emulator would be left running and the
catalog's lock held. Inside `sigterm_as_interrupt()`, SIGTERM raises
`Terminated` instead, a KeyboardInterrupt, so code that already cleans up after
Ctrl-C cleans up after a cancelled job the same way. SIGKILL cannot be caught;
the emulator covers it with a parent-death signal (see emulator_server.py).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

# 128 + the signal number: what a shell reports for a process that SIGTERM ended.
SIGTERM_EXIT = 128 + signal.SIGTERM
SIGINT_EXIT = 128 + signal.SIGINT


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived; raised where Ctrl-C's KeyboardInterrupt would be."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated()


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While inside, SIGTERM raises Terminated; the previous handler is restored on the way out.

    Only the main thread can set handlers; elsewhere (a test's worker thread) this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
