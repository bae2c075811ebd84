"""EKS in an existing VPC (`network.second_subnet_id`) under the Pulumi SDK's mocks (preview=False).

EKS needs subnets in two Availability Zones (components/eks_cluster.py, SUBNETS_DOC). In a VPC gpuforge makes, the
second subnet is made; in an existing VPC the spec names it, and its VPC and zone are checked against EC2's answer
(`getSubnet`) before the control plane is declared.

The offline mocks cannot know an existing subnet's VPC and zone (gpuforge/pulumi_mocks.py derives a VPC id from the
subnet id and puts every subnet in zone a), so these tests replace the mocks' `getSubnet` answer for the two subnets
they name with the VPC and zone each case needs; every other field stays the mocks' own.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulumi
import pytest
from components_helpers import AMI, NOW, cluster_spec, one, run

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from stack_files import slurm_stack, write_stack

from gpuforge import pulumi_mocks, stack_config
from gpuforge.components import GpuCluster
from gpuforge.components.specs import NetworkSpec, SchedulerSpec
from gpuforge.errors import InputError
from gpuforge.pulumi_mocks import GpuforgeMocks
from gpuforge.stack_config import load_stack_config

VPC = "vpc-0123456789abcdef0"
OTHER_VPC = "vpc-0fedcba9876543210"
FIRST = "subnet-0123456789abcdef0"
SECOND = "subnet-0aaaaaaaaaaaaaaa1"
GET_SUBNET = "aws:ec2/getSubnet:getSubnet"
SUBNET = "aws:ec2/subnet:Subnet"
CLUSTER = "aws:eks/cluster:Cluster"


def kubernetes() -> SchedulerSpec:
    return SchedulerSpec(
        type="kubernetes",
        kubernetes_version="1.35",  # the minor gpuforge/data/eks_addons.yaml pins the EKS add-ons for
        system_node_type="m7i.xlarge",
        admin_role_arn="arn:aws:iam::123456789012:role/platform-admin",
    )


def existing(**overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "vpc_id": VPC,
        "subnet_id": FIRST,
        "second_subnet_id": SECOND,
        "api_access": "existing",
    }
    values.update(overrides)
    return values


@pytest.fixture
def subnets(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, tuple[str, str]]]:
    """Subnet id -> (VPC id, zone) that the mocks' getSubnet answers with; the test fills it."""
    facts: dict[str, tuple[str, str]] = {}
    answer: Callable[[GpuforgeMocks, dict[str, Any]], dict[str, Any]] = pulumi_mocks._CALL_ANSWERS[GET_SUBNET]

    def placed(mocks: GpuforgeMocks, args: dict[str, Any]) -> dict[str, Any]:
        result = answer(mocks, args)
        if args.get("id") in facts:
            vpc, zone = facts[str(args["id"])]
            result.update(vpcId=vpc, availabilityZone=zone)
        return result

    monkeypatch.setitem(pulumi_mocks._CALL_ANSWERS, GET_SUBNET, placed)
    yield facts


def deploy(network: dict[str, Any]) -> Any:
    spec = cluster_spec(scheduler=kubernetes(), network=network)

    def build() -> pulumi.Output[Any]:
        return GpuCluster("demo", spec, now=NOW).summary

    return run(build)


def test_existing_vpc_without_second_subnet_refused_before_anything(mocks: GpuforgeMocks) -> None:
    spec = cluster_spec(scheduler=kubernetes(), network=existing(second_subnet_id=None))
    with pytest.raises(InputError) as caught:
        GpuCluster("demo", spec, now=NOW)
    message = caught.value.message
    assert "network.second_subnet_id" in message
    assert "two Availability Zones" in message
    assert "Fix: give network.second_subnet_id" in message
    assert mocks.resources == ()


def test_existing_vpc_uses_the_given_second_subnet(
    mocks: GpuforgeMocks, subnets: dict[str, tuple[str, str]]
) -> None:
    subnets.update({FIRST: (VPC, "us-east-1a"), SECOND: (VPC, "us-east-1b")})
    deploy(existing())
    cluster = one(mocks, CLUSTER).inputs
    assert cluster["vpcConfig"]["subnetIds"] == [FIRST, SECOND]
    assert mocks.of_type(SUBNET) == []  # nothing made in a VPC gpuforge does not own
    looked_up = [call.args["id"] for call in mocks.calls if call.token == GET_SUBNET]
    assert SECOND in looked_up


