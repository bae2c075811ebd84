"""One bound on every wait of a command: a deadline that each call's timeout is cut from, and a backstop.

A per-call timeout alone does not bound a command. The `kubernetes` client's urllib3 pool retried a
read that timed out three more times (urllib3's default Retry(3)), so a server that accepted and never
answered held `scheduler apply` for 4 x 60 s; a command that makes dozens of calls, each with its own
timeout, waits the sum of them; and a server that sends a byte now and then resets a read timeout for
ever, as does a stalled credential helper. So a command that waits on the network takes one `Deadline`:

- every call's timeout is `deadline.timeout(cap)`, what is left (at most `cap`), and no layer retries on
  its own;
- `deadline.enforced()` arms a timer, as a backstop for what no timeout reaches (a trickling answer, a
  blocking read inside a library): when it fires, `DeadlineExceeded` is raised in the command's thread from
  wherever it waits. It fires BACKSTOP_GRACE_S after the deadline, so that a timeout cut from the deadline
  ends a call first, with the more precise error (a connection refused or never accepted is not a server
  that accepted and went silent).
"""

from __future__ import annotations

import argparse
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType

from gpuforge.errors import GpuforgeError
from gpuforge.flag_types import seconds

BACKSTOP_GRACE_S = 1.0
# A command's `--timeout` (`preflight`, `scheduler apply`): each makes a handful to a few hundred quick requests,
# answered in well under a second each. Below a second nothing answers; above an hour is a unit slip.
DEFAULT_COMMAND_TIMEOUT_S = 120.0
COMMAND_TIMEOUT_RANGE_S = (1.0, 3600.0)


def add_timeout_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """The command's `--timeout S`, its one deadline: `what` says what it bounds."""
    low, high = COMMAND_TIMEOUT_RANGE_S
    parser.add_argument(
        "--timeout",
        type=seconds(low, high),
        default=DEFAULT_COMMAND_TIMEOUT_S,
        metavar="S",
        help=f"{what} (default: %(default)g; {low:g} to {high:g})",
    )


class DeadlineExceeded(GpuforgeError):
    """The command's deadline passed while it waited (exit 1: nothing is wrong with the input, run again)."""

    exit_code = 1


@dataclass
class Deadline:
    """`seconds` from now. `flag` is how the user sets it (named in the error); `doing` is the step under
    way, set by the caller, so the error says what did not answer."""

    seconds: float
    flag: str
    doing: str = "starting"
    ends: float = field(init=False)

    def __post_init__(self) -> None:
        self.ends = time.monotonic() + self.seconds

    def left(self) -> float:
        return self.ends - time.monotonic()

    def expired(self) -> DeadlineExceeded:
        return DeadlineExceeded(
            f"{self.doing}: no answer within the command's deadline of {self.seconds:g} s ({self.flag}). Fix: run "
            f"again (a slow link or a busy server: pass a longer {self.flag})."
        )

    def timeout(self, cap: float) -> float:
        """The timeout for the next call: what is left of the deadline, at most `cap`; raises when none is left."""
        left = self.left()
        if left <= 0:
            raise self.expired()
        return min(cap, left)

    @contextmanager
    def enforced(self) -> Iterator[Deadline]:
        """The backstop (module docstring) for the block; a no-op outside the main thread, where no signal lands."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return

        def fire(signum: int, frame: FrameType | None) -> None:
            raise self.expired()

        previous = signal.signal(signal.SIGALRM, fire)
        signal.setitimer(signal.ITIMER_REAL, max(self.left(), 0.0) + BACKSTOP_GRACE_S)
        try:
            yield self
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
