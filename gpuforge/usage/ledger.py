"""The capacity ledger: every Capacity Block, ODCR and On-Demand period a stack has had, with its
window, type, size and price, so a report prices each hour by the capacity that held it.

The stack file names only today's capacity; once the next block replaces it, a report of last month
priced from the stack file would be priced at the new block's rate. The ledger is a file beside the
stack, `capacity-ledger.<stack>.yaml`, versioned in git with it (README, "Usage and cost"):

    periods:               # oldest first, none overlapping
      - type: capacity-block            # capacity-block | reservation | on-demand
        reservationId: cr-0a1b2c3d4e5f60718   # capacity-block and reservation only
        instanceType: p5.48xlarge
        nodes: 2
        start: 2026-11-01T11:30:00Z
        end: 2026-11-15T11:30:00Z       # the last period may leave it out: still current
        upfrontFeeUsd: 31464.00         # capacity-block: the fee the purchase showed
      - type: on-demand
        instanceType: p5.48xlarge
        nodes: 2
        start: 2026-11-15T11:30:00Z
        usdPerInstanceHour: 98.32       # reservation and on-demand: the On-Demand rate billed

A Capacity Block's GPU-hour costs its fee over its hours x nodes x GPUs; an ODCR's and On-Demand's
the instance-hour rate over the type's GPUs (gpuforge.usage.cost says why). Every rule of the file
is checked when it is read: a bad ledger is exit 2 naming the file, the period, the field and the fix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

from gpuforge import hardware
from gpuforge.display import cut
from gpuforge.errors import InputError
from gpuforge.loading import load_yaml
from gpuforge.scheduler.slurm_values import RESERVATION_ID
from gpuforge.usage.window import Window, parse_time

TYPES = ("capacity-block", "reservation", "on-demand")
PRICE_KEY = {
    "capacity-block": "upfrontFeeUsd",
    "reservation": "usdPerInstanceHour",
    "on-demand": "usdPerInstanceHour",
}
JSON_PRICE_KEY = {
    "capacity-block": "upfront_fee_usd",
    "reservation": "usd_per_instance_hour",
    "on-demand": "usd_per_instance_hour",
}
KEYS = {
    "type",
    "reservationId",
    "instanceType",
    "nodes",
    "start",
    "end",
    "upfrontFeeUsd",
    "usdPerInstanceHour",
}
FIX = "edit the ledger as README 'Usage and cost' shows (one period per capacity the stack had, oldest first)"


def ledger_path(stack_dir: Path, stack: str) -> Path:
    """Where a stack's ledger lives: beside its Pulumi.<stack>.yaml, so git versions them together."""
    return stack_dir / f"capacity-ledger.{stack}.yaml"


@dataclass(frozen=True)
class Period:
    kind: str  # one of TYPES
    reservation_id: str | None
    instance_type: str
    nodes: int
    start: datetime
    end: datetime | None  # None: still current
    usd: float  # the fee (capacity-block) or the instance-hour rate (reservation, on-demand)

    @property
    def gpus(self) -> int:
        return self.nodes * hardware.get(self.instance_type).gpu_count

    @property
    def usd_per_gpu_hour(self) -> float:
        if self.kind == "capacity-block":
            assert self.end is not None  # read_ledger requires a block's end
            hours = (self.end - self.start).total_seconds() / 3600
            return self.usd / (hours * self.gpus)
        return self.usd / hardware.get(self.instance_type).gpu_count

    @property
    def name(self) -> str:
        return self.kind if self.reservation_id is None else f"{self.kind} {self.reservation_id}"

    def source(self) -> str:
        """How the rate was made, in words a reader can recompute."""
        per_node = hardware.get(self.instance_type).gpu_count
        if self.kind == "capacity-block":
            assert self.end is not None
            hours = (self.end - self.start).total_seconds() / 3600
            return (
                f"upfront fee ${self.usd:,.2f} over {hours:g} h x {self.nodes} nodes x {per_node} GPUs "
                f"({self.instance_type})"
            )
        return f"On-Demand ${self.usd}/instance-hour over {per_node} GPUs ({self.instance_type})"

    def span(self, window: Window) -> Window | None:
        """The part of `window` this period covers; None where they do not meet."""
        since = max(window.since, self.start)
        until = window.until if self.end is None else min(window.until, self.end)
        return Window(since, until) if since < until else None

    def to_file(self) -> dict[str, Any]:
        """The period as the ledger file writes it (the keys read_ledger reads)."""
        entry: dict[str, Any] = {"type": self.kind}
        if self.reservation_id is not None:
            entry["reservationId"] = self.reservation_id
        entry.update(instanceType=self.instance_type, nodes=self.nodes, start=_iso(self.start))
        if self.end is not None:
            entry["end"] = _iso(self.end)
        entry[PRICE_KEY[self.kind]] = self.usd
        return entry

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.kind,
            "reservation_id": self.reservation_id,
            "instance_type": self.instance_type,
            "nodes": self.nodes,
            "start": self.start.isoformat(),
            "end": None if self.end is None else self.end.isoformat(),
            # the file's camelCase key in the report's snake_case: upfront_fee_usd or usd_per_instance_hour
            JSON_PRICE_KEY[self.kind]: self.usd,
        }


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _bad(path: Path, where: str, rule: str, value: object) -> InputError:
    return InputError(f"{path}: {where}: {rule}; found {cut(value)}. Fix: {FIX}.")


