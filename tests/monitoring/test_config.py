"""`gpuforge:monitoring`: defaults, and bad input refused with the key and the fix (exit 2)."""

from __future__ import annotations

from typing import Any

import pytest
from monitoring_support import StackMaker

from gpuforge.display import cut
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


@pytest.mark.parametrize(
    "address",
    [
        "oncall\x00@example.com",
        "oncall\x1b[2J@example.com",
        "oncall\r@example.com",
        "on\u2028call@example.com",
        '"on call"@example.com',
        "oncall@[192.0.2.1]",
        "on..call@example.com",
        ".oncall@example.com",
        "ónçall@example.com",
        "oncall@exa_mple.com",
        "oncall@-example.com",
        "oncall@example.com (pager)",
        "Oncall <oncall@example.com>",
        f"{'x' * 65}@example.com",
    ],
)
def test_an_address_that_is_no_plain_addr_spec_is_refused_at_plan_time(
    make_stack: StackMaker, address: str
) -> None:
    """What SNS gets is an RFC 5322 addr-spec in its plain form: control characters, line separators, quotes,
    literals, comments, display names and non-ASCII letters are refused with the file, key, value and fix."""
    folder = make_stack(
        **{"gpuforge:monitoring": {"alerts": {"sns": "create", "email": ["ok@example.com", address]}}}
    )
    with pytest.raises(InputError) as caught:
        load_stack(folder, "test")
    message = caught.value.message
    assert f"{folder / 'Pulumi.test.yaml'}: gpuforge:monitoring.alerts.email[1] = {cut(address)}: " in message
    assert "RFC 5322" in message and "Fix: give the address as name@example.com" in message
    assert message.isascii() and "\n" not in message and "\r" not in message


def test_the_same_address_twice_is_refused(make_stack: StackMaker) -> None:
    emails = ["oncall@example.com", "team@example.com", "oncall@EXAMPLE.com"]
    folder = make_stack(**{"gpuforge:monitoring": {"alerts": {"sns": "create", "email": emails}}})
    with pytest.raises(
        InputError, match=r"email\[2\] = 'oncall@EXAMPLE.com': the same address as alerts.email\[0\]"
    ):
        load_stack(folder, "test")


def test_plain_addresses_are_read(make_stack: StackMaker) -> None:
    emails = [
        "oncall@example.com",
        "a.b+gpu-alerts@mail.example.co.uk",
        "o'brien@xn--bcher-kva.example",
        "x@a1.io",
    ]
    folder = make_stack(**{"gpuforge:monitoring": {"alerts": {"sns": "create", "email": emails}}})
    _, monitoring = load_stack(folder, "test")
    assert monitoring.alerts is not None and monitoring.alerts.email == emails
