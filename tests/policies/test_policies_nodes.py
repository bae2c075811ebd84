"""Per-node rules on real node groups: EFA interfaces, IMDSv2, public IPs, EBS encryption, capacity advisory."""

from __future__ import annotations

from typing import Any

import pulumi_aws as aws
import pytest
from policy_helpers import (
    INSTANCE,
    LAUNCH_TEMPLATE,
    Images,
    edit,
    mandatory,
    named,
    of,
    record_cluster,
    spec,
    verdicts,
)

RESERVED = {"type": "reservation", "reservation_id": "cr-0123456789abcdef0"}


def _interface(
    like: Any, card: int, device: int, kind: str, **extra: Any
) -> aws.ec2.LaunchTemplateNetworkInterfaceArgs:
    """An interface in the same subnet and security group as `like` (one of the component's)."""
    return aws.ec2.LaunchTemplateNetworkInterfaceArgs(
        network_card_index=card,
        device_index=device,
        interface_type=kind,
        subnet_id=like.subnet_id,
        security_groups=like.security_groups,
        delete_on_termination="true",
        **extra,
    )


def _older_layout(count: int) -> Any:
    """AWS's older multi-card layout: EFA primary at card 0 device 0, the others at device index 1."""

    def layout(current: list[Any]) -> list[Any]:
        first = current[0]
        return [_interface(first, 0, 0, "efa", associate_public_ip_address="false")] + [
            _interface(first, card, 1, "efa-only") for card in range(1, count)
        ]

    return layout


def test_current_and_older_layouts_pass(images: Images) -> None:
    current = verdicts(record_cluster(spec(images, capacity=RESERVED)), images)
    older = verdicts(
        record_cluster(
            spec(images, capacity=RESERVED), edit(LAUNCH_TEMPLATE, network_interfaces=_older_layout(32))
        ),
        images,
    )
    assert mandatory(current) == [] and mandatory(older) == []


def test_p5_with_one_efa_interface(images: Images) -> None:
    resources = record_cluster(
        spec(images, capacity=RESERVED), edit(LAUNCH_TEMPLATE, network_interfaces=lambda current: current[:2])
    )
    [verdict] = of(verdicts(resources, images), "efa-network-interfaces")
    assert verdict.enforcement == "mandatory"
    assert verdict.urn == named(resources, LAUNCH_TEMPLATE).urn
    assert (
        "p5.48xlarge takes one EFA on each of its 32 EFA cards (0-31), but 1 is attached" in verdict.message
    )
    assert "none on cards 1-31" in verdict.message
    assert "efa-only@0/1" in verdict.message  # the fix shows the layout to use


def test_misplaced_interfaces(images: Images) -> None:
    def broken(current: list[Any]) -> list[Any]:
        first = current[0]
        return [
            _interface(first, 0, 0, "efa-only"),  # an EFA-only interface cannot be primary
            _interface(first, 1, 2, "efa-only"),  # device index 2
            _interface(first, 2, 0, "efa-only"),
            _interface(first, 2, 0, "efa"),  # two on one slot, two EFAs on card 2
            _interface(first, 4, 0, "efa-only"),  # p4d has cards 0-3
        ]

    resources = record_cluster(
        spec(images, matrix="p4d-a100-cuda12", instance_type="p4d.24xlarge", capacity=RESERVED),
        edit(LAUNCH_TEMPLATE, network_interfaces=broken),
    )
    [verdict] = of(verdicts(resources, images), "efa-network-interfaces")
    for problem in (
        "2 interfaces share card 2 device 0",
        "has no card 4 (cards 0-3)",
        "an EFA sits at device index 0 or 1",
        "efa-only, which can't be primary",
        "more than one EFA on card 2",
        "none on card 3",
    ):
        assert problem in verdict.message


def test_card_that_takes_no_efa(images: Images) -> None:
    """p6-b300's card 0 takes only ENA interfaces; its 16 EFAs sit on cards 1-16."""
    clean = record_cluster(
        spec(images, matrix="p6-b200-cuda12", instance_type="p6-b300.48xlarge", capacity=RESERVED)
    )
    assert of(verdicts(clean, images), "efa-network-interfaces") == []
    wrong = record_cluster(
        spec(images, matrix="p6-b200-cuda12", instance_type="p6-b300.48xlarge", capacity=RESERVED),
        edit(
            LAUNCH_TEMPLATE,
            network_interfaces=lambda current: [_interface(current[0], 0, 0, "efa"), *current[1:]],
        ),
    )
    [verdict] = of(verdicts(wrong, images), "efa-network-interfaces")
    assert "efa at card 0 device 0: card 0 takes interface" in verdict.message


def test_types_without_efa_need_no_efa(images: Images) -> None:
    resources = record_cluster(spec(images, instance_type="g6.xlarge"))
    assert of(verdicts(resources, images), "efa-network-interfaces") == []


def test_type_outside_the_hardware_catalog(images: Images) -> None:
    resources = record_cluster(
        spec(images, capacity=RESERVED), edit(LAUNCH_TEMPLATE, instance_type="p5.4xlarge")
    )
    [verdict] = of(verdicts(resources, images), "efa-network-interfaces")
    assert "'p5.4xlarge' is not in gpuforge's hardware catalog" in verdict.message


