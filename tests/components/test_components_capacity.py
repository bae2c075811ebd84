"""Each capacity mode end to end, placement per capacity type, and the refusals."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pulumi
import pytest
from components_helpers import (
    ASG,
    INSTANCE,
    LAUNCH_TEMPLATE,
    NOW,
    PLACEMENT_GROUP,
    ROLE_POLICY,
    SCHEDULE,
    cluster_spec,
    one,
    run,
    user_data,
)

from gpuforge.components import CapacitySpec, GpuCluster, GpuClusterSpec
from gpuforge.errors import InputError, UnknownInstanceType
from gpuforge.pulumi_mocks import GpuforgeMocks

RESERVATION = "cr-0123456789abcdef0"
BLOCK_START = datetime(2030, 3, 1, 11, 30, tzinfo=UTC)
BLOCK_END = datetime(2030, 3, 15, 11, 30, tzinfo=UTC)


def block(**overrides: Any) -> CapacitySpec:
    values: dict[str, Any] = {
        "type": "capacity-block",
        "reservation_id": RESERVATION,
        "start": BLOCK_START,
        "end": BLOCK_END,
    }
    values.update(overrides)
    return CapacitySpec(**values)


def deploy(spec: GpuClusterSpec, now: datetime = NOW) -> dict[str, Any]:
    def build() -> pulumi.Output[Any]:
        cluster = GpuCluster("demo", spec, now=now)
        return pulumi.Output.all(cluster.node_group, cluster.placement_group, cluster.summary)

    node_group, placement_group, summary = run(build)
    return {"node_group": node_group, "placement_group": placement_group, "summary": summary}


def test_on_demand(mocks: GpuforgeMocks) -> None:
    result = deploy(cluster_spec(node_count=4))
    template = one(mocks, LAUNCH_TEMPLATE).inputs
    assert "instanceMarketOptions" not in template
    assert "capacityReservationSpecification" not in template
    group = one(mocks, PLACEMENT_GROUP)
    assert group.inputs["strategy"] == "cluster"
    asg = one(mocks, ASG).inputs
    assert asg["placementGroup"] == group.outputs["name"] == result["placement_group"]
    assert (asg["minSize"], asg["maxSize"], asg["desiredCapacity"]) == (4, 4, 4)
    # Deliberately no wait: a timed-out wait would mark the group for replacement.
    assert asg["waitForCapacityTimeout"] == "0"
    assert mocks.of_type(SCHEDULE) == []
    assert one(mocks, ASG).ignore_changes == ()
    assert result["summary"]["placement"]["source"] == "created"


def test_on_demand_partition_group_for_very_large_clusters(mocks: GpuforgeMocks) -> None:
    deploy(cluster_spec(node_count=64, placement_strategy="partition", partition_count=4))
    group = one(mocks, PLACEMENT_GROUP).inputs
    assert (group["strategy"], group["partitionCount"]) == ("partition", 4)


def test_reservation_uses_the_reservations_own_group(mocks: GpuforgeMocks) -> None:
    capacity = CapacitySpec(type="reservation", reservation_id=RESERVATION, placement_group="odcr-pg")
    result = deploy(cluster_spec(capacity=capacity))
    template = one(mocks, LAUNCH_TEMPLATE).inputs
    assert template["capacityReservationSpecification"] == {
        "capacityReservationTarget": {"capacityReservationId": RESERVATION}
    }
    assert "instanceMarketOptions" not in template
    # No new group beside an ODCR: the nodes go into the reservation's group.
    assert mocks.of_type(PLACEMENT_GROUP) == []
    asg = one(mocks, ASG).inputs
    assert asg["placementGroup"] == "odcr-pg" == result["placement_group"]
    assert asg["waitForCapacityTimeout"] == "20m"
    assert result["summary"]["placement"] == {"group": "odcr-pg", "strategy": None, "source": "reservation"}
    assert result["summary"]["capacity"]["reservation_id"] == RESERVATION


def test_reservation_without_a_group_gets_none(mocks: GpuforgeMocks) -> None:
    result = deploy(cluster_spec(capacity=CapacitySpec(type="reservation", reservation_id=RESERVATION)))
    assert mocks.of_type(PLACEMENT_GROUP) == []
    assert "placementGroup" not in one(mocks, ASG).inputs
    assert result["placement_group"] is None


def test_capacity_block_before_it_starts(mocks: GpuforgeMocks) -> None:
    result = deploy(cluster_spec(node_count=8, capacity=block()))
    template = one(mocks, LAUNCH_TEMPLATE).inputs
    assert template["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert template["capacityReservationSpecification"] == {
        "capacityReservationTarget": {"capacityReservationId": RESERVATION}
    }
    # No placement group on a Capacity Block.
    assert mocks.of_type(PLACEMENT_GROUP) == []
    asg = one(mocks, ASG)
    assert "placementGroup" not in asg.inputs
    assert result["placement_group"] is None
    # Zero nodes until the block starts.
    assert (asg.inputs["minSize"], asg.inputs["maxSize"], asg.inputs["desiredCapacity"]) == (0, 8, 0)
    actions = {s.inputs["scheduledActionName"]: s.inputs for s in mocks.of_type(SCHEDULE)}
    assert set(actions) == {"demo-nodes-block-start", "demo-nodes-block-end"}
    start = actions["demo-nodes-block-start"]
    end = actions["demo-nodes-block-end"]
    assert start["startTime"] == "2030-03-01T11:30:00Z"
    assert (start["minSize"], start["desiredCapacity"], start["maxSize"]) == (8, 8, 8)
    assert (end["minSize"], end["desiredCapacity"]) == (0, 0)
    scale_in = datetime.strptime(end["startTime"], "%Y-%m-%dT%H:%M:%S%z")
    # More than 30 minutes before the end, when AWS begins terminating.
    assert BLOCK_END - scale_in > timedelta(minutes=30)
    assert scale_in == BLOCK_END - timedelta(minutes=45)
    for schedule in mocks.of_type(SCHEDULE):
        assert schedule.inputs["autoscalingGroupName"] == asg.outputs["name"]
    # The schedules own the size: a later `pulumi up` must not reset it.
    assert set(asg.ignore_changes) == {"minSize", "desiredCapacity"}
    assert result["summary"]["capacity"]["initial_nodes"] == 0


def test_capacity_block_already_running(mocks: GpuforgeMocks) -> None:
    deploy(cluster_spec(node_count=8, capacity=block()), now=BLOCK_START + timedelta(days=1))
    asg = one(mocks, ASG).inputs
    assert (asg["minSize"], asg["desiredCapacity"]) == (8, 8)
    (schedule,) = mocks.of_type(SCHEDULE)
    assert schedule.inputs["scheduledActionName"] == "demo-nodes-block-end"


def test_capacity_block_that_is_over_is_refused_before_anything_is_registered(
    mocks: GpuforgeMocks,
) -> None:
    with pytest.raises(InputError, match=r"capacity\.end .*over or ends within 45 minutes"):
        deploy(cluster_spec(capacity=block()), now=BLOCK_END - timedelta(minutes=20))
    assert mocks.resources == ()


def test_fixed_instances(mocks: GpuforgeMocks) -> None:
    result = deploy(cluster_spec(node_count=3, node_mode="instances"))
    instances = mocks.of_type(INSTANCE)
    assert len(instances) == 3
    template = one(mocks, LAUNCH_TEMPLATE)
    group = one(mocks, PLACEMENT_GROUP).outputs["name"]
    for instance in instances:
        assert instance.inputs["launchTemplate"]["id"] == template.id
        assert instance.inputs["placementGroup"] == group
    assert sorted(result["node_group"]) == sorted(i.id for i in instances)
    assert mocks.of_type(ASG) == []
    # Without a group there is nothing to report to, and no permission to do it.
    assert "readonly NODE_CHECK_ARGS=''\n" in user_data(mocks)
    assert "--report-asg" not in user_data(mocks)
    assert not [p for p in mocks.of_type(ROLE_POLICY) if p.name.endswith("set-health")]


# -- refusals ----------------------------------------------------------------------


def test_capacity_block_without_a_reservation_id_is_refused() -> None:
    with pytest.raises(InputError, match=r"capacity\.reservation_id = None: a Capacity Block .* Fix:"):
        CapacitySpec(type="capacity-block", start=BLOCK_START, end=BLOCK_END)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"placement_group": "pg"},
            r"capacity\.placement_group = 'pg': a Capacity Block takes no placement group",
        ),
        ({"scale_in_minutes_before_end": 30}, r"scale_in_minutes_before_end = 30: AWS begins terminating"),
        ({"start": None}, r"capacity\.start = None"),
        (
            {"end": datetime(2030, 3, 15, 11, 30)},
            r"capacity\.end = '2030-03-15T11:30:00': a time without a time zone",
        ),
        ({"end": BLOCK_START + timedelta(minutes=40)}, r"capacity\.end .*must last longer"),
        ({"reservation_id": "cr-123"}, r"capacity\.reservation_id = 'cr-123': a Capacity Reservation id is"),
    ],
)
def test_capacity_block_refusals(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=message):
        block(**overrides)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"type": "on-demand", "reservation_id": RESERVATION},
            r"on-demand capacity does not use reservation_id",
        ),
        ({"type": "on-demand", "placement_group": "pg"}, r"on-demand capacity does not use placement_group"),
        ({"type": "reservation"}, r"capacity\.reservation_id = None: a targeted Capacity Reservation"),
        (
            {"type": "reservation", "reservation_id": RESERVATION, "start": BLOCK_START},
            r"an On-Demand Capacity Reservation does not use start",
        ),
        ({"type": "spot"}, r"CapacitySpec\.type = 'spot'"),
    ],
)
def test_capacity_refusals(values: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=message):
        CapacitySpec(**values)


def test_instances_on_a_capacity_block_are_refused() -> None:
    with pytest.raises(InputError, match=r"node_mode = 'instances': fixed instances cannot launch before"):
        cluster_spec(node_mode="instances", capacity=block())


@pytest.mark.parametrize("instance_type", ["g6.xlarge", "g5.48xlarge", "g6e.48xlarge"])
def test_a_capacity_block_on_a_type_aws_does_not_sell_as_one_is_refused(instance_type: str) -> None:
    """g6/g5/g6e list only on-demand and spot in SupportedUsageClasses: no Capacity Block can exist."""
    with pytest.raises(InputError) as error:
        cluster_spec(instance_type=instance_type, capacity=block())
    message = str(error.value)
    assert f"capacity.type = 'capacity-block': AWS sells {instance_type} as on-demand, spot" in message
    sold = re.search(r"a type sold as a Capacity Block: (.*?)\. \(source", message)
    assert sold is not None
    assert sold.group(1).split(", ") == [
        "p4d.24xlarge",
        "p4de.24xlarge",
        "p5.48xlarge",
        "p5e.48xlarge",
        "p5en.48xlarge",
        "p6-b200.48xlarge",
        "p6-b300.48xlarge",
    ]
    assert "SupportedUsageClasses" in message


@pytest.mark.parametrize("instance_type", ["p4d.24xlarge", "p5en.48xlarge", "p6-b300.48xlarge"])
def test_a_capacity_block_on_a_type_sold_as_one_passes(instance_type: str) -> None:
    cluster_spec(instance_type=instance_type, capacity=block())


def test_unknown_instance_type_is_refused() -> None:
    with pytest.raises(UnknownInstanceType, match=r"instance_type: instance type 'p9\.96xlarge' is not in"):
        cluster_spec(instance_type="p9.96xlarge")


def test_partition_strategy_only_for_on_demand() -> None:
    with pytest.raises(InputError, match=r"placement_strategy = 'partition'"):
        cluster_spec(
            placement_strategy="partition",
            partition_count=2,
            capacity=CapacitySpec(type="reservation", reservation_id=RESERVATION),
        )
    with pytest.raises(InputError, match=r"partition_count = 9"):
        cluster_spec(placement_strategy="partition", partition_count=9)
