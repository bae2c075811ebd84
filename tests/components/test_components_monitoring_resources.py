"""MonitoringResources: the AMP workspace, the SNS topic and its subscriptions, and the controller's grant."""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pytest
from components_helpers import ROLE_POLICY, one, run

from gpuforge.components.monitoring_resources import MonitoringResources, MonitoringResourcesArgs
from gpuforge.errors import InputError
from gpuforge.monitoring.config import AlertsConfig, MonitoringConfig, WorkspaceRef
from gpuforge.pulumi_mocks import GpuforgeMocks

WORKSPACE = "aws:amp/workspace:Workspace"
TOPIC = "aws:sns/topic:Topic"
SUBSCRIPTION = "aws:sns/topicSubscription:TopicSubscription"
KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
TAGS = {"gpuforge:cluster": "demo", "team": "ml"}
EXISTING_WORKSPACE = "arn:aws:aps:us-west-2:123456789012:workspace/ws-0123abcd-4567-89ef-0123-456789abcdef"
EXISTING_TOPIC = "arn:aws:sns:us-east-1:123456789012:oncall"
ROLE = "demo-slurm-role"


def monitoring(
    *, enabled: bool = True, remote_write: str | WorkspaceRef = "none", alerts: AlertsConfig | None = None
) -> MonitoringConfig:
    return MonitoringConfig(
        enabled=enabled, retention_days=15, remote_write=remote_write, alerts=alerts, drain_on_alert=True
    )


def deploy(config: MonitoringConfig, kms_key_arn: str | None = None) -> dict[str, Any]:
    """Build the component, grant ROLE, and return its outputs resolved (None where there is none)."""

    def build() -> pulumi.Output[dict[str, Any]]:
        made = MonitoringResources(
            "demo-monitoring", MonitoringResourcesArgs("demo", config, kms_key_arn, TAGS)
        )
        made.grant(ROLE)
        return pulumi.Output.all(
            workspace_arn=made.workspace_arn,
            url=made.remote_write_url,
            topic_arn=made.topic_arn,
            policy=made.policy,
        )

    resolved: dict[str, Any] = run(build)
    return resolved


def statements(policy: str) -> dict[str, dict[str, Any]]:
    document = json.loads(policy)
    assert document["Version"] == "2012-10-17"
    return {statement["Sid"]: statement for statement in document["Statement"]}


def test_amp_and_a_topic_are_made_encrypted_tagged_and_granted_exactly(mocks: GpuforgeMocks) -> None:
    alerts = AlertsConfig(sns="create", email=["oncall@example.com", "gpu-team@example.org"])
    out = deploy(monitoring(remote_write="amp", alerts=alerts), kms_key_arn=KEY)

    workspace = one(mocks, WORKSPACE)
    assert workspace.inputs["alias"] == "demo"
    assert workspace.inputs["kmsKeyArn"] == KEY
    assert workspace.inputs["tags"] == TAGS
    assert out["workspace_arn"] == workspace.outputs["arn"]
    assert out["url"] == (
        f"https://aps-workspaces.us-east-1.amazonaws.com/workspaces/{workspace.id}/api/v1/remote_write"
    )

    topic = one(mocks, TOPIC)
    assert topic.inputs["kmsMasterKeyId"] == KEY
    assert topic.inputs["tags"] == TAGS
    assert out["topic_arn"] == topic.outputs["arn"]
    subscriptions = {s.inputs["endpoint"]: s.inputs for s in mocks.of_type(SUBSCRIPTION)}
    assert set(subscriptions) == {"oncall@example.com", "gpu-team@example.org"}
    assert all(
        s["protocol"] == "email" and s["topic"] == topic.outputs["arn"] for s in subscriptions.values()
    )

    granted = statements(one(mocks, ROLE_POLICY).inputs["policy"])
    assert one(mocks, ROLE_POLICY).inputs["role"] == ROLE
    assert granted == {
        "PrometheusRemoteWrite": {
            "Sid": "PrometheusRemoteWrite",
            "Effect": "Allow",
            "Action": ["aps:RemoteWrite"],
            "Resource": workspace.outputs["arn"],
        },
        "AlertmanagerPublish": {
            "Sid": "AlertmanagerPublish",
            "Effect": "Allow",
            "Action": ["sns:Publish"],
            "Resource": topic.outputs["arn"],
        },
        "AlertsTopicKey": {
            "Sid": "AlertsTopicKey",
            "Effect": "Allow",
            "Action": ["kms:GenerateDataKey*", "kms:Decrypt"],
            "Resource": KEY,
        },
    }
    assert out["policy"] == one(mocks, ROLE_POLICY).inputs["policy"]


