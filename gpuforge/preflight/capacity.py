"""Capacity: the stack's On-Demand Capacity Reservation or Capacity Block, as AWS holds it.

A reservation takes only instances that match its instance type, platform and
Availability Zone (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-capacity-reservations.html),
and a Capacity Block likewise refuses an AMI of another platform or a subnet in
another zone (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-launch.html).
gpuforge's images are Ubuntu without license billing, whose platform is
`Linux/UNIX` (InstancePlatform in
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CapacityReservation.html).

A Capacity Block runs from StartDate to EndDate (an extension moves EndDate). AWS
begins terminating its instances 30 minutes before the end
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-using.html);
that lead is `cluster_rules.CAPACITY_BLOCK_TERMINATION_LEAD`, and the node group
scales in earlier still (`capacity.scale_in_minutes_before_end`). The node group
schedules its scaling from the stack's `start` and `end`, so those must be the
block's. Times are printed in the user's local zone and in UTC.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any

from gpuforge.components.cluster_rules import CAPACITY_BLOCK_TERMINATION_LEAD
from gpuforge.preflight.aws import error_code
from gpuforge.preflight.report import Check, Status, fail, ok, worst
from gpuforge.preflight.times import span, when
from gpuforge.stack_config import StackConfig

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client

CAPACITY = "capacity"
LINUX_PLATFORM = "Linux/UNIX"
NOT_FOUND_CODES = frozenset(
    {"InvalidCapacityReservationId.NotFound", "InvalidCapacityReservationId.Malformed"}
)
PLACEMENT_SOURCE = "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CapacityReservation.html"

Reservation = Mapping[str, Any]


def check_on_demand() -> Check:
    return ok(
        CAPACITY,
        "on-demand capacity: no reservation or Capacity Block to check; the quota check covers on-demand launches.",
    )


def describe_reservation(capacity: EC2Client, reservation_id: str) -> Reservation | None:
    """The reservation, or None when this account sees no such id in the region."""
    from botocore.exceptions import ClientError

    try:
        found = capacity.describe_capacity_reservations(CapacityReservationIds=[reservation_id])
    except ClientError as error:
        if error_code(error) in NOT_FOUND_CODES:
            return None
        raise
    reservations = found["CapacityReservations"]
    return reservations[0] if reservations else None


def _not_found(config: StackConfig, what: str) -> Check:
    return fail(
        CAPACITY,
        f"{what} {config.capacity.reservation_id} (gpuforge:capacity.reservationId in {config.source}) "
        f"does not exist in {config.region} for the AWS account in use.",
        f"copy the id from `aws ec2 describe-capacity-reservations --region {config.region}`, and check "
        "aws:region and the AWS profile in use.",
    )


def _attribute_problems(config: StackConfig, reservation: Reservation) -> list[str]:
    problems = []
    if reservation.get("InstanceType") != config.instance_type:
        problems.append(
            f"it reserves {reservation.get('InstanceType')}, the stack launches {config.instance_type} "
            "(gpuforge:instanceType)"
        )
    if reservation.get("AvailabilityZone") != config.availability_zone:
        problems.append(
            f"it is in {reservation.get('AvailabilityZone')}, the stack's zone is "
            f"{config.availability_zone} (gpuforge:availabilityZone)"
        )
    if reservation.get("InstancePlatform") != LINUX_PLATFORM:
        problems.append(
            f"its platform is {reservation.get('InstancePlatform')!r}; gpuforge's Ubuntu images launch as "
            f"{LINUX_PLATFORM!r}, so they cannot use it"
        )
    return problems


def _placement_problem(config: StackConfig, reservation: Reservation) -> tuple[str, str] | None:
    """A mismatch between the reservation's cluster placement group and the stack's, with its fix."""
    arn = reservation.get("PlacementGroupArn")
    group = str(arn).rsplit("/", 1)[-1] if arn else None
    wanted = config.capacity.placement_group
    if group == wanted:
        return None
    if wanted is None:
        return (
            f"it was made in cluster placement group {group!r}, and only instances launched into that "
            f"group use it ({PLACEMENT_SOURCE}, PlacementGroupArn)",
            f"set gpuforge:capacity.placementGroup: {group}",
        )
    if group is None:
        return (
            f"gpuforge:capacity.placementGroup is {wanted!r}, but the reservation is in no placement group, "
            "so instances launched into that group would not use it",
            "remove gpuforge:capacity.placementGroup",
        )
    return (
        f"it is in cluster placement group {group!r}, gpuforge:capacity.placementGroup is {wanted!r}",
        f"set gpuforge:capacity.placementGroup: {group}",
    )


def check_reservation(capacity: EC2Client, config: StackConfig, local: tzinfo | None) -> Check:
    """A targeted On-Demand Capacity Reservation: active, matching, big enough, same placement group."""
    reservation_id = config.capacity.reservation_id
    assert reservation_id is not None  # CapacitySpec requires it for a reservation
    reservation = describe_reservation(capacity, reservation_id)
    if reservation is None:
        return _not_found(config, "Capacity Reservation")
    if reservation.get("ReservationType") == "capacity-block":
        return fail(
            CAPACITY,
            f"{reservation_id} is a Capacity Block ({when(reservation['StartDate'], local)} to "
            f"{when(reservation['EndDate'], local)}), not an On-Demand Capacity Reservation.",
            "set gpuforge:capacity.type: capacity-block with the block's start and end, and nodeMode: asg.",
        )
    attribute_fix = (
        "use a reservation of the stack's instance type, zone and platform, or match the stack to it"
    )
    issues = [(problem, attribute_fix) for problem in _attribute_problems(config, reservation)]
    state = reservation.get("State")
    if state != "active":
        starts = f" (it starts {when(reservation['StartDate'], local)})" if state == "scheduled" else ""
        issues.append(
            (
                f"its state is {state!r}{starts}; instances launch only into an active reservation",
                "wait until the reservation is active, or use an active one",
            )
        )
    available, total = reservation.get("AvailableInstanceCount", 0), reservation.get("TotalInstanceCount", 0)
    if available < config.node_count:
        issues.append(
            (
                f"too small: {available} of its {total} instances are available, the stack needs "
                f"{config.node_count} (gpuforge:nodeCount)",
                f"lower gpuforge:nodeCount to {available}, free instances running in it, or grow it with "
                f"`aws ec2 modify-capacity-reservation --capacity-reservation-id {reservation_id} "
                f"--instance-count {total - available + config.node_count}`",
            )
        )
    placement = _placement_problem(config, reservation)
    if placement is not None:
        issues.append(placement)
    if issues:
        fixes = list(dict.fromkeys(fix for _, fix in issues))
        return fail(
            CAPACITY,
            f"Capacity Reservation {reservation_id}: " + "; ".join(text for text, _ in issues) + ".",
            "; ".join(fixes) + ".",
        )
    group = config.capacity.placement_group
    return ok(
        CAPACITY,
        f"Capacity Reservation {reservation_id}: active, {available} of {total} {config.instance_type} "
        f"available in {config.availability_zone} for {config.node_count} nodes, platform {LINUX_PLATFORM}"
        + (f", in placement group {group!r}" if group else ", no placement group")
        + ".",
    )


def _config_times(
    config: StackConfig, start: datetime, end: datetime, local: tzinfo | None
) -> list[tuple[Status, str, str]]:
    """The block's dates against gpuforge:capacity.start/end, from which the node group schedules its scaling."""
    assert config.capacity.start is not None and config.capacity.end is not None  # CapacitySpec requires both
    items: list[tuple[Status, str, str]] = []
    if config.capacity.start != start:
        items.append(
            (
                Status.FAIL,
                f"gpuforge:capacity.start is {when(config.capacity.start, local)}, but the block starts "
                f"{when(start, local)}; the node group would scale out at the wrong time",
                f"set gpuforge:capacity.start: {start.isoformat()}",
            )
        )
    if config.capacity.end < end:
        items.append(
            (
                Status.WARN,
                f"the block now ends {when(end, local)}, later than gpuforge:capacity.end "
                f"{when(config.capacity.end, local)} (an extension moved it); the node group would scale in "
                "early and leave the extension unused",
                f"set gpuforge:capacity.end: {end.isoformat()}",
            )
        )
    elif config.capacity.end > end:
        items.append(
            (
                Status.FAIL,
                f"the block ends {when(end, local)}, before gpuforge:capacity.end "
                f"{when(config.capacity.end, local)}; AWS would terminate the nodes before the node group "
                "scales in",
                f"set gpuforge:capacity.end: {end.isoformat()}",
            )
        )
    return items


