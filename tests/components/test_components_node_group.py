"""The node group per instance type: EFA interfaces, placement, security group, IMDSv2, public IP, RAID0.

Expected layouts are written from AWS's current multi-card guidance
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html): ENA at
card 0 / device 0, EFA-only at card 0 / device 1 when card 0 takes EFA, EFA-only at
device 0 on every further EFA card. The EFA counts are the issue's: 32 on p5/p5e, 16 on
p5en, 8 on p6-b200, 16 of 17 cards on p6-b300, 4 on p4d and g6e, 1 on g5.48xlarge, none
on the single-GPU dev types.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path
from typing import Any

import pulumi
import pytest
from components_helpers import (
    ASG,
    EGRESS,
    INGRESS,
    LAUNCH_TEMPLATE,
    PLACEMENT_GROUP,
    ROLE_POLICY,
    cluster_spec,
    interface_triples,
    one,
    rules_of,
    run,
    user_data,
)

from gpuforge.components import GpuCluster
from gpuforge.components.efa_layout import interface_layout
from gpuforge.errors import GpuforgeError
from gpuforge.hardware import NetworkCard
from gpuforge.hardware import get as hardware_get
from gpuforge.images.disk import ROOT_VOLUME_GIB as IMAGE_ROOT_VOLUME_GIB
from gpuforge.pulumi_mocks import GpuforgeMocks


def current_layout(first_efa_card: int, efa_cards: int) -> list[tuple[int, int, str]]:
    """AWS's current layout for a multi-card type whose EFA cards are consecutive."""
    layout = [(0, 0, "interface")]
    for card in range(first_efa_card, first_efa_card + efa_cards):
        layout.append((card, 1 if card == 0 else 0, "efa-only"))
    return layout


CASES = {
    # type: (expected interfaces, EFA count, instance-store disks)
    "p5.48xlarge": (current_layout(0, 32), 32, 8),
    "p5e.48xlarge": (current_layout(0, 32), 32, 8),
    "p5en.48xlarge": (current_layout(0, 16), 16, 8),
    "p6-b200.48xlarge": (current_layout(0, 8), 8, 8),
    "p6-b300.48xlarge": (current_layout(1, 16), 16, 8),
    "p4d.24xlarge": (current_layout(0, 4), 4, 8),
    "g6e.48xlarge": (current_layout(0, 4), 4, 4),
    "g5.48xlarge": ([(0, 0, "efa")], 1, 2),
    "g6.xlarge": ([(0, 0, "interface")], 0, 1),
    "g5.xlarge": ([(0, 0, "interface")], 0, 1),
}


def test_the_expected_layouts_start_as_aws_documents() -> None:
    """Guard the test's own table: the current layout's first entries, literally."""
    assert CASES["p5.48xlarge"][0][:3] == [(0, 0, "interface"), (0, 1, "efa-only"), (1, 0, "efa-only")]
    assert CASES["p6-b300.48xlarge"][0][:2] == [(0, 0, "interface"), (1, 0, "efa-only")]
    assert len(CASES["p5.48xlarge"][0]) == 33


@pytest.mark.parametrize("instance_type", sorted(CASES))
def test_layout_from_the_catalog(instance_type: str) -> None:
    expected, efa, _ = CASES[instance_type]
    slots = interface_layout(hardware_get(instance_type))
    assert [(s.network_card_index, s.device_index, s.interface_type) for s in slots] == expected
    assert sum(s.carries_efa for s in slots) == efa
    assert [s.takes_ip for s in slots].count(True) == 1, "only the primary interface takes an IP"


def test_a_catalog_row_the_layout_does_not_fit_is_refused() -> None:
    row = hardware_get("p5.48xlarge")
    cramped = tuple(
        NetworkCard(card.index, card.interface_types, 1, card.baseline_gbps, card.network_performance)
        for card in row.network_cards
    )
    with pytest.raises(GpuforgeError, match="card 0 gets 2 interfaces, its limit is 1"):
        interface_layout(dataclasses.replace(row, network_cards=cramped))


