"""Reserved capacity and how much of it jobs used.

The stack's `gpuforge:capacity` says what was reserved: a Capacity Block from `start` to `end`, an
On-Demand Capacity Reservation (`reservation`) with no dates in the stack (it is assumed active for
the whole report window: an ODCR bills until it is cancelled), or nothing (`on-demand`). Reserved
GPU-hours are the reservation's window inside the report's, times the node count, times the type's
GPUs; unused are those less the GPU-hours jobs held inside the same span.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuforge.stack_config import StackConfig
from gpuforge.usage.sacct import Job
from gpuforge.usage.window import Window


@dataclass(frozen=True)
class Reserved:
    capacity_type: str  # reservation | capacity-block
    span: Window | None  # the reservation inside the report window; None: they do not meet
    gpus: int
    gpu_seconds_reserved: int
    gpu_seconds_held: int
    note: str

    @property
    def gpu_seconds_unused(self) -> int:
        return max(0, self.gpu_seconds_reserved - self.gpu_seconds_held)

    def to_json(self) -> dict[str, Any]:
        return {
            "capacity_type": self.capacity_type,
            "since": None if self.span is None else self.span.since.isoformat(),
            "until": None if self.span is None else self.span.until.isoformat(),
            "gpus": self.gpus,
            "gpu_hours_reserved": round(self.gpu_seconds_reserved / 3600, 4),
            "gpu_hours_held": round(self.gpu_seconds_held / 3600, 4),
            "gpu_hours_unused": round(self.gpu_seconds_unused / 3600, 4),
            "note": self.note,
        }


def reserved(
    config: StackConfig, gpus_per_node: int, jobs: list[Job], window: Window, now: datetime
) -> Reserved | None:
    """The stack's reservation over the window; None for On-Demand capacity."""
    capacity = config.capacity
    gpus = config.node_count * gpus_per_node
    if capacity.type == "on-demand":
        return None
    if capacity.type == "capacity-block":
        assert capacity.start is not None and capacity.end is not None  # CapacitySpec requires them
        since, until = max(window.since, capacity.start), min(window.until, capacity.end)
        note = f"Capacity Block {capacity.reservation_id}, {capacity.start.isoformat()} to {capacity.end.isoformat()}"
    else:
        since, until = window.since, window.until
        note = (
            f"On-Demand Capacity Reservation {capacity.reservation_id}: the stack names no dates, so it is "
            "taken as active for the whole window"
        )
    if since >= until:
        return Reserved(capacity.type, None, gpus, 0, 0, f"{note}; outside the window")
    span = Window(since, until)
    held = sum(job.held_seconds(span, now) for job in jobs)
    return Reserved(capacity.type, span, gpus, gpus * span.seconds, held, note)
