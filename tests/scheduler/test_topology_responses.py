"""What a topology response must hold before its network nodes become Slurm switches.

The published responses below are AWS's own examples, as the EC2 User Guide prints them
("How Amazon EC2 topology works" and "Examples for Amazon EC2 instance topology", Example 1;
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-topology-examples.html, read
through a copy of the guide, code index id 53338766558). Every other response is that example
with the one change its test names. moto does not implement DescribeInstanceTopology, so the
fetching tests use botocore's Stubber, which checks each canned response against botocore's model.
"""

from __future__ import annotations

import copy
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from gpuforge.errors import InputError
from gpuforge.scheduler.topology import (
    MAX_IDS_PER_CALL,
    MAX_PAGES_PER_CALL,
    NetworkTopology,
    fetch_instance_topology,
    from_response,
)

# Example 1 of the guide, as published: one p4d and one trn1n instance, and a NextToken.
EXAMPLE_1: dict[str, Any] = {
    "Instances": [
        {
            "InstanceId": "i-1111111111example",
            "InstanceType": "p4d.24xlarge",
            "GroupName": "ML-group",
            "NetworkNodes": ["nn-1111111111example", "nn-2222222222example", "nn-3333333333example"],
            "CapacityBlockId": "null",
            "ZoneId": "usw2-az2",
            "AvailabilityZone": "us-west-2a",
        },
        {
            "InstanceId": "i-2222222222example",
            "InstanceType": "trn1n.32xlarge",
            "GroupName": "HPC-group",
            "NetworkNodes": ["nn-1111111111example", "nn-2222222222example", "nn-3214313214example"],
            "CapacityBlockId": "null",
            "ZoneId": "usw2-az2",
            "AvailabilityZone": "us-west-2a",
        },
    ],
    "NextToken": "SomeEncryptedToken",
}
# The guide's Capacity Reservation example: a reservation shows 1 to 3 network nodes.
RESERVATION = {
    "CapacityReservations": [
        {
            "CapacityReservationId": "cr-1111111111example",
            "CapacityBlockId": "null",
            "State": "active",
            "InstanceType": "p4d.24xlarge",
            "NetworkNodes": ["nn-1111111111example", "nn-2222222222example"],
            "AvailabilityZone": "us-west-2a",
        }
    ]
}


def _p4d_page(**changes: Any) -> dict[str, Any]:
    """Example 1's p4d entry alone, as one complete page (no NextToken), with `changes` to it."""
    entry = copy.deepcopy(EXAMPLE_1["Instances"][0])
    entry.update(changes)
    return {"Instances": [entry]}


def _refused(response: object) -> str:
    with pytest.raises(InputError) as caught:
        from_response(response, where="saved.json")
    return caught.value.message


def test_the_published_p4d_entry_becomes_a_three_switch_tree() -> None:
    topology = from_response(_p4d_page(), where="saved.json")
    assert topology.leaves == frozenset({"nn-3333333333example"})
    assert topology.leaf_of("i-1111111111example") == "nn-3333333333example"
    assert topology.children["nn-1111111111example"] == frozenset({"nn-2222222222example"})


def test_a_page_with_its_next_token_unread_is_refused() -> None:
    message = _refused(EXAMPLE_1)
    assert "NextToken" in message and "one page" in message


@pytest.mark.parametrize(
    ("node", "why"),
    [
        ("nn-3333333333example\nSwitchName=evil", "newline"),
        ("nn-3333333333example\n", "trailing newline"),
        ("nn-\u0661\u0662\u0663", "Arabic-Indic digits, which \\d takes"),
        ("nn-3 Switches=nn-1", "space"),
        ("nn-3#", "comment"),
        ("DEFAULT", "reserved word"),
        ("n" * 65, "longer than Slurm's 64"),
        ("", "empty"),
    ],
)
def test_a_network_node_name_slurm_would_misread_is_refused(node: str, why: str) -> None:
    nodes = ["nn-1111111111example", "nn-2222222222example", node]
    message = _refused(_p4d_page(NetworkNodes=nodes))
    assert "Instances[0].NetworkNodes[2]" in message, why
    assert "\n" not in message, "the refused value is shown escaped"


def test_a_published_type_outside_the_hardware_catalog_is_refused() -> None:
    trn1n = {"Instances": [EXAMPLE_1["Instances"][1]]}
    message = _refused(trn1n)
    assert "trn1n.32xlarge" in message and "hardware catalog" in message


@pytest.mark.parametrize(
    ("instance_type", "nodes", "expected"),
    [
        ("p5.48xlarge", 4, "3 network nodes"),
        ("p4d.24xlarge", 2, "3 network nodes"),
        ("p6-b200.48xlarge", 3, "4 network nodes"),
        ("p6-b300.48xlarge", 5, "4 network nodes"),
    ],
)
def test_an_instance_with_another_layer_count_than_its_type_is_refused(
    instance_type: str, nodes: int, expected: str
) -> None:
    path = [f"nn-{layer}111111111example" for layer in range(nodes)]
    message = _refused(_p4d_page(InstanceType=instance_type, NetworkNodes=path))
    assert (
        expected in message and instance_type in message and "ec2-instance-topology-prerequisites" in message
    )


