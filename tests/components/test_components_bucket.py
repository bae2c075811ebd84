"""DataBucket: versioned, encrypted, closed to the public, TLS only, optional checkpoint lifecycle."""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pytest
from components_helpers import ROLE_POLICY, cluster_spec, one, run

from gpuforge.components import BucketSpec, DataBucket, DataBucketArgs, GpuCluster
from gpuforge.errors import InputError
from gpuforge.pulumi_mocks import GpuforgeMocks

BUCKET = "aws:s3/bucket:Bucket"
BUCKET_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
PUBLIC_ACCESS_BLOCK = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def deploy(spec: BucketSpec) -> Any:
    return run(lambda: DataBucket("data", DataBucketArgs(spec)).bucket_name)


def test_defaults(mocks: GpuforgeMocks) -> None:
    name = deploy(BucketSpec())
    bucket = one(mocks, "aws:s3/bucket:Bucket")
    assert bucket.outputs["bucket"] == name
    assert name.startswith("data-bucket-"), "Pulumi auto-names the bucket from the component name"
    assert one(mocks, "aws:s3/bucketVersioning:BucketVersioning").inputs["versioningConfiguration"] == {
        "status": "Enabled"
    }
    (rule,) = one(
        mocks, "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
    ).inputs["rules"]
    assert rule["applyServerSideEncryptionByDefault"] == {"sseAlgorithm": "AES256"}
    block = one(mocks, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock").inputs
    assert all(
        block[key] is True
        for key in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
    )
    ownership = one(mocks, "aws:s3/bucketOwnershipControls:BucketOwnershipControls").inputs
    assert ownership["rule"] == {"objectOwnership": "BucketOwnerEnforced"}
    for part in mocks.resources:
        if part.type.startswith("aws:s3/") and part.type != "aws:s3/bucket:Bucket":
            assert part.inputs["bucket"] == bucket.id
    assert mocks.of_type("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration") == []


def test_kms_and_checkpoint_lifecycle(mocks: GpuforgeMocks) -> None:
    deploy(
        BucketSpec(
            kms_key_arn=KEY, checkpoint_retention_days=30, bucket_name="team-ckpts", force_destroy=True
        )
    )
    assert one(mocks, "aws:s3/bucket:Bucket").outputs["bucket"] == "team-ckpts"
    (rule,) = one(
        mocks, "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
    ).inputs["rules"]
    assert rule["applyServerSideEncryptionByDefault"] == {"sseAlgorithm": "aws:kms", "kmsMasterKeyId": KEY}
    assert rule["bucketKeyEnabled"] is True
    (lifecycle,) = one(mocks, "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration").inputs[
        "rules"
    ]
    assert lifecycle["filter"] == {"prefix": "checkpoints/"}
    assert lifecycle["expiration"] == {"days": 30}
    assert lifecycle["noncurrentVersionExpiration"] == {"noncurrentDays": 30}
    assert lifecycle["status"] == "Enabled"
    versioning = one(mocks, "aws:s3/bucketVersioning:BucketVersioning")
    assert (
        versioning.urn
        in one(mocks, "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration").dependencies
    )


def test_nodes_get_the_bucket_and_its_key_only(mocks: GpuforgeMocks) -> None:
    run(lambda: GpuCluster("demo", cluster_spec(bucket=BucketSpec(kms_key_arn=KEY))).bucket)
    bucket = one(mocks, "aws:s3/bucket:Bucket").outputs["arn"]
    (policy,) = [p for p in mocks.of_type(ROLE_POLICY) if p.name == "demo-nodes-bucket"]
    statements = {s["Sid"]: s for s in json.loads(policy.inputs["policy"])["Statement"]}
    assert statements["ClusterBucket"]["Resource"] == bucket
    assert statements["ClusterBucketObjects"]["Resource"] == f"{bucket}/*"
    assert statements["ClusterBucketKey"]["Resource"] == KEY
    assert all("*" not in s["Action"] for s in statements.values())


def _policy_of(args: DataBucketArgs, check: Any) -> Any:
    """Build one DataBucket; `check(arn, document)` runs inside apply, on the policy S3 would hold."""

    def build() -> pulumi.Output[Any]:
        data = DataBucket("data", args)
        return pulumi.Output.all(data.arn, data.policy).apply(
            lambda values: check(values[0], json.loads(values[1]))
        )

    return run(build)


def test_policy_denies_every_request_without_tls(mocks: GpuforgeMocks) -> None:
    def check(arn: str, document: dict[str, Any]) -> str:
        assert document["Version"] == "2012-10-17"
        assert document["Statement"] == [
            {
                "Sid": "DenyInsecureTransport",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": [arn, f"{arn}/*"],
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            }
        ]
        return arn

    arn = _policy_of(DataBucketArgs(), check)
    bucket = one(mocks, BUCKET)
    assert arn == bucket.outputs["arn"] == f"arn:aws:s3:::{bucket.outputs['bucket']}"
    policy = one(mocks, BUCKET_POLICY)
    assert policy.inputs["bucket"] == bucket.id
    # Written after the public access block, so S3 itself refuses a public statement added later.
    assert one(mocks, PUBLIC_ACCESS_BLOCK).urn in policy.dependencies


def test_added_statements_share_the_one_policy(mocks: GpuforgeMocks) -> None:
    reader = "arn:aws:iam::123456789012:role/reader"

    def statements(arn: pulumi.Output[str]) -> list[dict[str, Any]]:
        return [
            {
                "Sid": "Reader",
                "Effect": "Allow",
                "Principal": {"AWS": reader},
                "Action": "s3:GetObject",
                "Resource": pulumi.Output.concat(arn, "/*"),
            }
        ]

    def check(arn: str, document: dict[str, Any]) -> None:
        assert [s["Sid"] for s in document["Statement"]] == ["DenyInsecureTransport", "Reader"]
        assert document["Statement"][1]["Resource"] == f"{arn}/*"
        assert document["Statement"][1]["Principal"] == {"AWS": reader}

    _policy_of(DataBucketArgs(policy_statements=statements), check)
    assert len(mocks.of_type(BUCKET_POLICY)) == 1, "S3 keeps one policy per bucket"


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        (
            {"Sid": "DenyInsecureTransport", "Effect": "Deny"},
            r"policy_statements\[0\]\.Sid = 'DenyInsecureTransport'",
        ),
        (
            {"Action": "s3:GetObject"},
            r"policy_statements\[0\]\.Effect = None: a statement's Effect is Allow or Deny",
        ),
        ("Allow", r"policy_statements\[0\] = 'Allow': a statement is a mapping"),
    ],
)
def test_bad_statements_are_refused_before_anything_is_created(
    mocks: GpuforgeMocks, statement: Any, message: str
) -> None:
    args = DataBucketArgs(policy_statements=lambda arn: [statement])
    with pytest.raises(InputError, match=message):
        DataBucket("data", args)
    assert [r for r in mocks.resources if r.custom] == []


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"bucket_name": "Has_Upper"}, r"bucket\.bucket_name = 'Has_Upper'"),
        ({"bucket_name": "a..b"}, r"bucket\.bucket_name = 'a\.\.b'"),
        ({"checkpoint_retention_days": 0}, r"bucket\.checkpoint_retention_days = 0"),
        ({"checkpoint_retention_days": 7, "checkpoint_prefix": ""}, r"would expire every object"),
        ({"kms_key_arn": "alias/x"}, r"bucket\.kms_key_arn = 'alias/x'"),
    ],
)
def test_bucket_refusals(values: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=message):
        BucketSpec(**values)
