"""MonitoringResources: the AWS side of `gpuforge:monitoring` - the AMP workspace and the SNS topic.

- `remoteWrite: amp` makes an Amazon Managed Service for Prometheus workspace (alias: the
  cluster's name; the cluster's KMS key when it has one, else AMP's AWS-owned key).
  `remoteWrite: {workspaceArn}` makes nothing: the controller writes to that workspace.
  Either way the remote-write URL is derived from the workspace's ARN (region and id), the
  form the AMP user guide gives:
  https://aps-workspaces.<region>.amazonaws.com/workspaces/<id>/api/v1/remote_write
  (https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-onboard-ingest-metrics-remote-write.html),
  so a created and an existing workspace take one path.
- `alerts.sns: create` makes an SNS topic, encrypted with the cluster's KMS key or SNS's
  AWS-managed key `alias/aws/sns` (https://docs.aws.amazon.com/sns/latest/dg/sns-server-side-encryption.html).
  `alerts.sns: <ARN>` makes no topic. Each `alerts.email` address is subscribed (protocol
  email) to the topic Alertmanager sends to, made or given: SNS mails each address a link to
  confirm, and nothing reaches it before a person follows it
  (https://docs.aws.amazon.com/sns/latest/dg/sns-email-notifications.html).
- `grant(role)` gives the Slurm controller's role the least it needs: `aps:RemoteWrite` on the
  one workspace, `sns:Publish` on the one topic, and, for a topic this component encrypted with
  the cluster's key, `kms:GenerateDataKey*` and `kms:Decrypt` on that key (publishers to a
  topic under a customer managed key need both:
  https://docs.aws.amazon.com/sns/latest/dg/sns-key-management.html). It is a method, not an
  argument, because the controller's files need this component's URL and ARN before the
  controller (and its role) exist.
- `heartbeat: {sns: <ARN>}` (gpuforge.monitoring.heartbeat): the controller may publish to that
  topic, and a CloudWatch alarm watches it: fewer than one message published (AWS/SNS
  NumberOfMessagesPublished, Sum) in each of enough five-minute periods to outlast the longest
  normal gap between heartbeats, with missing data breaching (a topic nobody publishes to reports
  no data at all), notifies the alerts topic, and notifies it again when the heartbeat is back.
  CloudWatch can publish to an encrypted topic only under a customer managed key whose policy lets
  `cloudwatch.amazonaws.com` use it; SNS's AWS-managed key cannot be given that
  (https://docs.aws.amazon.com/sns/latest/dg/sns-key-management.html, "Enable compatibility between
  event sources from AWS services and encrypted topics"), so an alerts topic made here under that key
  is refused for the alarm.

With monitoring disabled, or with neither remote write nor alerts, nothing is made.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pulumi
import pulumi_aws as aws

from gpuforge.components import cluster_rules
from gpuforge.components.input_errors import invalid

if TYPE_CHECKING:
    from gpuforge.monitoring.config import MonitoringConfig

TOKEN = "gpuforge:monitoring:MonitoringResources"
POLICY_VERSION = "2012-10-17"
# SNS's AWS-managed key; any principal of the account allowed to use SNS may use it.
SNS_MANAGED_KEY = "alias/aws/sns"
REMOTE_WRITE_ACTIONS = ["aps:RemoteWrite"]
PUBLISH_ACTIONS = ["sns:Publish"]
# The heartbeat alarm (https://docs.aws.amazon.com/sns/latest/dg/sns-monitoring-using-cloudwatch.html:
# namespace AWS/SNS, dimension TopicName; NumberOfMessagesPublished counts what was published, which
# needs no subscriber, where NumberOfNotificationsDelivered would need one).
SNS_NAMESPACE = "AWS/SNS"
HEARTBEAT_METRIC = "NumberOfMessagesPublished"
TOPIC_KEY_ACTIONS = ["kms:GenerateDataKey*", "kms:Decrypt"]
_KMS_KEY_ARN = re.compile(r"arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/.+", re.ASCII)


@dataclass(frozen=True)
class MonitoringResourcesArgs:
    cluster_name: str
    monitoring: MonitoringConfig
    """The stack's validated `gpuforge:monitoring` (gpuforge.monitoring.config.parse_monitoring)."""
    kms_key_arn: str | None = None
    """The cluster's KMS key (a key ARN): encrypts the workspace and the topic this component makes."""
    tags: Mapping[str, str] = field(default_factory=dict)


