"""ami-pinned and driver-branch-eol on real GpuCluster output: pinned AMIs pass, everything else fails."""

from __future__ import annotations

from datetime import date
from typing import Any

import pulumi
import pulumi_aws as aws
import pytest
from policy_helpers import (
    INSTANCE,
    LAUNCH_TEMPLATE,
    Images,
    cluster,
    edit,
    mandatory,
    named,
    of,
    record,
    record_cluster,
    spec,
    verdicts,
)
from pulumi.runtime.mocks import MockCallArgs

from gpuforge.compat import compat
from gpuforge.components import AmiPin
from gpuforge.errors import InputError
from gpuforge.images.matrix import check_file
from gpuforge.pulumi_mocks import GpuforgeMocks

NOT_IN_CATALOG = "ami-0fedcba9876543210"


@pytest.mark.parametrize("node_mode", ["asg", "instances"])
def test_catalog_ami_passes(images: Images, node_mode: str) -> None:
    resources = record_cluster(
        spec(
            images,
            node_mode=node_mode,
            capacity={"type": "reservation", "reservation_id": "cr-0123456789abcdef0"},
        )
    )
    found = verdicts(resources, images)
    assert of(found, "ami-pinned") == []
    # Instances launched from the template take its AMI; the template is what is checked.
    assert INSTANCE not in {r.type for r in resources} or node_mode == "instances"


def test_ami_not_in_catalog(images: Images) -> None:
    pin = images.pins["p5-h100-cuda12"].model_copy(update={"ami_id": NOT_IN_CATALOG})
    resources = record_cluster(spec(images, ami=pin))
    [verdict] = of(verdicts(resources, images), "ami-pinned")
    assert verdict.enforcement == "mandatory"
    assert verdict.urn == named(resources, LAUNCH_TEMPLATE).urn
    assert NOT_IN_CATALOG in verdict.message
    assert str(images.catalog) in verdict.message and "not in the image catalog" in verdict.message
    assert "gpuforge image build" in verdict.message


def test_matrix_that_fails_its_check(images: Images) -> None:
    resources = record_cluster(spec(images, matrix="p5-h100-broken"))
    [verdict] = of(verdicts(resources, images), "ami-pinned")
    assert verdict.enforcement == "mandatory"
    assert "fails `gpuforge matrix check`" in verdict.message
    assert "p5-h100-broken" in verdict.message and "cuda.driver-minimum" in verdict.message


def test_matrix_that_is_gone(images: Images) -> None:
    """The catalog records an AMI whose matrix no longer exists under the configured folder."""
    resources = record_cluster(spec(images, matrix="p5-h100-broken"))
    shipped_only = images.matrices.parent / "shipped-only"
    shipped_only.mkdir(exist_ok=True)
    for path in images.matrices.glob("p5-h100-cuda*.yaml"):
        (shipped_only / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    found = verdicts(resources, images, {"ami-pinned": {"matricesDir": str(shipped_only)}})
    [verdict] = of(found, "ami-pinned")
    assert "no matrix under" in verdict.message and "has that digest" in verdict.message


def test_ssm_latest_parameter(images: Images) -> None:
    latest = "resolve:ssm:/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
    resources = record_cluster(spec(images), edit(LAUNCH_TEMPLATE, image_id=latest))
    [verdict] = of(verdicts(resources, images), "ami-pinned")
    assert verdict.enforcement == "mandatory"
    assert "SSM parameter" in verdict.message and latest in verdict.message


class LookupMocks(GpuforgeMocks):
    """Answers an AMI lookup as EC2 would: the newest matching AMI, which no catalog records.

    The recording mocks answer only the invokes the components make; a lookup is what
    this rule rejects, so this test gives it the answer a real `most_recent` lookup gives.
    """

    def call(self, args: MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        if args.token == "aws:ec2/getAmi:getAmi":
            assert args.args.get("mostRecent") is True
            return {"id": NOT_IN_CATALOG, "imageId": NOT_IN_CATALOG, "architecture": "x86_64"}, []
        return super().call(args)


def test_most_recent_lookup(images: Images) -> None:
    def latest(_: object) -> pulumi.Output[str]:
        return aws.ec2.get_ami_output(
            most_recent=True,
            owners=["amazon"],
            filters=[{"name": "name", "values": ["Deep Learning Base OSS Nvidia Driver GPU AMI*"]}],
        ).id

    resources = record(cluster(spec(images), edit(LAUNCH_TEMPLATE, image_id=latest)), mocks=LookupMocks())
    [verdict] = of(verdicts(resources, images), "ami-pinned")
    assert NOT_IN_CATALOG in verdict.message and "not in the image catalog" in verdict.message


def test_ami_unknown_at_preview_is_still_mandatory(images: Images) -> None:
    """An AMI made in the same stack (here a copy) has no id during preview: not a pinned literal."""

    def copied(_: object) -> pulumi.Output[str]:
        pin = images.pins["p5-h100-cuda12"]
        return aws.ec2.AmiCopy("copy", source_ami_id=pin.ami_id, source_ami_region=pin.region).id

    resources = record(cluster(spec(images), edit(LAUNCH_TEMPLATE, image_id=copied)), preview=True)
    [verdict] = of(verdicts(resources, images), "ami-pinned")
    assert verdict.enforcement == "mandatory"
    assert "not known at preview" in verdict.message


def test_unreadable_catalog_names_the_file(images: Images) -> None:
    broken = images.catalog.parent / "broken-catalog.json"
    broken.write_text("{not json", encoding="utf-8")
    resources = record_cluster(spec(images))
    [verdict] = of(verdicts(resources, images, {"ami-pinned": {"catalogPath": str(broken)}}), "ami-pinned")
    assert str(broken) in verdict.message and "not valid JSON" in verdict.message


def _days_to_eol(images: Images) -> int:
    matrix = check_file(images.matrices / "p5-h100-cuda12.yaml").matrix
    assert matrix is not None
    branch = compat().driver_branches.branches[matrix.nvidia.driver.split(".")[0]]
    return (branch.eol - date.today()).days


def test_driver_branch_near_end_of_life_is_advisory(images: Images) -> None:
    resources = record_cluster(spec(images))
    days = _days_to_eol(images)
    near = verdicts(resources, images, {"driver-branch-eol": {"warnDaysBeforeEol": days + 1}})
    [verdict] = of(near, "driver-branch-eol")
    assert verdict.enforcement == "advisory"
    assert "R580" in verdict.message and "end of life" in verdict.message
    assert mandatory(near) == []
    far = verdicts(resources, images, {"driver-branch-eol": {"warnDaysBeforeEol": max(days - 1, 0)}})
    assert of(far, "driver-branch-eol") == []


def test_invalid_policy_config_is_an_input_error(images: Images) -> None:
    resources = record_cluster(spec(images))
    with pytest.raises(InputError, match=r"driver-branch-eol.*warnDaysBeforeEol.*not of type 'integer'"):
        verdicts(resources, images, {"driver-branch-eol": {"warnDaysBeforeEol": "soon"}})
    with pytest.raises(InputError, match="not policies of the gpuforge pack"):
        verdicts(resources, images, {"ami-pined": "advisory"})


def test_amipin_rejects_a_non_literal_id() -> None:
    """Components refuse a malformed id up front; the policy covers what gets past them."""
    with pytest.raises(InputError):
        AmiPin(
            ami_id="latest", region="us-east-1", matrix_name="m", matrix_version="1", matrix_digest="0" * 64
        )
