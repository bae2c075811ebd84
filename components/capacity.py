"""How a node group's size follows its capacity over time.

On-demand capacity and ODCRs hold `node_count` nodes from the start. A Capacity
Block holds zero until its start, `node_count` during it, and zero again from
`scale_in_minutes_before_end` minutes before its end: AWS begins terminating the
block's instances 30 minutes before the end, so the group drains them first.
Scheduled actions do the scaling; one whose time has passed is left out (the
Auto Scaling API refuses start times in the past).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gpuforge.components.input_errors import invalid
from gpuforge.components.specs import CapacitySpec


@dataclass(frozen=True)
class ScheduledSize:
    """One scheduled action: at `at` (UTC), set the group to `size` (min and desired)."""

    label: str
    at: datetime
    size: int

    @property
    def start_time(self) -> str:
        """The time as the Auto Scaling API takes it: YYYY-MM-DDThh:mm:ssZ, in UTC."""
        return self.at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class ScalePlan:
    initial_size: int
    max_size: int
    schedule: tuple[ScheduledSize, ...]


def scale_plan(capacity: CapacitySpec, node_count: int, now: datetime | None = None) -> ScalePlan:
    """The group's size now and its scheduled changes; `now` defaults to the current time."""
    if capacity.type != "capacity-block":
        return ScalePlan(initial_size=node_count, max_size=node_count, schedule=())
    assert capacity.start is not None and capacity.end is not None  # CapacitySpec requires both
    now = now if now is not None else datetime.now(UTC)
    scale_in = capacity.end - timedelta(minutes=capacity.scale_in_minutes_before_end)
    if now >= scale_in:
        raise invalid(
            "capacity.end",
            capacity.end.isoformat(),
            f"the Capacity Block is over or ends within {capacity.scale_in_minutes_before_end} minutes "
            f"(now {now.astimezone(UTC).isoformat()}); its nodes would be terminated",
            "use the dates of a current or future Capacity Block",
        )
    scale_in_action = ScheduledSize("block-end", scale_in, 0)
    if now >= capacity.start:
        return ScalePlan(initial_size=node_count, max_size=node_count, schedule=(scale_in_action,))
    return ScalePlan(
        initial_size=0,
        max_size=node_count,
        schedule=(ScheduledSize("block-start", capacity.start, node_count), scale_in_action),
    )
