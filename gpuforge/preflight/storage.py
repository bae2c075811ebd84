"""Subnet and bucket: room for the nodes' addresses, and the S3 path the Lustre file system links.

Subnet: the stack's config has no key for an existing subnet, so the cluster
network component always creates the VPC and its subnet (`components.network`);
there is nothing in the account to check yet. The check says so and states how
many addresses the nodes will take: one per interface that takes an IP in the
launch template's layout (`components.efa_layout`; EFA-only interfaces take none).

Bucket: with `gpuforge:lustre.s3Path` the file system links an existing bucket.
It must exist and be readable, and automatic import works only from a bucket in
the file system's own region
(https://docs.aws.amazon.com/fsx/latest/LustreGuide/autoimport-data-repo-dra.html).
Without s3Path the link goes to the cluster's own bucket, which the stack creates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuforge.components.efa_layout import interface_layout
from gpuforge.components.specs import LustreSpec
from gpuforge.hardware import InstanceType
from gpuforge.preflight.aws import IAM_ACTIONS, error_code
from gpuforge.preflight.report import Check, fail, ok, warn
from gpuforge.stack_config import StackConfig

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

SUBNET = "subnet"
BUCKET = "bucket"
AUTO_IMPORT_SOURCE = "https://docs.aws.amazon.com/fsx/latest/LustreGuide/autoimport-data-repo-dra.html"


def check_subnet(config: StackConfig, instance: InstanceType) -> Check:
    per_node = sum(1 for slot in interface_layout(instance) if slot.takes_ip)
    return ok(
        SUBNET,
        "not applicable: the subnet is created by the stack (the gpuforge:* config names no existing subnet). "
        f"Its {config.node_count} nodes will take {config.node_count * per_node} private IPs "
        f"({per_node} per {config.instance_type} node: EFA-only interfaces take none).",
    )


def auto_import(spec: LustreSpec) -> bool:
    """Whether the file system imports S3 changes automatically (DRA events, or the legacy policy)."""
    if spec.s3_path is not None:
        return bool(spec.auto_import_events)
    return spec.auto_import_policy not in (None, "NONE")


def check_bucket(s3: S3Client, config: StackConfig) -> Check:
    from botocore.exceptions import ClientError

    lustre = config.lustre
    if lustre is None:
        return ok(BUCKET, "not applicable: the stack has no Lustre file system (no gpuforge:lustre).")
    path = lustre.s3_path or lustre.import_path
    if path is None:
        return ok(
            BUCKET,
            "not applicable: the file system links the cluster's own bucket, which the stack creates "
            "(no gpuforge:lustre.s3Path).",
        )
    bucket, _, prefix = path.removeprefix("s3://").partition("/")
    key = "gpuforge:lustre.s3Path"
    try:
        head = s3.head_bucket(Bucket=bucket)
    except ClientError as error:
        code = error_code(error)
        if code in ("404", "NoSuchBucket"):
            return fail(
                BUCKET,
                f"{path} ({key}): bucket {bucket!r} does not exist.",
                f"create it in {config.region}, or correct {key}.",
            )
        if code in ("403", "AccessDenied"):
            return fail(
                BUCKET,
                f"{path} ({key}): AWS denied HeadBucket on {bucket!r} ({code}): the credentials lack "
                f"{IAM_ACTIONS['HeadBucket']} on arn:aws:s3:::{bucket}, or the bucket belongs to another account.",
                f"allow {IAM_ACTIONS['HeadBucket']} on the bucket, or correct {key}.",
            )
        raise
    region = head.get("BucketRegion") or head["ResponseMetadata"]["HTTPHeaders"].get("x-amz-bucket-region")
    if auto_import(lustre) and region != config.region:
        return fail(
            BUCKET,
            f"{path} ({key}): bucket {bucket!r} is in {region}, the file system in {config.region}; automatic "
            f"import from S3 works only within one region ({AUTO_IMPORT_SOURCE}).",
            f"use a bucket in {config.region} (copy or replicate the data there), or correct {key}.",
        )
    where = f"bucket {bucket!r} exists in {region}" + (
        ", the file system's region (automatic import needs that)" if auto_import(lustre) else ""
    )
    if prefix:
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)
        if listed.get("KeyCount", 0) == 0:
            return warn(
                BUCKET,
                f"{path} ({key}): {where}, but no object's key starts with {prefix!r}; the file system "
                "would start empty there.",
                f"check the prefix in {key} (a typo links an empty folder), or upload the data first.",
            )
        where += f", and objects exist under {prefix!r}"
    return ok(BUCKET, f"{path} ({key}): {where}.")
