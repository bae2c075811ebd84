"""EC2 through boto3: the base image, the AMIs already built from a matrix, and verifying one.

Credentials come from boto3's standard chain (environment, profile, SSO,
instance role) and the endpoint from AWS_ENDPOINT_URL when it is set; only the
`--local` emulator passes explicit dummy credentials and its own endpoint.
Every AWS failure becomes a GpuforgeError that says which call failed and why.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from gpuforge.aws_session import client, open_session, setup_error
from gpuforge.errors import GpuforgeError
from gpuforge.images.tags import MATRIX_DIGEST_TAG, TagMismatch, compare_tags

if TYPE_CHECKING:
    import boto3
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_sts import STSClient

COMMAND = "gpuforge image"
# How often a copy's state is asked for while waiting (DescribeImages is cheap, copies take minutes).
POLL_INTERVAL_S = 15.0

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


_CONFIG = Config(connect_timeout=10, read_timeout=60, retries={"max_attempts": 5, "mode": "standard"})


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

    def in_region(self, region: str) -> Aws:
        """The same account and endpoint, another region (for copies)."""
        return replace(self, region=region)

    def client(self) -> EC2Client:
        ec2: EC2Client = client(
            self._session(), "ec2", command=COMMAND, endpoint_url=self.endpoint_url, config=_CONFIG
        )
        return ec2

    def account(self) -> str:
        """The account the credentials belong to (STS GetCallerIdentity)."""
        try:
            sts: STSClient = client(
                self._session(), "sts", command=COMMAND, endpoint_url=self.endpoint_url, config=_CONFIG
            )
            return sts.get_caller_identity()["Account"]
        except (ClientError, BotoCoreError) as error:
            raise _aws_failure("STS GetCallerIdentity", self, error) from None

    def _session(self) -> boto3.session.Session:
        # For the emulator, its dummy credentials; AWS_PROFILE must not pull a real profile in.
        return open_session(self.region, command=COMMAND, static_keys=self.credentials)

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
    owner_id: str = ""
    snapshot_ids: tuple[str, ...] = ()

    @classmethod
    def from_api(cls, raw: Mapping[str, Any]) -> Image:
        return cls(
            owner_id=str(raw.get("OwnerId", "")),
            snapshot_ids=tuple(
                device["Ebs"]["SnapshotId"]
                for device in raw.get("BlockDeviceMappings", [])
                if device.get("Ebs", {}).get("SnapshotId")
            ),
            ami_id=raw["ImageId"],
            name=raw.get("Name", ""),
            state=raw.get("State", "unknown"),
            tags={tag["Key"]: tag["Value"] for tag in raw.get("Tags", [])},
            boot_mode=raw.get("BootMode"),
            root_device_name=raw.get("RootDeviceName"),
            creation_date=str(raw.get("CreationDate", "")),
        )


def _aws_failure(call: str, aws: Aws, error: Exception) -> GpuforgeError:
    """A failed AWS call (exit 1); an AWS configuration botocore cannot use (no credentials, an unknown
    profile, an expired sign-in) is the environment to fix (exit 2), as everywhere (gpuforge.aws_session)."""
    setup = setup_error(error, COMMAND)
    if setup is not None:
        return setup
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


def wait_available(
    client: EC2Client,
    aws: Aws,
    ami_id: str,
    *,
    timeout_s: float,
    report: Callable[[str], None],
    interval_s: float = POLL_INTERVAL_S,
) -> Image:
    """Wait (bounded) until an AMI is `available`, reporting its state each poll; AwsError otherwise."""
    started = time.monotonic()
    while True:
        image = describe_image(client, aws, ami_id)
        state = image.state if image else "not visible yet"
        elapsed = time.monotonic() - started
        report(
            f"waiting for {ami_id} in {aws.region}: {state} ({int(elapsed) // 60:02d}:{int(elapsed) % 60:02d})"
        )
        if image is not None and image.state == "available":
            return image
        if image is not None and image.state in ("failed", "error", "deregistered", "invalid"):
            raise AwsError(
                f"AMI {ami_id} in {aws.region} is {image.state!r}, it will not become available. "
                "Fix: look at the copy in the EC2 console (a KMS key or snapshot quota is the usual cause) "
                "and run the build again."
            )
        if elapsed + interval_s > timeout_s:
            raise AwsError(
                f"AMI {ami_id} in {aws.region} was still {state!r} after {timeout_s:g} s. Fix: raise "
                "--copy-timeout, or wait and run the build again (it reuses the copy once available)."
            )
        time.sleep(interval_s)


def copy_image(client: EC2Client, aws: Aws, source: Image, source_region: str) -> str:
    """Start copying `source` into `aws.region` under the same name; the new AMI id.

    The client token makes a retried call return the same copy instead of a second one
    (CopyImage, ClientToken: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CopyImage.html).
    """
    token = f"gpuforge-{source.ami_id}-{aws.region}"[:64]
    try:
        copied = client.copy_image(
            SourceImageId=source.ami_id, SourceRegion=source_region, Name=source.name, ClientToken=token
        )
    except (ClientError, BotoCoreError) as error:
        raise _aws_failure(f"CopyImage of {source.ami_id} from {source_region}", aws, error) from None
    return copied["ImageId"]


def tag_image(client: EC2Client, aws: Aws, image: Image, tags: Mapping[str, str]) -> None:
    """Tag an AMI and its snapshots (a copy carries none of the source's tags until told)."""
    try:
        client.create_tags(
            Resources=[image.ami_id, *image.snapshot_ids],
            Tags=[{"Key": key, "Value": value} for key, value in sorted(tags.items())],
        )
    except (ClientError, BotoCoreError) as error:
        raise _aws_failure(f"CreateTags on {image.ami_id}", aws, error) from None


def share_image(client: EC2Client, aws: Aws, image: Image, accounts: Sequence[str]) -> None:
    """Let `accounts` launch the AMI and create volumes from its snapshots (both are needed to launch it)."""
    if not accounts:
        return
    try:
        client.modify_image_attribute(
            ImageId=image.ami_id, LaunchPermission={"Add": [{"UserId": account} for account in accounts]}
        )
        for snapshot in image.snapshot_ids:
            client.modify_snapshot_attribute(
                SnapshotId=snapshot,
                Attribute="createVolumePermission",
                OperationType="add",
                UserIds=list(accounts),
            )
    except (ClientError, BotoCoreError) as error:
        raise _aws_failure(f"sharing {image.ami_id} with {', '.join(accounts)}", aws, error) from None


def launch_permissions(client: EC2Client, aws: Aws, ami_id: str) -> list[str]:
    """The accounts an AMI is shared with."""
    try:
        raw = client.describe_image_attribute(ImageId=ami_id, Attribute="launchPermission")
    except (ClientError, BotoCoreError) as error:
        raise _aws_failure(f"DescribeImageAttribute of {ami_id}", aws, error) from None
    return sorted(p["UserId"] for p in raw.get("LaunchPermissions", []) if "UserId" in p)


def deregister(client: EC2Client, aws: Aws, image: Image) -> None:
    """Deregister an AMI, then delete its snapshots (deregistering leaves them, and they cost money)."""
    try:
        client.deregister_image(ImageId=image.ami_id)
        for snapshot in image.snapshot_ids:
            client.delete_snapshot(SnapshotId=snapshot)
    except (ClientError, BotoCoreError) as error:
        raise _aws_failure(f"deregistering {image.ami_id} and its snapshots", aws, error) from None
