"""Alert and recording rules from gpuforge/data/monitoring_alerts.yaml.

The Xid alerts take their codes from the node agent's Xid catalog (gpuforge.node.xid), so
an alert and the agent's gate act alike on every code: one source. DCGM reports only the
last Xid's code (DCGM_FI_DEV_XID_ERRORS, "The value is the specific XID error"), so the
codes are matched by value; codes whose action is in the kernel-log message get their own
alert, which points at the agent that reads the message.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from gpuforge.node.xid import NVLINK5_WORKFLOW, RECOVERY_XID, XidCatalog, load_catalog

DATA_FILE = "data/monitoring_alerts.yaml"
ALERTS_FILE = "gpuforge-alerts.yml"
USAGE_FILE = "gpuforge-usage.yml"
HEARTBEAT_FILE = "gpuforge-heartbeat.yml"
XID_METRIC = "DCGM_FI_DEV_XID_ERRORS"
# A rule gpuforge records is a metric gpuforge exports: its name starts with this.
OWN_PREFIX = "gpuforge_"


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str
    severity: str
    drain: bool
    meaning: str
    action: str
    reason: str
    annotations: tuple[tuple[str, str], ...] = ()  # more annotations (Prometheus templates)


@dataclass(frozen=True)
class Recording:
    record: str
    expr: str


@dataclass(frozen=True)
class Heartbeat:
    """The always-firing alert of the dead-man's switch (gpuforge.monitoring.heartbeat)."""

    name: str
    expr: str
    severity: str
    meaning: str
    action: str


@dataclass(frozen=True)
class Inhibit:
    """While `source` fires, `targets` with the same `equal` labels are not sent (Alertmanager inhibit_rules)."""

    source: str
    equal: tuple[str, ...]
    reason: str
    targets: tuple[str, ...]  # every drain: false alert of the pack but the source, in the pack's order


@dataclass(frozen=True)
class RuleData:
    alerts: tuple[Alert, ...]
    recording_interval: str
    recording: tuple[Recording, ...]
    heartbeat: Heartbeat
    inhibit: tuple[Inhibit, ...]


@cache
def load_rules() -> RuleData:
    """The shipped rule data (a broken shipped file is a bug: ValueError)."""
    data = yaml.safe_load(resources.files("gpuforge").joinpath(DATA_FILE).read_text(encoding="utf-8"))
    alerts = tuple(
        Alert(
            name=row["name"],
            expr=row["expr"],
            for_=row["for"],
            severity=row["severity"],
            drain=bool(row["drain"]),
            meaning=row["meaning"],
            action=row["action"],
            reason=row["reason"],
            annotations=tuple(sorted(row.get("annotations", {}).items())),
        )
        for row in data["alerts"]
    )
    recording = tuple(Recording(record=row["record"], expr=row["expr"]) for row in data["recording"]["rules"])
    for rule in recording:
        if not rule.record.startswith(OWN_PREFIX):
            raise ValueError(f"{DATA_FILE}: recorded metric {rule.record} does not start with {OWN_PREFIX}")
    names = [alert.name for alert in alerts]
    inhibit = tuple(
        Inhibit(
            source=row["source"],
            equal=tuple(row["equal"]),
            reason=row["reason"],
            targets=tuple(alert.name for alert in alerts if not alert.drain and alert.name != row["source"]),
        )
        for row in data["inhibit"]
    )
    for inhibit_rule in inhibit:
        if inhibit_rule.source not in names:
            raise ValueError(f"{DATA_FILE}: inhibit source {inhibit_rule.source} is not an alert of the pack")
    return RuleData(
        alerts=alerts,
        recording_interval=data["recording"]["interval"],
        recording=recording,
        heartbeat=Heartbeat(**data["heartbeat"]),
        inhibit=inhibit,
    )


def _ranges(codes: Iterable[int]) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for code in sorted(set(codes)):
        if spans and code == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], code)
        else:
            spans.append((code, code))
    return spans


