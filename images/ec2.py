"""EC2 through boto3: the base image, the AMIs already built from a matrix, and verifying one.

Credentials come from boto3's standard chain (environment, profile, SSO,
instance role) and the endpoint from AWS_ENDPOINT_URL when it is set; only the
`--local` emulator passes explicit dummy credentials and its own endpoint.
Every AWS failure becomes a GpuforgeError that says which call failed and why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import boto3
import botocore.session
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from gpuforge.errors import GpuforgeError
from gpuforge.images.tags import MATRIX_DIGEST_TAG, TagMismatch, compare_tags

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client

# Variables that would make packer or boto3 use a real account instead of the emulator.
_REAL_CREDENTIALS = (
    "AWS_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_EC2",
)


class AwsError(GpuforgeError):
    """An AWS call failed (exit 1)."""

    exit_code = 1


class BaseImageMissing(GpuforgeError):
    """The matrix's pinned base AMI does not exist in the region (exit 1)."""

    exit_code = 1


class VerificationFailed(GpuforgeError):
    """An AMI is missing, not available, or carries the wrong tags (exit 1)."""

    exit_code = 1


@dataclass(frozen=True)
class Aws:
    """Where EC2 calls go: a region, and for the emulator an endpoint and dummy credentials."""

    region: str
    endpoint_url: str | None = None
    credentials: tuple[str, str] | None = None

    def client(self) -> EC2Client:
        config = Config(connect_timeout=10, read_timeout=60, retries={"max_attempts": 5, "mode": "standard"})
        try:
            if self.credentials:
                # The emulator's dummy credentials; AWS_PROFILE must not pull a real profile in.
                isolated = botocore.session.Session(session_vars={"profile": (None, None, None, None)})
                session = boto3.session.Session(
                    botocore_session=isolated,
                    aws_access_key_id=self.credentials[0],
                    aws_secret_access_key=self.credentials[1],
                    region_name=self.region,
                )
            else:
                session = boto3.session.Session(region_name=self.region)
            return session.client("ec2", endpoint_url=self.endpoint_url, config=config)
        except BotoCoreError as error:
            raise _aws_failure("client setup", self, error) from None

    def packer_env(self, base: Mapping[str, str]) -> dict[str, str]:
        """The environment packer runs with: the caller's, with the region (and emulator credentials)."""
        env = dict(base)
        env["AWS_DEFAULT_REGION"] = self.region
        env["AWS_REGION"] = self.region
        if self.credentials:
            for name in _REAL_CREDENTIALS:
                env.pop(name, None)
            env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"] = self.credentials
            env["AWS_EC2_METADATA_DISABLED"] = "true"
        return env


@dataclass(frozen=True)
class Image:
    """The parts of DescribeImages gpuforge uses."""

    ami_id: str
    name: str
    state: str
    tags: dict[str, str]
    boot_mode: str | None
    root_device_name: str | None
    creation_date: str

    @classmethod
    def from_api(cls, raw: Mapping[str, Any]) -> Image:
        return cls(
            ami_id=raw["ImageId"],
            name=raw.get("Name", ""),
            state=raw.get("State", "unknown"),
            tags={tag["Key"]: tag["Value"] for tag in raw.get("Tags", [])},
            boot_mode=raw.get("BootMode"),
            root_device_name=raw.get("RootDeviceName"),
            creation_date=str(raw.get("CreationDate", "")),
        )


def _aws_failure(call: str, aws: Aws, error: Exception) -> AwsError:
    where = f" at {aws.endpoint_url}" if aws.endpoint_url else ""
    if isinstance(error, ClientError):
        detail = error.response.get("Error", {})
        reason = f"{detail.get('Code', 'error')}: {detail.get('Message', error)}"
    else:
        reason = str(error)
    return AwsError(
        f"EC2 {call} in {aws.region}{where} failed: {reason}. Fix: check the AWS credentials "
        "(AWS_PROFILE or the environment), the region, and network access to EC2."
    )


def describe_image(client: EC2Client, aws: Aws, ami_id: str) -> Image | None:
    """One image by id, or None when it does not exist (or is not visible to this account)."""
    try:
        images = client.describe_images(ImageIds=[ami_id])["Images"]
    except ClientError as error:
        if error.response.get("Error", {}).get("Code", "").startswith("InvalidAMIID"):
            return None
        raise _aws_failure("DescribeImages", aws, error) from None
    except BotoCoreError as error:
        raise _aws_failure("DescribeImages", aws, error) from None
    return Image.from_api(images[0]) if images else None


def base_image(client: EC2Client, aws: Aws, ami_id: str) -> Image:
    """The matrix's pinned base AMI, or BaseImageMissing."""
    image = describe_image(client, aws, ami_id)
    if image is None:
        raise BaseImageMissing(
            f"os.base_ami.{aws.region}: base AMI {ami_id} does not exist in {aws.region} (or this account "
            "cannot see it). Fix: pin the id of an existing image for this region in the matrix."
        )
    if image.state != "available":
        raise BaseImageMissing(
            f"os.base_ami.{aws.region}: base AMI {ami_id} is {image.state!r}, not 'available'. "
            "Fix: pin an available image."
        )
    return image


def images_with_digest(client: EC2Client, aws: Aws, digest: str) -> list[Image]:
    """This account's AMIs tagged with the matrix digest, newest first."""
    try:
        raw = client.describe_images(
            Owners=["self"], Filters=[{"Name": f"tag:{MATRIX_DIGEST_TAG}", "Values": [digest]}]
        )
    except (ClientError, BotoCoreError) as error:
        raise _aws_failure("DescribeImages", aws, error) from None
    images = [Image.from_api(item) for item in raw["Images"]]
    return sorted(images, key=lambda image: image.creation_date, reverse=True)


def verify_image(client: EC2Client, aws: Aws, ami_id: str, expected_tags: Mapping[str, str]) -> Image:
    """The AMI, after checking it exists, is available and carries exactly the expected gpuforge tags."""
    image = describe_image(client, aws, ami_id)
    if image is None:
        raise VerificationFailed(f"verification failed: AMI {ami_id} does not exist in {aws.region}.")
    problems: list[str] = []
    if image.state != "available":
        problems.append(f"state is {image.state!r}, expected 'available'")
    mismatches: list[TagMismatch] = compare_tags(expected_tags, image.tags)
    problems += [mismatch.render() for mismatch in mismatches]
    if problems:
        raise VerificationFailed(
            f"verification failed: AMI {ami_id} in {aws.region} does not match the matrix:\n  "
            + "\n  ".join(problems)
            + "\nFix: rebuild with `gpuforge image build --force`, or check the matrix you compared with."
        )
    return image
