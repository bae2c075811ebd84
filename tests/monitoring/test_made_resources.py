"""prometheus.yml and alertmanager.yml for a workspace and a topic MonitoringResources made.

The ARNs come from the component's own outputs under the offline mocks (preview=False), so the
rendered files hold what `pulumi up` would hand the controller; the pinned promtool and amtool
must accept them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from monitoring_support import tool

from gpuforge.components.monitoring_resources import MonitoringResources, MonitoringResourcesArgs
from gpuforge.errors import InputError
from gpuforge.monitoring.alertmanager import alertmanager_config
from gpuforge.monitoring.config import AlertsConfig, MonitoringConfig, WorkspaceRef
from gpuforge.monitoring.prometheus import prometheus_config
from gpuforge.pulumi_mocks import install

SOURCE = "stacks/x/Pulumi.test.yaml"
EXISTING_WORKSPACE = "arn:aws:aps:us-west-2:123456789012:workspace/ws-0123abcd-4567-89ef-0123-456789abcdef"
EXISTING_TOPIC = "arn:aws:sns:us-east-1:123456789012:oncall"


def _config(remote_write: str | WorkspaceRef = "none", sns: str | None = None) -> MonitoringConfig:
    return MonitoringConfig(
        enabled=True,
        retention_days=15,
        remote_write=remote_write,
        alerts=AlertsConfig(sns=sns) if sns is not None else None,
        drain_on_alert=True,
    )


def _prometheus(config: MonitoringConfig, workspace_arn: str | None = None) -> str:
    return prometheus_config(
        cluster="demo",
        region="us-east-1",
        instance_type="p5.48xlarge",
        monitoring=config,
        slurmctld_port=None,
        workspace_arn=workspace_arn,
        source=SOURCE,
    )


def _alertmanager(config: MonitoringConfig, topic_arn: str | None = None) -> str:
    return alertmanager_config(
        cluster="demo", region="us-east-1", monitoring=config, source=SOURCE, topic_arn=topic_arn
    )


def _made() -> dict[str, Any]:
    """The workspace and topic ARNs and the URL of a MonitoringResources run under the mocks."""
    install(preview=False)
    resolved: list[dict[str, Any]] = []

    @pulumi.runtime.test
    def program() -> pulumi.Output[None]:
        made = MonitoringResources(
            "demo-monitoring", MonitoringResourcesArgs("demo", _config("amp", "create"), None, {})
        )
        assert made.workspace_arn is not None and made.topic_arn is not None
        return pulumi.Output.all(
            workspace_arn=made.workspace_arn, topic_arn=made.topic_arn, url=made.remote_write_url
        ).apply(resolved.append)

    program()
    assert len(resolved) == 1, "the program's output never resolved"
    return resolved[0]


def _check(*command: str | Path) -> None:
    done = subprocess.run(
        [str(part) for part in command], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_made_workspace_and_topic_render_and_the_real_tools_accept_them(tmp_path: Path) -> None:
    made = _made()
    prometheus = _prometheus(_config("amp"), made["workspace_arn"])
    (remote,) = yaml.safe_load(prometheus)["remote_write"]
    assert remote == {"url": made["url"], "sigv4": {"region": "us-east-1"}}
    alertmanager = _alertmanager(_config(sns="create"), made["topic_arn"])
    (sns,) = [r for r in yaml.safe_load(alertmanager)["receivers"] if "sns_configs" in r]
    assert sns["sns_configs"][0]["topic_arn"] == made["topic_arn"]
    assert sns["sns_configs"][0]["sigv4"] == {"region": "us-east-1"}

    (tmp_path / "prometheus.yml").write_text(prometheus, encoding="utf-8")
    (tmp_path / "alertmanager.yml").write_text(alertmanager, encoding="utf-8")
    _check(tool("promtool"), "check", "config", "--syntax-only", tmp_path / "prometheus.yml")
    _check(tool("amtool"), "check-config", tmp_path / "alertmanager.yml")


@pytest.mark.parametrize(
    ("render", "named"),
    [
        (lambda: _prometheus(_config("amp")), "remoteWrite = 'amp'"),
        (lambda: _alertmanager(_config(sns="create")), "alerts.sns = 'create'"),
        (
            lambda: _prometheus(_config(WorkspaceRef(workspaceArn=EXISTING_WORKSPACE)), EXISTING_WORKSPACE),
            "remoteWrite names workspace",
        ),
        (lambda: _prometheus(_config(), EXISTING_WORKSPACE), "remoteWrite = 'none'"),
        (lambda: _alertmanager(_config(sns=EXISTING_TOPIC), EXISTING_TOPIC), "alerts.sns is not 'create'"),
        (lambda: _alertmanager(_config(), EXISTING_TOPIC), "alerts.sns is not 'create'"),
    ],
    ids=[
        "amp-no-arn",
        "create-no-arn",
        "workspace-twice",
        "workspace-unasked",
        "topic-twice",
        "topic-unasked",
    ],
)
def test_a_made_arn_is_required_for_create_and_refused_elsewhere(render: Any, named: str) -> None:
    with pytest.raises(InputError) as caught:
        render()
    assert SOURCE in caught.value.message and named in caught.value.message and "Fix:" in caught.value.message


def test_stack_arns_render_as_before_without_a_made_one() -> None:
    (remote,) = yaml.safe_load(_prometheus(_config(WorkspaceRef(workspaceArn=EXISTING_WORKSPACE))))[
        "remote_write"
    ]
    assert remote["sigv4"] == {"region": "us-west-2"}
    assert "remote_write" not in yaml.safe_load(_prometheus(_config()))
    receivers = yaml.safe_load(_alertmanager(_config(sns=EXISTING_TOPIC)))["receivers"]
    assert [r["sns_configs"][0]["topic_arn"] for r in receivers if "sns_configs" in r] == [EXISTING_TOPIC]