def test_a_four_layer_type_reads_four_layers() -> None:
    path = ["nn-a", "nn-b", "nn-c", "nn-d"]
    topology = from_response(_p4d_page(InstanceType="p6-b200.48xlarge", NetworkNodes=path), where="t")
    assert topology.leaves == frozenset({"nn-d"})


@pytest.mark.parametrize("instance_type", ["g5.48xlarge", "g6.xlarge"])
def test_topology_for_a_type_aws_gives_none_is_refused(instance_type: str) -> None:
    message = _refused(_p4d_page(InstanceType=instance_type))
    assert f"AWS reports no network topology for {instance_type}" in message


def test_an_entry_without_its_instance_type_is_refused() -> None:
    page = _p4d_page()
    del page["Instances"][0]["InstanceType"]
    assert "InstanceType" in _refused(page)


def test_an_instance_under_two_leaves_is_refused_and_a_repeated_entry_is_not() -> None:
    first = _p4d_page()["Instances"][0]
    moved = {
        **first,
        "NetworkNodes": ["nn-1111111111example", "nn-2222222222example", "nn-9999999999example"],
    }
    message = _refused({"Instances": [first, moved]})
    assert "i-1111111111example" in message and "one leaf" in message
    assert from_response({"Instances": [first, first]}, where="t").leaves == frozenset(
        {"nn-3333333333example"}
    )


def test_a_reservation_shows_up_to_its_types_layers() -> None:
    assert from_response(RESERVATION, where="t").leaves == frozenset({"nn-2222222222example"})
    deep = copy.deepcopy(RESERVATION)
    deep["CapacityReservations"][0]["NetworkNodes"] = ["nn-1", "nn-2", "nn-3", "nn-4"]
    message = _refused(deep)
    assert "1 to 3 network nodes" in message and "cr-1111111111example" in message


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"InstanceId": 7}, "InstanceId"),
        ({"NetworkNodes": "nn-1111111111example"}, "NetworkNodes"),
        ({"Placement": "nearby"}, "Placement"),
    ],
)
def test_a_response_botocores_model_rejects_is_refused(change: dict[str, Any], expected: str) -> None:
    message = _refused(_p4d_page(**change))
    assert expected in message and "botocore" in message


def test_a_switch_name_slurm_would_misread_never_reaches_topology_conf() -> None:
    # A tree built in code (sync merges Slurm's own tree with AWS's) is checked where it is written.
    hostile = NetworkTopology(children={"nn-1\nSwitchName=evil": frozenset()})
    with pytest.raises(InputError, match="switch"):
        hostile.topology_conf()


# --- Fetching: every page read, and no more pages than a call can have ----------------------


def _client() -> Any:
    return boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")


def _entry(instance: str) -> dict[str, Any]:
    return {**EXAMPLE_1["Instances"][0], "InstanceId": instance}


def test_an_endless_next_token_is_refused_after_the_bound() -> None:
    ec2 = _client()
    ids = ["i-1111111111example"]
    with Stubber(ec2) as stub:
        for page in range(MAX_PAGES_PER_CALL):
            params: dict[str, Any] = {"InstanceIds": ids}
            if page:
                params["NextToken"] = f"token-{page}"
            stub.add_response(
                "describe_instance_topology",
                {"Instances": [], "NextToken": f"token-{page + 1}"},
                params,
            )
        with pytest.raises(InputError, match=rf"{MAX_PAGES_PER_CALL} pages"):
            fetch_instance_topology(ec2, ids)
        stub.assert_no_pending_responses()


def test_a_next_token_that_repeats_is_refused() -> None:
    ec2 = _client()
    ids = ["i-1111111111example"]
    with Stubber(ec2) as stub:
        stub.add_response(
            "describe_instance_topology", {"Instances": [], "NextToken": "same"}, {"InstanceIds": ids}
        )
        stub.add_response(
            "describe_instance_topology",
            {"Instances": [], "NextToken": "same"},
            {"InstanceIds": ids, "NextToken": "same"},
        )
        with pytest.raises(InputError, match="same NextToken"):
            fetch_instance_topology(ec2, ids)


def test_every_page_of_every_call_is_read() -> None:
    ec2 = _client()
    ids = [f"i-{n:017x}" for n in range(MAX_IDS_PER_CALL + 1)]
    with Stubber(ec2) as stub:
        stub.add_response(
            "describe_instance_topology",
            {"Instances": [_entry(i) for i in ids[:20]], "NextToken": "page2"},
            {"InstanceIds": ids[:MAX_IDS_PER_CALL]},
        )
        stub.add_response(
            "describe_instance_topology",
            {"Instances": [_entry(i) for i in ids[20:MAX_IDS_PER_CALL]]},
            {"InstanceIds": ids[:MAX_IDS_PER_CALL], "NextToken": "page2"},
        )
        stub.add_response(
            "describe_instance_topology",
            {"Instances": [_entry(ids[-1])]},
            {"InstanceIds": ids[MAX_IDS_PER_CALL:]},
        )
        response = fetch_instance_topology(ec2, ids)
        stub.assert_no_pending_responses()
    assert "NextToken" not in response
    assert [entry["InstanceId"] for entry in response["Instances"]] == ids
    assert from_response(response, where="aws").leaf_of(ids[-1]) == "nn-3333333333example"
