"""Packer's `-machine-readable` output: `timestamp,target,type,data...`, one event a line.

Commas inside a field are written as `%!(PACKER_COMMA)` and newlines as a
literal backslash-n. The manifest post-processor hands the builder's artifact
on, so each AMI is announced twice and the artifact list is de-duplicated.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

COMMA = "%!(PACKER_COMMA)"
_AMI = re.compile(r"([a-z0-9-]+):(ami-[0-9a-f]+)")


@dataclass(frozen=True)
class Event:
    timestamp: int
    target: str
    type: str
    data: tuple[str, ...]

    @property
    def text(self) -> str:
        """The message of a `ui` event (its second data field), or all data joined."""
        if self.type == "ui" and len(self.data) >= 2:
            return self.data[1]
        return ",".join(self.data)


def _unescape(field: str) -> str:
    return field.replace(COMMA, ",").replace("\\n", "\n").replace("\\r", "\r")


def parse_line(line: str) -> Event | None:
    """One event, or None for a line that is not machine-readable (plugin noise, a crash trace)."""
    parts = line.rstrip("\r\n").split(",")
    if len(parts) < 3 or not parts[0].isdigit():
        return None
    return Event(int(parts[0]), parts[1], parts[2], tuple(_unescape(part) for part in parts[3:]))


def artifact_amis(events: Iterable[Event]) -> list[tuple[str, str]]:
    """(region, AMI id) of every artifact, in order, each once."""
    found: list[tuple[str, str]] = []
    for event in events:
        if event.type != "artifact" or len(event.data) < 3 or event.data[1] != "id":
            continue
        for item in event.data[2].split(","):
            match = _AMI.fullmatch(item.strip())
            if match and (match.group(1), match.group(2)) not in found:
                found.append((match.group(1), match.group(2)))
    return found


def error_line(events: Iterable[Event]) -> str | None:
    """Packer's own words for why it failed: a build's error event, else its last error message."""
    builder_error: str | None = None
    ui_error: str | None = None
    for event in events:
        if event.type == "error" and event.target and event.data:
            builder_error = event.data[0]
        elif event.type == "ui" and len(event.data) >= 2 and event.data[0] == "error":
            text = event.data[1].strip()
            if text and not text.startswith("==> Some builds didn't complete"):
                ui_error = text
    chosen = builder_error or ui_error
    if chosen is None:
        return None
    lines = [line.strip() for line in chosen.splitlines() if line.strip()]
    return " ".join(lines).removeprefix("==> ")
