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
