"""`gpuforge plan` of a stack with monitoring: the controller's monitoring resources, its summary line, and
the policy pack passing them; monitoring off plans none of it."""

from __future__ import annotations

import base64
import gzip
import importlib.util
import json
import shlex
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from plan_support import REPO, STACK_DIR, StackCopy

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


def _support() -> ModuleType:
    """tests/monitoring/monitoring_support.py (the real promtool and amtool), loaded by its path."""
    path = REPO / "tests" / "monitoring" / "monitoring_support.py"
    spec = importlib.util.spec_from_file_location("monitoring_support_for_plan", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _controller_files(result: Any, target: Path) -> dict[str, str]:
    """The monitoring files the planned controller's user data writes, written by its own function into `target`."""
    (instance,) = [
        r
        for r in result.run.mocks.of_type("aws:ec2/instance:Instance")
        if r.inputs["tags"].get("gpuforge:role") == "slurm-controller"
    ]
    text = gzip.decompress(base64.b64decode(instance.inputs["userDataBase64"])).decode("utf-8")
    declaration = "readonly MONITORING_ETC=/etc/gpuforge/monitoring\n"
    assert declaration in text
    runnable = text.replace(declaration, f"readonly MONITORING_ETC={shlex.quote(str(target))}\n")
    runnable = runnable[: runnable.rindex('main "$@"')] + "write_monitoring_files\n"
    subprocess.run(["bash", "-c", runnable], check=True, timeout=60)
    return {
        str(p.relative_to(target)): p.read_text(encoding="utf-8") for p in target.rglob("*") if p.is_file()
    }


def _check(*command: str | Path) -> None:
    done = subprocess.run(
        [str(part) for part in command], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_made_workspace_and_topic_plan_and_the_controller_renders_their_arns(
    capsys: pytest.CaptureFixture[str], stack_copy: StackCopy, catalog_path: Path, tmp_path: Path
) -> None:
    block = {"remoteWrite": "amp", "alerts": {"sns": "create", "email": ["oncall@example.com"]}}
    stack_dir = stack_copy("p5-prod", overrides={"gpuforge:monitoring": block})
    assert main(["plan", str(stack_dir), "--stack", "p5-prod", "--catalog", str(catalog_path)]) == 0
    out = capsys.readouterr().out
    assert "aws:amp/workspace:Workspace  p5-prod-monitoring-workspace" in out
    assert "aws:sns/topic:Topic  p5-prod-monitoring-alerts" in out
    result = plan(stack_dir, "p5-prod", catalog=catalog_path)
    assert result.mandatory_failures == ()
    (workspace,) = result.run.mocks.of_type("aws:amp/workspace:Workspace")
    (topic,) = result.run.mocks.of_type("aws:sns/topic:Topic")
    workspace_arn, topic_arn = workspace.outputs["arn"], topic.outputs["arn"]
    assert result.summary["monitoring"]["remote_write_workspace"] == workspace_arn
    assert result.summary["monitoring"]["sns_topic"] == topic_arn
    assert sorted((str(s["Action"]), s["Resource"]) for s in _monitoring_policy(result)) == [
        ("['aps:RemoteWrite']", workspace_arn),
        ("['sns:Publish']", topic_arn),
        ("ec2:DescribeInstances", "*"),
    ]

    target = tmp_path / "etc-monitoring"
    files = _controller_files(result, target)
    assert sorted(files) == result.summary["monitoring"]["files"]
    workspace_id = workspace_arn.rsplit("/", 1)[1]
    (remote,) = yaml.safe_load(files["prometheus.yml"])["remote_write"]
    assert remote == {
        "url": f"https://aps-workspaces.us-east-1.amazonaws.com/workspaces/{workspace_id}/api/v1/remote_write",
        "sigv4": {"region": "us-east-1"},
    }
    (sns,) = [r for r in yaml.safe_load(files["alertmanager.yml"])["receivers"] if "sns_configs" in r]
    assert sns["sns_configs"][0]["topic_arn"] == topic_arn
    support = _support()
    _check(support.tool("promtool"), "check", "config", "--syntax-only", target / "prometheus.yml")
    _check(support.tool("amtool"), "check-config", target / "alertmanager.yml")


@pytest.mark.parametrize("remote_write", ["none", "amp"])
def test_retention_the_controller_disk_cannot_hold_is_refused_at_plan_time(
    capsys: pytest.CaptureFixture[str], stack_copy: StackCopy, catalog_path: Path, remote_write: str
) -> None:
    # p5-prod: 16 p5.48xlarge, about 76,000 series (gpuforge.monitoring.sizing): about 0.8 GiB a day at 15s and
    # 2 bytes a sample, so 120 days are past the 80 GiB Prometheus has on the controller, and 15 days fit.
    block = {"retentionDays": 120, "remoteWrite": remote_write}
    stack_dir = stack_copy("p5-prod", overrides={"gpuforge:monitoring": block})
    assert main(["plan", str(stack_dir), "--stack", "p5-prod", "--catalog", str(catalog_path)]) == 2
    err = capsys.readouterr().err
    assert "gpuforge:monitoring.retentionDays = 120" in err
    assert "more than the 80 GiB" in err and "at most 97 days fit" in err
    assert "Fix: set retentionDays to 97 or fewer" in err and "remoteWrite" in err
    assert "Traceback" not in err


def test_retention_that_fits_plans(stack_copy: StackCopy, catalog_path: Path) -> None:
    stack_dir = stack_copy("p5-prod", overrides={"gpuforge:monitoring": {"retentionDays": 97}})
    assert main(["plan", str(stack_dir), "--stack", "p5-prod", "--catalog", str(catalog_path)]) == 0
