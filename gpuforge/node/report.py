"""The node check's verdicts and the report other tools read.

The JSON shape is a contract: {"instance_type", "healthy", "checks": [{"id",
"status", "evidence", "cause"}]}. User data, the systemd unit and people
reading /var/log/gpuforge/ all rely on it, so it is built in one place.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from gpuforge.atomic import write_text_atomic
from gpuforge.display import printable

LATEST_REPORT = "latest.json"


class Status(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict: what it saw (evidence) and, when not passing, the likely cause."""

    id: str
    status: Status
    evidence: str
    cause: str = ""

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "status": str(self.status), "evidence": self.evidence, "cause": self.cause}


def passed(check_id: str, evidence: str) -> CheckResult:
    return CheckResult(check_id, Status.PASS, evidence)


def warned(check_id: str, evidence: str, cause: str) -> CheckResult:
    return CheckResult(check_id, Status.WARN, evidence, cause)


def failed(check_id: str, evidence: str, cause: str) -> CheckResult:
    return CheckResult(check_id, Status.FAIL, evidence, cause)


@dataclass(frozen=True)
class NodeReport:
    instance_type: str
    checks: tuple[CheckResult, ...]

    @property
    def healthy(self) -> bool:
        """Warnings do not make a node unhealthy; one failure does."""
        return all(check.status is not Status.FAIL for check in self.checks)

    @property
    def failures(self) -> tuple[CheckResult, ...]:
        return tuple(check for check in self.checks if check.status is Status.FAIL)

    def to_json(self) -> dict[str, Any]:
        return {
            "instance_type": self.instance_type,
            "healthy": self.healthy,
            "checks": [check.to_json() for check in self.checks],
        }

    def to_text(self) -> str:
        """A person's view: one line per check, causes indented under problems.

        Evidence quotes the node (disk models from sysfs, mount sources from /proc/mounts, nvidia-smi's
        names): it is shown through gpuforge.display.printable, so a control character in one cannot
        repaint the terminal or forge a line of the journal ("PASS ...").
        """
        width = max((len(check.id) for check in self.checks), default=0)
        lines = [f"gpuforge node check on {printable(self.instance_type)}"]
        for check in self.checks:
            lines.append(f"  {check.status.upper():4}  {check.id:<{width}}  {printable(check.evidence)}")
            if check.cause:
                lines.append(f"        {'':<{width}}  cause: {printable(check.cause)}")
        verdict = "healthy" if self.healthy else f"NOT HEALTHY: {len(self.failures)} check(s) failed"
        lines.append(verdict)
        return "\n".join(lines)


def dumps(report: NodeReport) -> str:
    return json.dumps(report.to_json(), indent=2) + "\n"


def write_report(report: NodeReport, directory: Path, now: datetime | None = None) -> Sequence[Path]:
    """Write the report to DIR/node-check-<UTC timestamp>.json and DIR/latest.json, each atomically."""
    stamp = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    text = dumps(report)
    paths = (directory / f"node-check-{stamp}.json", directory / LATEST_REPORT)
    for path in paths:
        write_text_atomic(path, text)
    return paths
