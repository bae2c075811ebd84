"""A call that must not block on a FIFO, run so that a hang fails the test instead of stopping the run.

The node agent reads files in folders other processes can write (/run, /var/lib, sysfs below a
chosen root). A FIFO there blocks an open for reading until a writer comes, and an open for
writing until a reader comes: a prolog blocked so holds a job's start, a boot gate the node's
join. `returns_despite_fifos` runs the call in a thread; if it has not returned within the one
bound of the real-state waits (tests/waiting.py), every FIFO is opened read-write once, which
releases any open blocked on it, reader or writer, and the test fails naming the call.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from waiting import WAIT_S

T = TypeVar("T")


def make_fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def returns_despite_fifos(call: Callable[[], T], fifos: Sequence[Path], *, what: str) -> T:
    """`call()`'s result, if it returns within WAIT_S; fails (after releasing the FIFOs) if it blocks."""
    outcome: list[T] = []
    raised: list[BaseException] = []

    def target() -> None:
        try:
            outcome.append(call())
        except BaseException as error:  # noqa: BLE001 - re-raised in the test's thread below
            raised.append(error)

    thread = threading.Thread(target=target, daemon=True, name=what)
    thread.start()
    thread.join(WAIT_S)
    if thread.is_alive():
        for fifo in fifos:
            os.close(os.open(fifo, os.O_RDWR | os.O_NONBLOCK))
        thread.join(WAIT_S)
        raise AssertionError(f"{what} blocked on a FIFO for {WAIT_S:.0f} s")
    if raised:
        raise raised[0]
    return outcome[0]
