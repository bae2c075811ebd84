"""The one bounded wait of the real-daemon and API-server tests: poll the real state until it is the
state the next step needs, or fail naming what was awaited and the last state seen.

Why one helper and one bound: a wait that sleeps a guessed time, waits on a proxy of the state it
needs ("not ALLOCATED" for "no job and not COMPLETING", "port open" for "API ready"), or gives up
after a bound sized on an idle machine, passes on a developer's machine and fails under CI's load
(2 shared cores), rejecting good work. A wait here returns as soon as the state is reached, so a
generous bound costs nothing when things go well; `WAIT_S` is that bound for every wait, sized for
a loaded 2-core machine. A wait that also includes a known product interval (a health check every
65 s) adds that interval to it, never a shorter bound.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

# Seconds any state may take to arrive on a loaded 2-core CI machine: daemons starting, a node's
# Epilog (a Python start) finishing, slurmdbd recording a job, an API server becoming ready.
WAIT_S = 120.0
# Between two reads of the state: often enough that a test does not linger, rarely enough that
# polling (an scontrol, an HTTP request) does not add to the load it waits out.
POLL_S = 0.25
# How much of the last state a failure shows (its end: logs and command output end with the news).
SHOWN_CHARS = 4000

T = TypeVar("T")


class WaitFailed(AssertionError):
    """A wait ran out, or what it waited on stopped; the message says what, and what was seen last."""


def _shown(state: object) -> str:
    text = state if isinstance(state, str) else repr(state)
    return text if len(text) <= SHOWN_CHARS else f"...{text[-SHOWN_CHARS:]}"


def wait_until(
    what: str,
    observe: Callable[[], T],
    done: Callable[[T], bool] = bool,
    *,
    beyond_s: float = 0.0,
    poll_s: float = POLL_S,
    not_yet: tuple[type[Exception], ...] = (),
    stopped: Callable[[], str | None] | None = None,
    context: Callable[[], str] | None = None,
) -> T:
    """Read the state with `observe` until `done(state)`; return that state.

    `what` names the state awaited, for the failure. `beyond_s`: a known interval of the product
    under test that the state takes on top of the machine's own delays (added to WAIT_S). `not_yet`:
    exceptions that mean the state cannot be read yet (a daemon's port not open); the last one is
    reported as the state seen. `stopped`: says why the state can no longer come (a daemon exited),
    else None; checked after each read, so a dead daemon fails the wait at once. `context`: more to
    show on failure (a daemon's log). `poll_s`: between reads. Fails with WaitFailed after
    WAIT_S + beyond_s.
    """
    limit = WAIT_S + beyond_s
    deadline = time.monotonic() + limit
    last: object = "nothing read yet"
    while True:
        try:
            state = observe()
        except not_yet as error:
            last = f"{type(error).__name__}: {error}"
        else:
            if done(state):
                return state
            last = state
        reason = stopped() if stopped is not None else None
        if reason is not None or time.monotonic() >= deadline:
            headline = (
                f"{reason} while waiting for {what}"
                if reason is not None
                else f"timed out after {limit:.0f} s waiting for {what}"
            )
            extra = f"\n{context()}" if context is not None else ""
            raise WaitFailed(f"{headline}; last seen:\n{_shown(last)}{extra}")
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))
