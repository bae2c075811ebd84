"""tests/waiting.py, the one bounded wait of the real-daemon tests: it returns the state it waited for as
soon as it is there, and otherwise fails naming what it waited for and the last state it saw."""

from __future__ import annotations

import itertools
import time

import pytest
import waiting
from waiting import WaitFailed, wait_until


def test_returns_the_first_state_that_is_the_one_needed() -> None:
    reads = itertools.count()
    assert wait_until("the third read", lambda: next(reads), lambda state: state >= 2) == 2


def test_a_timeout_names_the_wait_and_the_last_state_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(waiting, "WAIT_S", 0.3)
    started = time.monotonic()
    states = iter(["State=IDLE+COMPLETING+DYNAMIC_NORM"] * 1000)
    with pytest.raises(WaitFailed) as failed:
        wait_until("gpu3 with no job", lambda: next(states), lambda state: "COMPLETING" not in state)
    assert time.monotonic() - started < 5
    assert str(failed.value).startswith("timed out after 0 s waiting for gpu3 with no job; last seen:\n")
    assert str(failed.value).endswith("State=IDLE+COMPLETING+DYNAMIC_NORM")


def test_a_known_product_interval_extends_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(waiting, "WAIT_S", 0.0)
    ready_at = time.monotonic() + 0.5
    assert wait_until("a health check", time.monotonic, lambda now: now >= ready_at, beyond_s=30) >= ready_at


def test_a_daemon_that_stopped_fails_the_wait_at_once_with_its_log() -> None:
    started = time.monotonic()
    with pytest.raises(WaitFailed) as failed:
        wait_until(
            "slurmctld to answer",
            lambda: "DOWN",
            lambda state: state == "UP",
            stopped=lambda: "ctl exited",
            context=lambda: "fatal: Unknown parameter",
        )
    assert time.monotonic() - started < 5  # not the whole bound
    assert str(failed.value) == (
        "ctl exited while waiting for slurmctld to answer; last seen:\nDOWN\nfatal: Unknown parameter"
    )


def test_a_state_not_readable_yet_is_retried_and_reported_and_other_errors_propagate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refused() -> str:
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(waiting, "WAIT_S", 0.3)
    with pytest.raises(
        WaitFailed, match=r"last seen:\nConnectionRefusedError: \[Errno 111\] Connection refused$"
    ):
        wait_until("the API ready", refused, not_yet=(OSError,))
    with pytest.raises(ConnectionRefusedError):
        wait_until("the API ready", refused)


def test_a_long_state_is_shown_by_its_end() -> None:
    log = "x" * 10_000 + "the line that says why"
    with pytest.raises(WaitFailed) as failed:
        wait_until("a ready line", lambda: log, lambda _: False, stopped=lambda: "it exited")
    assert str(failed.value).endswith("the line that says why")
    assert len(str(failed.value)) < waiting.SHOWN_CHARS + 200
