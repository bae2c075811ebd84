"""Monitoring on the Slurm controller: the rendered files and units in its user data, its IAM, its network rules.

The files are those `gpuforge monitoring render` writes for the shipped p5-prod stack (the same
function, `render_set`), so these tests see what `pulumi up` of that stack puts on the controller.
"""

from __future__ import annotations

import base64
import gzip
import json
import shlex
import stat
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pulumi
import pytest
from components_helpers import INGRESS, INSTANCE, ROLE_POLICY, SECURITY_GROUP, cluster_spec, run

from gpuforge.components import GpuCluster, SchedulerSpec
from gpuforge.components.controller_monitoring import ControllerMonitoring, controller_files, stack_monitoring
from gpuforge.components.slurm_controller import (
    CONTROLLER_ROLE,
    ROLE_TAG,
    USER_DATA_LIMIT_BYTES,
    _encoded,
)
from gpuforge.errors import InputError
from gpuforge.monitoring.cli import render_set
from gpuforge.monitoring.config import AlertsConfig, MonitoringConfig, WorkspaceRef
from gpuforge.pulumi_mocks import GpuforgeMocks, RecordedResource
from gpuforge.stack_config import load_stack_config

REPO = Path(__file__).resolve().parents[2]
STACK_DIR = REPO / "stacks" / "training"
SLURM = SchedulerSpec(type="slurm", controller_instance_type="m7i.2xlarge")
VERSION = "26.05.5"
WORKSPACE = "arn:aws:aps:us-east-1:123456789012:workspace/ws-0123abcd-4567-89ef-0123-456789abcdef"
TOPIC = "arn:aws:sns:us-east-1:123456789012:gpuforge-alerts"


@cache
def p5_prod() -> ControllerMonitoring:
    monitoring = stack_monitoring(load_stack_config(STACK_DIR, "p5-prod"))
    assert monitoring is not None  # Slurm stacks monitor by default
    return monitoring


def with_config(**changes: Any) -> ControllerMonitoring:
    """p5-prod's controller files with its monitoring block changed (MonitoringConfig's fields)."""
    config = p5_prod().config.model_copy(update=changes)
    assert isinstance(config, MonitoringConfig)
    return ControllerMonitoring(config=config, files=p5_prod().files)


def deploy(monitoring: ControllerMonitoring | None, **spec: Any) -> dict[str, Any]:
    def build() -> pulumi.Output[Any]:
        cluster = GpuCluster(
            "demo", cluster_spec(scheduler=SLURM, **spec), slurm_version=VERSION, monitoring=monitoring
        )
        return cluster.summary

    summary: dict[str, Any] = run(build)
    return summary


def controller(mocks: GpuforgeMocks) -> RecordedResource:
    (found,) = [r for r in mocks.of_type(INSTANCE) if r.inputs["tags"].get(ROLE_TAG) == CONTROLLER_ROLE]
    return found


def raw_user_data(mocks: GpuforgeMocks) -> bytes:
    return base64.b64decode(controller(mocks).inputs["userDataBase64"])


def script(mocks: GpuforgeMocks) -> str:
    return gzip.decompress(raw_user_data(mocks)).decode("utf-8")


def main_steps(text: str) -> list[str]:
    return [line.strip() for line in text.split("\nmain() {\n")[1].splitlines()]


def test_the_controller_gets_exactly_what_monitoring_render_writes_for_the_controller() -> None:
    _, rendered = render_set(load_stack_config(STACK_DIR, "p5-prod"))
    files = p5_prod().files
    assert files == controller_files(rendered)
    assert {"prometheus.yml", "prometheus.flags", "alertmanager.yml"} <= set(files)
    assert any(name.startswith("rules/") for name in files)
    # The nodes' field list, the dashboards and the sizing estimate are not the controller's.
    assert not any(name.endswith((".json", ".csv")) for name in files)


