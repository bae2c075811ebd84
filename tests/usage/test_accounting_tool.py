"""run_accounting_tool, which runs both sacct and sacctmgr: UTC, and errors that name the command and the fix."""

from __future__ import annotations

import pytest

from gpuforge.errors import GpuforgeError
from gpuforge.usage.sacct import run_accounting_tool


def test_it_runs_in_utc_and_returns_stdout() -> None:
    assert run_accounting_tool(["sh", "-c", "date +%Z"], 10, not_run_fix="a", failed_fix="b").strip() == "UTC"


def test_a_failing_tool_names_the_command_its_exit_stderr_and_the_fix() -> None:
    with pytest.raises(GpuforgeError) as caught:
        run_accounting_tool(
            ["sh", "-c", "echo refused >&2; exit 3"], 10, not_run_fix="a", failed_fix="check slurmdbd"
        )
    assert (
        str(caught.value) == "sh -c echo refused >&2; exit 3 failed (exit 3): 'refused'. Fix: check slurmdbd."
    )


def test_a_tool_that_cannot_start_names_the_fix() -> None:
    with pytest.raises(GpuforgeError) as caught:
        run_accounting_tool(["/nonexistent/sacct"], 10, not_run_fix="check slurmdbd", failed_fix="b")
    assert "/nonexistent/sacct did not run" in str(caught.value) and str(caught.value).endswith(
        "Fix: check slurmdbd."
    )
