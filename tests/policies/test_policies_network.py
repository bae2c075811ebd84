"""efa-placement, efa-security-group and node-open-ingress on real cluster output."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_aws as aws
from policy_helpers import (
    ASG,
    EGRESS,
    INGRESS,
    LAUNCH_TEMPLATE,
    SECURITY_GROUP,
    Images,
    cluster,
    edit,
    mandatory,
    named,
    of,
    record,
    record_cluster,
    spec,
    verdicts,
)

from gpuforge.components import GpuCluster

RESERVATION = "cr-0123456789abcdef0"
BLOCK = {
    "type": "capacity-block",
    "reservation_id": RESERVATION,
    "start": "2030-01-07T11:30:00Z",
    "end": "2030-01-21T11:30:00Z",
}


def test_each_capacity_type_places_nodes_right(images: Images) -> None:
    for capacity in ({"type": "on-demand"}, BLOCK, {"type": "reservation", "reservation_id": RESERVATION}):
        found = verdicts(record_cluster(spec(images, capacity=capacity)), images)
        assert of(found, "efa-placement") == [], capacity
    with_group = {
        "type": "reservation",
        "reservation_id": RESERVATION,
        "placement_group": "odcr-cluster-group",
    }
    assert (
        of(
            verdicts(record_cluster(spec(images, capacity=with_group, node_mode="instances")), images),
            "efa-placement",
        )
        == []
    )


def test_on_demand_without_placement_group(images: Images) -> None:
    resources = record_cluster(spec(images), edit(ASG, placement_group=None))
    [verdict] = of(verdicts(resources, images), "efa-placement")
    assert verdict.enforcement == "mandatory" and verdict.urn == named(resources, ASG).urn
    assert "on-demand p5.48xlarge EFA nodes without a placement group" in verdict.message
    assert "cluster placement group" in verdict.message


def test_partition_strategy_is_not_cluster(images: Images) -> None:
    resources = record_cluster(spec(images, placement_strategy="partition", partition_count=2))
    [verdict] = of(verdicts(resources, images), "efa-placement")
    assert "strategy 'partition'" in verdict.message and "set strategy to 'cluster'" in verdict.message
    assert "allow 'partition' in this policy's `strategies` config" in verdict.message


def test_partition_strategy_passes_when_the_policy_config_allows_it(images: Images) -> None:
    resources = record_cluster(spec(images, placement_strategy="partition", partition_count=2))
    config = {"efa-placement": {"strategies": ["cluster", "partition"]}}
    assert of(verdicts(resources, images, config), "efa-placement") == []


def test_capacity_block_takes_no_group(images: Images) -> None:
    resources = record_cluster(spec(images, capacity=BLOCK), edit(ASG, placement_group="my-cluster-group"))
    [verdict] = of(verdicts(resources, images), "efa-placement")
    assert "runs on a Capacity Block but launches into placement group 'my-cluster-group'" in verdict.message


def test_reservation_with_a_new_group(images: Images) -> None:
    """A group created beside an ODCR made elsewhere: the nodes would not use the reservation."""

    def new_group(_: object) -> pulumi.Output[str]:
        return aws.ec2.PlacementGroup("beside-odcr", strategy="cluster").name

    resources = record_cluster(
        spec(images, capacity={"type": "reservation", "reservation_id": RESERVATION}),
        edit(ASG, placement_group=new_group),
    )
    [verdict] = of(verdicts(resources, images), "efa-placement")
    assert f"uses capacity reservation {RESERVATION!r}, made outside the stack" in verdict.message


def test_reservation_created_in_the_stack_with_its_own_group(images: Images) -> None:
    """An ODCR the stack creates in a cluster group: its nodes launch into that group, and no other."""

    def program(node_group: str) -> Any:
        def build() -> None:
            own = aws.ec2.PlacementGroup("odcr-group", strategy="cluster")
            other = aws.ec2.PlacementGroup("other-group", strategy="cluster")
            reservation = aws.ec2.CapacityReservation(
                "odcr",
                instance_type="p5.48xlarge",
                instance_platform="Linux/UNIX",
                availability_zone="us-east-1a",
                instance_count=2,
                placement_group_arn=own.arn,
            )
            target = aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
                capacity_reservation_target=aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
                    capacity_reservation_id=reservation.id
                )
            )
            group = own if node_group == "own" else other
            cluster(
                spec(images, capacity={"type": "reservation", "reservation_id": RESERVATION}),
                edit(LAUNCH_TEMPLATE, capacity_reservation_specification=target),
                edit(ASG, placement_group=group.name),
            )()

        return build

    assert of(verdicts(record(program("own")), images), "efa-placement") == []
    [verdict] = of(verdicts(record(program("other")), images), "efa-placement")
    assert (
        "launches into placement group 'other-group'" in verdict.message
        and "its group 'odcr-group'" in verdict.message
    )


def test_nodes_in_two_subnets(images: Images) -> None:
    resources = record_cluster(
        spec(images), edit(ASG, vpc_zone_identifiers=lambda current: [*current, "subnet-0123456789abcdef0"])
    )
    [verdict] = of(verdicts(resources, images), "efa-placement")
    assert "spans 2 subnets" in verdict.message and "'subnet-0123456789abcdef0'" in verdict.message


def test_two_clusters_in_different_subnets(images: Images) -> None:
    def build() -> None:
        for name in ("alpha", "beta"):
            GpuCluster(name, spec(images, name=name, bucket=None))

    found = of(verdicts(record(build), images), "efa-placement")
    assert [verdict.urn for verdict in found] == [None]  # one stack-level verdict
    assert "sit in different subnets" in found[0].message


def test_efa_security_group_rules(images: Images) -> None:
    clean = record_cluster(spec(images))
    assert of(verdicts(clean, images), "efa-security-group") == []
    one_way = record_cluster(
        spec(images), edit(EGRESS, name_suffix="efa-out-self", ip_protocol="tcp", from_port=443, to_port=443)
    )
    [verdict] = of(verdicts(one_way, images), "efa-security-group")
    assert verdict.enforcement == "mandatory" and verdict.urn == named(one_way, LAUNCH_TEMPLATE).urn
    assert "lacks all egress from/to itself" in verdict.message and "demo-network-efa" in verdict.message


def test_efa_self_rules_written_other_ways(images: Images) -> None:
    """Inline rules on the group, or SecurityGroupRule resources, satisfy the rule as well."""
    not_self = {"referenced_security_group_id": None, "cidr_ipv4": "10.0.0.0/16"}
    inline = record_cluster(
        spec(images),
        edit(INGRESS, name_suffix="efa-in-self", **not_self),
        edit(EGRESS, name_suffix="efa-out-self", **not_self),
        edit(
            SECURITY_GROUP,
            name_suffix="network-efa",
            ingress=[aws.ec2.SecurityGroupIngressArgs(protocol="-1", from_port=0, to_port=0, self=True)],
            egress=[aws.ec2.SecurityGroupEgressArgs(protocol="-1", from_port=0, to_port=0, self=True)],
        ),
    )
    assert of(verdicts(inline, images), "efa-security-group") == []

    def with_rule_resources() -> None:
        built = cluster(
            spec(images),
            edit(INGRESS, name_suffix="efa-in-self", **not_self),
            edit(EGRESS, name_suffix="efa-out-self", **not_self),
        )()
        for direction in ("ingress", "egress"):
            aws.ec2.SecurityGroupRule(
                f"efa-{direction}-self",
                type=direction,
                security_group_id=built.security_group_id,
                protocol="-1",
                from_port=0,
                to_port=0,
                self=True,
            )

    assert of(verdicts(record(with_rule_resources), images), "efa-security-group") == []
    only_ingress = record_cluster(
        spec(images),
        edit(INGRESS, name_suffix="efa-in-self", **not_self),
        edit(EGRESS, name_suffix="efa-out-self", **not_self),
    )
    [verdict] = of(verdicts(only_ingress, images), "efa-security-group")
    assert "lacks all ingress from/to itself and all egress from/to itself" in verdict.message


def test_open_ingress_on_node_groups(images: Images) -> None:
    def open_ssh() -> None:
        built = cluster(spec(images))()
        aws.vpc.SecurityGroupIngressRule(
            "ssh-from-anywhere",
            security_group_id=built.security_group_id,
            cidr_ipv4="0.0.0.0/0",
            ip_protocol="tcp",
            from_port=22,
            to_port=22,
        )

    resources = record(open_ssh)
    [verdict] = of(verdicts(resources, images), "node-open-ingress")
    assert verdict.urn == next(r.urn for r in resources if r.name == "ssh-from-anywhere")
    assert "lets 0.0.0.0/0 into node security group" in verdict.message
    inline = record_cluster(
        spec(images),
        edit(
            SECURITY_GROUP,
            name_suffix="network-efa",
            ingress=[
                aws.ec2.SecurityGroupIngressArgs(
                    protocol="tcp", from_port=22, to_port=22, ipv6_cidr_blocks=["::/0"]
                )
            ],
        ),
    )
    [verdict] = of(verdicts(inline, images), "node-open-ingress")
    assert "lets ::/0 into node security group" in verdict.message
    # The endpoints' group is not a node group: the nodes never carry it.
    endpoints = record_cluster(
        spec(images),
        edit(
            INGRESS,
            name_suffix="endpoints-in-https",
            referenced_security_group_id=None,
            cidr_ipv4="0.0.0.0/0",
        ),
    )
    assert of(verdicts(endpoints, images), "node-open-ingress") == []
    assert mandatory(verdicts(record_cluster(spec(images)), images)) == []


def test_template_outside_the_stack(images: Images) -> None:
    resources = record_cluster(
        spec(images),
        edit(
            ASG,
            launch_template=aws.autoscaling.GroupLaunchTemplateArgs(id="lt-0123456789abcdef0", version="1"),
        ),
    )
    [verdict] = of(verdicts(resources, images), "efa-placement")
    assert (
        "launches from launch template 'lt-0123456789abcdef0', which the stack does not create"
        in verdict.message
    )
