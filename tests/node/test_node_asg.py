"""--report-asg against moto's server on 127.0.0.1: a failing node is marked Unhealthy in its group."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from node_scenarios import FIXTURES, fixture, p5_healthy
from test_node_cli import run_node, serve_imds

from gpuforge.node.asg import AsgReportError, report_unhealthy
from gpuforge.node.imds import ENDPOINT_ENV, Identity
from gpuforge.node.xid import DMESG

REGION = "us-east-1"
pytestmark = pytest.mark.slow


def group_with_one_instance(name: str) -> tuple[Any, str]:
    ec2 = boto3.client("ec2", region_name=REGION)
    autoscaling = boto3.client("autoscaling", region_name=REGION)
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    ec2.create_launch_template(
        LaunchTemplateName=name, LaunchTemplateData={"ImageId": image, "InstanceType": "p5.48xlarge"}
    )
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=name,
        LaunchTemplate={"LaunchTemplateName": name, "Version": "$Latest"},
        MinSize=1,
        MaxSize=1,
        DesiredCapacity=1,
        AvailabilityZones=[f"{REGION}a"],
        HealthCheckGracePeriod=900,
    )
    (instance,) = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][
        0
    ]["Instances"]
    assert instance["HealthStatus"] == "Healthy"
    return autoscaling, instance["InstanceId"]


def health(autoscaling: Any, instance_id: str) -> str:
    (state,) = autoscaling.describe_auto_scaling_instances(InstanceIds=[instance_id])["AutoScalingInstances"]
    status: str = state["HealthStatus"]
    return status


def test_failing_node_marks_itself_unhealthy(
    aws: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    autoscaling, instance_id = group_with_one_instance("gpu-nodes-a")
    metadata = {"instance-id": instance_id, "instance-type": "p5.48xlarge", "placement/region": REGION}
    imds = serve_imds(metadata)
    monkeypatch.setenv(ENDPOINT_ENV, next(imds))
    try:
        scenario = p5_healthy().set(DMESG, fixture("dmesg/xid79.txt"))
        code = run_node(
            scenario,
            tmp_path,
            monkeypatch,
            "--json",
            "--report-asg",
            "--manifest",
            str(FIXTURES / "manifest/p5-h100.json"),
        )
    finally:
        imds.close()
    captured = capsys.readouterr()
    assert code == 1
    assert json.loads(captured.out)["healthy"] is False
    assert f"marked {instance_id} Unhealthy" in captured.err
    assert health(autoscaling, instance_id).upper() == "UNHEALTHY"


def test_healthy_node_leaves_its_group_alone(
    aws: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    autoscaling, instance_id = group_with_one_instance("gpu-nodes-b")
    imds = serve_imds(
        {"instance-id": instance_id, "instance-type": "p5.48xlarge", "placement/region": REGION}
    )
    monkeypatch.setenv(ENDPOINT_ENV, next(imds))
    try:
        code = run_node(
            p5_healthy(),
            tmp_path,
            monkeypatch,
            "--report-asg",
            "--manifest",
            str(FIXTURES / "manifest/p5-h100.json"),
        )
    finally:
        imds.close()
    assert code == 0
    assert health(autoscaling, instance_id) == "Healthy"


def test_rejected_report_is_an_error_that_names_the_fix(aws: str) -> None:
    identity = Identity(instance_id="i-00000000000000000", instance_type="p5.48xlarge", region=REGION)
    with pytest.raises(AsgReportError, match="autoscaling:SetInstanceHealth"):
        report_unhealthy(identity)
