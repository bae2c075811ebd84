"""DataBucket: versioned, encrypted, closed to the public, optional checkpoint lifecycle."""

from __future__ import annotations

import json
from typing import Any

import pytest
from components_helpers import ROLE_POLICY, cluster_spec, one, run

from gpuforge.components import BucketSpec, DataBucket, DataBucketArgs, GpuCluster
from gpuforge.errors import InputError
from gpuforge.pulumi_mocks import GpuforgeMocks

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
