"""Parsers for `nvidia-smi` output: the `--query-gpu` CSV and the `-q` text report.

Both formats are nvidia-smi's own. The CSV header repeats the queried field
names, with units in brackets (`power.limit [W]`); missing values print as
`[N/A]` or `[Not Supported]`. The `-q` report is an indented tree, four
spaces a level, one block per GPU headed `GPU 00000000:53:00.0`.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping
from dataclasses import dataclass

# Fields of `nvidia-smi --query-gpu` that the checks read. clocks_event_reasons.*
# replaced clocks_throttle_reasons.* in driver 535; the idle reason is left out
# on purpose, because an idle GPU always reports it.
CLOCK_EVENT_FIELDS = (
    "clocks_event_reasons.sw_power_cap",
    "clocks_event_reasons.hw_slowdown",
    "clocks_event_reasons.hw_thermal_slowdown",
    "clocks_event_reasons.hw_power_brake_slowdown",
    "clocks_event_reasons.sw_thermal_slowdown",
)
QUERY_FIELDS = (
    "index",
    "pci.bus_id",
    "name",
    "uuid",
    "driver_version",
    "ecc.errors.uncorrected.volatile.total",
    "power.limit",
    "power.default_limit",
    *CLOCK_EVENT_FIELDS,
)
GPU_QUERY = ("nvidia-smi", f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv")
GPU_DETAILS = ("nvidia-smi", "-q")

_MISSING_VALUES = {"", "N/A", "[N/A]", "[Not Supported]", "Not Supported", "[Unknown Error]"}
_UNIT = re.compile(r"\s*\[[^\]]*\]$")
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
# "Failed to initialize NVML: Driver/library version mismatch" is followed, on
# newer drivers, by "NVML library version: 570.133".
_NVML_LIBRARY = re.compile(r"NVML library version:\s*([0-9][0-9.]*)")
_BLOCK_HEADER = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")


class NvidiaSmiFormatError(ValueError):
    """Output that does not have the shape nvidia-smi prints."""


@dataclass(frozen=True)
class GpuRow:
    """One GPU's line of the `--query-gpu` CSV."""

    index: str
    bus_id: str
    name: str
    uuid: str
    driver_version: str | None
    ecc_uncorrected: int | None
    power_limit_w: float | None
    power_default_limit_w: float | None
    active_clock_events: tuple[str, ...]


@dataclass(frozen=True)
class QueryResult:
    rows: tuple[GpuRow, ...]
    # Lines nvidia-smi printed instead of a row, e.g. "Unable to determine the
    # device handle for GPU0000:53:00.0: Unknown Error" for a GPU off the bus.
    stray_lines: tuple[str, ...]


def _value(raw: str | None) -> str | None:
    if raw is None:
        return None
    text = raw.strip()
    return None if text in _MISSING_VALUES else text


def _number(raw: str | None) -> float | None:
    text = _value(raw)
    if text is None:
        return None
    match = _NUMBER.search(text)
    return float(match.group()) if match else None


def parse_query_csv(text: str) -> QueryResult:
    """Parse `nvidia-smi --query-gpu=... --format=csv` (header line included)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise NvidiaSmiFormatError("empty output")
    header = [_UNIT.sub("", name.strip()) for name in next(csv.reader([lines[0]], skipinitialspace=True))]
    if "index" not in header or "name" not in header:
        raise NvidiaSmiFormatError(f"no CSV header with index and name: {lines[0]!r}")
    rows: list[GpuRow] = []
    stray: list[str] = []
    for line in lines[1:]:
        cells = next(csv.reader([line], skipinitialspace=True))
        if len(cells) != len(header):
            stray.append(line.strip())
            continue
        record: Mapping[str, str] = dict(zip(header, cells, strict=True))
        ecc = _number(record.get("ecc.errors.uncorrected.volatile.total"))
        rows.append(
            GpuRow(
                index=record["index"].strip(),
                bus_id=(_value(record.get("pci.bus_id")) or "").upper(),
                name=_value(record.get("name")) or "",
                uuid=_value(record.get("uuid")) or "",
                driver_version=_value(record.get("driver_version")),
                ecc_uncorrected=None if ecc is None else int(ecc),
                power_limit_w=_number(record.get("power.limit")),
                power_default_limit_w=_number(record.get("power.default_limit")),
                active_clock_events=tuple(
                    field.removeprefix("clocks_event_reasons.")
                    for field in CLOCK_EVENT_FIELDS
                    if (_value(record.get(field)) or "").lower() == "active"
                ),
            )
        )
    return QueryResult(tuple(rows), tuple(stray))


def nvml_library_version(text: str) -> str | None:
    """The user-space NVML version named in a driver/library mismatch message, if any."""
    match = _NVML_LIBRARY.search(text)
    return match.group(1) if match else None


def is_version_mismatch(text: str) -> bool:
    return "Driver/library version mismatch" in text


@dataclass(frozen=True)
class GpuDetails:
    """One GPU block of `nvidia-smi -q`, as (section, ..., key) paths to values."""

    bus_id: str
    fields: Mapping[tuple[str, ...], str]

    def get(self, *path: str) -> str | None:
        return self.fields.get(path)


@dataclass(frozen=True)
class DetailsReport:
    driver_version: str | None
    gpus: tuple[GpuDetails, ...]


def parse_details(text: str) -> DetailsReport:
    """Parse the indented `nvidia-smi -q` report into one field map per GPU.

    A line `Key : Value` is a field; a line with no colon opens a section whose
    fields are indented one level (four spaces) deeper. `Remapped Rows : N/A`
    keeps its value under the path ("Remapped Rows",).
    """
    driver: str | None = None
    gpus: list[GpuDetails] = []
    bus_id: str | None = None
    fields: dict[tuple[str, ...], str] = {}
    stack: list[str] = []

    def close() -> None:
        if bus_id is not None:
            gpus.append(GpuDetails(bus_id, dict(fields)))

    for raw in text.splitlines():
        if not raw.strip() or raw.lstrip().startswith("="):
            continue
        header = _BLOCK_HEADER.match(raw)
        if header:
            close()
            bus_id, fields, stack = header.group(1).upper(), {}, []
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        key, sep, value = raw.strip().partition(":")
        key, value = key.strip(), value.strip()
        if bus_id is None:
            if sep and key == "Driver Version":
                driver = value
            continue
        depth = max(indent // 4 - 1, 0)
        del stack[depth:]
        if sep:
            fields[(*stack, key)] = value
        else:
            stack.append(key)
    close()
    if driver is None and not gpus:
        raise NvidiaSmiFormatError("no 'Driver Version' line and no GPU blocks")
    return DetailsReport(driver, tuple(gpus))