def _positive_number(path: Path, where: str, value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise _bad(path, where, "must be a finite number above 0 (USD)", value)
    return float(value)


def _time(path: Path, where: str, value: object) -> datetime:
    if not isinstance(value, str):
        raise _bad(path, where, "must be an ISO 8601 time with a zone, e.g. 2026-11-01T11:30:00Z", value)
    try:
        return parse_time(where, value)
    except InputError:
        raise _bad(
            path, where, "must be an ISO 8601 time with a zone, e.g. 2026-11-01T11:30:00Z", value
        ) from None


def _period(path: Path, index: int, entry: object) -> Period:
    where = f"periods[{index}]"
    if not isinstance(entry, dict):
        raise _bad(
            path, where, "must be a mapping of type, instanceType, nodes, start, end and a price", entry
        )
    unknown = sorted(set(entry) - KEYS, key=str)
    if unknown:
        raise _bad(
            path, where, f"has a key that is not a ledger key (keys: {', '.join(sorted(KEYS))})", unknown[0]
        )
    kind = entry.get("type")
    if kind not in TYPES:
        raise _bad(path, f"{where}.type", f"must be one of {', '.join(TYPES)}", kind)
    reservation = entry.get("reservationId")
    if kind == "on-demand" and reservation is not None:
        raise _bad(path, f"{where}.reservationId", "On-Demand capacity has no reservation", reservation)
    # The stack file's rule for the id (gpuforge.scheduler.slurm_values), so the two agree.
    if kind != "on-demand" and not (
        isinstance(reservation, str) and RESERVATION_ID.pattern.fullmatch(reservation)
    ):
        raise _bad(path, f"{where}.reservationId", RESERVATION_ID.rule, reservation)
    instance_type = entry.get("instanceType")
    if not isinstance(instance_type, str) or instance_type not in hardware.catalog():
        raise _bad(path, f"{where}.instanceType", "must be a GPU instance type gpuforge knows", instance_type)
    nodes = entry.get("nodes")
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise _bad(path, f"{where}.nodes", "must be a whole number of nodes, 1 or more", nodes)
    start = _time(path, f"{where}.start", entry.get("start"))
    end = None if entry.get("end") is None else _time(path, f"{where}.end", entry.get("end"))
    if kind == "capacity-block" and end is None:
        raise _bad(path, f"{where}.end", "a Capacity Block has an end (its fee pays for start to end)", None)
    if end is not None and end <= start:
        raise _bad(path, f"{where}.end", f"must be after start {start.isoformat()}", end.isoformat())
    key = PRICE_KEY[kind]
    other = next(iter(set(PRICE_KEY.values()) - {key}))
    if other in entry:
        raise _bad(path, f"{where}.{other}", f"a {kind} period is priced by {key}, not {other}", entry[other])
    usd = _positive_number(path, f"{where}.{key}", entry.get(key))
    return Period(kind, reservation, instance_type, nodes, start, end, usd)


def read_ledger(path: Path) -> tuple[Period, ...] | None:
    """The ledger's periods, oldest first; None when the stack has no ledger file."""
    if not path.exists() and not path.is_symlink():
        return None
    return parse_ledger(path, load_yaml(path, what="capacity ledger", fix=FIX, timestamps_as_text=True))


def parse_ledger(path: Path, document: object) -> tuple[Period, ...]:
    """The periods of a parsed ledger `document` (from `path`), every rule checked."""
    if (
        not isinstance(document, dict)
        or not isinstance(document.get("periods"), list)
        or not document["periods"]
    ):
        raise _bad(
            path,
            "periods",
            "the file is a mapping whose `periods` is a list of one or more periods",
            document,
        )
    periods = tuple(_period(path, index, entry) for index, entry in enumerate(document["periods"]))
    for index, (earlier, later) in enumerate(pairwise(periods), start=1):
        if earlier.end is None:
            raise _bad(path, f"periods[{index - 1}].end", "only the last period may be open (no end)", None)
        if later.start < earlier.end:
            raise _bad(
                path,
                f"periods[{index}].start",
                f"periods are oldest first and do not overlap: periods[{index - 1}] ends {earlier.end.isoformat()}",
                later.start.isoformat(),
            )
    return periods


def uncovered(periods: tuple[Period, ...], window: Window) -> Window | None:
    """The first part of `window` no period covers (before the first, in a gap, after the last closed one)."""
    cursor = window.since
    for period in periods:
        if period.end is not None and period.end <= cursor:
            continue
        if period.start > cursor:
            return Window(cursor, min(period.start, window.until))
        if period.end is None:
            return None
        cursor = period.end
        if cursor >= window.until:
            return None
    return Window(cursor, window.until) if cursor < window.until else None