def test_instance_that_overrides_its_template_type(images: Images) -> None:
    resources = record_cluster(
        spec(
            images,
            matrix="p4d-a100-cuda12",
            instance_type="p4d.24xlarge",
            node_mode="instances",
            capacity=RESERVED,
        ),
        edit(INSTANCE, instance_type="p5.48xlarge"),
    )
    found = of(verdicts(resources, images), "efa-network-interfaces")
    assert {verdict.urn for verdict in found} == {r.urn for r in resources if r.type == INSTANCE}
    assert "over its launch template" in found[0].message


@pytest.mark.parametrize(
    ("metadata", "shown"),
    [
        (
            aws.ec2.LaunchTemplateMetadataOptionsArgs(http_endpoint="enabled", http_tokens="optional"),
            "'optional'",
        ),
        (None, "unset"),
    ],
)
def test_imdsv1_on_the_template(images: Images, metadata: Any, shown: str) -> None:
    resources = record_cluster(
        spec(images, capacity=RESERVED), edit(LAUNCH_TEMPLATE, metadata_options=metadata)
    )
    [verdict] = of(verdicts(resources, images), "imdsv2-required")
    assert verdict.enforcement == "mandatory" and verdict.urn == named(resources, LAUNCH_TEMPLATE).urn
    assert f"http_tokens is {shown}" in verdict.message and "'required'" in verdict.message


def test_imdsv1_on_instances(images: Images) -> None:
    resources = record_cluster(
        spec(images, node_mode="instances", capacity=RESERVED),
        edit(INSTANCE, metadata_options=aws.ec2.InstanceMetadataOptionsArgs(http_tokens="optional")),
    )
    found = of(verdicts(resources, images), "imdsv2-required")
    assert {verdict.urn for verdict in found} == {r.urn for r in resources if r.type == INSTANCE}
    assert (
        of(
            verdicts(record_cluster(spec(images, node_mode="instances", capacity=RESERVED)), images),
            "imdsv2-required",
        )
        == []
    )


def test_public_ip(images: Images) -> None:
    def public(current: list[Any]) -> list[Any]:
        return [_interface(current[0], 0, 0, "interface", associate_public_ip_address="true"), *current[1:]]

    template = record_cluster(
        spec(images, capacity=RESERVED), edit(LAUNCH_TEMPLATE, network_interfaces=public)
    )
    [verdict] = of(verdicts(template, images), "no-public-ip")
    assert "network_interfaces[0].associate_public_ip_address is 'true'" in verdict.message
    unset = record_cluster(
        spec(images, capacity=RESERVED),
        edit(
            LAUNCH_TEMPLATE,
            network_interfaces=lambda current: [_interface(current[0], 0, 0, "interface"), *current[1:]],
        ),
    )
    [verdict] = of(verdicts(unset, images), "no-public-ip")
    assert "associate_public_ip_address is unset" in verdict.message
    instances = record_cluster(
        spec(images, node_mode="instances", capacity=RESERVED),
        edit(INSTANCE, associate_public_ip_address=True),
    )
    assert len(of(verdicts(instances, images), "no-public-ip")) == 2


def test_unencrypted_volumes(images: Images) -> None:
    def unencrypted(current: list[Any]) -> list[Any]:
        root = current[0]
        return [
            aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                device_name=root.device_name,
                ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                    volume_size=200, volume_type="gp3", encrypted="false"
                ),
            )
        ]

    resources = record_cluster(
        spec(images, capacity=RESERVED), edit(LAUNCH_TEMPLATE, block_device_mappings=unencrypted)
    )
    [verdict] = of(verdicts(resources, images), "ebs-encrypted")
    assert "block_device_mappings[0].ebs.encrypted is 'false'" in verdict.message
    bare = record_cluster(spec(images, capacity=RESERVED), edit(LAUNCH_TEMPLATE, block_device_mappings=None))
    [verdict] = of(verdicts(bare, images), "ebs-encrypted")
    assert "no block_device_mappings" in verdict.message
    instances = record_cluster(
        spec(images, node_mode="instances", capacity=RESERVED),
        edit(INSTANCE, root_block_device=aws.ec2.InstanceRootBlockDeviceArgs(encrypted=False)),
    )
    assert len(of(verdicts(instances, images), "ebs-encrypted")) == 2
    assert of(verdicts(record_cluster(spec(images, capacity=RESERVED)), images), "ebs-encrypted") == []


def test_p_family_on_plain_on_demand_is_advisory(images: Images) -> None:
    on_demand = verdicts(record_cluster(spec(images)), images)
    [verdict] = of(on_demand, "p-family-capacity")
    assert verdict.enforcement == "advisory" and "Capacity Block" in verdict.message
    assert of(verdicts(record_cluster(spec(images, capacity=RESERVED)), images), "p-family-capacity") == []
    block = {
        "type": "capacity-block",
        "reservation_id": "cr-0123456789abcdef0",
        "start": "2030-01-07T11:30:00Z",
        "end": "2030-01-21T11:30:00Z",
    }
    assert of(verdicts(record_cluster(spec(images, capacity=block)), images), "p-family-capacity") == []
    assert (
        of(verdicts(record_cluster(spec(images, instance_type="g6.xlarge")), images), "p-family-capacity")
        == []
    )
