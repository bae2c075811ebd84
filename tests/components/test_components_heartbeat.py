"""MonitoringResources with `heartbeat: {sns: <ARN>}`: the controller may publish to the heartbeat topic, and
a CloudWatch alarm, with missing data breaching, tells the alerts topic when the heartbeat stops.

The alarm's values are checked against botocore's model of PutMetricAlarm (its enums, and the
TreatMissingData values its documentation lists), the API the provider calls.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pulumi
import pytest
from components_helpers import ROLE_POLICY, enum_of, one, run, service_model

from gpuforge.components.monitoring_resources import MonitoringResources, MonitoringResourcesArgs
from gpuforge.errors import InputError
from gpuforge.monitoring.config import AlertsConfig, HeartbeatConfig, MonitoringConfig
from gpuforge.monitoring.heartbeat import SNS_METRIC_PERIOD_S, timing
from gpuforge.pulumi_mocks import GpuforgeMocks

ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"
TOPIC = "aws:sns/topic:Topic"
KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
HEARTBEAT_TOPIC = "arn:aws:sns:us-east-1:123456789012:gpuforge-heartbeat"
ALERTS_TOPIC = "arn:aws:sns:us-east-1:123456789012:oncall"
TAGS = {"gpuforge:cluster": "demo"}


def _monitoring(heartbeat: HeartbeatConfig | None, alerts: str = ALERTS_TOPIC) -> MonitoringConfig:
    return MonitoringConfig(
        enabled=True,
        retention_days=15,
        remote_write="none",
        alerts=AlertsConfig(sns=alerts),
        drain_on_alert=True,
        heartbeat=heartbeat,
    )


def _deploy(config: MonitoringConfig, kms_key_arn: str | None = None) -> dict[str, Any]:
    def build() -> pulumi.Output[dict[str, Any]]:
        made = MonitoringResources(
            "demo-monitoring", MonitoringResourcesArgs("demo", config, kms_key_arn, TAGS)
        )
        made.grant("demo-slurm-role")
        return pulumi.Output.all(topic_arn=made.topic_arn, policy=made.policy)

    resolved: dict[str, Any] = run(build)
    return resolved


@pytest.mark.parametrize("interval", [60, 300, 3600])
def test_the_heartbeat_topic_is_granted_and_watched_by_an_alarm_that_treats_silence_as_missing(
    mocks: GpuforgeMocks, interval: int
) -> None:
    _deploy(_monitoring(HeartbeatConfig(sns=HEARTBEAT_TOPIC, intervalSeconds=interval)))
    granted = {s["Sid"]: s for s in json.loads(one(mocks, ROLE_POLICY).inputs["policy"])["Statement"]}
    assert granted["AlertmanagerHeartbeat"] == {
        "Sid": "AlertmanagerHeartbeat",
        "Effect": "Allow",
        "Action": ["sns:Publish"],
        "Resource": HEARTBEAT_TOPIC,
    }
    assert granted["AlertmanagerPublish"]["Resource"] == ALERTS_TOPIC
    alarm = one(mocks, ALARM).inputs
    assert alarm["namespace"] == "AWS/SNS" and alarm["metricName"] == "NumberOfMessagesPublished"
    assert alarm["dimensions"] == {"TopicName": "gpuforge-heartbeat"}
    assert alarm["statistic"] == "Sum" and alarm["statistic"] in enum_of("cloudwatch", "Statistic")
    assert alarm["comparisonOperator"] == "LessThanThreshold"
    assert alarm["comparisonOperator"] in enum_of("cloudwatch", "ComparisonOperator")
    assert alarm["threshold"] == 1
    assert alarm["treatMissingData"] == "breaching"
    documented = service_model("cloudwatch").operation_model("PutMetricAlarm").input_shape.members
    assert (
        "<code>breaching | notBreaching | ignore | missing</code>"
        in documented["TreatMissingData"].documentation
    )
    # Five-minute periods (SNS's metrics arrive every five minutes), all of them without a publish,
    # spanning more than the longest silence a running controller can leave.
    assert alarm["period"] == SNS_METRIC_PERIOD_S
    periods = int(alarm["evaluationPeriods"])
    assert int(alarm["datapointsToAlarm"]) == periods
    rendered = timing(interval)
    assert periods * SNS_METRIC_PERIOD_S * 1000 > rendered.missing_after_ms
    assert (periods - 1) * SNS_METRIC_PERIOD_S * 1000 <= rendered.missing_after_ms  # and no longer
    assert periods * SNS_METRIC_PERIOD_S <= 86400  # CloudWatch evaluates at most a day
    assert alarm["alarmActions"] == [ALERTS_TOPIC] and alarm["okActions"] == [ALERTS_TOPIC]
    assert re.search(
        r"no heartbeat published to SNS topic gpuforge-heartbeat for \d+ minutes", alarm["alarmDescription"]
    )
    assert alarm["tags"] == TAGS


def test_the_alarm_notifies_a_made_alerts_topic_under_the_cluster_s_key(mocks: GpuforgeMocks) -> None:
    out = _deploy(_monitoring(HeartbeatConfig(sns=HEARTBEAT_TOPIC), alerts="create"), kms_key_arn=KEY)
    made = one(mocks, TOPIC)
    assert made.inputs["kmsMasterKeyId"] == KEY
    assert one(mocks, ALARM).inputs["alarmActions"] == [made.outputs["arn"]] == [out["topic_arn"]]


def test_a_made_alerts_topic_under_sns_s_managed_key_is_refused_before_anything_is_made(
    mocks: GpuforgeMocks,
) -> None:
    with pytest.raises(InputError) as caught:
        MonitoringResources(
            "demo-monitoring",
            MonitoringResourcesArgs(
                "demo", _monitoring(HeartbeatConfig(sns=HEARTBEAT_TOPIC), alerts="create"), None, TAGS
            ),
        )
    message = caught.value.message
    assert "gpuforge:monitoring.heartbeat.sns" in message and "alias/aws/sns" in message
    assert "CloudWatch cannot publish" in message and "Fix:" in message
    assert mocks.resources == ()


def test_a_url_heartbeat_makes_nothing_in_aws(mocks: GpuforgeMocks) -> None:
    _deploy(_monitoring(HeartbeatConfig(url="https://hc.example.com/ping/abc")))
    assert mocks.of_type(ALARM) == []
    granted = {s["Sid"] for s in json.loads(one(mocks, ROLE_POLICY).inputs["policy"])["Statement"]}
    assert granted == {"AlertmanagerPublish"}