def test_without_a_cluster_key_amp_uses_its_own_and_sns_its_managed_key(mocks: GpuforgeMocks) -> None:
    deploy(monitoring(remote_write="amp", alerts=AlertsConfig(sns="create")))
    assert "kmsKeyArn" not in one(mocks, WORKSPACE).inputs
    assert one(mocks, TOPIC).inputs["kmsMasterKeyId"] == "alias/aws/sns"
    assert mocks.of_type(SUBSCRIPTION) == []
    granted = statements(one(mocks, ROLE_POLICY).inputs["policy"])
    assert set(granted) == {"PrometheusRemoteWrite", "AlertmanagerPublish"}


def test_existing_workspace_and_topic_make_nothing_but_the_grant(mocks: GpuforgeMocks) -> None:
    out = deploy(
        monitoring(
            remote_write=WorkspaceRef(workspaceArn=EXISTING_WORKSPACE),
            alerts=AlertsConfig(sns=EXISTING_TOPIC),
        ),
        kms_key_arn=KEY,
    )
    assert mocks.of_type(WORKSPACE) == [] and mocks.of_type(TOPIC) == [] and mocks.of_type(SUBSCRIPTION) == []
    assert out["workspace_arn"] == EXISTING_WORKSPACE
    assert out["url"] == (
        "https://aps-workspaces.us-west-2.amazonaws.com/workspaces/"
        "ws-0123abcd-4567-89ef-0123-456789abcdef/api/v1/remote_write"
    )
    assert out["topic_arn"] == EXISTING_TOPIC
    granted = statements(one(mocks, ROLE_POLICY).inputs["policy"])
    assert {sid: s["Resource"] for sid, s in granted.items()} == {
        "PrometheusRemoteWrite": EXISTING_WORKSPACE,
        "AlertmanagerPublish": EXISTING_TOPIC,
    }, "a topic the component did not encrypt gets no grant on the cluster's key"


def test_emails_are_subscribed_to_an_existing_topic_too(mocks: GpuforgeMocks) -> None:
    deploy(monitoring(alerts=AlertsConfig(sns=EXISTING_TOPIC, email=["oncall@example.com"])))
    (subscription,) = mocks.of_type(SUBSCRIPTION)
    assert subscription.inputs["topic"] == EXISTING_TOPIC
    assert subscription.inputs["endpoint"] == "oncall@example.com"


@pytest.mark.parametrize(
    "config",
    [
        monitoring(
            enabled=False, remote_write="amp", alerts=AlertsConfig(sns="create", email=["a@example.com"])
        ),
        monitoring(),
    ],
    ids=["disabled", "nothing-asked"],
)
def test_nothing_is_made_or_granted_when_nothing_is_asked(
    mocks: GpuforgeMocks, config: MonitoringConfig
) -> None:
    out = deploy(config, kms_key_arn=KEY)
    assert [r.type for r in mocks.resources if r.custom] == []
    assert out == {"workspace_arn": None, "url": None, "topic_arn": None, "policy": None}


def test_a_key_alias_is_refused_before_anything_is_made(mocks: GpuforgeMocks) -> None:
    with pytest.raises(InputError, match=r"kms_key_arn = 'alias/mine': not a KMS key ARN.*Fix:"):
        MonitoringResources(
            "demo-monitoring",
            MonitoringResourcesArgs("demo", monitoring(remote_write="amp"), "alias/mine", TAGS),
        )
    assert mocks.resources == ()
