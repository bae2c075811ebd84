"""`gpuforge plan` of a stack with monitoring: the controller's monitoring resources, its summary line, and
the policy pack passing them; monitoring off plans none of it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from plan_support import STACK_DIR, StackCopy

from gpuforge.cli import main
from gpuforge.plan.stack_plan import plan

ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
WORKSPACE = "arn:aws:aps:us-east-1:123456789012:workspace/ws-0123abcd-4567-89ef-0123-456789abcdef"
TOPIC = "arn:aws:sns:us-east-1:123456789012:gpuforge-alerts"


def _monitoring_policy(result: Any) -> list[dict[str, Any]]:
    """The controller's monitoring statements: discovery (the controller's) and the grant (MonitoringResources')."""
    names = ("p5-prod-slurm-monitoring", "p5-prod-monitoring-controller")
    return [
        statement
        for policy in result.run.mocks.of_type(ROLE_POLICY)
        if policy.name in names
        for statement in json.loads(policy.inputs["policy"])["Statement"]
    ]


def _exporter_rules(result: Any) -> list[str]:
    return sorted(
        rule.name
        for rule in result.run.mocks.of_type(INGRESS)
        if rule.inputs.get("fromPort") in (9400.0, 9100.0)
    )


def test_p5_prod_plans_prometheus_and_alertmanager_on_its_controller(
    capsys: pytest.CaptureFixture[str], catalog_path: Path
) -> None:
    code = main(["plan", str(STACK_DIR), "--stack", "p5-prod", "--catalog", str(catalog_path)])
    out = capsys.readouterr().out
    assert code == 0
    assert (
        "  monitoring Prometheus and Alertmanager on the controller (5 files in /etc/gpuforge/monitoring); "
        "drain receiver on\n"
    ) in out
    assert "aws:iam/rolePolicy:RolePolicy  p5-prod-slurm-monitoring" in out
    result = plan(STACK_DIR, "p5-prod", catalog=catalog_path)
    assert result.mandatory_failures == ()
    assert result.summary["monitoring"]["enabled"] is True
    assert _exporter_rules(result) == [
        "p5-prod-slurm-nodes-in-dcgm-exporter",
        "p5-prod-slurm-nodes-in-node-exporter",
    ]


def test_monitoring_off_plans_none_of_it(
    capsys: pytest.CaptureFixture[str], stack_copy: StackCopy, catalog_path: Path
) -> None:
    stack_dir = stack_copy("p5-prod", overrides={"gpuforge:monitoring": {"enabled": False}})
    result = plan(stack_dir, "p5-prod", catalog=catalog_path)
    assert result.mandatory_failures == ()
    assert result.summary["monitoring"]["enabled"] is False
    assert _monitoring_policy(result) == [] and _exporter_rules(result) == []
    assert main(["plan", str(stack_dir), "--stack", "p5-prod", "--catalog", str(catalog_path)]) == 0
    assert "  monitoring none\n" in capsys.readouterr().out


def test_remote_write_and_topic_get_exactly_their_arns_and_pass_the_policies(
    stack_copy: StackCopy, catalog_path: Path
) -> None:
    block = {"remoteWrite": {"workspaceArn": WORKSPACE}, "alerts": {"sns": TOPIC}, "drainOnAlert": False}
    stack_dir = stack_copy("p5-prod", overrides={"gpuforge:monitoring": block})
    result = plan(stack_dir, "p5-prod", catalog=catalog_path)
    assert result.mandatory_failures == ()
    assert sorted((str(s["Action"]), s["Resource"]) for s in _monitoring_policy(result)) == [
        ("['aps:RemoteWrite']", WORKSPACE),
        ("['sns:Publish']", TOPIC),
        ("ec2:DescribeInstances", "*"),
    ]
    assert result.summary["monitoring"]["drain_receiver"] is False


@pytest.mark.parametrize(
    ("block", "field"),
    [({"remoteWrite": "amp"}, "remoteWrite"), ({"alerts": {"sns": "create"}}, "alerts.sns")],
)
def test_workspace_and_topic_creation_are_still_refused_with_exit_2(
    capsys: pytest.CaptureFixture[str],
    stack_copy: StackCopy,
    catalog_path: Path,
    block: dict[str, Any],
    field: str,
) -> None:
    stack_dir = stack_copy("p5-prod", overrides={"gpuforge:monitoring": block})
    assert main(["plan", str(stack_dir), "--stack", "p5-prod", "--catalog", str(catalog_path)]) == 2
    assert f"gpuforge:monitoring.{field}" in capsys.readouterr().err
