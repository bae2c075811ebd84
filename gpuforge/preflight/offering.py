"""Instance offering: the type is sold in the stack's zone and has what the launch template uses.

The launch template gives each node every EFA interface of `efa_layout`, and the
placement component puts on-demand nodes in a new cluster placement group (and
reservation nodes in the reservation's group, where it has one). AWS's
DescribeInstanceTypes answer must allow both; the hardware catalog is a copy of
that answer, and this check catches a catalog row that no longer matches AWS.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from gpuforge.components.efa_layout import efa_interface_count
from gpuforge.hardware import InstanceType
from gpuforge.preflight.report import Check, fail, ok
from gpuforge.stack_config import StackConfig

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ec2.literals import InstanceTypeType

OFFERING = "offering"
INSTANCE_TYPE = "instance-type"


def check_offering(ec2: EC2Client, config: StackConfig) -> Check:
    """The instance type is offered in the configured Availability Zone."""
    paginator = ec2.get_paginator("describe_instance_type_offerings")
    zones = sorted(
        offering["Location"]
        for page in paginator.paginate(
            LocationType="availability-zone",
            Filters=[{"Name": "instance-type", "Values": [config.instance_type]}],
        )
        for offering in page["InstanceTypeOfferings"]
    )
    if config.availability_zone in zones:
        return ok(OFFERING, f"{config.instance_type} is offered in {config.availability_zone}.")
    where = f"it is offered in {', '.join(zones)}" if zones else "it is offered in no zone of the region"
    return fail(
        OFFERING,
        f"{config.instance_type} is not offered in {config.availability_zone} "
        f"(gpuforge:availabilityZone in {config.source}); in {config.region} {where}.",
        "set gpuforge:availabilityZone to a zone that offers the type (for a reservation or Capacity "
        "Block, its own zone), or pick another instance type or region.",
    )


def placement_use(config: StackConfig) -> str | None:
    """How the stack places its nodes, when that needs the cluster strategy (None: no group)."""
    capacity = config.capacity
    if capacity.type == "on-demand":
        return "the stack creates a cluster placement group for on-demand nodes"
    if capacity.type == "reservation" and capacity.placement_group is not None:
        return f"the nodes launch into the reservation's cluster placement group {capacity.placement_group!r}"
    return None


def check_instance_type(ec2: EC2Client, config: StackConfig, instance: InstanceType) -> Check:
    """AWS's description of the type allows the EFA interfaces and placement the stack uses."""
    described = ec2.describe_instance_types(InstanceTypes=[cast("InstanceTypeType", config.instance_type)])[
        "InstanceTypes"
    ]
    if not described:
        return fail(
            INSTANCE_TYPE,
            f"DescribeInstanceTypes returned nothing for {config.instance_type} in {config.region}.",
            "check gpuforge:instanceType and aws:region.",
        )
    network = described[0].get("NetworkInfo", {})
    strategies = described[0].get("PlacementGroupInfo", {}).get("SupportedStrategies", [])
    problems: list[str] = []
    found: list[str] = []
    efa_count = efa_interface_count(instance)
    if efa_count:
        aws_max = network.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0)
        if not network.get("EfaSupported", False) or aws_max < efa_count:
            problems.append(
                f"the launch template gives each node {efa_count} EFA interface(s), but AWS reports "
                f"EfaSupported={network.get('EfaSupported', False)} with at most {aws_max}"
            )
        else:
            found.append(f"EFA supported ({efa_count} interface(s) per node, AWS allows {aws_max})")
    else:
        found.append("no EFA used on this type")
    use = placement_use(config)
    if use is None:
        found.append("no cluster placement group needed")
    elif "cluster" not in strategies:
        problems.append(f"{use}, but AWS lists the placement strategies {strategies} for it")
    else:
        found.append(f"cluster placement supported ({use})")
    if problems:
        return fail(
            INSTANCE_TYPE,
            f"{config.instance_type}: " + "; ".join(problems) + ".",
            "regenerate the hardware catalog row with scripts/regen_instance_types.py, or pick a type "
            "that supports what the stack uses.",
        )
    return ok(INSTANCE_TYPE, f"{config.instance_type}: " + "; ".join(found) + ".")