def value_in(metric: str, codes: Iterable[int]) -> str:
    """PromQL keeping the series of `metric` whose value is one of `codes` (runs become ranges)."""
    parts = [
        f"{metric} == {low}" if low == high else f"{metric} >= {low} <= {high}"
        for low, high in _ranges(codes)
    ]
    if not parts:
        raise ValueError(f"no codes for {metric}")
    return " or ".join(f"({part})" for part in parts)


@dataclass(frozen=True)
class XidClasses:
    """The catalog's codes by what an alert does with them."""

    node_bad: tuple[int, ...]
    application: tuple[int, ...]
    from_log: tuple[int, ...]
    ignored: tuple[int, ...]


def xid_classes(catalog: XidCatalog) -> XidClasses:
    from_log, node_bad, application, ignored = [], [], [], []
    for code, entry in sorted(catalog.entries.items()):
        if (
            code == RECOVERY_XID
            or entry.immediate_action == NVLINK5_WORKFLOW
            or entry.solo_action is not None
        ):
            from_log.append(code)
        elif catalog.fails(entry.gate_action):
            node_bad.append(code)
        elif entry.gate_action == "restart_app":
            application.append(code)
        else:
            ignored.append(code)
    return XidClasses(tuple(node_bad), tuple(application), tuple(from_log), tuple(ignored))


def _placeholders(gpu_count: int, dcgm_job: str, node_job: str) -> dict[str, str]:
    classes = xid_classes(load_catalog())
    return {
        "xid_node_bad": value_in(XID_METRIC, classes.node_bad),
        "xid_application": value_in(XID_METRIC, classes.application),
        "xid_from_log": value_in(XID_METRIC, classes.from_log),
        "xid_classified": value_in(
            XID_METRIC, classes.node_bad + classes.application + classes.from_log + classes.ignored
        ),
        "gpu_count": str(gpu_count),
        "dcgm_job": dcgm_job,
        "node_job": node_job,
    }


def _dump(document: dict[str, Any], header: str) -> str:
    return f"# {header}\n" + yaml.safe_dump(document, sort_keys=False, width=1000)


def alert_rules(*, cluster: str, gpu_count: int, dcgm_job: str, node_job: str) -> str:
    """rules/gpuforge-alerts.yml for a cluster whose nodes have `gpu_count` GPUs."""
    values = _placeholders(gpu_count, dcgm_job, node_job)
    rules = [
        {
            "alert": alert.name,
            "expr": alert.expr.format(**values),
            "for": alert.for_,
            "labels": {"severity": alert.severity, "drain": "true" if alert.drain else "false"},
            "annotations": {"summary": alert.meaning, "action": alert.action, **dict(alert.annotations)},
        }
        for alert in load_rules().alerts
    ]
    return _dump(
        {"groups": [{"name": "gpuforge-alerts", "rules": rules}]},
        f"{ALERTS_FILE} for cluster {cluster}, rendered by gpuforge from {DATA_FILE} and data/xid_catalog.json",
    )


def heartbeat_rules(*, cluster: str, interval: str) -> str:
    """rules/gpuforge-heartbeat.yml: the always-firing heartbeat, its group evaluated every `interval`."""
    heartbeat = load_rules().heartbeat
    rule = {
        "alert": heartbeat.name,
        "expr": heartbeat.expr,
        "labels": {"severity": heartbeat.severity, "drain": "false"},
        "annotations": {"summary": heartbeat.meaning, "action": heartbeat.action},
    }
    return _dump(
        {"groups": [{"name": "gpuforge-heartbeat", "interval": interval, "rules": [rule]}]},
        f"{HEARTBEAT_FILE} for cluster {cluster}, rendered by gpuforge from {DATA_FILE}",
    )


def recording_rules(*, cluster: str) -> str:
    """rules/gpuforge-usage.yml: GPU-seconds held and useful, per job (hpc_job) and per node."""
    data = load_rules()
    rules = [{"record": rule.record, "expr": rule.expr} for rule in data.recording]
    return _dump(
        {"groups": [{"name": "gpuforge-usage", "interval": data.recording_interval, "rules": rules}]},
        f"{USAGE_FILE} for cluster {cluster}, rendered by gpuforge from {DATA_FILE}",
    )
