"""How the quota check counts vCPUs already in use, instance by instance.

moto 5.2.5 does not record which Capacity Reservation an instance runs in (its
DescribeInstances leaves CapacityReservationId empty and reports Capacity Block
instances as Spot), so this test answers DescribeInstances, DescribeInstanceTypes
and DescribeCapacityReservations with botocore's Stubber, shaped after AWS's API
reference (Instance: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_Instance.html).
The run-level tests cover the same check against moto where moto can serve it.
"""

from __future__ import annotations

from typing import Any

from preflight_cases import ACTIVE_FILTER, capacity_block, capacity_reservation, reservations, stubbed

from gpuforge.preflight.quota import G_AND_VT_INSTANCES, P_INSTANCES, family_usage, quota_for

NOWHERE = "http://127.0.0.1:9"  # never contacted: the Stubbers answer every call
ODCR = "cr-0aaaaaaaaaaaaaaaa"
BLOCK = "cr-0bbbbbbbbbbbbbbbb"


def _instance(instance_id: str, instance_type: str, **extra: Any) -> dict[str, Any]:
    return {
        "InstanceId": instance_id,
        "InstanceType": instance_type,
        "State": {"Code": 16, "Name": "running"},
        "Placement": {"AvailabilityZone": "us-east-1a", "Tenancy": "default"},
        **extra,
    }


def _vcpus(instance_type: str, count: int) -> dict[str, Any]:
    return {"InstanceType": instance_type, "VCpuInfo": {"DefaultVCpus": count}}


def test_usage_counts_each_instance_once_and_reservations_whole() -> None:
    ec2, ec2_stub = stubbed("ec2", NOWHERE)
    capacity, capacity_stub = stubbed("ec2", NOWHERE)
    capacity_stub.add_response(
        "describe_capacity_reservations",
        reservations(
            capacity_reservation(CapacityReservationId=ODCR, TotalInstanceCount=2, AvailableInstanceCount=1),
            capacity_block(CapacityReservationId=BLOCK),
            capacity_reservation(CapacityReservationId="cr-0cccccccccccccccc", InstanceType="g6e.48xlarge"),
        ),
        ACTIVE_FILTER,
    )
    instances = [
        _instance("i-0000000000000000a", "p5.48xlarge", CapacityReservationId=ODCR),  # inside the ODCR
        _instance(
            "i-0000000000000000b",
            "p5.48xlarge",
            CapacityReservationId=BLOCK,
            InstanceLifecycle="capacity-block",
        ),
        _instance("i-0000000000000000c", "p4d.24xlarge"),  # plain On-Demand
        _instance("i-0000000000000000d", "p5.48xlarge", InstanceLifecycle="spot"),  # Spot: its own quota
        _instance("i-0000000000000000e", "g6e.48xlarge"),  # the G and VT quota
    ]
    ec2_stub.add_response(
        "describe_instances",
        {"Reservations": [{"ReservationId": "r-0123456789abcdef0", "Instances": instances}]},
        {"Filters": [{"Name": "instance-state-name", "Values": ["pending", "running"]}]},
    )
    ec2_stub.add_response(
        "describe_instance_types",
        {"InstanceTypes": [_vcpus("p4d.24xlarge", 96), _vcpus("p5.48xlarge", 192)]},
        {"InstanceTypes": ["p4d.24xlarge", "p5.48xlarge"]},
    )
    usage = family_usage(ec2, capacity, P_INSTANCES)
    ec2_stub.assert_no_pending_responses()
    capacity_stub.assert_no_pending_responses()
    assert usage.on_demand == 96  # the p4d only
    assert usage.reserved == 2 * 192  # the whole ODCR, its running instance included
    assert usage.in_blocks == 192
    assert usage.counted == 96 + 384
    assert usage.active_reservations == frozenset({ODCR})


def test_quota_for_maps_families_to_codes() -> None:
    assert quota_for("p5.48xlarge") is P_INSTANCES
    assert quota_for("p6-b200.48xlarge") is P_INSTANCES
    assert quota_for("g6e.48xlarge") is G_AND_VT_INSTANCES
    assert quota_for("vt1.24xlarge") is G_AND_VT_INSTANCES
    assert quota_for("trn1.32xlarge") is None
    assert (P_INSTANCES.code, G_AND_VT_INSTANCES.code) == ("L-417A185B", "L-DB2E81BA")
