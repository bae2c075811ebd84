"""Every enumerated value the components emit, checked against AWS's API models in botocore.

Pulumi's mocks accept any string, so a wrong enum (an interface type, a market type,
an FSx deployment type...) would pass every other test and fail only in `pulumi up`.
botocore ships AWS's service models (shapes, enums, constraints and documentation);
where a pulumi-aws docstring disagrees with them (its launch-template interface_type
docstring names only `efa`, not `efa-only`), botocore is the authority.

One program builds clusters that together emit every value: each capacity type, both
placement strategies, all three interface types, every FSx link kind, EFA-enabled FSx,
NAT and endpoints, both bucket encryptions.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pulumi
import pytest
from components_helpers import (
    AMI,
    NOW,
    cluster_spec,
    documented_values,
    enum_of,
    plain_documentation,
    run,
    service_model,
)

from gpuforge.components import BucketSpec, CapacitySpec, GpuCluster, LustreSpec, NetworkSpec, lustre_rules
from gpuforge.pulumi_mocks import GpuforgeMocks, RecordedResource

KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"

SPECS = [
    cluster_spec(
        name="od",
        node_count=64,
        placement_strategy="partition",
        partition_count=3,
        network=NetworkSpec(api_access="nat"),
        bucket=BucketSpec(kms_key_arn=KEY, checkpoint_retention_days=14),
        lustre=LustreSpec(
            deployment_type="PERSISTENT_2",
            storage_capacity_gib=4800,
            throughput_per_tib=1000,
            efa_enabled=True,
            metadata_mode="USER_PROVISIONED",
            metadata_iops=24000,
            kms_key_arn=KEY,
        ),
    ),
    cluster_spec(
        name="odcr",
        instance_type="g5.48xlarge",
        capacity=CapacitySpec(
            type="reservation", reservation_id="cr-0123456789abcdef0", placement_group="pg1"
        ),
        lustre=LustreSpec(deployment_type="SCRATCH_2", storage_capacity_gib=2400, data_compression="NONE"),
    ),
    cluster_spec(
        name="block",
        capacity=CapacitySpec(
            type="capacity-block",
            reservation_id="cr-0fedcba9876543210",
            start=datetime(2030, 2, 1, 11, 30, tzinfo=UTC),
            end=datetime(2030, 2, 2, 11, 30, tzinfo=UTC),
        ),
        lustre=LustreSpec(
            deployment_type="SCRATCH_1",
            storage_capacity_gib=3600,
            lustre_version="2.10",
            import_path="s3://datasets-bucket/",
            export_path="s3://datasets-bucket/export/",
            auto_import_policy="NEW_CHANGED",
        ),
    ),
    cluster_spec(
        name="fixed",
        instance_type="g6.xlarge",
        node_mode="instances",
        node_count=1,
        network=NetworkSpec(
            vpc_id="vpc-0a1b2c3d", subnet_id="subnet-0a1b2c3d", route_table_ids=("rtb-0a1b2c3d",)
        ),
        lustre=LustreSpec(
            deployment_type="PERSISTENT_2",
            storage_capacity_gib=1200,
            throughput_per_tib=125,
            metadata_mode="AUTOMATIC",
            s3_path="s3://datasets-bucket/train/",
            file_system_path="/datasets",
        ),
        imds_hop_limit=2,
        ami=AMI,
    ),
]


@pytest.fixture(scope="module")
def emitted() -> list[RecordedResource]:
    from gpuforge.pulumi_mocks import install

    mocks: GpuforgeMocks = install(preview=False)

    def build() -> pulumi.Output[Any]:
        clusters = [GpuCluster(spec.name, spec, now=NOW) for spec in SPECS]
        return pulumi.Output.all(*(cluster.summary for cluster in clusters))

    run(build)
    return list(mocks.resources)


def inputs(emitted: list[RecordedResource], token: str) -> list[dict[str, Any]]:
    found = [dict(r.inputs) for r in emitted if r.type == token]
    assert found, f"the clusters emitted no {token}"
    return found


def values_at(items: list[dict[str, Any]], path: str) -> set[Any]:
    """Every value at a dotted path; `[]` walks a list."""

    def walk(node: Any, parts: list[str]) -> Iterator[Any]:
        if not parts:
            yield node
            return
        head, *rest = parts
        if head.endswith("[]"):
            for item in node.get(head[:-2], []) if isinstance(node, dict) else []:
                yield from walk(item, rest)
        elif isinstance(node, dict) and head in node:
            yield from walk(node[head], rest)

    return {value for item in items for value in walk(item, path.split("."))}


LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"

# (resource type, path in its inputs, where AWS lists the allowed values)
ENUM_CHECKS = [
    (LAUNCH_TEMPLATE, "instanceMarketOptions.marketType", ("ec2", "MarketType")),
    (LAUNCH_TEMPLATE, "metadataOptions.httpTokens", ("ec2", "LaunchTemplateHttpTokensState")),
    (LAUNCH_TEMPLATE, "metadataOptions.httpEndpoint", ("ec2", "LaunchTemplateInstanceMetadataEndpointState")),
    (LAUNCH_TEMPLATE, "blockDeviceMappings[].ebs.volumeType", ("ec2", "VolumeType")),
    (LAUNCH_TEMPLATE, "tagSpecifications[].resourceType", ("ec2", "ResourceType")),
    ("aws:ec2/placementGroup:PlacementGroup", "strategy", ("ec2", "PlacementStrategy")),
    ("aws:ec2/vpcEndpoint:VpcEndpoint", "vpcEndpointType", ("ec2", "VpcEndpointType")),
    ("aws:ec2/eip:Eip", "domain", ("ec2", "DomainType")),
    ("aws:ec2/natGateway:NatGateway", "connectivityType", ("ec2", "ConnectivityType")),
    ("aws:fsx/lustreFileSystem:LustreFileSystem", "deploymentType", ("fsx", "LustreDeploymentType")),
    ("aws:fsx/lustreFileSystem:LustreFileSystem", "dataCompressionType", ("fsx", "DataCompressionType")),
    ("aws:fsx/lustreFileSystem:LustreFileSystem", "storageType", ("fsx", "StorageType")),
    ("aws:fsx/lustreFileSystem:LustreFileSystem", "autoImportPolicy", ("fsx", "AutoImportPolicyType")),
    (
        "aws:fsx/lustreFileSystem:LustreFileSystem",
        "metadataConfiguration.mode",
        ("fsx", "MetadataConfigurationMode"),
    ),
    (
        "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation",
        "s3.autoImportPolicy.events[]",
        ("fsx", "EventType"),
    ),
    (
        "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation",
        "s3.autoExportPolicy.events[]",
        ("fsx", "EventType"),
    ),
    (
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
        "rules[].applyServerSideEncryptionByDefault.sseAlgorithm",
        ("s3", "ServerSideEncryption"),
    ),
    (
        "aws:s3/bucketVersioning:BucketVersioning",
        "versioningConfiguration.status",
        ("s3", "BucketVersioningStatus"),
    ),
    (
        "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration",
        "rules[].status",
        ("s3", "ExpirationStatus"),
    ),
    (
        "aws:s3/bucketOwnershipControls:BucketOwnershipControls",
        "rule.objectOwnership",
        ("s3", "ObjectOwnership"),
    ),
]


@pytest.mark.parametrize(
    ("token", "path", "shape"), ENUM_CHECKS, ids=[f"{c[0].split(':')[-1]}.{c[1]}" for c in ENUM_CHECKS]
)
def test_enumerations(emitted: list[RecordedResource], token: str, path: str, shape: tuple[str, str]) -> None:
    found = values_at(inputs(emitted, token), path)
    assert found, f"no value at {path}"
    assert found <= set(enum_of(*shape)), f"{found - set(enum_of(*shape))} are not in {shape}"


def test_interface_types(emitted: list[RecordedResource]) -> None:
    """InterfaceType is a plain string in the model; its documentation lists the valid values."""
    allowed = documented_values(
        "ec2", "LaunchTemplateInstanceNetworkInterfaceSpecificationRequest", "InterfaceType"
    )
    assert set(allowed) == {"interface", "efa", "efa-only"}
    found = values_at(inputs(emitted, LAUNCH_TEMPLATE), "networkInterfaces[].interfaceType")
    assert found == {"interface", "efa", "efa-only"}, "the clusters should emit all three"
    doc = plain_documentation(
        "ec2", "LaunchTemplateInstanceNetworkInterfaceSpecificationRequest", "InterfaceType"
    )
    assert "do not assign any IP addresses" in doc
    for template in inputs(emitted, LAUNCH_TEMPLATE):
        for interface in template["networkInterfaces"]:
            if interface["interfaceType"] == "efa-only":
                assert not {
                    "privateIpAddress",
                    "ipv4Addresses",
                    "ipv4AddressCount",
                    "associatePublicIpAddress",
                } & set(interface)


def test_hop_limits(emitted: list[RecordedResource]) -> None:
    doc = plain_documentation(
        "ec2", "LaunchTemplateInstanceMetadataOptionsRequest", "HttpPutResponseHopLimit"
    )
    low, high = map(int, re.search(r"Integers from (\d+) to (\d+)", doc).groups())  # type: ignore[union-attr]
    found = values_at(inputs(emitted, LAUNCH_TEMPLATE), "metadataOptions.httpPutResponseHopLimit")
    assert found == {1, 2}
    assert all(low <= value <= high for value in found)


def test_security_group_protocols(emitted: list[RecordedResource]) -> None:
    doc = plain_documentation("ec2", "IpPermission", "IpProtocol")
    assert "Use -1 to specify all protocols" in doc and "(tcp, udp, icmp, icmpv6)" in doc
    rules = inputs(emitted, "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule") + inputs(
        emitted, "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
    )
    assert {rule["ipProtocol"] for rule in rules} == {"-1", "tcp"}
    for rule in rules:
        # "For tcp, udp, and icmp, you must specify a port range."
        assert (rule["ipProtocol"] == "tcp") == ("fromPort" in rule and "toPort" in rule)


def test_health_check_type(emitted: list[RecordedResource]) -> None:
    doc = plain_documentation("autoscaling", "CreateAutoScalingGroupType", "HealthCheckType")
    allowed = re.search(r"The valid values are (.+?)\. ", doc)
    assert allowed
    values = set(re.findall(r"[A-Z][A-Z0-9_]+", allowed.group(1)))
    assert "EC2" in values
    assert values_at(inputs(emitted, "aws:autoscaling/group:Group"), "healthCheckType") <= values


def test_schedule_times(emitted: list[RecordedResource]) -> None:
    doc = plain_documentation("autoscaling", "PutScheduledUpdateGroupActionType", "StartTime")
    assert "YYYY-MM-DDThh:mm:ssZ format in UTC" in doc
    for schedule in inputs(emitted, "aws:autoscaling/schedule:Schedule"):
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z", schedule["startTime"])


def test_fsx_numbers_and_patterns(emitted: list[RecordedResource]) -> None:
    fsx = service_model("fsx")
    systems = inputs(emitted, "aws:fsx/lustreFileSystem:LustreFileSystem")

    def within(shape: str, values: set[Any]) -> None:
        metadata = fsx.shape_for(shape).metadata
        assert all(metadata["min"] <= v <= metadata["max"] for v in values), (shape, values, metadata)

    within("StorageCapacity", values_at(systems, "storageCapacity"))
    within("PerUnitStorageThroughput", values_at(systems, "perUnitStorageThroughput"))
    within("MetadataIops", values_at(systems, "metadataConfiguration.iops"))
    version = fsx.shape_for("FileSystemTypeVersion").metadata["pattern"]
    documented = re.search(
        r"Valid values are (\d\.\d+), (\d\.\d+), and (\d\.\d+)",
        plain_documentation("fsx", "CreateFileSystemRequest", "FileSystemTypeVersion"),
    )
    assert documented
    for value in values_at(systems, "fileSystemTypeVersion"):
        assert re.match(version, value) and value in documented.groups()
    archive = fsx.shape_for("ArchivePath").metadata["pattern"]
    for path in values_at(systems, "importPath") | values_at(systems, "exportPath"):
        assert re.match(archive, path)
    associations = inputs(emitted, "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation")
    for association in associations:
        assert re.match(archive, association["dataRepositoryPath"])
        assert re.match(fsx.shape_for("Namespace").metadata["pattern"], association["fileSystemPath"])


# -- the rules' constants against the model's own words ---------------------------------------


def test_capacity_rule_matches_the_model() -> None:
    doc = plain_documentation("fsx", "CreateFileSystemRequest", "StorageCapacity")
    assert (
        "For SCRATCH_2, PERSISTENT_2, and PERSISTENT_1 deployment types using SSD storage type, "
        "the valid values are 1200 GiB, 2400 GiB, and increments of 2400 GiB" in doc
    )
    assert (
        "For SCRATCH_1 deployment type, valid values are 1200 GiB, 2400 GiB, and increments of 3600 GiB"
        in doc
    )
    assert lustre_rules.SSD_CAPACITY_SMALL_GIB == (1200, 2400)
    assert lustre_rules.SSD_CAPACITY_INCREMENT_GIB == {
        "PERSISTENT_2": 2400,
        "SCRATCH_2": 2400,
        "SCRATCH_1": 3600,
    }


def test_throughput_rule_matches_the_model() -> None:
    doc = plain_documentation("fsx", "CreateFileSystemLustreConfiguration", "PerUnitStorageThroughput")
    listed = re.search(r"For PERSISTENT_2 SSD storage: ([\d, ]+) MB/s/TiB", doc)
    assert listed
    assert tuple(int(v) for v in listed.group(1).split(",")) == lustre_rules.PERSISTENT_2_THROUGHPUT_PER_TIB
    assert "Required with PERSISTENT_1 and PERSISTENT_2" in doc


def test_link_rules_match_the_model() -> None:
    operation = re.sub(
        r"<[^>]+>", "", service_model("fsx").operation_model("CreateDataRepositoryAssociation").documentation
    )
    assert (
        "supported on all FSx for Lustre 2.12 and 2.15 file systems, excluding scratch_1 deployment type"
        in operation
    )
    for deployment in ("SCRATCH_1", "SCRATCH_2", "PERSISTENT_2"):
        for version in ("2.10", "2.12", "2.15"):
            spec = LustreSpec.model_construct(deployment_type=deployment, lustre_version=version)
            expected = version in ("2.12", "2.15") and deployment != "SCRATCH_1"
            assert lustre_rules.data_repository_association_supported(spec) is expected
    import_doc = plain_documentation("fsx", "CreateFileSystemLustreConfiguration", "ImportPath")
    assert "not supported for file systems with a data repository association" in import_doc
    version_doc = plain_documentation("fsx", "CreateFileSystemRequest", "FileSystemTypeVersion")
    assert "2.10 is supported by the Scratch and Persistent_1 Lustre deployment types" in version_doc
    assert "except for PERSISTENT_2 with a metadata configuration mode" in version_doc
    kms_doc = plain_documentation("fsx", "CreateFileSystemRequest", "KmsKeyId")
    assert "PERSISTENT_1 and PERSISTENT_2 deployment types only" in kms_doc


def test_metadata_iops_bounds_match_the_model() -> None:
    metadata = service_model("fsx").shape_for("MetadataIops").metadata
    assert (metadata["min"], metadata["max"]) == (
        lustre_rules.METADATA_IOPS_SMALL[0],
        lustre_rules.METADATA_IOPS_MAX,
    )
