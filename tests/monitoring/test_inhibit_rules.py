"""alertmanager.yml's inhibit rules come from the alert pack's data, never a hand-kept list.

The targets are every `drain: false` alert of gpuforge/data/monitoring_alerts.yaml but the source, and
each carries the label the rule matches on: the firing cases that the real promtool runs
(test_real_prometheus.ALERT_CASES) say which labels each alert has.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from test_real_prometheus import ALERT_CASES

from gpuforge.monitoring import rules as rules_module
from gpuforge.monitoring.alertmanager import alertmanager_config
from gpuforge.monitoring.config import MonitoringConfig
from gpuforge.monitoring.rules import load_rules


def _inhibit_rules() -> list[dict[str, object]]:
    config = MonitoringConfig(
        enabled=True, retention_days=15, remote_write="none", alerts=None, drain_on_alert=True
    )
    text = alertmanager_config(cluster="demo", region="us-east-1", monitoring=config, source="x")
    rendered: list[dict[str, object]] = yaml.safe_load(text)["inhibit_rules"]
    return rendered


def test_a_node_down_inhibits_every_non_drain_alert_of_that_node() -> None:
    data = load_rules()
    (rule,) = _inhibit_rules()
    assert rule["source_matchers"] == ['alertname="GpuforgeNodeDown"']
    assert rule["equal"] == ["node"]
    (matcher,) = rule["target_matchers"]  # type: ignore[misc]
    targets = matcher.removeprefix('alertname=~"').removesuffix('"').split("|")
    assert targets == [a.name for a in data.alerts if not a.drain and a.name != "GpuforgeNodeDown"]
    assert {a.name for a in data.alerts if a.drain}.isdisjoint(targets), "a drain alert must still drain"
    for name in targets:
        (_, _, labels), _ = ALERT_CASES[name]
        assert "node" in labels, f"{name} fires without the `node` label the inhibit rule matches on"


def test_a_new_alert_is_a_target_without_editing_any_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pack with one more alert (as a contributor would add it): the rendered rule inhibits it too."""
    shipped = yaml.safe_load(
        (Path(rules_module.__file__).parents[1] / rules_module.DATA_FILE).read_text(encoding="utf-8")
    )
    shipped["alerts"].append({**shipped["alerts"][-1], "name": "GpuforgeSomethingNew", "drain": False})
    folder = tmp_path / "gpuforge"
    (folder / "data").mkdir(parents=True)
    (folder / rules_module.DATA_FILE).write_text(yaml.safe_dump(shipped), encoding="utf-8")
    monkeypatch.setattr(rules_module.resources, "files", lambda _package: folder)
    load_rules.cache_clear()
    try:
        (rule,) = _inhibit_rules()
    finally:
        load_rules.cache_clear()
    assert rule["target_matchers"][0].endswith('|GpuforgeSomethingNew"')  # type: ignore[index]
