"""`gpuforge:monitoring`: defaults, and bad input refused with the key and the fix (exit 2)."""

from __future__ import annotations

from typing import Any

import pytest
from monitoring_support import StackMaker

from gpuforge.errors import InputError
from gpuforge.monitoring.config import WorkspaceRef, load_stack


def test_defaults_follow_the_scheduler(make_stack: StackMaker) -> None:
    _, monitoring = load_stack(make_stack(), "test")
    assert monitoring.enabled is True
    assert monitoring.retention_days == 15
    assert monitoring.remote_write == "none"
    assert monitoring.alerts is None
    assert monitoring.drain_on_alert is True
    _, without = load_stack(make_stack(**{"gpuforge:scheduler": None}), "test")
    assert without.enabled is False


def test_a_full_block_is_read(make_stack: StackMaker) -> None:
    topic = "arn:aws:sns:us-east-1:123456789012:gpuforge-alerts"
    workspace = "arn:aws:aps:us-east-1:123456789012:workspace/ws-0123abcd-4567-89ef-0123-456789abcdef"
    block = {
        "enabled": True,
        "retentionDays": 30,
        "remoteWrite": {"workspaceArn": workspace},
        "alerts": {"sns": topic, "email": ["oncall@example.com"]},
        "drainOnAlert": False,
    }
    config, monitoring = load_stack(make_stack(**{"gpuforge:monitoring": block}), "test")
    assert config.instance_type == "p5.48xlarge"  # the rest of the stack is read as before
    assert monitoring.retention_days == 30
    assert monitoring.remote_write == WorkspaceRef(workspaceArn=workspace)
    assert monitoring.sns_topic_arn == topic
    assert monitoring.alerts is not None and monitoring.alerts.email == ["oncall@example.com"]
    assert monitoring.drain_on_alert is False


def test_amp_and_a_made_topic_are_read_for_monitoring_resources_to_make(make_stack: StackMaker) -> None:
    block = {"remoteWrite": "amp", "alerts": {"sns": "create", "email": ["oncall@example.com"]}}
    _, monitoring = load_stack(make_stack(**{"gpuforge:monitoring": block}), "test")
    assert monitoring.remote_write == "amp"
    assert monitoring.alerts is not None and monitoring.alerts.sns == "create"
    assert monitoring.sns_topic_arn is None, "the topic's ARN comes from MonitoringResources, not the stack"
    assert monitoring.alerts.email == ["oncall@example.com"]


@pytest.mark.parametrize(
    ("block", "named"),
    [
        ({"retentionDays": 0}, "gpuforge:monitoring.retentionDays = 0"),
        ({"retentionDays": "15d"}, "gpuforge:monitoring.retentionDays = '15d'"),
        ({"retentionDays": 15000}, "gpuforge:monitoring.retentionDays = 15000"),
        ({"enabled": "yes"}, "gpuforge:monitoring.enabled = 'yes'"),
        ({"remoteWrite": "prometheus"}, "gpuforge:monitoring.remoteWrite"),
        (
            {"remoteWrite": {"workspaceArn": "ws-123"}},
            "gpuforge:monitoring.remoteWrite.workspaceArn = 'ws-123'",
        ),
        (
            {"remoteWrite": {"workspaceArn": "arn:aws-cn:aps:cn-north-1:123456789012:workspace/ws-1"}},
            "partition aws-cn",
        ),
        ({"alerts": {"sns": "my-topic"}}, "gpuforge:monitoring.alerts.sns = 'my-topic'"),
        (
            {"alerts": {"sns": "arn:aws-us-gov:sns:us-gov-west-1:123456789012:alerts"}},
            "partition aws-us-gov",
        ),
        (
            {"alerts": {"sns": "create", "email": ["oncall@"]}},
            "gpuforge:monitoring.alerts.email[0] = 'oncall@'",
        ),
        ({"alerts": {"sns": "arn:aws:sns:us-east-1:123456789012:a\nb"}}, "gpuforge:monitoring.alerts.sns"),
        ({"alerts": {"email": ["not an address"]}}, "gpuforge:monitoring.alerts.email[0]"),
        ({"drainOnAlert": 1}, "gpuforge:monitoring.drainOnAlert = 1"),
        ({"retention": 15}, "gpuforge:monitoring.retention: unknown key"),
        ([1, 2], "gpuforge:monitoring = [1, 2]"),
    ],
)
def test_bad_input_names_the_key_and_the_fix(make_stack: StackMaker, block: Any, named: str) -> None:
    folder = make_stack(**{"gpuforge:monitoring": block})
    with pytest.raises(InputError) as caught:
        load_stack(folder, "test")
    assert named in caught.value.message
    assert "Fix:" in caught.value.message
    assert str(folder / "Pulumi.test.yaml") in caught.value.message


def test_monitoring_without_a_controller_is_refused(make_stack: StackMaker) -> None:
    folder = make_stack(**{"gpuforge:scheduler": None, "gpuforge:monitoring": {"enabled": True}})
    with pytest.raises(InputError, match=r"monitoring\.enabled = True: Prometheus and Alertmanager run on"):
        load_stack(folder, "test")


def test_the_rest_of_the_stack_is_still_checked(make_stack: StackMaker) -> None:
    folder = make_stack(**{"gpuforge:monitoring": {}, "gpuforge:nodeCount": 0})
    with pytest.raises(InputError, match="gpuforge:nodeCount"):
        load_stack(folder, "test")