def _statement(sid: str, actions: list[str], resource: pulumi.Input[str]) -> dict[str, Any]:
    return {"Sid": sid, "Effect": "Allow", "Action": actions, "Resource": resource}


def _check_heartbeat_alarm(monitoring: MonitoringConfig, kms_key_arn: str | None) -> None:
    """Refuse an SNS heartbeat whose alarm could not notify: CloudWatch cannot publish to a topic under
    SNS's AWS-managed key, which the alerts topic made here gets when the cluster has no key."""
    heartbeat, alerts = monitoring.heartbeat, monitoring.alerts
    if not monitoring.enabled or heartbeat is None or heartbeat.sns is None or alerts is None:
        return
    if alerts.sns == "create" and kms_key_arn is None:
        raise invalid(
            "gpuforge:monitoring.heartbeat.sns",
            heartbeat.sns,
            "the alarm that notices a missing heartbeat notifies the alerts topic, which is made "
            f"under SNS's AWS-managed key ({SNS_MANAGED_KEY}) when the cluster has no KMS key, and "
            "CloudWatch cannot publish to a topic under that key",
            "give the cluster's bucket a customer managed key whose policy lets cloudwatch.amazonaws.com "
            "use it (kms:GenerateDataKey*, kms:Decrypt), name an alerts topic CloudWatch can publish to "
            "(alerts.sns: <ARN>), or use heartbeat.url",
        )


