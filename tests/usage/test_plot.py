"""`--plot`: one bar per group of the report (here teams) with the useful, idle-held and other-held series,
and unused reserved hours as a bar of their own; drawn in `validate report`'s SVG frame."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime

from gpuforge.usage.cost import Rate
from gpuforge.usage.metrics import JobMetrics
from gpuforge.usage.plot import UNUSED_BAR, render_svg
from gpuforge.usage.report import Group, UsageReport
from gpuforge.usage.reservations import Reserved
from gpuforge.usage.window import Window

SVG = "{http://www.w3.org/2000/svg}"
WINDOW = Window(datetime(2026, 12, 1, tzinfo=UTC), datetime(2026, 12, 2, tzinfo=UTC))


def _group(name: str, held_h: float, metered: JobMetrics | None) -> Group:
    group = Group(name, {f"{name}-1"}, int(held_h * 3600))
    group.metered = metered
    return group


def _bars(svg: str) -> dict[str, dict[str, float]]:
    root = ET.fromstring(svg)
    return {
        bar.attrib["data-group"]: {
            rect.attrib["data-series"]: float(rect.attrib["height"]) for rect in bar.iter(f"{SVG}rect")
        }
        for bar in root.iter(f"{SVG}g")
    }


def test_one_bar_per_team_with_its_series_and_the_unused_reserved_bar() -> None:
    teams = [
        _group("llm", 10, JobMetrics(10 * 3600, 6 * 3600, 2 * 3600)),
        _group("vision", 4, JobMetrics(4 * 3600, 3 * 3600, 0)),
        _group("research", 2, None),
    ]
    reserve = Reserved("capacity-block", WINDOW, 16, 16 * 86400, 16 * 3600, "block")
    report = UsageReport(
        "p5", WINDOW, "team", tuple(teams), Group("total"), None, reserve, None, Rate(None, "no price")
    )
    bars = _bars(render_svg(report))
    assert set(bars) == {"llm", "vision", "research", UNUSED_BAR}
    assert set(bars["llm"]) == {"useful", "idle held", "other held"}
    assert set(bars["vision"]) == {"useful", "idle held", "other held"}
    assert set(bars["research"]) == {"held (no metrics)"}
    assert set(bars[UNUSED_BAR]) == {"unused reserved"}
    # Heights share one scale: llm's useful (6 h) is 3 x its idle (2 h) and twice vision's useful (3 h).
    assert abs(bars["llm"]["useful"] - 3 * bars["llm"]["idle held"]) < 0.2
    assert abs(bars["llm"]["useful"] - 2 * bars["vision"]["useful"]) < 0.2
    assert bars[UNUSED_BAR]["unused reserved"] > bars["llm"]["useful"]  # 368 h unused is the tallest


def test_no_jobs_and_no_reservation_is_a_plot_that_says_so() -> None:
    report = UsageReport("p5", WINDOW, "team", (), Group("total"), None, None, None, Rate(None, "no price"))
    svg = render_svg(report)
    assert _bars(svg) == {}
    assert "no GPU jobs in the window" in svg
