"""DataBucket: the S3 bucket for datasets and checkpoints.

Versioned (an overwritten checkpoint can be recovered), encrypted (SSE-S3, or
SSE-KMS with the given key and an S3 Bucket Key to cut KMS requests), every
public-access block on, ACLs disabled (bucket owner enforced), TLS only, and
optionally a lifecycle rule that expires old checkpoints. Uses the provider's v7
resources (`s3.Bucket` and its separate configuration resources; `BucketV2` is
deprecated).

TLS only: S3 accepts plain HTTP requests unless the bucket policy refuses them, so
the bucket's policy denies every S3 action to everyone when `aws:SecureTransport` is
false. S3 keeps one policy per bucket (each PutBucketPolicy replaces the last), so
the component owns that one BucketPolicy, and a caller who needs more statements
passes them in `DataBucketArgs.policy_statements` instead of writing a second one.
Sources: https://docs.aws.amazon.com/AmazonS3/latest/userguide/security-best-practices.html
         https://docs.aws.amazon.com/AmazonS3/latest/API/API_PutBucketPolicy.html
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws

from gpuforge.components.input_errors import invalid
from gpuforge.components.specs import BucketSpec

TOKEN = "gpuforge:storage:DataBucket"

# Parts of multipart uploads that never completed (e.g. a checkpoint writer that died)
# are billed until removed.
ABORT_INCOMPLETE_UPLOADS_DAYS = 7

TLS_ONLY_SID = "DenyInsecureTransport"
POLICY_VERSION = "2012-10-17"
EFFECTS = ("Allow", "Deny")
STAND_IN_ARN = "arn:aws:s3:::stand-in"

Statements = Callable[[pulumi.Output[str]], Sequence[Mapping[str, Any]]]
"""Given the bucket's ARN, more statements for its policy (IAM JSON: Sid, Effect, Principal, ...)."""


@dataclass(frozen=True)
class DataBucketArgs:
    spec: BucketSpec = field(default_factory=BucketSpec)
    tags: Mapping[str, str] = field(default_factory=dict)
    policy_statements: Statements | None = None
    """Statements to add to the bucket's one policy, beside the TLS-only deny (called once on a
    stand-in ARN to check them before anything is created, then on the bucket's ARN)."""


def tls_only_statement(arn: pulumi.Input[str]) -> dict[str, Any]:
    """Deny every S3 action, to everyone, on the bucket and its objects, over plain HTTP."""
    return {
        "Sid": TLS_ONLY_SID,
        "Effect": "Deny",
        "Principal": "*",
        "Action": "s3:*",
        "Resource": [arn, pulumi.Output.concat(arn, "/*")],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }


def _checked(statements: Sequence[Mapping[str, Any]]) -> None:
    """Refuse statements S3 would reject, or that would clash with the TLS deny."""
    sids: list[object] = [TLS_ONLY_SID]
    for index, statement in enumerate(statements):
        where = f"DataBucketArgs.policy_statements[{index}]"
        if not isinstance(statement, Mapping):
            raise invalid(where, statement, "a statement is a mapping of IAM policy elements", "pass a dict")
        if statement.get("Effect") not in EFFECTS:
            raise invalid(
                f"{where}.Effect", statement.get("Effect"), "a statement's Effect is Allow or Deny", "set one"
            )
        sid = statement.get("Sid")
        if sid is not None and sid in sids:
            raise invalid(
                f"{where}.Sid",
                sid,
                f"Sids in one policy are unique, and {TLS_ONLY_SID!r} is the TLS-only deny's",
                "pick another Sid",
            )
        sids.append(sid)


class DataBucket(pulumi.ComponentResource):
    bucket_name: pulumi.Output[str]
    arn: pulumi.Output[str]
    policy: pulumi.Output[str]
    """The bucket's one policy document (JSON), as S3 holds it."""
    kms_key_arn: str | None

    def __init__(self, name: str, args: DataBucketArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TOKEN, name, None, opts)
        spec = args.spec
        if args.policy_statements:
            # Checked on a stand-in ARN before anything is registered, so a bad statement creates nothing.
            _checked(args.policy_statements(pulumi.Output.from_input(STAND_IN_ARN)))
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
        public_access = aws.s3.BucketPublicAccessBlock(
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
        extra = list(args.policy_statements(bucket.arn)) if args.policy_statements else []
        policy = aws.s3.BucketPolicy(
            f"{name}-policy",
            bucket=bucket.id,
            policy=pulumi.Output.json_dumps(
                {"Version": POLICY_VERSION, "Statement": [tls_only_statement(bucket.arn), *extra]}
            ),
            # With block_public_policy in place first, S3 itself refuses a public statement.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[public_access]),
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
        self.policy = policy.policy
        self.kms_key_arn = spec.kms_key_arn
        self.register_outputs({"bucket_name": self.bucket_name, "arn": self.arn, "policy": self.policy})
