"""Running the node's commands: one injectable runner for every check.

Checks never call `subprocess` themselves. They ask a `Runner` for a
`CommandResult`, so that tests can replay recorded outputs and so that a
missing command (a node without the NVIDIA driver, say) comes back as a clean
result instead of an exception.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

# Commands that a healthy node answers in well under this; nvidia-smi -q on an
# 8-GPU node without persistence mode is the slowest (several seconds).
DEFAULT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class CommandResult:
    """What one command did: its output, or why it did not run."""

    argv: tuple[str, ...]
    returncode: int | None
    stdout: str = ""
    stderr: str = ""
    missing: bool = False
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.missing and not self.timed_out

    @property
    def command(self) -> str:
        return " ".join(self.argv)

    def failure(self) -> str:
        """One sentence on why the command gave no usable output (for a check's evidence)."""
        if self.missing:
            return f"`{self.argv[0]}` is not installed or not on PATH"
        if self.timed_out:
            return f"`{self.command}` did not finish in time"
        detail = (self.stderr.strip() or self.stdout.strip()).splitlines()
        first = detail[0] if detail else "no output"
        return f"`{self.command}` exited {self.returncode}: {first}"


class Runner(Protocol):
    """Runs one command and never raises for a missing, failing or hung command."""

    def __call__(self, argv: Sequence[str]) -> CommandResult: ...


@dataclass
class SubprocessRunner:
    """The real runner: subprocess with a timeout, C locale, no shell.

    `deadline` (a `clock` reading) bounds all commands together: each one gets
    the smaller of `timeout_s` and the time left, and once it has passed a
    command is not started at all. Slurm kills its HealthCheckProgram after
    60 s, so a periodic check must end on time even when several commands hang.
    """

    timeout_s: float = DEFAULT_TIMEOUT_S
    path: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    deadline: float | None = None
    clock: Callable[[], float] = time.monotonic

    def _timeout(self) -> float:
        if self.deadline is None:
            return self.timeout_s
        return min(self.timeout_s, self.deadline - self.clock())

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        args = tuple(argv)
        timeout = self._timeout()
        if timeout <= 0:
            return CommandResult(args, None, timed_out=True)
        search_path = self.path if self.path is not None else os.environ.get("PATH", os.defpath)
        executable = shutil.which(args[0], path=search_path)
        if executable is None:
            return CommandResult(args, None, missing=True)
        # The C locale keeps number and date formats the parsers expect.
        env = {**os.environ, "PATH": search_path, "LC_ALL": "C", "LANG": "C", **self.env}
        try:
            completed = subprocess.run(
                [executable, *args[1:]],
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout,
                env=env,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return CommandResult(args, None, timed_out=True)
        except OSError as error:
            return CommandResult(args, None, stderr=str(error), missing=True)
        return CommandResult(args, completed.returncode, completed.stdout, completed.stderr)


class CachedRunner:
    """Runs each distinct command once per node check; `rerun` bypasses the cache.

    Several checks read the same `nvidia-smi` output; running it once keeps the
    gate fast and makes all checks judge the same snapshot. The EFA check's
    bounded retry uses `rerun`, because EFA devices can appear late at boot.
    """

    def __init__(self, runner: Runner) -> None:
        self._runner = runner
        self._results: dict[tuple[str, ...], CommandResult] = {}

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        key = tuple(argv)
        if key not in self._results:
            self._results[key] = self._runner(key)
        return self._results[key]

    def rerun(self, argv: Sequence[str]) -> CommandResult:
        key = tuple(argv)
        self._results[key] = self._runner(key)
        return self._results[key]
