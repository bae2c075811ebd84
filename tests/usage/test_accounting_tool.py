"""run_accounting_tool, which runs both sacct and sacctmgr: UTC, and errors that name the command and the fix."""

from __future__ import annotations

import time

import pytest

from gpuforge.errors import GpuforgeError
from gpuforge.usage.sacct import run_accounting_tool


def test_it_runs_in_utc_and_returns_stdout() -> None:
    assert (
        run_accounting_tool(
            ["sh", "-c", "date +%Z"], 10, max_bytes=100, not_run_fix="a", failed_fix="b"
        ).strip()
        == "UTC"
    )


def test_a_failing_tool_names_the_command_its_exit_stderr_and_the_fix() -> None:
    with pytest.raises(GpuforgeError) as caught:
        run_accounting_tool(
            ["sh", "-c", "echo refused >&2; exit 3"],
            10,
            max_bytes=100,
            not_run_fix="a",
            failed_fix="check slurmdbd",
        )
    assert (
        str(caught.value) == "sh -c echo refused >&2; exit 3 failed (exit 3): 'refused'. Fix: check slurmdbd."
    )


def test_a_tool_that_cannot_start_names_the_fix() -> None:
    with pytest.raises(GpuforgeError) as caught:
        run_accounting_tool(
            ["/nonexistent/sacct"], 10, max_bytes=100, not_run_fix="check slurmdbd", failed_fix="b"
        )
    assert "/nonexistent/sacct did not run" in str(caught.value) and str(caught.value).endswith(
        "Fix: check slurmdbd."
    )


def test_a_tool_that_writes_past_the_cap_is_stopped_there() -> None:
    """`yes` never stops writing: it is stopped once its output passes the cap, not read into memory."""
    started = time.monotonic()
    with pytest.raises(
        GpuforgeError, match=r"^yes wrote more than 1000000 bytes, more than the report reads\. Fix:"
    ):
        run_accounting_tool(["yes"], 60, max_bytes=1_000_000, not_run_fix="a", failed_fix="b")
    assert time.monotonic() - started < 30


def test_a_tool_that_never_answers_is_stopped_at_its_timeout() -> None:
    started = time.monotonic()
    with pytest.raises(
        GpuforgeError, match=r"^sleep 600 did not run \(no answer within 1 s\)\. Fix: check slurmdbd\."
    ):
        run_accounting_tool(["sleep", "600"], 1, max_bytes=100, not_run_fix="check slurmdbd", failed_fix="b")
    assert time.monotonic() - started < 30
