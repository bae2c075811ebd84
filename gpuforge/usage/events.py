"""Node failures from Slurm's accounting: `sacctmgr show event` (node events: down, drained, failing).

slurmdbd keeps an event per node state change with its reason (gpuforge's drains carry
`gpuforge: ...`). The report counts the node-hours the nodes spent down or drained inside the window
(overlapping events of one node counted once) and the jobs those nodes interrupted.

The file form is sacctmgr's `--parsable2` table with its header line, read by column name:
`TZ=UTC sacctmgr --parsable2 show event Event=Node Start=T End=T format=Cluster,NodeName,Start,End,State,Reason`.
Times are the controller's local time as sacctmgr prints them, so the file must be captured with TZ=UTC
(gpuforge runs it so itself). A `Cluster` column, when there, must name this stack's cluster (an older
capture without it is read as it is).

Bounds: an event's host list may name at most MAX_HOSTS nodes (gpuforge.usage.hostlist), and a file at
most MAX_NODE_EVENTS node events once its lists are expanded, so a file of a few megabytes cannot turn
into gigabytes of events; both are counted before anything is expanded.
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gpuforge.display import cut
from gpuforge.errors import InputError
from gpuforge.loading import MAX_DATA_BYTES, read_text
from gpuforge.usage.hostlist import MAX_HOSTS, NodeIndex, TooManyHosts, expand_hostlist
from gpuforge.usage.sacct import Job, run_accounting_tool
from gpuforge.usage.window import Window

# sacctmgr's format names (Start, End) and the header it prints for them (TimeStart, TimeEnd).
FORMAT = "Cluster,NodeName,Start,End,State,Reason"
COLUMNS = ("NodeName", "TimeStart", "TimeEnd", "State", "Reason")  # Cluster is checked when present
# Node events one file may expand to: every node of the largest cluster down or drained 16 times in
# one window. A million NodeEvents take about 0.3 GB and 2 s to read and count on one core.
MAX_NODE_EVENTS = 16 * MAX_HOSTS
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


def parse_events(text: str, *, source: str, cluster: str | None = None) -> list[NodeEvent]:
    """The node events of sacctmgr's `--parsable2` table that took a node from jobs; with `cluster`,
    a line whose Cluster column names another is refused."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0].split("|")
    missing = [column for column in COLUMNS if column not in header]
    if missing:
        raise InputError(
            f"{source}: line 1: the header {cut(lines[0])} lacks column(s) {', '.join(missing)}. Fix: {FIX}."
        )
    at = {column: header.index(column) for column in (*COLUMNS, "Cluster") if column in header}
    events: list[NodeEvent] = []
    for number, line in enumerate(lines[1:], start=2):
        cells = line.split("|")
        if len(cells) != len(header):
            raise InputError(
                f"{source}: line {number}: {len(cells)} column(s), the header has {len(header)}. Fix: {FIX}."
            )
        if cluster is not None and "Cluster" in at and cells[at["Cluster"]] != cluster:
            raise InputError(
                f"{source}: line {number}: Cluster = {cut(cells[at['Cluster']])}: this stack's Slurm cluster is "
                f"{cut(cluster)} (gpuforge names it after the stack), and another cluster's node events are not "
                f"this stack's. Fix: pass the events of cluster {cluster} only (`sacctmgr ... show event "
                f"Clusters={cluster} ...`), or the --stack that cluster belongs to."
            )
        node, state = cells[at["NodeName"]], cells[at["State"]]
        if not node or not any(word in state.upper() for word in LOST_STATES):
            continue  # a cluster event, or a node coming back
        end_text = cells[at["TimeEnd"]]
        start = _time(source, number, "TimeStart", cells[at["TimeStart"]])
        end = None if end_text == OPEN_END else _time(source, number, "TimeEnd", end_text)
        # One event may name several nodes that changed state together, as a host list.
        try:
            names = expand_hostlist(node, limit=min(MAX_HOSTS, MAX_NODE_EVENTS - len(events)))
        except TooManyHosts as error:
            if error.count <= MAX_HOSTS:
                raise InputError(
                    f"{source}: line {number}: more than {MAX_NODE_EVENTS} node events in all once host lists are "
                    f"expanded (16 for each of the {MAX_HOSTS} nodes of the largest cluster gpuforge builds). "
                    "Fix: pass a shorter window."
                ) from None
            raise InputError(
                f"{source}: line {number}: NodeName = {cut(node)} names {error.count} nodes, more than the "
                f"{MAX_HOSTS} of the largest cluster gpuforge builds (the addresses of a /16 subnet less AWS's 5). "
                f"Fix: {FIX}."
            ) from None
        reason = cells[at["Reason"]]
        events.extend(
            NodeEvent(node=name, start=start, end=end, state=state, reason=reason) for name in names
        )
    return events


def read_events(path: Path, *, cluster: str) -> list[NodeEvent]:
    return parse_events(
        read_text(path, what="sacctmgr events", max_bytes=MAX_DATA_BYTES, fix=FIX),
        source=str(path),
        cluster=cluster,
    )


def run_sacctmgr(window: Window, *, cluster: str) -> list[NodeEvent]:
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
        max_bytes=MAX_DATA_BYTES,
        not_run_fix="check slurmdbd",
        failed_fix="check that slurmdbd is up (`sacctmgr show cluster`)",
    )
    return parse_events(stdout, source="sacctmgr show event", cluster=cluster)


def node_seconds_lost(events: list[NodeEvent], window: Window) -> int:
    """Seconds nodes were down or drained inside the window; a node's overlapping events count once."""
    spans_of: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
    for event in events:
        spans_of[event.node].append(
            (max(event.start, window.since), min(event.end or window.until, window.until))
        )
    total = 0
    for spans in spans_of.values():
        reach = window.since
        for start, end in sorted(spans):
            start = max(start, reach)
            if end > start:
                total += int((end - start).total_seconds())
                reach = end
    return total


def interrupted_jobs(jobs: list[Job], events: list[NodeEvent]) -> list[Job]:
    """Runs ended by a node: NODE_FAIL, or a run on an event's node that ended, not COMPLETED,
    while the node was down or drained. A run's host list is matched through a NodeIndex of the
    event nodes, never expanded."""
    spans_of: dict[str, list[tuple[datetime, datetime | None]]] = defaultdict(list)
    for event in events:
        spans_of[event.node].append((event.start, event.end))
    index = NodeIndex(spans_of)
    hit: list[Job] = []
    for job in jobs:
        if job.state == "NODE_FAIL":
            hit.append(job)
            continue
        end = job.end
        if end is None or job.state == "COMPLETED":
            continue
        if any(
            start <= end <= (until or end)
            for node in index.named_by(job.nodes)
            for start, until in spans_of[node]
        ):
            hit.append(job)
    return hit
