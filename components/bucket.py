"""DataBucket: the S3 bucket for datasets and checkpoints.

Versioned (an overwritten checkpoint can be recovered), encrypted (SSE-S3, or
SSE-KMS with the given key and an S3 Bucket Key to cut KMS requests), every
public-access block on, ACLs disabled (bucket owner enforced), and optionally a
lifecycle rule that expires old checkpoints. Uses the provider's v7 resources
(`s3.Bucket` and its separate configuration resources; `BucketV2` is deprecated).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from gpuforge.components.specs import BucketSpec

TOKEN = "gpuforge:storage:DataBucket"

# Parts of multipart uploads that never completed (e.g. a checkpoint writer that died)
# are billed until removed.
ABORT_INCOMPLETE_UPLOADS_DAYS = 7


@dataclass(frozen=True)
class DataBucketArgs:
    spec: BucketSpec = field(default_factory=BucketSpec)
    tags: Mapping[str, str] = field(default_factory=dict)


class DataBucket(pulumi.ComponentResource):
    bucket_name: pulumi.Output[str]
    arn: pulumi.Output[str]
    kms_key_arn: str | None

    def __init__(self, name: str, args: DataBucketArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TOKEN, name, None, opts)
        spec = args.spec
        child = pulumi.ResourceOptions(parent=self)
        bucket = aws.s3.Bucket(
            f"{name}-bucket",
            bucket=spec.bucket_name,
            force_destroy=spec.force_destroy,
            tags=dict(args.tags),
            opts=child,
        )
        aws.s3.BucketOwnershipControls(
            f"{name}-ownership",
            bucket=bucket.id,
            rule=aws.s3.BucketOwnershipControlsRuleArgs(object_ownership="BucketOwnerEnforced"),
            opts=child,
        )
        aws.s3.BucketPublicAccessBlock(
            f"{name}-public-access",
            bucket=bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=child,
        )
        versioning = aws.s3.BucketVersioning(
            f"{name}-versioning",
            bucket=bucket.id,
            versioning_configuration=aws.s3.BucketVersioningVersioningConfigurationArgs(status="Enabled"),
            opts=child,
        )
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-encryption",
            bucket=bucket.id,
            rules=[
                aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
                    apply_server_side_encryption_by_default=aws.s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                        sse_algorithm="aws:kms" if spec.kms_key_arn else "AES256",
                        kms_master_key_id=spec.kms_key_arn,
                    ),
                    bucket_key_enabled=True if spec.kms_key_arn else None,
                )
            ],
            opts=child,
        )
        if spec.checkpoint_retention_days is not None:
            days = spec.checkpoint_retention_days
            aws.s3.BucketLifecycleConfiguration(
                f"{name}-lifecycle",
                bucket=bucket.id,
                rules=[
                    aws.s3.BucketLifecycleConfigurationRuleArgs(
                        id="expire-old-checkpoints",
                        status="Enabled",
                        filter=aws.s3.BucketLifecycleConfigurationRuleFilterArgs(
                            prefix=spec.checkpoint_prefix
                        ),
                        expiration=aws.s3.BucketLifecycleConfigurationRuleExpirationArgs(days=days),
                        noncurrent_version_expiration=aws.s3.BucketLifecycleConfigurationRuleNoncurrentVersionExpirationArgs(
                            noncurrent_days=days
                        ),
                        abort_incomplete_multipart_upload=aws.s3.BucketLifecycleConfigurationRuleAbortIncompleteMultipartUploadArgs(
                            days_after_initiation=ABORT_INCOMPLETE_UPLOADS_DAYS
                        ),
                    )
                ],
                # S3 requires versioning to be configured before a rule on noncurrent versions.
                opts=pulumi.ResourceOptions(parent=self, depends_on=[versioning]),
            )
        self.bucket_name = bucket.bucket
        self.arn = bucket.arn
        self.kms_key_arn = spec.kms_key_arn
        self.register_outputs({"bucket_name": self.bucket_name, "arn": self.arn})
