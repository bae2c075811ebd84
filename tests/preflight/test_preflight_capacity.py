"""The capacity check: On-Demand Capacity Reservations and Capacity Blocks.

moto 5.2.5 does not implement DescribeCapacityReservations, so every response here
comes from botocore's Stubber, shaped after AWS's API reference (see
preflight_cases). The stub also checks the request: the reservation is looked up by
the stack's id. `now` and the local time zone are fixed per test.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from preflight_cases import (
    BLOCK_END,
    BLOCK_START,
    NOW,
    RESERVATION_ID,
    block_capacity,
    by_id,
    capacity_block,
    capacity_reservation,
    reservations,
    stack_config,
    stubbed,
    write_stack,
)

from gpuforge.preflight.capacity import check_capacity_block, check_reservation
from gpuforge.preflight.report import Check, Status
from gpuforge.stack_config import StackConfig, load_stack_config

NOWHERE = "http://127.0.0.1:9"  # never contacted: the Stubber answers before a request is made
LOS_ANGELES = ZoneInfo("America/Los_Angeles")


def _config(tmp_path: Path, **overrides: Any) -> StackConfig:
    return load_stack_config(write_stack(tmp_path / "stack", stack_config(**overrides)), "test")


def _reservation_config(tmp_path: Path, **capacity: Any) -> StackConfig:
    spec = {"type": "reservation", "reservationId": RESERVATION_ID, **capacity}
    return _config(tmp_path, **{"gpuforge:capacity": spec, "gpuforge:nodeMode": "instances"})


def _block_config(tmp_path: Path, **capacity: Any) -> StackConfig:
    return _config(tmp_path, **{"gpuforge:capacity": block_capacity(**capacity)})


def _reservation_check(config: StackConfig, answer: dict[str, Any]) -> Check:
    ec2, stubber = stubbed("ec2", NOWHERE)
    stubber.add_response("describe_capacity_reservations", reservations(answer), by_id())
    check = check_reservation(ec2, config, UTC)
    stubber.assert_no_pending_responses()
    return check


def _block_check(config: StackConfig, answer: dict[str, Any], now: datetime = NOW, local: Any = UTC) -> Check:
    ec2, stubber = stubbed("ec2", NOWHERE)
    stubber.add_response("describe_capacity_reservations", reservations(answer), by_id())
    check = check_capacity_block(ec2, config, now, local)
    stubber.assert_no_pending_responses()
    return check


# --- On-Demand Capacity Reservations -------------------------------------------------------


def test_matching_active_reservation_passes(tmp_path: Path) -> None:
    answer = capacity_reservation(TotalInstanceCount=4, AvailableInstanceCount=3)
    check = _reservation_check(_reservation_config(tmp_path), answer)
    assert check.status is Status.OK, check.text
    assert "active, 3 of 4 p5.48xlarge available in us-east-1a for 2 nodes" in check.message
    assert "platform Linux/UNIX, no placement group" in check.message


def test_too_small_reservation_fails_with_the_modify_command(tmp_path: Path) -> None:
    answer = capacity_reservation(TotalInstanceCount=4, AvailableInstanceCount=1)
    check = _reservation_check(_reservation_config(tmp_path), answer)
    assert check.status is Status.FAIL
    assert "too small: 1 of its 4 instances are available, the stack needs 2" in check.message
    assert check.fix is not None
    assert f"--capacity-reservation-id {RESERVATION_ID} --instance-count 5" in check.fix


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("InstanceType", "p4d.24xlarge", "it reserves p4d.24xlarge, the stack launches p5.48xlarge"),
        ("AvailabilityZone", "us-east-1b", "it is in us-east-1b, the stack's zone is us-east-1a"),
        ("InstancePlatform", "Windows", "its platform is 'Windows'"),
    ],
)
def test_reservation_attributes_must_match(tmp_path: Path, field: str, value: str, expected: str) -> None:
    check = _reservation_check(_reservation_config(tmp_path), capacity_reservation(**{field: value}))
    assert check.status is Status.FAIL
    assert expected in check.message


@pytest.mark.parametrize("state", ["expired", "cancelled", "scheduled", "pending"])
def test_inactive_reservation_fails(tmp_path: Path, state: str) -> None:
    check = _reservation_check(_reservation_config(tmp_path), capacity_reservation(State=state))
    assert check.status is Status.FAIL
    assert f"its state is {state!r}" in check.message


def test_unknown_reservation_id_names_the_id_and_region(tmp_path: Path) -> None:
    ec2, stubber = stubbed("ec2", NOWHERE)
    stubber.add_client_error(
        "describe_capacity_reservations",
        service_error_code="InvalidCapacityReservationId.NotFound",
        service_message=f"The capacity reservation ID '{RESERVATION_ID}' does not exist",
        http_status_code=400,
        expected_params=by_id(),
    )
    check = check_reservation(ec2, _reservation_config(tmp_path), UTC)
    assert check.status is Status.FAIL
    assert f"Capacity Reservation {RESERVATION_ID}" in check.message
    assert "does not exist in us-east-1" in check.message


def test_block_given_as_reservation_fails(tmp_path: Path) -> None:
    check = _reservation_check(_reservation_config(tmp_path), capacity_block())
    assert check.status is Status.FAIL
    assert "is a Capacity Block" in check.message
    assert check.fix is not None and "capacity-block" in check.fix


PG_ARN = "arn:aws:ec2:us-east-1:123456789012:placement-group/train-pg"


@pytest.mark.parametrize(
    ("configured", "arn", "status", "expected"),
    [
        ("train-pg", PG_ARN, Status.OK, "in placement group 'train-pg'"),
        (None, PG_ARN, Status.FAIL, "it was made in cluster placement group 'train-pg'"),
        ("train-pg", None, Status.FAIL, "the reservation is in no placement group"),
        ("other-pg", PG_ARN, Status.FAIL, "it is in cluster placement group 'train-pg'"),
    ],
)
def test_reservation_placement_group_must_be_the_stacks(
    tmp_path: Path, configured: str | None, arn: str | None, status: Status, expected: str
) -> None:
    capacity = {"placementGroup": configured} if configured else {}
    answer = capacity_reservation(**({"PlacementGroupArn": arn} if arn else {}))
    check = _reservation_check(_reservation_config(tmp_path, **capacity), answer)
    assert check.status is status, check.text
    assert expected in check.message


# --- Capacity Blocks -------------------------------------------------------------------------


def test_active_block_with_time_left_passes_and_prints_local_and_utc_times(tmp_path: Path) -> None:
    check = _block_check(_block_config(tmp_path), capacity_block(), local=LOS_ANGELES)
    assert check.status is Status.OK, check.text
    # 11:30 UTC is 03:30 Pacific Standard Time in January.
    assert "2030-01-07 03:30 PST (2030-01-07 11:30 UTC) to 2030-01-21 03:30 PST (2030-01-21 11:30 UTC)" in (
        check.message
    )
    # The node group scales in 45 minutes before the end, AWS terminates from 30 minutes before.
    assert "10 d 22 h 45 min left until the node group scales in 2030-01-21 02:45 PST" in check.message
    assert "AWS begins terminating 2030-01-21 03:00 PST (2030-01-21 11:00 UTC)" in check.message


def test_expired_block_fails(tmp_path: Path) -> None:
    after = BLOCK_END + timedelta(hours=1)
    check = _block_check(_block_config(tmp_path), capacity_block(State="expired"), now=after)
    assert check.status is Status.FAIL
    assert "the block ended 2030-01-21 11:30 UTC (state 'expired')" in check.message
    assert check.fix is not None and "describe-capacity-block-offerings" in check.fix


def test_block_past_its_end_fails_even_if_still_reported_active(tmp_path: Path) -> None:
    check = _block_check(_block_config(tmp_path), capacity_block(), now=BLOCK_END + timedelta(minutes=1))
    assert check.status is Status.FAIL
    assert "the block ended" in check.message


@pytest.mark.parametrize("minutes_left", [40, 20])
def test_block_too_close_to_its_end_fails(tmp_path: Path, minutes_left: int) -> None:
    now = BLOCK_END - timedelta(minutes=minutes_left)
    check = _block_check(_block_config(tmp_path), capacity_block(), now=now)
    assert check.status is Status.FAIL
    assert (
        "too late to launch: AWS begins terminating the block's instances 2030-01-21 11:00 UTC"
        in check.message
    )
    assert "the node group scales in 2030-01-21 10:45 UTC" in check.message


def test_block_just_before_scale_in_still_passes(tmp_path: Path) -> None:
    now = BLOCK_END - timedelta(minutes=46)
    check = _block_check(_block_config(tmp_path), capacity_block(), now=now)
    assert check.status is Status.OK, check.text
    assert "1 min left until the node group scales in" in check.message


def test_block_not_started_warns_with_start_time(tmp_path: Path) -> None:
    before = BLOCK_START - timedelta(days=2, hours=3)
    check = _block_check(_block_config(tmp_path), capacity_block(State="scheduled"), now=before)
    assert check.status is Status.WARN
    assert "not started: it starts 2030-01-07 11:30 UTC, in 2 d 3 h" in check.message
    assert "holds 0 nodes" in check.message


def test_block_payment_pending_warns(tmp_path: Path) -> None:
    before = BLOCK_START - timedelta(days=1)
    check = _block_check(_block_config(tmp_path), capacity_block(State="payment-pending"), now=before)
    assert check.status is Status.WARN
    assert "payment pending" in check.message


@pytest.mark.parametrize("state", ["payment-failed", "cancelled", "unavailable"])
def test_block_in_an_unusable_state_fails(tmp_path: Path, state: str) -> None:
    check = _block_check(_block_config(tmp_path), capacity_block(State=state))
    assert check.status is Status.FAIL
    assert f"its state is {state!r}" in check.message


def test_extended_block_warns_to_move_the_configured_end(tmp_path: Path) -> None:
    extended = BLOCK_END + timedelta(days=7)
    check = _block_check(_block_config(tmp_path), capacity_block(EndDate=extended))
    assert check.status is Status.WARN
    assert (
        "the block now ends 2030-01-28 11:30 UTC, later than gpuforge:capacity.end 2030-01-21 11:30 UTC"
        in (check.message)
    )
    assert check.fix is not None and "set gpuforge:capacity.end: 2030-01-28T11:30:00+00:00" in check.fix


def test_block_ending_before_the_configured_end_fails(tmp_path: Path) -> None:
    check = _block_check(_block_config(tmp_path), capacity_block(EndDate=BLOCK_END - timedelta(days=1)))
    assert check.status is Status.FAIL
    assert "AWS would terminate the nodes before the node group scales in" in check.message


def test_configured_start_must_be_the_blocks(tmp_path: Path) -> None:
    config = _block_config(tmp_path, start="2030-01-06T11:30:00Z")
    check = _block_check(config, capacity_block())
    assert check.status is Status.FAIL
    assert "gpuforge:capacity.start is 2030-01-06 11:30 UTC, but the block starts 2030-01-07 11:30 UTC" in (
        check.message
    )


def test_block_smaller_than_the_stack_fails(tmp_path: Path) -> None:
    answer = capacity_block(TotalInstanceCount=1, AvailableInstanceCount=1)
    check = _block_check(_block_config(tmp_path), answer)
    assert check.status is Status.FAIL
    assert "too small: the block holds 1 instances, the stack needs 2" in check.message


def test_block_in_another_zone_fails(tmp_path: Path) -> None:
    check = _block_check(_block_config(tmp_path), capacity_block(AvailabilityZone="us-east-1c"))
    assert check.status is Status.FAIL
    assert "it is in us-east-1c, the stack's zone is us-east-1a" in check.message


def test_reservation_given_as_block_fails(tmp_path: Path) -> None:
    check = _block_check(_block_config(tmp_path), capacity_reservation())
    assert check.status is Status.FAIL
    assert "is an On-Demand Capacity Reservation, not a Capacity Block" in check.message
