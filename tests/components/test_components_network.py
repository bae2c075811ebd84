"""ClusterNetwork: new or existing VPC, the EFA group, and the three ways to reach AWS APIs."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pulumi
import pytest
from components_helpers import (
    AMI,
    EGRESS,
    INGRESS,
    SECURITY_GROUP,
    VPC_ENDPOINT,
    cluster_spec,
    one,
    rules_of,
    run,
)

from gpuforge.components import ClusterNetwork, ClusterNetworkArgs, GpuCluster, NetworkSpec
from gpuforge.errors import InputError
from gpuforge.pulumi_mocks import GpuforgeMocks, install

SUBNET = "aws:ec2/subnet:Subnet"
VPC = "aws:ec2/vpc:Vpc"


def deploy(args: ClusterNetworkArgs) -> tuple[str, str, str]:
    def build() -> pulumi.Output[Any]:
        network = ClusterNetwork("net", args)
        return pulumi.Output.all(network.vpc_id, network.subnet_id, network.security_group_id)

    vpc, subnet, group = run(build)
    return vpc, subnet, group


def endpoints(mocks: GpuforgeMocks) -> dict[str, dict[str, Any]]:
    return {e.inputs["serviceName"]: dict(e.inputs) for e in mocks.of_type(VPC_ENDPOINT)}


def test_new_vpc_with_endpoints(mocks: GpuforgeMocks) -> None:
    vpc, subnet, group = deploy(ClusterNetworkArgs("us-east-1a"))
    assert one(mocks, VPC).id == vpc
    created = one(mocks, SUBNET)
    assert created.id == subnet
    assert created.inputs["availabilityZone"] == "us-east-1a"
    assert created.inputs["mapPublicIpOnLaunch"] is False
    assert ipaddress.IPv4Network(created.inputs["cidrBlock"]).subnet_of(ipaddress.IPv4Network("10.0.0.0/16"))
    assert one(mocks, VPC).inputs["enableDnsHostnames"] is True
    found = endpoints(mocks)
    interface = {f"com.amazonaws.us-east-1.{s}" for s in ("ssm", "ssmmessages", "ec2messages", "autoscaling")}
    assert set(found) == interface | {"com.amazonaws.us-east-1.s3"}
    (endpoint_group,) = [g.id for g in mocks.of_type(SECURITY_GROUP) if g.name == "net-endpoints"]
    for name in interface:
        assert found[name]["vpcEndpointType"] == "Interface"
        assert found[name]["subnetIds"] == [subnet]
        assert found[name]["securityGroupIds"] == [endpoint_group]
        assert found[name]["privateDnsEnabled"] is True
    s3 = found["com.amazonaws.us-east-1.s3"]
    assert s3["vpcEndpointType"] == "Gateway"
    assert s3["routeTableIds"] == [one(mocks, "aws:ec2/routeTable:RouteTable").id]
    # HTTPS from the nodes only.
    (https,) = rules_of(mocks, INGRESS, endpoint_group)
    assert (https["ipProtocol"], https["fromPort"], https["toPort"]) == ("tcp", 443, 443)
    assert https["referencedSecurityGroupId"] == group
    assert mocks.of_type("aws:ec2/natGateway:NatGateway") == []


def test_efa_group_rules(mocks: GpuforgeMocks) -> None:
    _, _, group = deploy(ClusterNetworkArgs("us-east-1a"))
    ingress = rules_of(mocks, INGRESS, group)
    assert [(r["ipProtocol"], r.get("referencedSecurityGroupId")) for r in ingress] == [("-1", group)]
    egress = {
        (r["ipProtocol"], r.get("referencedSecurityGroupId"), r.get("cidrIpv4"))
        for r in rules_of(mocks, EGRESS, group)
    }
    assert egress == {("-1", group, None), ("-1", None, "0.0.0.0/0")}
    # No security group anywhere takes ingress from an address range.
    assert all("cidrIpv4" not in r.inputs and "cidrIpv6" not in r.inputs for r in mocks.of_type(INGRESS))


def test_nat_gateway(mocks: GpuforgeMocks) -> None:
    deploy(ClusterNetworkArgs("us-east-1a", NetworkSpec(api_access="nat")))
    nat = one(mocks, "aws:ec2/natGateway:NatGateway")
    public = mocks.named("net-public")
    assert nat.inputs["subnetId"] == public.id
    assert nat.inputs["allocationId"] == one(mocks, "aws:ec2/eip:Eip").id
    routes = {r.name: r.inputs for r in mocks.of_type("aws:ec2/route:Route")}
    assert routes["net-private-default"]["natGatewayId"] == nat.id
    assert (
        routes["net-public-default"]["gatewayId"] == one(mocks, "aws:ec2/internetGateway:InternetGateway").id
    )
    private = mocks.named("net-private")
    assert not ipaddress.IPv4Network(public.inputs["cidrBlock"]).overlaps(
        ipaddress.IPv4Network(private.inputs["cidrBlock"])
    )
    assert set(endpoints(mocks)) == {"com.amazonaws.us-east-1.s3"}


def test_existing_vpc(mocks: GpuforgeMocks) -> None:
    spec = NetworkSpec(
        vpc_id="vpc-0a1b2c3d", subnet_id="subnet-0123456789abcdef0", route_table_ids=("rtb-0a1b2c3d",)
    )
    vpc, subnet, _ = deploy(ClusterNetworkArgs("us-east-1a", spec))
    assert (vpc, subnet) == ("vpc-0a1b2c3d", "subnet-0123456789abcdef0")
    assert mocks.of_type(VPC) == [] and mocks.of_type(SUBNET) == []
    assert endpoints(mocks)["com.amazonaws.us-east-1.s3"]["routeTableIds"] == ["rtb-0a1b2c3d"]


def test_existing_vpc_that_already_reaches_aws(mocks: GpuforgeMocks) -> None:
    spec = NetworkSpec(vpc_id="vpc-0a1b2c3d", subnet_id="subnet-0a1b2c3d", api_access="existing")
    deploy(ClusterNetworkArgs("us-east-1a", spec))
    assert mocks.of_type(VPC_ENDPOINT) == []
    assert [g.name for g in mocks.of_type(SECURITY_GROUP)] == ["net-efa"]


def test_china_partition_prefixes_and_principal() -> None:
    """Service names and ARNs come from the partition the provider reports, not a hard-coded aws."""
    mocks = install(GpuforgeMocks(region="cn-north-1"), preview=False)
    ami = AMI.model_copy(update={"region": "cn-north-1"})
    spec = cluster_spec(ami=ami, availability_zone="cn-north-1a", bucket=None)
    run(lambda: GpuCluster("demo", spec).launch_template_id)
    assert "cn.com.amazonaws.cn-north-1.ssm" in endpoints(mocks)
    document = json.loads(one(mocks, "aws:iam/role:Role").inputs["assumeRolePolicy"])
    assert document["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com.cn"}
    attachment = one(mocks, "aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    assert attachment.inputs["policyArn"] == "arn:aws-cn:iam::aws:policy/AmazonSSMManagedInstanceCore"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"vpc_id": "vpc-0a1b2c3d"}, r"network\.vpc_id/subnet_id"),
        (
            {"vpc_id": "vpc-0a1b2c3d", "subnet_id": "subnet-0a1b2c3d"},
            r"network\.route_table_ids = \(\): the S3 gateway",
        ),
        (
            {"vpc_id": "vpc-0a1b2c3d", "subnet_id": "subnet-0a1b2c3d", "api_access": "nat"},
            r"network\.api_access = 'nat'",
        ),
        (
            {"vpc_id": "vpc-xyz", "subnet_id": "subnet-0a1b2c3d", "api_access": "existing"},
            r"network\.vpc_id = 'vpc-xyz'",
        ),
        ({"route_table_ids": ("rtb-0a1b2c3d",)}, r"route tables are only given with an existing VPC"),
        ({"vpc_cidr": "10.0.0.0/24"}, r"the VPC block must be from /16 to /22"),
        ({"vpc_cidr": "10.0.0.1/16"}, r"network\.vpc_cidr = '10\.0\.0\.1/16': not an IPv4 network"),
        ({"api_access": "internet"}, r"NetworkSpec\.api_access = 'internet'"),
    ],
)
def test_network_refusals(values: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=message):
        NetworkSpec(**values)


def test_bad_zone_is_refused_before_anything_is_registered(mocks: GpuforgeMocks) -> None:
    with pytest.raises(InputError, match=r"availability_zone = 'east': not an Availability Zone name"):
        deploy(ClusterNetworkArgs("east"))
    assert mocks.resources == ()


def test_assume_role_document(mocks: GpuforgeMocks) -> None:
    """The assume-role document renders as IAM JSON naming the EC2 service principal."""
    run(lambda: GpuCluster("demo", cluster_spec(bucket=None)).launch_template_id)
    document = json.loads(one(mocks, "aws:iam/role:Role").inputs["assumeRolePolicy"])
    assert document["Statement"] == [
        {"Effect": "Allow", "Action": "sts:AssumeRole", "Principal": {"Service": "ec2.amazonaws.com"}}
    ]
    attachment = one(mocks, "aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    assert attachment.inputs["policyArn"] == "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
