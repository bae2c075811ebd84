"""The verdict of each preflight check and how the report prints them.

A check ends as `ok`, `warn` or `fail`; a warning or failure carries the fix. The
command exits 1 when any check fails and 0 otherwise (2 is for input that stops
preflight before any check runs, raised as GpuforgeError and handled by gpuforge.cli).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gpuforge.display import printable

EXIT_OK, EXIT_FAILED = 0, 1


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"

    @property
    def rank(self) -> int:
        return (Status.OK, Status.WARN, Status.FAIL).index(self)


def worst(statuses: Iterable[Status]) -> Status:
    """The most severe status (fail over warn over ok); ok for none."""
    return max(statuses, key=lambda status: status.rank, default=Status.OK)


@dataclass(frozen=True)
class Check:
    """One check's verdict: `message` says what was found, `fix` what to do about it."""

    id: str
    status: Status
    message: str
    fix: str | None = None

    @property
    def text(self) -> str:
        """The message with its fix, as one sentence block."""
        return self.message if self.fix is None else f"{self.message} Fix: {self.fix}"

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "status": str(self.status), "message": self.text}


def ok(check_id: str, message: str) -> Check:
    return Check(check_id, Status.OK, message)


def warn(check_id: str, message: str, fix: str) -> Check:
    return Check(check_id, Status.WARN, message, fix)


def fail(check_id: str, message: str, fix: str) -> Check:
    return Check(check_id, Status.FAIL, message, fix)


def exit_code(checks: Sequence[Check]) -> int:
    return EXIT_FAILED if any(check.status is Status.FAIL for check in checks) else EXIT_OK


def to_json(checks: Sequence[Check]) -> dict[str, Any]:
    return {"checks": [check.to_json() for check in checks]}


def render_text(checks: Sequence[Check]) -> str:
    """One line per check: status, id, message and fix."""
    width = max((len(check.id) for check in checks), default=0)
    # Messages quote names from the stack file and from AWS (tags, AMI names): escaped for the terminal.
    lines = [f"{check.status!s:4} {check.id:{width}}  {printable(check.text)}" for check in checks]
    failed = sum(check.status is Status.FAIL for check in checks)
    warned = sum(check.status is Status.WARN for check in checks)
    verdict = "preflight failed" if failed else "preflight passed"
    lines.append(f"{verdict}: {failed} failed, {warned} warnings, {len(checks)} checks")
    return "\n".join(lines)
