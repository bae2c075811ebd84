"""alertmanager.yml: SNS for people, gpuforge's drain receiver for nodes that are bad.

Alerts labelled `drain="true"` (gpuforge.monitoring.rules) go, with drainOnAlert, to the drain
receiver on the controller's loopback, which drains the node named by the alert's `node` label
in Slurm (reason "gpuforge: alert <name>"), and on to SNS. The receiver listens on 127.0.0.1 only,
so nothing off the controller can drain a node; its port is gpuforge's choice.

With `heartbeat`, the always-firing GpuforgeHeartbeat goes, on a route of its own and first, to the
receiver off the controller, every interval (gpuforge.monitoring.heartbeat derives the route's
intervals), and to no one else. The inhibit rules come from the alert pack's data
(gpuforge/data/monitoring_alerts.yaml, `inhibit`; gpuforge.monitoring.rules derives the targets).
"""

from __future__ import annotations

from typing import Any

import yaml

from gpuforge.errors import InputError
from gpuforge.monitoring.config import DOC, KEY, HeartbeatConfig, MonitoringConfig
from gpuforge.monitoring.heartbeat import duration, timing
from gpuforge.monitoring.rules import load_rules

DRAIN_RECEIVER = "gpuforge-drain"
NOTIFY_RECEIVER = "gpuforge-notify"
NO_RECEIVER = "gpuforge-none"
HEARTBEAT_RECEIVER = "gpuforge-heartbeat"
DRAIN_URL = "http://127.0.0.1:9098/alerts"


def alertmanager_config(
    *, cluster: str, region: str, monitoring: MonitoringConfig, source: str, topic_arn: str | None = None
) -> str:
    """alertmanager.yml; `source` names the stack file for errors.

    `topic_arn` is the topic MonitoringResources made for `alerts.sns: create`
    (components/monitoring_resources.py): its ARN exists only once `pulumi up` made it.
    """
    topic = _topic(monitoring, topic_arn, region, source)
    receivers: list[dict[str, Any]] = []
    routes: list[dict[str, Any]] = []
    if monitoring.heartbeat is not None:
        receiver, route = _heartbeat(monitoring.heartbeat, cluster)
        receivers.append(receiver)
        routes.append(route)
    if monitoring.drain_on_alert:
        receivers.append(
            {"name": DRAIN_RECEIVER, "webhook_configs": [{"url": DRAIN_URL, "send_resolved": False}]}
        )
        routes.append({"receiver": DRAIN_RECEIVER, "matchers": ['drain="true"'], "continue": True})
    if topic is not None:
        topic_region = topic.split(":")[3]
        receivers.append(
            {
                "name": NOTIFY_RECEIVER,
                "sns_configs": [
                    {
                        "topic_arn": topic,
                        "sigv4": {"region": topic_region},
                        "subject": f"gpuforge {cluster}: {{{{ .CommonLabels.alertname }}}}",
                    }
                ],
            }
        )
        if routes:  # a drain alert matched the drain route: this route sends it (and the rest) to SNS too
            routes.append({"receiver": NOTIFY_RECEIVER})
    else:
        receivers.append({"name": NO_RECEIVER})
    default = NOTIFY_RECEIVER if topic is not None else NO_RECEIVER
    document = {
        "route": {
            "receiver": default,
            "group_by": ["alertname", "node"],
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "4h",
            "routes": routes,
        },
        "inhibit_rules": _inhibit_rules(),
        "receivers": receivers,
    }
    header = f"# alertmanager.yml for cluster {cluster}, rendered by gpuforge for Alertmanager 0.33\n"
    return header + yaml.safe_dump(document, sort_keys=False, width=1000)


def _topic(monitoring: MonitoringConfig, topic_arn: str | None, region: str, source: str) -> str | None:
    """The topic Alertmanager publishes to: the stack's own, or the one made for `create`; None: no SNS."""
    if monitoring.alerts is None or monitoring.sns_topic_arn is not None:
        if topic_arn is not None:
            raise InputError(
                f"{source}: {KEY}.alerts.sns is not 'create', and a made topic {topic_arn} was given. "
                "Fix: set `alerts: {sns: create}` to send to it."
            )
        return monitoring.sns_topic_arn
    if topic_arn is None:
        raise InputError(
            f"{source}: {KEY}.alerts.sns = 'create': the topic is made by MonitoringResources "
            "(components/monitoring_resources.py) at `pulumi up`, and its ARN was not given, so there is no "
            f"ARN to send to. Fix: render with the made topic's ARN, or give an existing topic's ARN "
            f"(arn:aws:sns:{region}:<account>:<topic>) ({DOC})."
        )
    return topic_arn


def _heartbeat(heartbeat: HeartbeatConfig, cluster: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The heartbeat's receiver and its route: nothing else reaches that receiver, and it reaches nothing else.

    Resolved notifications are not sent: the receiver counts arrivals, and a dying Prometheus's
    heartbeat resolving is not one.
    """
    if heartbeat.url is not None:
        receiver: dict[str, Any] = {
            "name": HEARTBEAT_RECEIVER,
            "webhook_configs": [{"url": heartbeat.url, "send_resolved": False}],
        }
    else:
        assert heartbeat.sns is not None  # config.parse_monitoring: exactly one of url and sns
        receiver = {
            "name": HEARTBEAT_RECEIVER,
            "sns_configs": [
                {
                    "topic_arn": heartbeat.sns,
                    "sigv4": {"region": heartbeat.sns.split(":")[3]},
                    "subject": f"gpuforge {cluster}: heartbeat",
                    "send_resolved": False,
                }
            ],
        }
    rendered = timing(heartbeat.interval_seconds)
    route = {
        "receiver": HEARTBEAT_RECEIVER,
        "matchers": [f'alertname="{load_rules().heartbeat.name}"'],
        "group_by": ["alertname"],
        "group_wait": "0s",
        "group_interval": duration(rendered.group_interval_ms),
        "repeat_interval": duration(rendered.repeat_interval_ms),
        "continue": False,
    }
    return receiver, route


def _inhibit_rules() -> list[dict[str, Any]]:
    """Alertmanager's inhibit_rules from the pack's `inhibit` rows (targets derived from the pack)."""
    return [
        {
            "source_matchers": [f'alertname="{rule.source}"'],
            "target_matchers": [f'alertname=~"{"|".join(rule.targets)}"'],
            "equal": list(rule.equal),
        }
        for rule in load_rules().inhibit
        if rule.targets
    ]