@pytest.mark.parametrize(
    "instance_type",
    [
        "p5.48xlarge",
        "p5en.48xlarge",
        "p6-b200.48xlarge",
        "p4d.24xlarge",
        "g6e.48xlarge",
        "g6.xlarge",
        "g5.xlarge",
        "p6-b300.48xlarge",
        "g5.48xlarge",
    ],
)
def test_node_group_on_demand(mocks: GpuforgeMocks, instance_type: str, tmp_path: Path) -> None:
    expected, efa, disks = CASES[instance_type]

    def build() -> pulumi.Output[Any]:
        cluster = GpuCluster("demo", cluster_spec(instance_type=instance_type, bucket=None))

        def check_summary(summary: dict[str, Any]) -> dict[str, Any]:
            assert summary["efa_interfaces_per_node"] == efa
            assert summary["network_interfaces_per_node"] == len(expected)
            assert summary["scratch_disks_per_node"] == disks
            return summary

        return pulumi.Output.all(
            cluster.placement_group,
            cluster.security_group_id,
            cluster.launch_template_id,
            cluster.summary.apply(check_summary),
        )

    # The program has finished: every resource is registered; check what was recorded.
    group_name, efa_group, template_id, summary = run(build)
    template = one(mocks, LAUNCH_TEMPLATE)
    assert template.id == template_id
    # Interfaces: count, types, card and device indices.
    assert interface_triples(template) == expected
    for interface in template.inputs["networkInterfaces"]:
        # The EFA security group on every interface, and nothing at the top level.
        assert interface["securityGroups"] == [efa_group]
        # No public IP anywhere; EFA-only interfaces carry no IP settings at all.
        assert interface.get("associatePublicIpAddress") in (None, "false")
        if interface["interfaceType"] == "efa-only":
            assert not {"privateIpAddress", "ipv4Addresses", "ipv4AddressCount"} & set(interface)
    assert template.inputs["networkInterfaces"][0]["associatePublicIpAddress"] == "false"
    assert "vpcSecurityGroupIds" not in template.inputs
    assert "securityGroupNames" not in template.inputs
    # IMDSv2 only, hop limit 1 by default.
    metadata = template.inputs["metadataOptions"]
    assert metadata["httpTokens"] == "required"
    assert metadata["httpPutResponseHopLimit"] == 1
    # Encrypted gp3 root.
    (root,) = template.inputs["blockDeviceMappings"]
    assert root["ebs"]["encrypted"] == "true"
    assert root["ebs"]["volumeType"] == "gp3"
    # On-demand: a new cluster placement group, and the nodes use it.
    group = one(mocks, PLACEMENT_GROUP)
    assert group.inputs["strategy"] == "cluster"
    assert group.outputs["name"] == group_name
    assert one(mocks, ASG).inputs["placementGroup"] == group_name
    assert summary["placement"] == {"group": group_name, "strategy": "cluster", "source": "created"}
    # The EFA group allows all traffic from and to itself, and no ingress from addresses.
    self_rule = {"ipProtocol": "-1", "referencedSecurityGroupId": efa_group}
    ingress = rules_of(mocks, INGRESS, efa_group)
    egress = rules_of(mocks, EGRESS, efa_group)
    assert self_rule in [{k: rule.get(k) for k in self_rule} for rule in ingress]
    assert self_rule in [{k: rule.get(k) for k in self_rule} for rule in egress]
    assert all("cidrIpv4" not in rule and "cidrIpv6" not in rule for rule in ingress)
    script = user_data(mocks)
    # RAID0 over the catalog's disk count, or one disk formatted directly.
    assert f"readonly SCRATCH_DISKS={disks}\n" in script
    if disks > 1:
        assert 'mdadm --create /dev/md/scratch --run --level=0 --raid-devices="$SCRATCH_DISKS"' in script
    path = tmp_path / "user-data.sh"
    path.write_text(script)
    subprocess.run(["bash", "-n", str(path)], check=True)
    subprocess.run(["shellcheck", str(path)], check=True)


def test_health_permission_is_scoped_to_the_own_group(mocks: GpuforgeMocks) -> None:
    def build() -> pulumi.Output[Any]:
        cluster = GpuCluster("demo", cluster_spec(bucket=None))
        return cluster.node_group

    group_name = run(build)
    group = one(mocks, ASG)
    assert group.outputs["name"] == group_name
    (policy,) = [p for p in mocks.of_type(ROLE_POLICY) if p.name == "demo-nodes-set-health"]
    document = json.loads(policy.inputs["policy"])
    assert document["Statement"] == [
        {
            "Sid": "OwnGroupHealth",
            "Effect": "Allow",
            "Action": "autoscaling:SetInstanceHealth",
            "Resource": group.outputs["arn"],
        }
    ]


def test_hop_limit_two_for_containers(mocks: GpuforgeMocks) -> None:
    run(lambda: GpuCluster("demo", cluster_spec(imds_hop_limit=2, bucket=None)).launch_template_id)
    assert one(mocks, LAUNCH_TEMPLATE).inputs["metadataOptions"]["httpPutResponseHopLimit"] == 2


def test_a_root_volume_smaller_than_the_image_s_is_refused() -> None:
    # EC2 cannot make a root volume smaller than the AMI's root snapshot: the node would never launch.
    with pytest.raises(GpuforgeError, match=f"gpuforge images are built with {IMAGE_ROOT_VOLUME_GIB} GiB"):
        GpuCluster("demo", cluster_spec(root_volume_gib=IMAGE_ROOT_VOLUME_GIB - 1, bucket=None))
