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


class MonitoringResources(pulumi.ComponentResource):
    workspace_arn: pulumi.Output[str] | None
    """The workspace Prometheus writes to (made or given); None: no remote write."""
    remote_write_url: pulumi.Output[str] | None
    topic_arn: pulumi.Output[str] | None
    """The topic Alertmanager publishes to (made or given); None: no SNS receiver."""
    policy: pulumi.Output[str] | None
    """The controller's policy document (JSON); None: the controller needs nothing here."""

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
            }
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
