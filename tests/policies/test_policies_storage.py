"""fsx-same-subnet, fsx-s3-link, s3-bucket-protection and cost-allocation-tags on real cluster output."""

from __future__ import annotations

import pulumi_aws as aws
from policy_helpers import (
    BUCKET,
    BUCKET_ENCRYPTION,
    FSX,
    PUBLIC_ACCESS_BLOCK,
    Images,
    edit,
    named,
    of,
    record,
    record_cluster,
    spec,
    verdicts,
)

from gpuforge.components import ClusterNetwork, LustreSpec, LustreStorage
from gpuforge.components.lustre import LustreStorageArgs
from gpuforge.components.network import ClusterNetworkArgs

PERSISTENT_2 = LustreSpec(deployment_type="PERSISTENT_2", storage_capacity_gib=2400, throughput_per_tib=250)
SCRATCH_2 = LustreSpec(deployment_type="SCRATCH_2", storage_capacity_gib=1200)
RESERVED = {"type": "reservation", "reservation_id": "cr-0123456789abcdef0"}


def test_file_system_beside_the_nodes(images: Images) -> None:
    clean = record_cluster(spec(images, lustre=PERSISTENT_2, capacity=RESERVED))
    assert of(verdicts(clean, images), "fsx-same-subnet") == []
    elsewhere = record_cluster(
        spec(images, lustre=PERSISTENT_2, capacity=RESERVED), edit(FSX, subnet_ids="subnet-0aaaaaaaaaaaaaaaa")
    )
    [verdict] = of(verdicts(elsewhere, images), "fsx-same-subnet")
    assert verdict.enforcement == "mandatory" and verdict.urn == named(elsewhere, FSX).urn
    assert "is in subnet 'subnet-0aaaaaaaaaaaaaaaa', the nodes in 'demo-network-private'" in verdict.message


def test_dra_link_passes(images: Images) -> None:
    for lustre in (PERSISTENT_2, SCRATCH_2):
        found = verdicts(record_cluster(spec(images, lustre=lustre, capacity=RESERVED)), images)
        assert of(found, "fsx-s3-link") == [], lustre.deployment_type


def test_legacy_link_where_a_dra_cannot_be_used_passes(images: Images) -> None:
    scratch_1 = LustreSpec(
        deployment_type="SCRATCH_1", storage_capacity_gib=1200, import_path="s3://datasets/train/"
    )
    found = verdicts(record_cluster(spec(images, lustre=scratch_1, bucket=None, capacity=RESERVED)), images)
    assert of(found, "fsx-s3-link") == []


def test_import_path_beside_a_dra(images: Images) -> None:
    resources = record_cluster(
        spec(images, lustre=PERSISTENT_2, capacity=RESERVED), edit(FSX, import_path="s3://datasets/")
    )
    [verdict] = of(verdicts(resources, images), "fsx-s3-link")
    assert "linked to S3 twice" in verdict.message and "demo-lustre-dra" in verdict.message


def test_import_path_on_persistent_2(images: Images) -> None:
    resources = record_cluster(
        spec(images, lustre=PERSISTENT_2, bucket=None, capacity=RESERVED),
        edit(FSX, import_path="s3://datasets/"),
    )
    [verdict] = of(verdicts(resources, images), "fsx-s3-link")
    assert "PERSISTENT_2 does not support ImportPath" in verdict.message


def test_import_path_on_scratch_2_without_a_dra_passes(images: Images) -> None:
    """AWS documents the legacy link on SCRATCH_2 (and SCRATCH_1, PERSISTENT_1); only a DRA beside it, or
    PERSISTENT_2, is refused. The old policy refused this file system."""
    resources = record_cluster(
        spec(images, lustre=SCRATCH_2, bucket=None, capacity=RESERVED),
        edit(FSX, import_path="s3://datasets/"),
    )
    assert of(verdicts(resources, images), "fsx-s3-link") == []


def test_dra_on_scratch_1(images: Images) -> None:
    def build() -> None:
        network = ClusterNetwork("net", ClusterNetworkArgs("us-east-1a"))
        scratch_1 = LustreSpec(deployment_type="SCRATCH_1", storage_capacity_gib=1200)
        storage = LustreStorage(
            "scratch",
            LustreStorageArgs(scratch_1, network.vpc_id, network.subnet_id, network.security_group_id),
        )
        aws.fsx.DataRepositoryAssociation(
            "late-link",
            file_system_id=storage.file_system_id,
            data_repository_path="s3://datasets/",
            file_system_path="/",
        )

    [verdict] = of(verdicts(record(build), images), "fsx-s3-link")
    assert "DRAs work on Lustre 2.12 and 2.15 file systems except SCRATCH_1" in verdict.message


def test_unlinked_file_system(images: Images) -> None:
    resources = record_cluster(spec(images, lustre=PERSISTENT_2, bucket=None, capacity=RESERVED))
    [verdict] = of(verdicts(resources, images), "fsx-s3-link")
    assert "is not linked to S3" in verdict.message
    assert of(verdicts(resources, images, {"fsx-s3-link": {"requireS3Link": False}}), "fsx-s3-link") == []


def test_bucket_protection(images: Images) -> None:
    assert of(verdicts(record_cluster(spec(images, capacity=RESERVED)), images), "s3-bucket-protection") == []
    open_bucket = record_cluster(
        spec(images, capacity=RESERVED), edit(PUBLIC_ACCESS_BLOCK, restrict_public_buckets=False)
    )
    [verdict] = of(verdicts(open_bucket, images), "s3-bucket-protection")
    assert verdict.urn == named(open_bucket, BUCKET).urn
    assert "restrictPublicBuckets=False" in verdict.message
    no_default = record_cluster(
        spec(images, capacity=RESERVED),
        edit(
            BUCKET_ENCRYPTION,
            rules=[aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(bucket_key_enabled=True)],
        ),
    )
    [verdict] = of(verdicts(no_default, images), "s3-bucket-protection")
    assert "no default encryption configuration" in verdict.message


def test_cost_allocation_tags(images: Images) -> None:
    resources = record_cluster(spec(images, lustre=PERSISTENT_2, capacity=RESERVED, tags={"team": "vision"}))
    assert of(verdicts(resources, images), "cost-allocation-tags") == []
    found = of(
        verdicts(resources, images, {"cost-allocation-tags": {"requiredTags": ["team", "cost-center"]}}),
        "cost-allocation-tags",
    )
    assert {verdict.enforcement for verdict in found} == {"advisory"}
    assert len(found) == 3  # the nodes, the file system, the bucket
    assert all("lack the cost-allocation tag cost-center, so" in verdict.message for verdict in found)