def _state(
    config: StackConfig, reservation: Reservation, now: datetime, local: tzinfo | None
) -> tuple[Status, str, str]:
    """What the block's state and the time left mean for a launch now."""
    start, end = reservation["StartDate"], reservation["EndDate"]
    state = reservation.get("State")
    scale_in = end - timedelta(minutes=config.capacity.scale_in_minutes_before_end)
    terminate = end - CAPACITY_BLOCK_TERMINATION_LEAD
    buy = (
        "buy a new block (`aws ec2 describe-capacity-block-offerings`), then set gpuforge:capacity.reservationId, "
        "start and end to it"
    )
    if state == "expired" or now >= end:
        return Status.FAIL, f"the block ended {when(end, local)} (state {state!r})", buy
    if state in ("active", "scheduled", "payment-pending") and now >= scale_in:
        return (
            Status.FAIL,
            f"too late to launch: AWS begins terminating the block's instances {when(terminate, local)} "
            f"({span(CAPACITY_BLOCK_TERMINATION_LEAD)} before its end), and the node group scales in "
            f"{when(scale_in, local)}; it is now {when(now, local)}",
            buy,
        )
    if state == "active":
        available = reservation.get("AvailableInstanceCount", 0)
        if available < config.node_count:
            return (
                Status.FAIL,
                f"only {available} of its {reservation.get('TotalInstanceCount', 0)} instances are available, "
                f"the stack needs {config.node_count}",
                "terminate instances running in the block that are not this stack's, or lower gpuforge:nodeCount",
            )
        return (
            Status.OK,
            f"active: {span(scale_in - now)} left until the node group scales in {when(scale_in, local)} "
            f"(AWS begins terminating {when(terminate, local)})",
            "",
        )
    if state == "scheduled":
        return (
            Status.WARN,
            f"not started: it starts {when(start, local)}, in {span(start - now)}; until then the node group "
            f"holds 0 nodes and scales to {config.node_count} at the start",
            "none needed if that start is planned: `pulumi up` now creates everything but the nodes",
        )
    if state == "payment-pending":
        return (
            Status.WARN,
            f"payment pending: EC2 schedules the block once the payment goes through (it starts "
            f"{when(start, local)}), or marks it payment-failed",
            "check the payment with `aws ec2 describe-capacity-reservations`, and run preflight again",
        )
    return (
        Status.FAIL,
        f"its state is {state!r}; a Capacity Block takes instances only when scheduled or active",
        buy,
    )


