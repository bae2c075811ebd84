"""Rules that join several inputs of a cluster, or need the hardware catalog.

The spec models (`specs`) and the components call these same functions, so a
component used on its own refuses exactly what a GpuClusterSpec refuses.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

from gpuforge import hardware
from gpuforge.components.input_errors import invalid
from gpuforge.errors import UnknownInstanceType
from gpuforge.scheduler import slurm_values
from gpuforge.subnet_limits import SUBNET_RESERVED_ADDRESSES, SUBNET_SIZING_SOURCE

if TYPE_CHECKING:
    from gpuforge.components.specs import CapacitySpec, NodeMode, PlacementStrategy

# AWS starts terminating Capacity Block instances 30 minutes before the block ends: the
# "Capacity Block Expiration Warning" event comes 40 minutes before the end and says
# instances "will begin to terminate in 10 minutes".
# Source: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-monitor.html
CAPACITY_BLOCK_TERMINATION_LEAD = timedelta(minutes=30)

# Instances of a Capacity Block are placed close together by AWS ("automatically placed
# close together inside Amazon EC2 UltraClusters"), so no cluster placement group is
# needed; a placement group there can only narrow where the reserved capacity may land.
# Source: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CapacityBlock.html
CAPACITY_BLOCK_PLACEMENT_SOURCE = (
    "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CapacityBlock.html"
)

# Capacity Blocks last 1 to 14 days in 1-day steps, or up to 182 days in 7-day steps.
# Source: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-capacity-blocks.html
CAPACITY_BLOCK_MAX_DURATION = timedelta(days=182)
CAPACITY_BLOCK_SOURCE = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-capacity-blocks.html"


# A partition placement group has up to seven partitions per Availability Zone.
# Source: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-strategies.html
MAX_PARTITIONS = 7

# Tag rules: keys 1-128 characters, values up to 256, the `aws:` prefix is reserved.
# Source: https://docs.aws.amazon.com/tag-editor/latest/userguide/tagging.html
_TAG_KEY_MAX = 128
_TAG_VALUE_MAX = 256
# Tags gpuforge sets itself (cluster, matrix pins); users may not override them.
GPUFORGE_TAG_PREFIX = "gpuforge:"

# Reservation ids and zone names are checked whole by gpuforge.scheduler.slurm_values' rules.
# Terraform/Pulumi duration strings for wait_for_capacity_timeout, e.g. "0", "20m", "1h30m".
_DURATION = re.compile(r"(?:0|(?=[0-9])(?:[0-9]+h)?(?:[0-9]+m)?(?:[0-9]+s)?)")


def instance_type(name: str) -> hardware.InstanceType:
    """The catalog row for `name`; an unknown type names the `instance_type` input."""
    try:
        return hardware.get(name)
    except UnknownInstanceType as error:
        raise UnknownInstanceType(f"instance_type: {error.message}") from None


def region_of_zone(zone: str) -> str:
    """The region an Availability Zone name belongs to (us-east-1a -> us-east-1)."""
    slurm_values.AVAILABILITY_ZONE.check(zone, field="availability_zone")
    return slurm_values.availability_zone_region(zone)


def check_availability_zone(zone: str, region: str, region_from: str = "the AMI's region") -> None:
    """The zone must be in `region`; `region_from` names where that region was set, for the message
    (a stack's `aws:region`, or the AMI's region for a spec built in code)."""
    if region_of_zone(zone) != region:
        raise invalid(
            "availability_zone",
            zone,
            f"the zone is in {region_of_zone(zone)}, not in {region_from} {region!r}; an AMI id exists in one region only",
            f"pick a zone in {region}, or set {region_from} to {region_of_zone(zone)} (with an AMI catalogued there)",
        )


def check_capacity(capacity: CapacitySpec) -> None:
    """Each capacity type takes exactly the fields it needs."""
    if capacity.type == "on-demand":
        _refuse_set(
            capacity,
            ("reservation_id", "start", "end", "placement_group", "upfront_fee_usd"),
            "on-demand capacity",
        )
        return
    if capacity.reservation_id is None:
        what = "a Capacity Block" if capacity.type == "capacity-block" else "a targeted Capacity Reservation"
        raise invalid(
            "capacity.reservation_id",
            None,
            f"{what} is used through its reservation id; without one the nodes could not use it",
            "set reservation_id to the cr-... id of the reservation",
        )
    slurm_values.RESERVATION_ID.check(capacity.reservation_id, field="capacity.reservation_id")
    if capacity.type == "reservation":
        _refuse_set(capacity, ("start", "end", "upfront_fee_usd"), "an On-Demand Capacity Reservation")
        if capacity.placement_group is not None and not 1 <= len(capacity.placement_group) <= 255:
            raise invalid(
                "capacity.placement_group",
                capacity.placement_group,
                "a placement group name is 1-255 characters",
                "copy the reservation's placement group name",
            )
        return
    _check_capacity_block(capacity)


def _check_capacity_block(capacity: CapacitySpec) -> None:
    if capacity.placement_group is not None:
        raise invalid(
            "capacity.placement_group",
            capacity.placement_group,
            "a Capacity Block takes no placement group: AWS places its instances close together, "
            "and a group can only narrow where the reserved capacity may land",
            "remove placement_group",
            source=CAPACITY_BLOCK_PLACEMENT_SOURCE,
        )
    for field in ("start", "end"):
        value = getattr(capacity, field)
        if value is None:
            raise invalid(
                f"capacity.{field}",
                None,
                "a Capacity Block node group scales out at the block's start and in before its end",
                f"set {field} to the block's {field} date with its time zone (e.g. 2026-05-01T11:30:00Z)",
            )
        if value.tzinfo is None or value.utcoffset() is None:
            raise invalid(
                f"capacity.{field}",
                value.isoformat(),
                "a time without a time zone is ambiguous",
                "add the zone, e.g. a trailing Z for UTC as EC2 prints it",
            )
    assert capacity.start is not None and capacity.end is not None  # checked just above
    fee = capacity.upfront_fee_usd
    if fee is not None and not (math.isfinite(fee) and fee > 0):
        raise invalid(
            "capacity.upfront_fee_usd",
            fee,
            "a Capacity Block's upfront fee is a positive amount in USD",
            "set upfront_fee_usd to the fee the purchase showed, or remove it",
        )
    lead = timedelta(minutes=capacity.scale_in_minutes_before_end)
    if lead <= CAPACITY_BLOCK_TERMINATION_LEAD:
        raise invalid(
            "capacity.scale_in_minutes_before_end",
            capacity.scale_in_minutes_before_end,
            "AWS begins terminating Capacity Block instances 30 minutes before the end, "
            "so the group must scale in earlier than that",
            "use more than 30 (the default is 45)",
            source="https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-monitor.html",
        )
    if capacity.end <= capacity.start:
        raise invalid(
            "capacity.end",
            capacity.end.isoformat(),
            f"a Capacity Block ends after it starts ({capacity.start.isoformat()})",
            "copy start and end from the Capacity Block's offering (describe-capacity-block-offerings)",
            source=CAPACITY_BLOCK_SOURCE,
        )
    if capacity.end - capacity.start > CAPACITY_BLOCK_MAX_DURATION:
        raise invalid(
            "capacity.end",
            capacity.end.isoformat(),
            f"a Capacity Block lasts at most {CAPACITY_BLOCK_MAX_DURATION.days} days; this one lasts "
            f"{(capacity.end - capacity.start).days} days from {capacity.start.isoformat()}",
            "copy start and end from the Capacity Block's offering (describe-capacity-block-offerings)",
            source=CAPACITY_BLOCK_SOURCE,
        )
    if capacity.end - lead <= capacity.start:
        raise invalid(
            "capacity.end",
            capacity.end.isoformat(),
            f"the block must last longer than the {capacity.scale_in_minutes_before_end}-minute "
            f"scale-in lead after its start {capacity.start.isoformat()}",
            "check the start and end dates against the Capacity Block",
        )


def private_subnet_block(vpc_cidr: str) -> ipaddress.IPv4Network:
    """The private subnet of a new VPC: the first half of its block (the controller's address lies in it)."""
    return next(ipaddress.IPv4Network(vpc_cidr).subnets(prefixlen_diff=1))


def check_subnet_addresses(
    instance: hardware.InstanceType, node_count: int, subnet: ipaddress.IPv4Network, *, controllers: int
) -> None:
    """Refuse a node count whose addresses cannot fit the subnet the nodes are launched in.

    A node takes one private address for each interface that carries IP (the primary one, and
    an EFA-with-ENA interface); EFA-only interfaces take none, since AWS cannot assign them an
    IP address (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/create-efa.html).
    `controllers` counts other instances in the subnet (the Slurm controller).
    """
    from gpuforge.components.efa_layout import interface_layout  # efa_layout imports hardware only

    per_node = sum(1 for slot in interface_layout(instance) if slot.takes_ip)
    needed = node_count * per_node + controllers
    usable = subnet.num_addresses - SUBNET_RESERVED_ADDRESSES
    if needed > usable:
        raise invalid(
            "node_count",
            node_count,
            f"{node_count} {instance.name} node(s) need {needed} private addresses ({per_node} each"
            f"{f', plus {controllers} for the controller' if controllers else ''}), more than the "
            f"{usable} the subnet {subnet} can give (AWS reserves {SUBNET_RESERVED_ADDRESSES})",
            f"use at most {(usable - controllers) // per_node} nodes, or a larger VPC block (up to /16)",
            source=SUBNET_SIZING_SOURCE,
        )


def _refuse_set(capacity: CapacitySpec, fields: tuple[str, ...], what: str) -> None:
    for field in fields:
        value = getattr(capacity, field)
        if value is not None:
            raise invalid(
                f"capacity.{field}",
                value,
                f"{what} does not use {field}",
                f"remove {field}, or set capacity.type to the kind of capacity it belongs to",
            )


def check_capacity_block_type(instance: hardware.InstanceType, capacity: CapacitySpec) -> None:
    """Refuse a Capacity Block on a type AWS does not sell as one.

    AWS sells Capacity Blocks only for the types whose DescribeInstanceTypes `SupportedUsageClasses`
    lists `capacity-block`; on any other type the reservation cannot exist, and the plan would be one
    `pulumi up` could never satisfy.
    """
    if capacity.type != "capacity-block" or "capacity-block" in instance.supported_usage_classes:
        return
    sold = sorted(
        name for name, row in hardware.catalog().items() if "capacity-block" in row.supported_usage_classes
    )
    raise invalid(
        "capacity.type",
        capacity.type,
        f"AWS sells {instance.name} as {', '.join(instance.supported_usage_classes) or 'nothing'} "
        "(DescribeInstanceTypes SupportedUsageClasses), not as a Capacity Block",
        f"use on-demand or a reservation for {instance.name}, or a type sold as a Capacity Block: "
        + ", ".join(sold),
        source="https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_InstanceTypeInfo.html "
        "(SupportedUsageClasses); gpuforge/data/instance_types.json",
    )


def check_node_mode(node_mode: NodeMode, capacity: CapacitySpec) -> None:
    if node_mode == "instances" and capacity.type == "capacity-block":
        raise invalid(
            "node_mode",
            node_mode,
            "fixed instances cannot launch before a Capacity Block starts, and AWS terminates them "
            "at its end; only an Auto Scaling group follows the block with scheduled actions",
            "use node_mode: asg",
        )


def check_placement(
    instance: hardware.InstanceType,
    strategy: PlacementStrategy,
    partition_count: int | None,
    capacity: CapacitySpec,
) -> None:
    if strategy != "cluster" and capacity.type != "on-demand":
        raise invalid(
            "placement_strategy",
            strategy,
            f"gpuforge creates a placement group only for on-demand capacity; {capacity.type} "
            "capacity uses the reservation's own group or none",
            "remove placement_strategy",
        )
    if strategy not in instance.placement_strategies:
        raise invalid(
            "placement_strategy",
            strategy,
            f"{instance.name} supports {list(instance.placement_strategies)}",
            "pick one of those",
            source=instance.source,
        )
    if strategy == "partition":
        if partition_count is None or not 2 <= partition_count <= MAX_PARTITIONS:
            raise invalid(
                "partition_count",
                partition_count,
                f"a partition placement group has 2 to {MAX_PARTITIONS} partitions per Availability Zone",
                f"set partition_count between 2 and {MAX_PARTITIONS}",
                source="https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-strategies.html",
            )
    elif partition_count is not None:
        raise invalid(
            "partition_count",
            partition_count,
            "partitions belong to the partition strategy",
            "remove partition_count, or set placement_strategy: partition",
        )


def check_user_tags(tags: Mapping[str, str]) -> None:
    """A spec's own tags: AWS's rules, and none of the keys gpuforge sets itself."""
    check_tags(tags)
    for key in tags:
        if key.startswith(GPUFORGE_TAG_PREFIX):
            raise invalid(
                "tags",
                key,
                f"keys starting with {GPUFORGE_TAG_PREFIX!r} are set by gpuforge (cluster, matrix pins)",
                "rename the tag",
            )


def check_tags(tags: Mapping[str, str]) -> None:
    for key, value in tags.items():
        if not 1 <= len(key) <= _TAG_KEY_MAX or key.lower().startswith("aws:"):
            raise invalid(
                "tags",
                key,
                f"tag keys are 1-{_TAG_KEY_MAX} characters and may not start with 'aws:'",
                "rename the tag",
                source="https://docs.aws.amazon.com/tag-editor/latest/userguide/tagging.html",
            )
        if len(value) > _TAG_VALUE_MAX:
            raise invalid(
                f"tags.{key}",
                value,
                f"tag values are at most {_TAG_VALUE_MAX} characters",
                "shorten the value",
                source="https://docs.aws.amazon.com/tag-editor/latest/userguide/tagging.html",
            )


def check_wait_timeout(value: str) -> None:
    if not _DURATION.fullmatch(value):
        raise invalid(
            "wait_for_capacity_timeout",
            value,
            "a duration such as 20m or 1h30m, or 0 to not wait",
            "write it in that form",
        )


def wait_for_capacity_timeout(capacity: CapacitySpec) -> str:
    """How long `pulumi up` waits for the Auto Scaling group to reach its size.

    - on-demand: "0". GPU On-Demand capacity is often short; a wait that times out fails
      the update and leaves the group marked for replacement, which would destroy the
      nodes that did launch. The group keeps trying in the background instead.
    - reservation: "20m". The capacity is held for us, so the nodes should come up;
      waiting makes a wrong reservation (zone, type, platform) fail the update visibly.
    - capacity-block: "0". The group holds no nodes until the block starts.
    """
    if capacity.type == "reservation":
        return "20m"
    return "0"