def test_the_user_data_writes_the_files_0644_in_0755_folders(mocks: GpuforgeMocks, tmp_path: Path) -> None:
    deploy(p5_prod())
    text = script(mocks)
    target = tmp_path / "etc-monitoring"
    declaration = "readonly MONITORING_ETC=/etc/gpuforge/monitoring\n"
    assert declaration in text
    # Run the script's own write_monitoring_files into a folder of this test, not main.
    runnable = text.replace(declaration, f"readonly MONITORING_ETC={shlex.quote(str(target))}\n")
    runnable = runnable[: runnable.rindex('main "$@"')] + "write_monitoring_files\n"
    subprocess.run(["bash", "-c", runnable], check=True, timeout=60)
    written = {str(path.relative_to(target)): path for path in target.rglob("*") if path.is_file()}
    assert set(written) == set(p5_prod().files)
    for name, path in written.items():
        assert path.read_text(encoding="utf-8") == p5_prod().files[name]
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
    for folder in (target, target / "rules"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o755


def test_the_user_data_starts_prometheus_alertmanager_and_the_receiver(mocks: GpuforgeMocks) -> None:
    summary = deploy(p5_prod())
    text = script(mocks)
    assert "readonly MONITORING_UNITS=(gpuforge-prometheus.service gpuforge-alertmanager.service)\n" in text
    assert 'systemctl enable --now "${MONITORING_UNITS[@]}"' in text
    steps = main_steps(text)
    assert steps.index("step write_monitoring_files") < steps.index("if ((${#FAILED_STEPS[@]} == 0)); then")
    assert "step start_monitoring" in steps and "step start_alert_receiver" in steps
    assert summary["monitoring"] == {
        "enabled": True,
        "files": sorted(p5_prod().files),
        "drain_receiver": True,
        "remote_write_workspace": None,
        "sns_topic": None,
    }


def test_drain_on_alert_false_starts_no_receiver(mocks: GpuforgeMocks) -> None:
    summary = deploy(with_config(drain_on_alert=False))
    steps = main_steps(script(mocks))
    assert "step start_monitoring" in steps
    assert "step start_alert_receiver" not in steps
    assert summary["monitoring"]["drain_receiver"] is False


def test_monitoring_off_renders_none_of_it(mocks: GpuforgeMocks) -> None:
    summary = deploy(None)
    text = script(mocks)
    for absent in (
        "MONITORING",
        "monitoring",
        "prometheus",
        "alertmanager",
        "ALERT_RECEIVER_UNIT=",
        "9400",
        "9100",
    ):
        assert absent not in text
    assert "step start_alert_receiver" not in main_steps(text)
    assert mocks.of_type("gpuforge:monitoring:MonitoringResources") == []
    assert not [
        p
        for p in mocks.of_type(ROLE_POLICY)
        if "aps:" in p.inputs["policy"] or "Prometheus" in p.inputs["policy"]
    ]
    assert {rule.inputs.get("fromPort") for rule in mocks.of_type(INGRESS)}.isdisjoint({9400.0, 9100.0})
    assert summary["monitoring"] == {
        "enabled": False,
        "files": [],
        "drain_receiver": False,
        "remote_write_workspace": None,
        "sns_topic": None,
    }


def _policies(mocks: GpuforgeMocks, name: str) -> list[dict[str, Any]]:
    return [json.loads(p.inputs["policy"]) for p in mocks.of_type(ROLE_POLICY) if p.name == name]


def test_the_controller_role_discovers_nodes_and_writes_to_its_one_workspace_and_topic(
    mocks: GpuforgeMocks,
) -> None:
    alerts = AlertsConfig(sns=TOPIC, email=["oncall@example.com"])
    deploy(with_config(remote_write=WorkspaceRef(workspaceArn=WORKSPACE), alerts=alerts))
    (discovery,) = _policies(mocks, "demo-slurm-monitoring")
    assert discovery["Statement"] == [
        {
            "Sid": "PrometheusEc2Discovery",
            "Effect": "Allow",
            "Action": "ec2:DescribeInstances",
            "Resource": "*",
        }
    ]
    # MonitoringResources' grant, on the controller's own role.
    (grant,) = [p for p in mocks.of_type(ROLE_POLICY) if p.name == "demo-monitoring-controller"]
    (role,) = [r for r in mocks.of_type("aws:iam/role:Role") if r.name == "demo-slurm-role"]
    assert grant.inputs["role"] == role.outputs["name"]
    assert [(s["Action"], s["Resource"]) for s in json.loads(grant.inputs["policy"])["Statement"]] == [
        (["aps:RemoteWrite"], WORKSPACE),
        (["sns:Publish"], TOPIC),
    ]
    (subscription,) = mocks.of_type("aws:sns/topicSubscription:TopicSubscription")
    assert (subscription.inputs["topic"], subscription.inputs["endpoint"]) == (TOPIC, "oncall@example.com")


def test_without_workspace_or_topic_the_role_only_discovers(mocks: GpuforgeMocks) -> None:
    deploy(p5_prod())
    (policy,) = _policies(mocks, "demo-slurm-monitoring")
    assert [statement["Sid"] for statement in policy["Statement"]] == ["PrometheusEc2Discovery"]
    assert _policies(mocks, "demo-monitoring-controller") == []


def _ingress(mocks: GpuforgeMocks) -> set[tuple[str, str | None, str | None, float | None, float | None]]:
    return {
        (
            rule.inputs["securityGroupId"],
            rule.inputs.get("referencedSecurityGroupId"),
            rule.inputs.get("cidrIpv4"),
            rule.inputs.get("fromPort"),
            rule.inputs.get("toPort"),
        )
        for rule in mocks.of_type(INGRESS)
    }


def test_the_controller_reaches_the_nodes_exporters_and_nothing_else_new(mocks: GpuforgeMocks) -> None:
    deploy(None)
    without = _ingress(mocks)
    with_monitoring = install_fresh()
    deploy(p5_prod())
    added = _ingress(with_monitoring) - without
    groups = {group.name: group.id for group in with_monitoring.of_type(SECURITY_GROUP)}
    nodes, controller_group = groups["demo-network-efa"], groups["demo-slurm-sg"]
    assert added == {
        (nodes, controller_group, None, 9400.0, 9400.0),
        (nodes, controller_group, None, 9100.0, 9100.0),
    }
    assert _ingress(with_monitoring) - added == without


def install_fresh() -> GpuforgeMocks:
    from gpuforge.pulumi_mocks import install

    return install(preview=False)


def test_the_p5_prod_controller_user_data_fits_ec2_s_limit(mocks: GpuforgeMocks) -> None:
    deploy(p5_prod())
    raw = raw_user_data(mocks)
    # Uncompressed, the script is past the limit: without gzip EC2 would refuse the instance.
    assert len(gzip.decompress(raw)) > USER_DATA_LIMIT_BYTES
    assert len(raw) <= USER_DATA_LIMIT_BYTES
    print(f"p5-prod controller user data: {len(gzip.decompress(raw))} bytes raw, {len(raw)} gzip")


def test_user_data_past_the_limit_is_refused_with_its_size() -> None:
    # Incompressible text (bytes of a hash chain as hex) larger than the limit after gzip.
    import hashlib

    block, chunks = b"gpuforge", []
    while sum(map(len, chunks)) < 3 * USER_DATA_LIMIT_BYTES:
        block = hashlib.sha256(block).digest()
        chunks.append(block.hex().encode())
    with pytest.raises(InputError, match=r"user_data = '\d+ bytes gzip-compressed': EC2 takes at most 16384"):
        _encoded(b"".join(chunks).decode())


def test_monitoring_without_slurm_is_refused() -> None:
    with pytest.raises(
        InputError, match="monitoring runs Prometheus and Alertmanager on the Slurm controller"
    ):
        GpuCluster("demo", cluster_spec(), monitoring=p5_prod())


def test_the_monitoring_controller_script_is_valid_bash(mocks: GpuforgeMocks, tmp_path: Path) -> None:
    deploy(p5_prod())
    path = tmp_path / "controller.sh"
    path.write_text(script(mocks), encoding="utf-8")
    subprocess.run(["bash", "-n", str(path)], check=True, timeout=60)
    subprocess.run(["shellcheck", "--shell=bash", str(path)], check=True, timeout=120)