class MonitoringResources(pulumi.ComponentResource):
    workspace_arn: pulumi.Output[str] | None
    """The workspace Prometheus writes to (made or given); None: no remote write."""
    remote_write_url: pulumi.Output[str] | None
    topic_arn: pulumi.Output[str] | None
    """The topic Alertmanager publishes to (made or given); None: no SNS receiver."""
    policy: pulumi.Output[str] | None
    """The controller's policy document (JSON); None: the controller needs nothing here."""
    heartbeat_alarm: aws.cloudwatch.MetricAlarm | None
    """The alarm on the heartbeat topic (`heartbeat.sns`); None: no SNS heartbeat."""

    def __init__(
        self, name: str, args: MonitoringResourcesArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        from gpuforge.monitoring.config import WorkspaceRef
        from gpuforge.monitoring.prometheus import remote_write_url

        if args.kms_key_arn is not None and not _KMS_KEY_ARN.fullmatch(args.kms_key_arn):
            raise invalid(
                "kms_key_arn",
                args.kms_key_arn,
                "not a KMS key ARN (AMP takes a key ARN, not an alias)",
                "give the key's ARN, arn:aws:kms:<region>:<account>:key/<id>",
            )
        cluster_rules.check_tags(args.tags)
        _check_heartbeat_alarm(args.monitoring, args.kms_key_arn)
        super().__init__(TOKEN, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        monitoring = args.monitoring
        tags = dict(args.tags)
        self._name = name
        self.workspace_arn = None
        self.remote_write_url = None
        self.topic_arn = None
        statements: list[dict[str, Any]] = []

        remote_write = monitoring.remote_write if monitoring.enabled else "none"
        if remote_write == "amp":
            workspace = aws.amp.Workspace(
                f"{name}-workspace",
                alias=args.cluster_name,
                kms_key_arn=args.kms_key_arn,
                tags=tags,
                opts=child,
            )
            self.workspace_arn = workspace.arn
        elif isinstance(remote_write, WorkspaceRef):
            self.workspace_arn = pulumi.Output.from_input(remote_write.workspace_arn)
        if self.workspace_arn is not None:
            self.remote_write_url = self.workspace_arn.apply(
                lambda arn: remote_write_url(WorkspaceRef(workspaceArn=arn))[0]
            )
            statements.append(_statement("PrometheusRemoteWrite", REMOTE_WRITE_ACTIONS, self.workspace_arn))

        alerts = monitoring.alerts if monitoring.enabled else None
        if alerts is not None:
            if alerts.sns == "create":
                topic = aws.sns.Topic(
                    f"{name}-alerts",
                    kms_master_key_id=args.kms_key_arn or SNS_MANAGED_KEY,
                    tags=tags,
                    opts=child,
                )
                self.topic_arn = topic.arn
            else:
                self.topic_arn = pulumi.Output.from_input(alerts.sns)
            for index, address in enumerate(alerts.email):
                aws.sns.TopicSubscription(
                    f"{name}-email-{index}",
                    topic=self.topic_arn,
                    protocol="email",
                    endpoint=address,
                    opts=child,
                )
            statements.append(_statement("AlertmanagerPublish", PUBLISH_ACTIONS, self.topic_arn))
            if alerts.sns == "create" and args.kms_key_arn is not None:
                statements.append(_statement("AlertsTopicKey", TOPIC_KEY_ACTIONS, args.kms_key_arn))

        self.heartbeat_alarm = None
        heartbeat = monitoring.heartbeat if monitoring.enabled else None
        if heartbeat is not None and heartbeat.sns is not None:
            assert self.topic_arn is not None  # parse_monitoring: a heartbeat topic comes with alerts
            statements.append(_statement("AlertmanagerHeartbeat", PUBLISH_ACTIONS, heartbeat.sns))
            self.heartbeat_alarm = self._heartbeat_alarm(
                name, heartbeat.sns, heartbeat.interval_seconds, self.topic_arn, tags, child
            )

        self.policy = (
            pulumi.Output.json_dumps({"Version": POLICY_VERSION, "Statement": statements})
            if statements
            else None
        )
        self.register_outputs(
            {
                "workspace_arn": self.workspace_arn,
                "remote_write_url": self.remote_write_url,
                "topic_arn": self.topic_arn,
                "policy": self.policy,
                "heartbeat_alarm": self.heartbeat_alarm.arn if self.heartbeat_alarm is not None else None,
            }
        )

    @staticmethod
    def _heartbeat_alarm(
        name: str,
        topic_arn: str,
        interval_s: int,
        notify: pulumi.Output[str],
        tags: dict[str, str],
        opts: pulumi.ResourceOptions,
    ) -> aws.cloudwatch.MetricAlarm:
        """ALARM when no heartbeat was published for `alarm_periods` five-minute periods in a row."""
        from gpuforge.monitoring.heartbeat import SNS_METRIC_PERIOD_S, timing

        periods = timing(interval_s).alarm_periods
        topic_name = topic_arn.rsplit(":", 1)[1]
        return aws.cloudwatch.MetricAlarm(
            f"{name}-heartbeat-missing",
            alarm_description=(
                f"gpuforge: no heartbeat published to SNS topic {topic_name} for {periods * SNS_METRIC_PERIOD_S // 60} "
                "minutes: the Slurm controller's Prometheus or Alertmanager, or the controller, is down"
            ),
            namespace=SNS_NAMESPACE,
            metric_name=HEARTBEAT_METRIC,
            dimensions={"TopicName": topic_name},
            statistic="Sum",
            period=SNS_METRIC_PERIOD_S,
            evaluation_periods=periods,
            datapoints_to_alarm=periods,
            threshold=1,
            comparison_operator="LessThanThreshold",
            treat_missing_data="breaching",
            alarm_actions=[notify],
            ok_actions=[notify],
            tags=tags,
            opts=opts,
        )

    def grant(self, role: pulumi.Input[str]) -> aws.iam.RolePolicy | None:
        """The controller's role (its name) may write to the workspace and publish to the topic; None: nothing to grant."""
        if self.policy is None:
            return None
        return aws.iam.RolePolicy(
            f"{self._name}-controller",
            role=role,
            policy=self.policy,
            opts=pulumi.ResourceOptions(parent=self),
        )
