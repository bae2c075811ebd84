"""The README's monitoring section lists every alert and every recorded metric (issue 21: 'The README lists
every alert with its meaning and its action')."""

from __future__ import annotations

from monitoring_support import REPO

from gpuforge.monitoring.rules import load_rules


def _section() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index("## Monitoring")
    return text[start : text.index("\n## ", start + 1)]


def test_every_alert_is_listed_with_its_meaning_and_action() -> None:
    section = _section()
    for alert in load_rules().alerts:
        assert f"| `{alert.name}` |" in section
        assert alert.meaning in section and alert.action in section, alert.name


def test_every_recorded_metric_is_listed() -> None:
    section = _section()
    for rule in load_rules().recording:
        assert f"`{rule.record}`" in section
