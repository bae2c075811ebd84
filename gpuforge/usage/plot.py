"""`--plot FILE.svg`: stacked bars of GPU-hours per group of the report (--by: team, user, partition or
job), drawn with `validate report`'s SVG frame.

Each group's bar stacks the hours its jobs' GPUs were useful (SM-active GPU-hours), held idle (the
idle rule of metrics.py), and held otherwise; a group without metrics gets one "held (no metrics)"
segment. Unused reserved hours belong to no group (nobody held them), so they are a bar of their own
at the end. The GPU-hour axis carries its values (`<text data-tick=...>` at round steps) and each bar
its dollars (`<text data-usd=...>`, the report's cost of the group, "no price" where there is none).
Each bar is a `<g data-group=...>` whose rectangles carry `data-series`, so the file can be
checked by a program as well as read. Names come from accounting: each is written through
gpuforge.display.printable (XML has no place for control characters) and then XML-escaped, in one
place (_label).
"""

from __future__ import annotations

import math
from html import escape

from gpuforge.display import printable
from gpuforge.svg import document
from gpuforge.usage.report import Group, UsageReport

SERIES = {  # series -> colour
    "useful": "#2ca02c",
    "idle held": "#d62728",
    "other held": "#1f77b4",
    "held (no metrics)": "#7f7f7f",
    "unused reserved": "#ff7f0e",
}
UNUSED_BAR = "(unused reserved)"


def _segments(group: Group) -> list[tuple[str, float]]:
    held = group.gpu_seconds_held / 3600
    if group.metered is None:
        return [("held (no metrics)", held)]
    useful, idle = group.metered.useful_s / 3600, group.metered.idle_s / 3600
    return [("useful", useful), ("idle held", idle), ("other held", max(0.0, held - useful - idle))]


def _label(name: str) -> str:
    """A name from accounting as SVG text or attribute: control characters escaped, then XML's own."""
    return escape(printable(name))


def _ticks(top: float) -> list[float]:
    """Round axis values from 0 to at least `top`: a step of 1, 2 or 5 times a power of ten, 4 to 10 steps."""
    raw = top / 5
    power = 10 ** math.floor(math.log10(raw))
    step = next(power * factor for factor in (1, 2, 5, 10) if power * factor >= raw)
    # 12 significant digits: 3 x 0.1 is 0.30000000000000004 in binary, an axis says 0.3
    return [float(f"{step * index:.12g}") for index in range(math.ceil(top / step - 1e-9) + 1)]


def _tick_text(value: float) -> str:
    return f"{value:g}"


def _usd(cost: float | None) -> str:
    return "no price" if cost is None else f"${cost:,.2f}"


def render_svg(report: UsageReport, *, width: int = 720, height: int = 420) -> str:
    """One bar per group of the report (report.by), then the unused reserved bar."""
    margin = 60
    bars = [(group.name, _segments(group), report.cost(group)) for group in report.groups]
    if report.reserved is not None:
        unused = [("unused reserved", report.reserved.gpu_seconds_unused / 3600)]
        bars.append((UNUSED_BAR, unused, report.unused_cost()))
    highest = max((sum(value for _, value in segments) for _, segments, _ in bars), default=0.0) or 1.0
    ticks = _ticks(highest)
    top = ticks[-1]
    plot_height = height - 2 * margin
    slot = (width - 2 * margin) / max(1, len(bars))
    parts = [
        f'<line x1="{margin}" y1="{height - margin}" x2="{width - margin}" y2="{height - margin}" stroke="black"/>',
        f'<line x1="{margin}" y1="{margin}" x2="{margin}" y2="{height - margin}" stroke="black"/>',
        f'<text x="15" y="{height / 2}" transform="rotate(-90 15 {height / 2})" text-anchor="middle">GPU-hours</text>',
        f'<text x="{margin}" y="{margin - 25}">GPU-hours per {_label(report.by)}, {escape(report.window.since.isoformat())} to '
        f"{escape(report.window.until.isoformat())} (max {highest:.1f}; $ above each bar)</text>",
    ]
    for tick in ticks:
        y_tick = height - margin - tick / top * plot_height
        parts.append(
            f'<line x1="{margin - 4}" y1="{y_tick:.1f}" x2="{margin}" y2="{y_tick:.1f}" stroke="black"/>'
            f'<text data-tick="{tick!r}" x="{margin - 6}" y="{y_tick + 4:.1f}" text-anchor="end">'
            f"{_tick_text(tick)}</text>"
        )
    if not bars:
        parts.append(f'<text x="{margin + 10}" y="{height // 2}">no GPU jobs in the window</text>')
    for index, (name, segments, cost) in enumerate(bars):
        x = margin + index * slot + slot * 0.15
        y = float(height - margin)
        rects = []
        for series, value in segments:
            tall = value / top * plot_height
            y -= tall
            rects.append(
                f'<rect data-series="{series}" x="{x:.1f}" y="{y:.1f}" width="{slot * 0.7:.1f}" height="{tall:.1f}" '
                f'fill="{SERIES[series]}"><title>{_label(name)}: {series} {value:.2f} GPU-h</title></rect>'
            )
        label = f'<text x="{x + slot * 0.35:.1f}" y="{height - margin + 15}" text-anchor="middle">{_label(name)}</text>'
        usd = (
            f'<text data-usd="{"" if cost is None else repr(cost)}" x="{x + slot * 0.35:.1f}" y="{y - 4:.1f}" '
            f'text-anchor="middle">{_usd(cost)}</text>'
        )
        parts.append(f'<g data-group="{_label(name)}">{"".join(rects)}{usd}{label}</g>')
    for index, (series, colour) in enumerate(SERIES.items()):
        parts.append(
            f'<text x="{width - margin}" y="{margin + 15 * index}" text-anchor="end" fill="{colour}">{series}</text>'
        )
    return document(width, height, parts)
