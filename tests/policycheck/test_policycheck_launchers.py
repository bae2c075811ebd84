"""The node rules hold for every resource that launches instances with its own settings, not only Instance.

A spot instance request takes an instance's settings field for field, and a launch
configuration (the Auto Scaling group's older launch source) takes the same under
`image_id`; an open node through either is refused like an open Instance.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from policycheck_support import FIXTURES

from gpuforge.policycheck.check import check

LAUNCHERS = FIXTURES / "launchers"


@pytest.mark.parametrize(
    ("stack", "resource_type"),
    [
        ("spot-instance-request", "aws:ec2/spotInstanceRequest:SpotInstanceRequest"),
        ("launch-configuration", "aws:ec2/launchConfiguration:LaunchConfiguration"),
    ],
)
def test_an_open_node_is_refused_however_it_is_launched(
    catalog_file: Path, stack: str, resource_type: str
) -> None:
    result = check(LAUNCHERS, stack=f"{stack}-open", catalog=catalog_file)
    (node,) = [r for r in result.resources if r.type == resource_type]
    found = sorted(v.policy for v in result.mandatory_failures if v.urn == node.urn)
    assert found == ["imdsv2-required", "no-public-ip", "no-ssh-key"]

    hardened = check(LAUNCHERS, stack=f"{stack}-hardened", catalog=catalog_file)
    assert [r.type for r in hardened.resources] == [resource_type]
    assert hardened.mandatory_failures == ()


def test_each_launch_specification_of_a_spot_fleet_is_a_node(catalog_file: Path) -> None:
    result = check(LAUNCHERS, stack="spot-fleet-request-open", catalog=catalog_file)
    (fleet,) = [r for r in result.resources if r.type == "aws:ec2/spotFleetRequest:SpotFleetRequest"]
    found = sorted(
        (v.policy, v.message.split(" ")[0]) for v in result.mandatory_failures if v.urn == fleet.urn
    )
    assert found == [
        ("ebs-encrypted", "launch_specifications[1].root_block_devices[0].encrypted"),
        ("imdsv2-required", "launch_specifications[0]:"),
        ("imdsv2-required", "launch_specifications[1]:"),
        ("no-public-ip", "launch_specifications[0].associate_public_ip_address"),
        ("no-public-ip", "launch_specifications[1].associate_public_ip_address"),
        ("no-ssh-key", "spot"),
    ]
    assert all(v.policy != "ami-pinned" for v in result.verdicts if v.urn == fleet.urn)
