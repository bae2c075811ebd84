"""Grafana dashboards (JSON) for a cluster: busy versus useful, fabric per EFA device, health events.

One source of names: the usage panels query the recording rules gpuforge renders (their names come
from gpuforge/data/monitoring_alerts.yaml through gpuforge.monitoring.rules), the fabric panels the
EFA collector's series (gpuforge.node.efa_metrics: prefix, counter, suffix), and the health
dashboard shows every alert of the rendered rule file with its own expression, so a panel shows
the series exactly while its alert would fire. Nothing here spells a metric name of its own.

The files import into Amazon Managed Grafana or a self-hosted Grafana (Dashboards > New > Import,
or a file provider). Each has a `datasource` variable of type prometheus that every panel and
query uses, so one import serves any Prometheus (the controller's, or an Amazon Managed Service
for Prometheus workspace). schemaVersion 41 is Grafana's LATEST_VERSION in grafana/grafana
apps/dashboard/pkg/migration/schemaversion/migrations.go (commit 7501ffa8538f888d6f940fe9ee67e500ed95e44a);
a later Grafana migrates it forward on load (its MIN_VERSION there is 21).
The first key, `description` (a field of Grafana's dashboard), names the file and its cluster, as
the other rendered files' first line does.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import yaml

from gpuforge.monitoring.rules import ALERTS_FILE, load_rules
from gpuforge.node.efa_metrics import KERNEL_PORT_COUNTERS, METRIC_PREFIX, METRIC_SUFFIX

DASHBOARDS_DIR = "dashboards"
SCHEMA_VERSION = 41
DATASOURCE_VARIABLE = "datasource"
DATASOURCE = {"type": "prometheus", "uid": f"${{{DATASOURCE_VARIABLE}}}"}
HEADER_KEY = "description"  # Grafana's own dashboard field, so an import keeps it
# EFA counters the fabric dashboard shows (names of the efa driver's hw_counters files).
EFA_TRAFFIC = ("tx_bytes", "rx_bytes", "rdma_read_bytes", "rdma_write_bytes")
EFA_ERRORS = (
    "retrans_pkts",
    "retrans_timeout_events",
    "unresponsive_remote_events",
    "impaired_remote_conn_events",
    "rx_drops",
    "rdma_read_wr_err",
    "rdma_write_wr_err",
)
_WIDTH = 12
_HEIGHT = 8


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: str = "timeseries"


def efa_metric(counter: str) -> str:
    """The series name the EFA collector writes for a hw_counters file (a counter it does not read is a bug)."""
    if counter not in KERNEL_PORT_COUNTERS:
        raise ValueError(f"{counter} is not an EFA counter gpuforge collects (gpuforge.node.efa_metrics)")
    return f"{METRIC_PREFIX}{counter}{METRIC_SUFFIX}"


def _recorded(suffix: str, scope: str) -> str:
    """The recording rule `gpuforge_<scope>:<suffix>` as the rule data names it."""
    name = f"gpuforge_{scope}:{suffix}"
    if name not in {rule.record for rule in load_rules().recording}:
        raise ValueError(f"no recording rule {name} in gpuforge/data/monitoring_alerts.yaml")
    return name


def usage_panels() -> list[Panel]:
    panels = []
    for scope, label in (("job", "hpc_job"), ("node", "node")):
        held = _recorded("gpu_seconds_held:1m", scope)
        useful = _recorded("gpu_seconds_useful:1m", scope)
        ratio = _recorded("gpu_useful_ratio:1m", scope)
        panels += [
            Panel(
                f"GPUs held and GPUs' worth of useful work, per {scope}",
                f"Held: GPUs the {scope} holds; useful: the same weighted by SM activity ({held}, {useful} / 60).",
                (
                    Query(f"{held} / 60", f"held {{{{{label}}}}}"),
                    Query(f"{useful} / 60", f"useful {{{{{label}}}}}"),
                ),
            ),
            Panel(
                f"Useful fraction, per {scope}",
                f"Useful GPU-seconds over held GPU-seconds ({ratio}); low means a {scope} holds GPUs it leaves idle.",
                (Query(ratio, f"{{{{{label}}}}}"),),
                unit="percentunit",
            ),
            Panel(
                f"GPU-hours held and useful over the dashboard's range, per {scope}",
                f"sum_over_time of the minute recordings ({held}, {useful}) over $__range, in hours.",
                (
                    Query(f"sum_over_time({held}[$__range]) / 3600", f"held {{{{{label}}}}}"),
                    Query(f"sum_over_time({useful}[$__range]) / 3600", f"useful {{{{{label}}}}}"),
                ),
                kind="table",
            ),
        ]
    return panels


def fabric_panels() -> list[Panel]:
    traffic = [
        Panel(
            f"EFA {counter} per device",
            f"rate({efa_metric(counter)}) per node and device; hpc_job names the jobs holding the device's GPUs.",
            (Query(f"rate({efa_metric(counter)}[$__rate_interval])", "{{node}} {{device}} {{hpc_job}}"),),
            unit="Bps",
        )
        for counter in EFA_TRAFFIC
    ]
    errors = [
        Panel(
            f"EFA {counter} per device",
            f"increase({efa_metric(counter)}) per node and device over 5 minutes.",
            (Query(f"increase({efa_metric(counter)}[5m])", "{{node}} {{device}} {{hpc_job}}"),),
        )
        for counter in EFA_ERRORS
    ]
    return traffic + errors


def health_panels(alert_rules_text: str) -> list[Panel]:
    """One panel per alert of the rendered rule file, with its own expression (series while it fires)."""
    groups = yaml.safe_load(alert_rules_text)["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    firing = Panel(
        "Firing gpuforge alerts",
        "Prometheus's ALERTS series for the alerts in rules/" + ALERTS_FILE,
        (Query('ALERTS{alertname=~"Gpuforge.*", alertstate="firing"}', "{{alertname}} {{node}} {{gpu}}"),),
        kind="table",
    )
    return [firing] + [
        Panel(
            rule["alert"],
            f"{rule['annotations']['summary']} Action: {rule['annotations']['action']}",
            (Query(rule["expr"], "{{node}} {{gpu}} {{device}}"),),
        )
        for rule in rules
    ]


def _panel(panel: Panel, number: int) -> dict[str, Any]:
    return {
        "id": number,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {
            "h": _HEIGHT,
            "w": _WIDTH,
            "x": _WIDTH * ((number - 1) % 2),
            "y": _HEIGHT * ((number - 1) // 2),
        },
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {},
        "targets": [
            {
                "refId": chr(ord("A") + index),
                "datasource": DATASOURCE,
                "expr": query.expr,
                "legendFormat": query.legend,
                **({"instant": True, "format": "table"} if panel.kind == "table" else {"range": True}),
            }
            for index, query in enumerate(panel.queries)
        ],
    }


def dashboard(uid: str, title: str, panels: list[Panel], *, cluster: str) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": f"{title} ({cluster})",
        "tags": ["gpuforge", cluster],
        "schemaVersion": SCHEMA_VERSION,
        "editable": True,
        "graphTooltip": 1,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "1m",
        "templating": {
            "list": [
                {
                    "name": DATASOURCE_VARIABLE,
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                }
            ]
        },
        "annotations": {"list": []},
        "panels": [_panel(panel, number) for number, panel in enumerate(panels, start=1)],
    }


def header_prefix(name: str, cluster: str) -> str:
    """How a JSON file rendered for `cluster` begins (the render's check of its own files reads it):
    JSON has no comments, so its first key says what the other files' first line says."""
    return f'{{"{HEADER_KEY}": ' + json.dumps(f"{name} for cluster {cluster}, rendered by gpuforge")[:-1]


def json_text(name: str, document: dict[str, Any], *, cluster: str, source: str) -> str:
    """`document` as JSON whose first line is the `gpuforge` key naming the file, its cluster and `source`."""
    header = f"{name} for cluster {cluster}, rendered by gpuforge from {source}"
    body = json.dumps(document, indent=2)
    return f'{{"{HEADER_KEY}": {json.dumps(header)},\n' + body[2:] + "\n"


def _uid(kind: str, cluster: str) -> str:
    """A dashboard uid (Grafana allows 40 characters): the kind and a digest of the cluster name."""
    return f"gpuforge-{kind}-{hashlib.sha256(cluster.encode()).hexdigest()[:12]}"


def dashboard_files(*, cluster: str, alert_rules_text: str) -> dict[str, str]:
    """dashboards/*.json (relative path -> text) for `cluster`, the health one from its rendered alert rules."""
    documents = {
        "gpuforge-usage.json": dashboard(
            _uid("usage", cluster), "GPU busy versus useful", usage_panels(), cluster=cluster
        ),
        "gpuforge-fabric.json": dashboard(
            _uid("fabric", cluster), "EFA fabric", fabric_panels(), cluster=cluster
        ),
        "gpuforge-health.json": dashboard(
            _uid("health", cluster), "GPU health events", health_panels(alert_rules_text), cluster=cluster
        ),
    }
    source = "gpuforge/data/monitoring_alerts.yaml"
    return {
        f"{DASHBOARDS_DIR}/{name}": json_text(name, document, cluster=cluster, source=source)
        for name, document in documents.items()
    }