def check_capacity_block(
    capacity: EC2Client, config: StackConfig, now: datetime, local: tzinfo | None
) -> Check:
    """An EC2 Capacity Block for ML: the right block, the stack's dates, and time left to use it."""
    reservation_id = config.capacity.reservation_id
    assert reservation_id is not None  # CapacitySpec requires it for a Capacity Block
    reservation = describe_reservation(capacity, reservation_id)
    if reservation is None:
        return _not_found(config, "Capacity Block")
    if reservation.get("ReservationType") != "capacity-block":
        return fail(
            CAPACITY,
            f"{reservation_id} is an On-Demand Capacity Reservation, not a Capacity Block.",
            "set gpuforge:capacity.type: reservation and remove start and end, or give the block's id.",
        )
    start, end = reservation["StartDate"], reservation["EndDate"]
    items = [
        (Status.FAIL, problem, "use the block bought for this stack's instance type and zone")
        for problem in _attribute_problems(config, reservation)
    ]
    total = reservation.get("TotalInstanceCount", 0)
    if total < config.node_count:
        items.append(
            (
                Status.FAIL,
                f"too small: the block holds {total} instances, the stack needs {config.node_count}",
                f"lower gpuforge:nodeCount to {total}, or buy a block of {config.node_count}",
            )
        )
    items += _config_times(config, start, end, local)
    items.append(_state(config, reservation, now, local))
    status = worst(status for status, _, _ in items)
    shown = [text for _, text, _ in items]
    fixes = [fix for item_status, _, fix in items if item_status is not Status.OK and fix]
    message = (
        f"Capacity Block {reservation_id} ({total} x {reservation.get('InstanceType')} in "
        f"{reservation.get('AvailabilityZone')}): {when(start, local)} to {when(end, local)}; "
        + "; ".join(shown)
        + "."
    )
    return Check(CAPACITY, status, message, "; ".join(fixes) + "." if fixes else None)
