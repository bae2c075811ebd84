"""User-facing errors and findings.

Every rejection gpuforge makes is either a `Finding` (a rule that a file broke,
collected and reported together) or a `GpuforgeError` (input that stops the
command). Both carry enough for a person to act: what, where, and the fix. The
CLI turns them into messages and exit codes; nothing else may print a traceback
for bad input.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True)
class Finding:
    """One rule's verdict on one field of one file."""

    rule: str
    severity: Severity
    field: str
    message: str
    source: str

    def to_json(self) -> dict[str, str]:
        data = asdict(self)
        data["severity"] = str(self.severity)
        return data

    def render(self) -> str:
        return f"{self.severity}: [{self.rule}] {self.field}: {self.message} (source: {self.source})"


class GpuforgeError(Exception):
    """Input or environment a person must fix; `exit_code` is what the CLI returns."""

    exit_code = 2

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message


class InputError(GpuforgeError):
    """A file or value the user gave is unreadable or invalid (exit 2)."""


class UnknownInstanceType(InputError):
    """An instance type that the hardware catalog does not describe."""
