"""Node failures from Slurm's accounting: `sacctmgr show event` (node events: down, drained, failing).

slurmdbd keeps an event per node state change with its reason (gpuforge's drains carry
`gpuforge: ...`). The report counts the node-hours the nodes spent down or drained inside the window
(overlapping events of one node counted once) and the jobs those nodes interrupted.

The file form is sacctmgr's `--parsable2` table with its header line, read by column name:
`TZ=UTC sacctmgr --parsable2 show event Event=Node Start=T End=T format=NodeName,Start,End,State,Reason`.
Times are the controller's local time as sacctmgr prints them, so the file must be captured with TZ=UTC
(gpuforge runs it so itself).
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gpuforge.display import cut
from gpuforge.errors import InputError
from gpuforge.loading import MAX_DATA_BYTES, read_text
from gpuforge.usage.sacct import Job, run_accounting_tool
from gpuforge.usage.window import Window

# sacctmgr's format names (Start, End) and the header it prints for them (TimeStart, TimeEnd).
FORMAT = "NodeName,Start,End,State,Reason"
COLUMNS = ("NodeName", "TimeStart", "TimeEnd", "State", "Reason")
LOST_STATES = ("DOWN", "DRAIN", "FAIL")  # a state naming any of these took the node from jobs
OPEN_END = "Unknown"  # sacctmgr's TimeEnd of an event still open
FIX = (
    "pass the output of `TZ=UTC sacctmgr --parsable2 show event Event=Node Start=T End=T "
    f"format={FORMAT}` run on the controller, unedited"
)
SACCTMGR_TIMEOUT_S = 120


@dataclass(frozen=True)
class NodeEvent:
    node: str
    start: datetime
    end: datetime | None  # None: still down or drained
    state: str
    reason: str


def _time(source: str, line: int, column: str, text: str) -> datetime:
    try:
        value = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        raise InputError(
            f"{source}: line {line}: {column} = {cut(text)}: sacctmgr's time YYYY-MM-DDTHH:MM:SS is expected. Fix: {FIX}."
        ) from None
    return value.replace(tzinfo=UTC)


def parse_events(text: str, *, source: str) -> list[NodeEvent]:
    """The node events of sacctmgr's `--parsable2` table that took a node from jobs."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0].split("|")
    missing = [column for column in COLUMNS if column not in header]
    if missing:
        raise InputError(
            f"{source}: line 1: the header {cut(lines[0])} lacks column(s) {', '.join(missing)}. Fix: {FIX}."
        )
    at = {column: header.index(column) for column in COLUMNS}
    events: list[NodeEvent] = []
    for number, line in enumerate(lines[1:], start=2):
        cells = line.split("|")
        if len(cells) != len(header):
            raise InputError(
                f"{source}: line {number}: {len(cells)} column(s), the header has {len(header)}. Fix: {FIX}."
            )
        node, state = cells[at["NodeName"]], cells[at["State"]]
        if not node or not any(word in state.upper() for word in LOST_STATES):
            continue  # a cluster event, or a node coming back
        end_text = cells[at["TimeEnd"]]
        start = _time(source, number, "TimeStart", cells[at["TimeStart"]])
        end = None if end_text == OPEN_END else _time(source, number, "TimeEnd", end_text)
        # One event may name several nodes that changed state together, as a host list.
        events.extend(
            NodeEvent(node=name, start=start, end=end, state=state, reason=cells[at["Reason"]])
            for name in expand_hostlist(node)
        )
    return events


def read_events(path: Path) -> list[NodeEvent]:
    return parse_events(
        read_text(path, what="sacctmgr events", max_bytes=MAX_DATA_BYTES, fix=FIX), source=str(path)
    )


def run_sacctmgr(window: Window) -> list[NodeEvent]:
    """On the controller: the node events that overlap the window."""
    sacctmgr = shutil.which("sacctmgr")
    if sacctmgr is None:
        raise InputError("sacctmgr is not on PATH. Fix: run on the controller, or pass --events FILE.")
    stamp = "%Y-%m-%dT%H:%M:%S"
    command = [
        sacctmgr, "--parsable2", "show", "event", "Event=Node",
        f"Start={window.since.strftime(stamp)}", f"End={window.until.strftime(stamp)}",
        f"format={FORMAT}",
    ]  # fmt: skip
    stdout = run_accounting_tool(
        command,
        SACCTMGR_TIMEOUT_S,
        not_run_fix="check slurmdbd",
        failed_fix="check that slurmdbd is up (`sacctmgr show cluster`)",
    )
    return parse_events(stdout, source="sacctmgr show event")


def node_seconds_lost(events: list[NodeEvent], window: Window) -> int:
    """Seconds nodes were down or drained inside the window; a node's overlapping events count once."""
    total = 0
    for node in {event.node for event in events}:
        spans = sorted(
            (max(event.start, window.since), min(event.end or window.until, window.until))
            for event in events
            if event.node == node
        )
        reach = window.since
        for start, end in spans:
            start = max(start, reach)
            if end > start:
                total += int((end - start).total_seconds())
                reach = end
    return total


_RANGE = re.compile(r"^(\d+)-(\d+)$")


def expand_hostlist(hostlist: str) -> list[str]:
    """Slurm's compressed host list (`gpu-[1-3,7],ctl`) as names; the one bracket form Slurm prints."""
    names: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", hostlist):
        match = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part)
        if match is None:
            names.append(part)
            continue
        prefix, ranges, suffix = match.groups()
        for item in ranges.split(","):
            bounds = _RANGE.match(item)
            if bounds is None:
                names.append(f"{prefix}{item}{suffix}")
                continue
            low, high = bounds.groups()
            names.extend(f"{prefix}{n:0{len(low)}d}{suffix}" for n in range(int(low), int(high) + 1))
    return names


def interrupted_jobs(jobs: list[Job], events: list[NodeEvent]) -> list[Job]:
    """Runs ended by a node: NODE_FAIL, or a run on an event's node that ended, not COMPLETED,
    while the node was down or drained."""
    hit: list[Job] = []
    for job in jobs:
        if job.state == "NODE_FAIL":
            hit.append(job)
            continue
        if job.end is None or job.state == "COMPLETED":
            continue
        nodes = set(expand_hostlist(job.nodes))
        if any(event.node in nodes and event.start <= job.end <= (event.end or job.end) for event in events):
            hit.append(job)
    return hit
