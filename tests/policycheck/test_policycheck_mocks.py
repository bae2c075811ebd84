"""The policy-check mocks: when an AMI lookup is pinned, and the data sources any program commonly calls."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from gpuforge.images.catalog import CatalogEntry
from gpuforge.policycheck.check import check
from gpuforge.policycheck.mocks import UNPINNED_PREFIX, CataloguedAmi, resolve_ami

AMI = "ami-0123456789abcdef0"
NAME = "gpuforge-p5-h100-cuda12-1.0.0-0123456789ab"
CATALOGUED = [
    CataloguedAmi(
        CatalogEntry(
            ami_id=AMI,
            region="us-east-1",
            matrix_name="p5-h100-cuda12",
            matrix_version="1.0.0",
            matrix_digest="0123456789ab" + "0" * 52,
            built_at="2026-01-31T12:00:00+00:00",
            packer_version="1.6.6",
        ),
        NAME,
    )
]


def _lookup(**filters: list[str]) -> dict[str, Any]:
    """get_ami's arguments as the provider receives them; filter names with dashes as image_id=..."""
    return {
        "mostRecent": True,
        "owners": ["self"],
        "filters": [{"name": name.replace("_", "-"), "values": values} for name, values in filters.items()],
    }


@pytest.mark.parametrize(
    "args",
    [
        _lookup(image_id=[AMI]),
        _lookup(name=[NAME]),
        _lookup(image_id=[AMI], name=[NAME]),
        {**_lookup(name=[NAME]), "mostRecent": False},
    ],
    ids=["image-id", "exact name", "both", "not most_recent"],
)
def test_filters_that_name_one_catalogued_ami_resolve_to_it(args: dict[str, Any]) -> None:
    lookup = resolve_ami(args, "us-east-1", CATALOGUED)
    assert (lookup.ami_id, lookup.pinned) == (AMI, True)
    assert "catalogued AMI ami-0123456789abcdef0 of matrix p5-h100-cuda12 1.0.0" in lookup.reason


@pytest.mark.parametrize(
    ("args", "region", "reason"),
    [
        (_lookup(name=["gpuforge-p5-*"]), "us-east-1", "the filter value 'gpuforge-p5-*' is a wildcard"),
        (_lookup(name=["gpuforge-p5-h100-cuda12-1.0.0-0123456789a?"]), "us-east-1", "is a wildcard"),
        ({**_lookup(), "nameRegex": "^gpuforge-"}, "us-east-1", "name_regex '^gpuforge-' matches a pattern"),
        (_lookup(), "us-east-1", "no image-id or name filter names one AMI"),
        (_lookup(architecture=["x86_64"]), "us-east-1", "no image-id or name filter names one AMI"),
        (_lookup(image_id=[AMI, "ami-0fedcba9876543210"]), "us-east-1", "the filters allow several AMIs"),
        (_lookup(image_id=[AMI]), "us-west-2", "no AMI of the image catalog in us-west-2 has image-id"),
        (
            _lookup(image_id=[AMI], name=["other"]),
            "us-east-1",
            "has image-id 'ami-0123456789abcdef0' and name 'other'",
        ),
    ],
    ids=[
        "wildcard",
        "question mark",
        "name regex",
        "no filter",
        "other filter",
        "two ids",
        "other region",
        "disagree",
    ],
)
def test_anything_else_resolves_to_a_stand_in_no_catalog_holds(
    args: dict[str, Any], region: str, reason: str
) -> None:
    lookup = resolve_ami(args, region, CATALOGUED)
    assert lookup.pinned is False
    assert reason in lookup.reason
    assert lookup.ami_id.startswith(UNPINNED_PREFIX) and lookup.ami_id != AMI
    # The same call gets the same stand-in: a check is reproducible.
    assert resolve_ami(args, region, CATALOGUED).ami_id == lookup.ami_id


def test_describe_reads_like_the_call_in_the_program() -> None:
    lookup = resolve_ami(_lookup(name=["x-*"]), "us-east-1", CATALOGUED)
    assert lookup.describe() == "get_ami(most_recent=True, owners=['self'], filters={'name': ['x-*']})"


def test_region_partition_identity_and_zones_are_answered(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: probe\nruntime: python\n", encoding="utf-8")
    (tmp_path / "Pulumi.dev.yaml").write_text("config:\n  aws:region: eu-west-1\n", encoding="utf-8")
    program = """
        import pulumi
        import pulumi_aws as aws

        pulumi.export("region", aws.get_region().region)
        pulumi.export("partition", aws.get_partition().partition)
        pulumi.export("account", aws.get_caller_identity().account_id)
        zones = aws.get_availability_zones(exclude_names=["eu-west-1b"])
        pulumi.export("zones", zones.names)
        pulumi.export("zone_ids", zones.zone_ids)
    """
    (tmp_path / "__main__.py").write_text(textwrap.dedent(program), encoding="utf-8")
    outputs = check(tmp_path).run.outputs
    assert outputs["region"] == "eu-west-1"
    assert outputs["partition"] == "aws"
    assert outputs["account"] == "123456789012"
    assert outputs["zones"] == ["eu-west-1a", "eu-west-1c"]
    assert outputs["zone_ids"] == ["eu-west-1-az1", "eu-west-1-az3"]


def test_a_launch_template_from_an_output_lookup_is_refused_naming_the_lookup(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: fleet\nruntime: python\n", encoding="utf-8")
    (tmp_path / "Pulumi.dev.yaml").write_text("config:\n  aws:region: us-east-1\n", encoding="utf-8")
    program = """
        import pulumi_aws as aws

        image = aws.ec2.get_ami_output(
            most_recent=True, owners=["amazon"], filters=[{"name": "name", "values": ["al2023-ami-*"]}]
        )
        aws.ec2.LaunchTemplate("nodes", image_id=image.id, instance_type="g5.xlarge")
    """
    (tmp_path / "__main__.py").write_text(textwrap.dedent(program), encoding="utf-8")
    result = check(tmp_path)
    (lookup,) = result.lookups
    assert not lookup.pinned
    (template,) = [r for r in result.resources if r.type == "aws:ec2/launchTemplate:LaunchTemplate"]
    assert template.inputs["imageId"] == lookup.ami_id
    (verdict,) = [v for v in result.verdicts if v.policy == "ami-pinned"]
    assert verdict.urn == template.urn and verdict.enforcement == "mandatory"
    assert f"That id stands for the lookup {lookup.describe()}" in verdict.message
    assert "'al2023-ami-*' is a wildcard" in verdict.message