@pytest.mark.parametrize(
    ("facts", "rule"),
    [
        (
            {FIRST: (VPC, "us-east-1a"), SECOND: (VPC, "us-east-1a")},
            rf"network\.second_subnet_id = '{SECOND}': .*same Availability Zone \(us-east-1a\) as network\.subnet_id"
            r".*Fix: give a private subnet of vpc-0123456789abcdef0 in another zone than us-east-1a",
        ),
        (
            {FIRST: (VPC, "us-east-1a"), SECOND: (OTHER_VPC, "us-east-1b")},
            rf"network\.second_subnet_id = '{SECOND}': .*is in VPC {OTHER_VPC}, not the cluster's VPC {VPC}"
            rf".*Fix: give a private subnet of {VPC}",
        ),
    ],
    ids=["same-zone", "other-vpc"],
)
def test_second_subnet_checked_against_ec2(
    mocks: GpuforgeMocks,
    subnets: dict[str, tuple[str, str]],
    facts: dict[str, tuple[str, str]],
    rule: str,
) -> None:
    subnets.update(facts)
    with pytest.raises(InputError, match=rule):
        deploy(existing())
    assert mocks.of_type(CLUSTER) == []  # the control plane waits for the checked subnet


@pytest.mark.parametrize(
    ("network", "rule"),
    [
        ({"second_subnet_id": SECOND}, r"network\.second_subnet_id .* only with an existing VPC"),
        (
            existing(second_subnet_id=FIRST),
            r"network\.second_subnet_id .* another subnet than network\.subnet_id",
        ),
        (existing(second_subnet_id="subnet-nope"), r"network\.second_subnet_id .* not an EC2 resource id"),
    ],
    ids=["new-vpc", "same-subnet", "malformed"],
)
def test_second_subnet_spec_rules(network: dict[str, Any], rule: str) -> None:
    with pytest.raises(InputError, match=rule):
        NetworkSpec(**network)


def test_second_subnet_refused_where_nothing_uses_it(mocks: GpuforgeMocks) -> None:
    spec = cluster_spec(network=existing())  # no scheduler: no EKS control plane
    with pytest.raises(InputError, match=r"network\.second_subnet_id .* only the EKS control plane"):
        GpuCluster("demo", spec, now=NOW)
    assert mocks.resources == ()


# -- image pulls: the add-on images come from registries outside AWS --------------------------------------------


def test_endpoints_only_kubernetes_refused_naming_the_registries(mocks: GpuforgeMocks) -> None:
    """With interface endpoints and no NAT the nodes reach AWS services only; nvcr.io and registry.k8s.io are not."""
    spec = cluster_spec(scheduler=kubernetes(), network={"api_access": "endpoints"})  # NetworkSpec's default
    with pytest.raises(InputError) as caught:
        GpuCluster("demo", spec, now=NOW)
    message = caught.value.message
    assert message.startswith("network.api_access = 'endpoints': ")
    assert "nvcr.io (nvidia-device-plugin)" in message
    assert "registry.k8s.io (kueue)" in message
    assert "dkr.ecr" not in message  # the EFA plugin's image has no sourced digest, so it is not applied
    assert "Fix: use network.api_access: nat" in message
    assert "mirror the images to ECR in us-east-1" in message
    assert mocks.resources == ()


def test_nat_kubernetes_makes_the_nat_gateway_and_the_cluster(mocks: GpuforgeMocks) -> None:
    deploy({"api_access": "nat"})
    assert len(mocks.of_type("aws:ec2/natGateway:NatGateway")) == 1
    assert len(mocks.of_type(CLUSTER)) == 1


def test_existing_access_kubernetes_accepted(
    mocks: GpuforgeMocks, subnets: dict[str, tuple[str, str]]
) -> None:
    """`api_access: existing` is the VPC owner's word that the path exists; gpuforge cannot see it."""
    subnets.update({FIRST: (VPC, "us-east-1a"), SECOND: (VPC, "us-east-1b")})
    deploy(existing(api_access="existing"))
    assert len(mocks.of_type(CLUSTER)) == 1


@pytest.mark.parametrize(("scheduler", "access"), [("kubernetes", "nat"), ("slurm", "endpoints")])
def test_stacks_get_nat_for_kubernetes_only(tmp_path: Path, scheduler: str, access: str) -> None:
    block = (
        {
            "type": "kubernetes",
            "kubernetesVersion": "1.35",  # the shipped H100 matrix's kubernetes.version
            "systemNodeType": "m7i.xlarge",
            "adminRoleArn": "arn:aws:iam::123456789012:role/platform-admin",
        }
        if scheduler == "kubernetes"
        else None  # slurm_stack's own Slurm block
    )
    changes = {"gpuforge:scheduler": block} if block else {}
    folder = write_stack(tmp_path / "stack", "dev", slurm_stack(**changes))
    config = load_stack_config(folder, "dev")
    assert stack_config.cluster_spec(config, AMI).network.api_access == access
