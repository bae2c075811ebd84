"""The recording mocks: AWS-shaped answers, the resource tree, and loud failure on unknown invokes."""

from __future__ import annotations

import re
from typing import Any

import pulumi
import pulumi_aws as aws
import pytest
from components_helpers import FSX, cluster_spec, one, run

from gpuforge.components import GpuCluster, LustreSpec
from gpuforge.errors import GpuforgeError
from gpuforge.pulumi_mocks import GpuforgeMocks, install

ID_FORMATS = {
    "aws:ec2/vpc:Vpc": r"vpc-[0-9a-f]{17}",
    "aws:ec2/subnet:Subnet": r"subnet-[0-9a-f]{17}",
    "aws:ec2/securityGroup:SecurityGroup": r"sg-[0-9a-f]{17}",
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": r"sgr-[0-9a-f]{17}",
    "aws:ec2/launchTemplate:LaunchTemplate": r"lt-[0-9a-f]{17}",
    "aws:ec2/vpcEndpoint:VpcEndpoint": r"vpce-[0-9a-f]{17}",
    "aws:ec2/routeTable:RouteTable": r"rtb-[0-9a-f]{17}",
    "aws:fsx/lustreFileSystem:LustreFileSystem": r"fs-[0-9a-f]{17}",
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": r"dra-[0-9a-f]{17}",
    "aws:ec2/placementGroup:PlacementGroup": r"train-placement-group-[0-9a-f]{7}",
    "aws:autoscaling/group:Group": r"train-nodes-asg-[0-9a-f]{7}",
    "aws:iam/role:Role": r"train-nodes-role-[0-9a-f]{7}",
    "aws:s3/bucket:Bucket": r"train-data-bucket-[0-9a-f]{7}",
}


def deploy() -> None:
    lustre = LustreSpec(deployment_type="PERSISTENT_2", storage_capacity_gib=1200, throughput_per_tib=125)
    run(lambda: GpuCluster("train", cluster_spec(name="train", lustre=lustre)).summary)


def test_ids_and_arns_look_like_aws(mocks: GpuforgeMocks) -> None:
    deploy()
    for token, pattern in ID_FORMATS.items():
        for resource in mocks.of_type(token):
            assert re.fullmatch(pattern, resource.id), (token, resource.id)
    fs = one(mocks, FSX)
    assert fs.outputs["dnsName"] == f"{fs.id}.fsx.us-east-1.amazonaws.com"
    assert re.fullmatch(r"[a-z0-9]{8}", fs.outputs["mountName"])
    assert fs.outputs["arn"] == f"arn:aws:fsx:us-east-1:123456789012:file-system/{fs.id}"
    group = one(mocks, "aws:autoscaling/group:Group")
    assert re.fullmatch(
        r"arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:[0-9a-f-]{36}:autoScalingGroupName/"
        + re.escape(group.id),
        group.outputs["arn"],
    )
    bucket = one(mocks, "aws:s3/bucket:Bucket")
    assert bucket.outputs["arn"] == f"arn:aws:s3:::{bucket.id}"
    tokens = {call.token for call in mocks.calls}
    assert {"aws:index/getRegion:getRegion", "aws:index/getPartition:getPartition"} <= tokens
    assert "aws:iam/getPolicyDocument:getPolicyDocument" in tokens


def test_runs_are_reproducible() -> None:
    runs = []
    for _ in range(2):
        mocks = install(preview=False)
        deploy()
        runs.append(sorted((r.type, r.name, r.id) for r in mocks.resources))
    assert runs[0] == runs[1]


def test_parents_are_recorded(mocks: GpuforgeMocks) -> None:
    deploy()
    nodes = mocks.named("train-nodes")
    children = {r.name for r in mocks.children(nodes)}
    assert {"train-nodes-lt", "train-nodes-asg", "train-nodes-role", "train-nodes-profile"} <= children
    (root,) = mocks.tree()
    assert root.resource.name == "train"
    assert {child.resource.name for child in root.children} == {
        "train-network",
        "train-placement",
        "train-data",
        "train-lustre",
        "train-nodes",
    }


def test_an_invoke_without_an_answer_fails_loudly(mocks: GpuforgeMocks) -> None:
    def build() -> pulumi.Output[Any]:
        return aws.ec2.get_vpc_output(default=True).id

    with pytest.raises(GpuforgeError, match=r"no answer for the provider function 'aws:ec2/getVpc:getVpc'"):
        run(build)
