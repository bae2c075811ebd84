"""The real subprocess runner: missing commands, failures and hangs come back as results."""

from __future__ import annotations

import time
from pathlib import Path

from node_scenarios import ReplayRunner, Scenario

from gpuforge.node.runner import CachedRunner, SubprocessRunner


def test_missing_command_is_a_clean_result(tmp_path: Path) -> None:
    result = SubprocessRunner(path=str(tmp_path))(["nvidia-smi", "-q"])
    assert result.missing and result.returncode is None and not result.ok
    assert result.failure() == "`nvidia-smi` is not installed or not on PATH"


def test_exit_status_and_output_are_kept() -> None:
    result = SubprocessRunner()(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (result.returncode, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert not result.ok
    assert result.failure() == "`sh -c echo out; echo err >&2; exit 3` exited 3: err"


def test_runs_in_the_c_locale() -> None:
    result = SubprocessRunner()(["sh", "-c", "echo $LC_ALL"])
    assert result.ok and result.stdout == "C\n"


def test_a_hung_command_times_out_quickly() -> None:
    started = time.monotonic()
    result = SubprocessRunner(timeout_s=0.3)(["sleep", "5"])
    assert result.timed_out and not result.ok
    assert time.monotonic() - started < 3
    assert "did not finish in time" in result.failure()


def test_cached_runner_runs_each_command_once_and_rerun_refreshes() -> None:
    replay = ReplayRunner(Scenario().set(["lsmod"], "Module Size Used by\n"))
    runner = CachedRunner(replay)
    first, second = runner(["lsmod"]), runner(["lsmod"])
    assert first is second and replay.calls == [("lsmod",)]
    runner.rerun(["lsmod"])
    assert replay.calls == [("lsmod",), ("lsmod",)]
