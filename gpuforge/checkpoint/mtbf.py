"""Mean time between node failures: the cluster's own drain history, else a published figure.

A node failure is a Slurm node event (`sacctmgr show event`, parsed by gpuforge.usage.events) that took
the node from jobs (DOWN, DRAIN, FAIL) with a reason gpuforge's node agent wrote (`gpuforge: ...`, see
gpuforge.node.slurm.drain_reason): a drain someone made by hand for maintenance is not a failure. The
cluster's MTBF per node is its nodes' up time in the window (node count x window, less the time nodes
were already down or drained) over the failures that began in the window.

With few failures that ratio is noise: n Poisson events estimate a rate to about 1/sqrt(n) of itself,
so below MIN_EVENTS (10: within about a third) the published figure is used, and the report says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuforge.loading import load_yaml
from gpuforge.usage.events import NodeEvent, node_seconds_lost
from gpuforge.usage.window import Window

GPUFORGE_REASON = "gpuforge:"
MIN_EVENTS = 10
FAILURE_RATES = Path(__file__).resolve().parent.parent / "data" / "failure_rates.yaml"
DEFAULT_FIGURE = "llama3-405b-pretraining"


@dataclass(frozen=True)
class Mtbf:
    """Mean time between failures of ONE node, seconds, and where it came from."""

    node_seconds: float
    source: str
    failures: int | None = None  # from drain history: the failures counted
    node_hours: float | None = None  # from drain history: the up time they were counted over

    def job_seconds(self, nodes: int) -> float:
        """The mean time to interrupt of a job on `nodes` nodes: any one node's failure stops it, and
        independent failures add their rates."""
        return self.node_seconds / nodes


def published(name: str = DEFAULT_FIGURE, path: Path = FAILURE_RATES) -> Mtbf:
    """A published figure from gpuforge/data/failure_rates.yaml, converted per node."""
    figures: dict[str, Any] = load_yaml(path, what="failure rates", fix="restore the file from gpuforge")
    figure = figures[name]
    nodes = figure["gpus"] / figure["gpus_per_node"]
    node_hours = nodes * figure["days"] * 24
    return Mtbf(
        node_seconds=node_hours * 3600 / figure["interruptions"],
        source=f"published: {figure['interruptions']} unexpected interruptions in {figure['days']} days on "
        f"{figure['gpus']} GPUs ({nodes:g} nodes), {figure['title']}, {figure['url']}",
    )


def is_failure(event: NodeEvent) -> bool:
    return event.reason.strip().startswith(GPUFORGE_REASON)


def from_history(
    events: list[NodeEvent], window: Window, nodes: int, *, min_events: int = MIN_EVENTS
) -> Mtbf | None:
    """The MTBF per node from the drain history in `window` on a cluster of `nodes` nodes; None with
    fewer than `min_events` failures (the caller falls back on `published`)."""
    failures = [e for e in events if is_failure(e) and window.since <= e.start < window.until]
    if len(failures) < max(1, min_events):
        return None
    up_seconds = nodes * window.seconds - node_seconds_lost(events, window)
    if up_seconds <= 0:
        return None
    return Mtbf(
        node_seconds=up_seconds / len(failures),
        source=f"drain history: {len(failures)} gpuforge failures over {up_seconds / 3600:.1f} node-hours "
        f"({window.since:%Y-%m-%dT%H:%M:%SZ} to {window.until:%Y-%m-%dT%H:%M:%SZ})",
        failures=len(failures),
        node_hours=up_seconds / 3600,
    )


def cluster_or_published(
    events: list[NodeEvent] | None, window: Window | None, nodes: int, *, min_events: int = MIN_EVENTS
) -> Mtbf:
    """The cluster's own MTBF when its history is enough, else the published figure."""
    own = (
        None
        if events is None or window is None
        else from_history(events, window, nodes, min_events=min_events)
    )
    return own if own is not None else published()
