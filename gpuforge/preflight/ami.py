"""AMI: the catalog's image for the stack's matrix exists in the region, is available, and is that matrix's.

The image catalog maps a matrix digest and region to an AMI id
(`stack_config.resolve_ami`, the same lookup `pulumi up` makes). The AMI itself
carries the digest in its `gpuforge:matrix-digest` tag (`images.tags`), so a
catalog entry that points at an image of another matrix, or a matrix edited after
its image was built, shows up here as a tag mismatch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuforge.components.specs import AmiPin
from gpuforge.images.tags import MATRIX_DIGEST_TAG
from gpuforge.preflight.aws import error_code
from gpuforge.preflight.report import Check, Status, fail, ok
from gpuforge.stack_config import StackConfig, display_path

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client

AMI = "ami"
NOT_FOUND_CODES = frozenset({"InvalidAMIID.NotFound", "InvalidAMIID.Unavailable", "InvalidAMIID.Malformed"})


def unresolved(message: str) -> Check:
    """No AMI could be taken from the catalog; the message (from `resolve_ami`) carries its own fix."""
    return Check(AMI, Status.FAIL, message)


def check_ami(ec2: EC2Client, config: StackConfig, pin: AmiPin) -> Check:
    from botocore.exceptions import ClientError

    build = f"`gpuforge image build {display_path(config.matrix_path)} --region {config.region}`"
    what = f"AMI {pin.ami_id} (the catalog's image of matrix {pin.matrix_name} {pin.matrix_version} in {config.region})"
    try:
        images = ec2.describe_images(ImageIds=[pin.ami_id])["Images"]
    except ClientError as error:
        if error_code(error) not in NOT_FOUND_CODES:
            raise
        images = []
    if not images:
        return fail(
            AMI,
            f"{what} does not exist in {config.region} for the account in use: it was deregistered, or the "
            "catalog entry belongs to another account.",
            f"rebuild it with {build}, or correct the catalog entry.",
        )
    image = images[0]
    problems: list[str] = []
    fixes: list[str] = []
    state = image.get("State")
    if state != "available":
        problems.append(f"its state is {state!r}, not 'available'")
        fixes.append(
            "wait for a pending image to become available"
            if state == "pending"
            else f"rebuild it with {build}"
        )
    tags = {tag["Key"]: tag["Value"] for tag in image.get("Tags", [])}
    found = tags.get(MATRIX_DIGEST_TAG)
    if found is None:
        problems.append(
            f"it has no {MATRIX_DIGEST_TAG} tag (tags are visible only to the account that owns the image)"
        )
        fixes.append(f"use an image built by gpuforge in this account: {build}")
    elif found != pin.matrix_digest:
        problems.append(
            f"its {MATRIX_DIGEST_TAG} tag is {found}, but the matrix {config.matrix_path.name} has digest "
            f"{pin.matrix_digest}: the image was built from another matrix, or the matrix changed since"
        )
        fixes.append(f"rebuild it with {build} and use the new catalog entry")
    if problems:
        return fail(AMI, f"{what}: " + "; ".join(problems) + ".", "; ".join(fixes) + ".")
    return ok(
        AMI, f"{what}: available, {MATRIX_DIGEST_TAG} = {pin.matrix_digest[:12]}... matches the matrix."
    )
