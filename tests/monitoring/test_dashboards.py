"""Grafana dashboards from `gpuforge monitoring render`: their structure, their one source of names,
and every expression of every panel answered by the real Prometheus the matrices pin (scripts/monitoring-root.sh).

The daemon test backfills series with `promtool tsdb create-blocks-from openmetrics` into the data
folder of a Prometheus it starts on 127.0.0.1 (with the rendered rule files), waits on its
readiness, queries each expression at the backfilled time, and stops it by its pid.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard
from monitoring_support import SHIPPED_STACKS, tool
from monitoring_tools import prometheus

from gpuforge.cli import main
from gpuforge.monitoring.dashboards import DATASOURCE_VARIABLE, HEADER_KEY, SCHEMA_VERSION
from gpuforge.monitoring.rules import ALERTS_FILE, load_rules
from gpuforge.node.efa_metrics import KERNEL_PORT_COUNTERS, METRIC_PREFIX, METRIC_SUFFIX

MONITORED_STACKS = ["p5-prod", "p6-b200-reserved"]
DASHBOARDS = ("gpuforge-usage.json", "gpuforge-fabric.json", "gpuforge-health.json")
SCRAPE_S = 15  # prometheus.yml's scrape_interval
# Grafana replaces its built-in range variables with durations before it sends a query
# (https://grafana.com/docs/grafana/latest/datasources/prometheus/template-variables/): these stand in.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__range": "1h"}


def _render(stack: str, out: Path) -> Path:
    assert main(["monitoring", "render", str(SHIPPED_STACKS), "--stack", stack, "--out", str(out)]) == 0
    return out


def _dashboards(out: Path) -> dict[str, dict[str, Any]]:
    return {name: json.loads((out / "dashboards" / name).read_text(encoding="utf-8")) for name in DASHBOARDS}


def _exprs(document: dict[str, Any]) -> list[str]:
    return [target["expr"] for panel in document["panels"] for target in panel["targets"]]


@pytest.mark.parametrize("stack", MONITORED_STACKS)
def test_every_dashboard_is_grafana_json_with_a_datasource_variable(stack: str, tmp_path: Path) -> None:
    out = _render(stack, tmp_path / "out")
    for name, document in _dashboards(out).items():
        assert document[HEADER_KEY].startswith(f"{name} for cluster"), name
        assert document["schemaVersion"] == SCHEMA_VERSION
        assert isinstance(document["uid"], str) and 0 < len(document["uid"]) <= 40  # Grafana's uid limit
        variables = [v for v in document["templating"]["list"] if v["name"] == DATASOURCE_VARIABLE]
        assert variables == [
            {
                "name": DATASOURCE_VARIABLE,
                "label": "Prometheus",
                "type": "datasource",
                "query": "prometheus",
                "current": {},
                "hide": 0,
            }
        ]
        panels = document["panels"]
        assert panels, name
        ids = [panel["id"] for panel in panels]
        assert len(ids) == len(set(ids)), f"{name}: panel ids repeat"
        reference = {"type": "prometheus", "uid": f"${{{DATASOURCE_VARIABLE}}}"}
        for panel in panels:
            assert panel["type"] in ("timeseries", "table") and panel["title"], panel
            assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
            assert panel["datasource"] == reference
            assert panel["targets"], panel["title"]
            refs = [target["refId"] for target in panel["targets"]]
            assert len(refs) == len(set(refs)), panel["title"]
            for target in panel["targets"]:
                assert target["datasource"] == reference
                assert isinstance(target["expr"], str) and target["expr"].strip()


@pytest.mark.parametrize("name", DASHBOARDS)
def test_grafanas_own_dashboard_types_read_every_key(name: str, tmp_path: Path) -> None:
    """grafana-foundation-sdk (Grafana's published types) reads each file and writes back every key
    gpuforge wrote, on the dashboard, each panel and each query: no key Grafana does not know."""
    out = _render("p5-prod", tmp_path / "out")
    register_default_plugins()
    document = _dashboards(out)[name]
    again = json.loads(JSONEncoder().encode(Dashboard.from_json(document)))
    assert set(document) <= set(again)
    assert again[HEADER_KEY] == document[HEADER_KEY] and again["schemaVersion"] == SCHEMA_VERSION
    assert len(again["panels"]) == len(document["panels"])
    for panel, read in zip(document["panels"], again["panels"], strict=True):
        assert set(panel) <= set(read), panel["title"]
        assert read["datasource"] == panel["datasource"]
        for target, query in zip(panel["targets"], read["targets"], strict=True):
            assert set(target) <= set(query), panel["title"]
            assert query["expr"] == target["expr"]
    variable = again["templating"]["list"][0]
    assert (variable["name"], variable["type"], variable["query"]) == (
        DATASOURCE_VARIABLE,
        "datasource",
        "prometheus",
    )


def test_panels_use_the_rules_names(tmp_path: Path) -> None:
    out = _render("p5-prod", tmp_path / "out")
    dashboards = _dashboards(out)
    usage = " ".join(_exprs(dashboards["gpuforge-usage.json"]))
    for rule in load_rules().recording:
        assert rule.record in usage, rule.record
    fabric = " ".join(_exprs(dashboards["gpuforge-fabric.json"]))
    collected = {f"{METRIC_PREFIX}{name}{METRIC_SUFFIX}" for name in KERNEL_PORT_COUNTERS}
    assert set(re.findall(rf"{METRIC_PREFIX}\w+", fabric)) <= collected
    alerts = " ".join(alert.expr for alert in load_rules().alerts)
    in_alerts = {name for name in collected if name in alerts}
    assert in_alerts  # the rules watch EFA counters: the fabric dashboard shows each of them
    assert {name for name in in_alerts if name not in fabric} == set()
    rules = yaml.safe_load((out / "rules" / ALERTS_FILE).read_text(encoding="utf-8"))["groups"][0]["rules"]
    health = {
        panel["title"]: panel["targets"][0]["expr"] for panel in dashboards["gpuforge-health.json"]["panels"]
    }
    for rule in rules:
        assert health[rule["alert"]] == rule["expr"]


def _series(name: str, labels: dict[str, str], values: list[float], start: int, every: int) -> list[str]:
    inner = ",".join(f'{key}="{value}"' for key, value in labels.items())
    return [f"{name}{{{inner}}} {value} {start + every * step}" for step, value in enumerate(values)]


def _backfill(start: int, minutes: int) -> str:
    """OpenMetrics history of one node, scraped every 15 s as prometheus.yml does: GPU 0 held by job 42
    (and an Xid 79), EFA counters growing; and the minute recordings as the rules would have written them."""
    scrapes = 4 * minutes
    dcgm = {"job": "gpuforge-dcgm", "node": "i-1", "gpu": "0", "hpc_job": "42"}
    efa = {
        "job": "gpuforge-node",
        "node": "i-1",
        "device": "rdmap16s27",
        "port": "1",
        "gpus": "0",
        "hpc_job": "42",
    }
    lines: list[str] = []
    lines += _series("DCGM_FI_DEV_GPU_TEMP", dcgm, [40.0] * scrapes, start, SCRAPE_S)
    lines += _series("DCGM_FI_PROF_SM_ACTIVE", dcgm, [0.5] * scrapes, start, SCRAPE_S)
    lines += _series("DCGM_FI_DEV_XID_ERRORS", dcgm, [79.0] * scrapes, start, SCRAPE_S)
    for counter in KERNEL_PORT_COUNTERS:
        name = f"{METRIC_PREFIX}{counter}{METRIC_SUFFIX}"
        lines += _series(name, efa, [1000.0 * step for step in range(scrapes)], start, SCRAPE_S)
    for rule in load_rules().recording:
        scope = {"hpc_job": "42"} if rule.record.startswith("gpuforge_job:") else {"node": "i-1"}
        value = 0.5 if "ratio" in rule.record else 60.0
        lines += _series(rule.record, scope, [value] * minutes, start, 60)
    return "\n".join(lines) + "\n# EOF\n"


@contextlib.contextmanager
def _prometheus(out: Path, data: Path, log: Path) -> Iterator[int]:
    config = out / "dashboards-test.yml"
    config.write_text(yaml.safe_dump({"rule_files": [str(out / "rules" / "*.yml")]}), encoding="utf-8")
    with prometheus(config, data, log) as port:
        yield port


def _query(port: int, expr: str, at: int) -> dict[str, Any]:
    query = urllib.parse.urlencode({"query": expr, "time": str(at)})
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?{query}", timeout=10) as answer:
            return dict(json.loads(answer.read()))
    except urllib.error.HTTPError as error:  # Prometheus answers 400/422 with a JSON error body
        return dict(json.loads(error.read()))


@pytest.mark.slow
def test_every_expression_answers_from_the_real_prometheus(tmp_path: Path) -> None:
    out = _render("p5-prod", tmp_path / "out")
    minutes = 90
    start = (int(time.time()) // 3600 - 6) * 3600  # well inside retention, older than the head block
    history = tmp_path / "history.om"
    history.write_text(_backfill(start, minutes), encoding="utf-8")
    data = tmp_path / "data"
    made = subprocess.run(
        [str(tool("promtool")), "tsdb", "create-blocks-from", "openmetrics", str(history), str(data)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    at = start + 60 * (minutes - 1)
    with _prometheus(out, data, tmp_path / "prometheus.log") as port:
        empty = []
        for name, document in _dashboards(out).items():
            for panel in document["panels"]:
                for target in panel["targets"]:
                    expr = target["expr"]
                    for variable, value in GRAFANA_VARIABLES.items():
                        expr = expr.replace(variable, value)
                    answer = _query(port, expr, at)
                    assert answer["status"] == "success", (name, panel["title"], expr, answer)
                    if not answer["data"]["result"]:
                        empty.append(panel["title"])
    # Non-vacuous: every usage and fabric panel, and the Xid alert's, shows the backfilled node.
    dashboards = _dashboards(out)
    expected = {
        panel["title"]
        for name in ("gpuforge-usage.json", "gpuforge-fabric.json")
        for panel in dashboards[name]["panels"]
    } | {"GpuforgeXidNodeBad"}
    assert not expected & set(empty), sorted(expected & set(empty))
