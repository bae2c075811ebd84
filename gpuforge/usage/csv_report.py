"""`--csv FILE`: the report for finance, as CSV (RFC 4180: a header row, CRLF line ends, fields with a
comma, quote or line break quoted, quotes doubled; Python's csv module with its default dialect).

One row per group, then the total, then one row per ledger cost line (gpuforge.usage.ledger) and the
unused reserved hours, with figures unrounded so a spreadsheet's sums match the report's. Names come
from accounting and AWS: a cell that starts with = + - @ (or a tab or carriage return) is read as a
formula by spreadsheets, so such a cell is prefixed with a single quote, as OWASP's CSV injection
guidance says (https://owasp.org/www-community/attacks/CSV_Injection); figures are written by this
module, never from a name, so they are left as numbers.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from gpuforge.atomic import write_text_atomic
from gpuforge.usage.report import Group, UsageReport

HEADER = (
    "row",
    "name",
    "since",
    "until",
    "jobs",
    "gpu_seconds_held",
    "gpu_hours_held",
    "gpu_hours_useful",
    "gpu_hours_idle",
    "usd_per_gpu_hour",
    "cost_usd",
)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(text: str) -> str:
    """`text` as a spreadsheet shows it, never runs it: a leading formula character gets a `'` before it."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def _figure(value: float | int | None) -> str:
    return "" if value is None else repr(value)


def _group_row(kind: str, group: Group, report: UsageReport) -> list[str]:
    metered = group.metered
    return [
        kind,
        safe_cell(group.name),
        report.window.since.isoformat(),
        report.window.until.isoformat(),
        str(len(group.job_ids)),
        str(group.gpu_seconds_held),
        _figure(group.gpu_seconds_held / 3600),
        _figure(None if metered is None else metered.useful_s / 3600),
        _figure(None if metered is None else metered.idle_s / 3600),
        _figure(None if report.ledger is not None else report.rate.usd_per_gpu_hour),
        _figure(report.cost_exact(group)),
    ]


def render_csv(report: UsageReport) -> str:
    """The report's rows as CSV text (header first)."""
    out = io.StringIO()
    writer = csv.writer(out)  # the default dialect: RFC 4180 quoting, CRLF
    writer.writerow(HEADER)
    for group in report.groups:
        writer.writerow(_group_row(report.by, group, report))
    writer.writerow(_group_row("total", report.total, report))
    if report.ledger is not None:
        for line in report.ledger.lines:
            writer.writerow(
                [
                    "cost line",
                    safe_cell(line.period.name),
                    line.span.since.isoformat(),
                    line.span.until.isoformat(),
                    "",
                    str(line.gpu_seconds_held),
                    _figure(line.gpu_seconds_held / 3600),
                    "",
                    "",
                    _figure(line.period.usd_per_gpu_hour),
                    _figure(line.cost(line.gpu_seconds_held)),
                ]
            )
    if report.reserved is not None and report.reserved.span is not None:
        unused = report.reserved.gpu_seconds_unused
        exact = (
            sum(line.cost(line.gpu_seconds_unused) for line in report.ledger.lines)
            if report.ledger is not None
            else None
            if report.rate.usd_per_gpu_hour is None
            else unused / 3600 * report.rate.usd_per_gpu_hour
        )
        span = report.reserved.span
        writer.writerow(
            [
                "unused reserved",
                safe_cell(report.reserved.capacity_type),
                span.since.isoformat(),
                span.until.isoformat(),
                "",
                str(unused),
                _figure(unused / 3600),
                "",
                "",
                "",
                _figure(exact),
            ]
        )
    return out.getvalue()


def write_csv(path: Path, report: UsageReport) -> None:
    """Write the CSV atomically (a reader sees the old file or the new one)."""
    write_text_atomic(path, render_csv(report))
