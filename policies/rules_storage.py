"""Storage rules: FSx for Lustre beside the nodes and linked to S3 the supported way; S3 buckets closed.

FSx for Lustre encrypts every file system at rest (with a customer key on PERSISTENT
types, with the service key on SCRATCH types), so no rule asks for a KMS key.

These are stack policies: the file system's subnet, a data repository
association's file system and a bucket setting's bucket are ids that the stack
creates, unknown during preview, and found through property dependencies.
"""

from __future__ import annotations

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    PolicyResource,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from gpuforge.components.lustre_rules import API_SOURCE, DRA_SOURCE, data_repository_association_supported
from gpuforge.components.specs import LustreSpec
from gpuforge.policies import aws_types
from gpuforge.policies.engine_adapter import unknown_during_preview
from gpuforge.policies.props import UNKNOWN, at, flag, is_set, items, show, text, text_or_texts
from gpuforge.policies.stack_graph import StackGraph, bucket_settings, describe, merge, node_subnets, nodes

# Lustre version when FileSystemTypeVersion is not given: 2.10, except 2.12 for PERSISTENT_2
# without a metadata configuration and 2.15 for PERSISTENT_2 with one; DeploymentType
# defaults to SCRATCH_1.
# Source: https://docs.aws.amazon.com/fsx/latest/APIReference/API_CreateFileSystem.html (FileSystemTypeVersion)
#         https://docs.aws.amazon.com/fsx/latest/APIReference/API_CreateFileSystemLustreConfiguration.html
DEFAULT_DEPLOYMENT = "SCRATCH_1"
LEGACY_FIELDS = ("importPath", "exportPath")
REQUIRE_LINK_KEY = "requireS3Link"
PUBLIC_ACCESS_FLAGS = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
S3_BLOCK_SOURCE = (
    "https://docs.aws.amazon.com/AmazonS3/latest/userguide/access-control-block-public-access.html"
)
S3_ENCRYPTION_SOURCE = "https://docs.aws.amazon.com/AmazonS3/latest/userguide/default-bucket-encryption.html"


def _lustre_version(file_system: PolicyResource, deployment: str) -> str:
    given = text(at(file_system.props, "fileSystemTypeVersion"))
    if given is UNKNOWN:
        unknown_during_preview([file_system.name, "fileSystemTypeVersion"])
    if isinstance(given, str):
        return given
    if deployment != "PERSISTENT_2":
        return "2.10"
    return "2.15" if is_set(at(file_system.props, "metadataConfiguration")) else "2.12"


def _dra_supported(deployment: str, version: str) -> bool:
    # The components' rule, on the resource's values (model_construct skips the spec's own checks,
    # which are about user input, not about this question).
    return data_repository_association_supported(
        LustreSpec.model_construct(deployment_type=deployment, lustre_version=version)  # type: ignore[call-arg, arg-type]
    )


def validate_fsx_subnet(args: StackValidationArgs, report: ReportViolation) -> None:
    graph = StackGraph(args.resources)
    file_systems = graph.of_type(aws_types.LUSTRE_FILE_SYSTEM)
    if not file_systems:
        return
    node_refs = merge(node_subnets(graph, node) for node in nodes(graph))
    if node_refs.unresolved:
        unknown_during_preview(["nodes", "subnets"])
    if not node_refs.identities:
        return  # no nodes in this stack to be beside
    for file_system in file_systems:
        # pulumi-aws 7 takes the one subnet as a string; older versions took a one-item list.
        values = text_or_texts(at(file_system.props, "subnetIds"))
        refs = graph.refs(file_system, "subnetIds", values, (aws_types.SUBNET,))
        if refs.unresolved:
            unknown_during_preview([file_system.name, "subnetIds"])
        if not refs.identities or not refs.identities <= node_refs.identities:
            report(
                f"file system {describe(file_system)} is in subnet {refs.describe()}, the nodes in "
                f"{node_refs.describe()}: traffic to another subnet (or zone) adds latency and cross-AZ "
                "charges. Fix: create the file system in the nodes' subnet (LustreStorage takes the "
                "cluster's subnet).",
                file_system.urn,
            )


def validate_fsx_link(args: StackValidationArgs, report: ReportViolation) -> None:
    graph = StackGraph(args.resources)
    require_link = bool(args.get_config()[REQUIRE_LINK_KEY])
    associations = graph.of_type(aws_types.DATA_REPOSITORY_ASSOCIATION)
    for file_system in graph.of_type(aws_types.LUSTRE_FILE_SYSTEM):
        deployment = text(at(file_system.props, "deploymentType"))
        if deployment is UNKNOWN:
            unknown_during_preview([file_system.name, "deploymentType"])
        deployment = str(deployment or DEFAULT_DEPLOYMENT)
        version = _lustre_version(file_system, deployment)
        supported = _dra_supported(deployment, version)
        legacy = [name for name in LEGACY_FIELDS if is_set(at(file_system.props, name))]
        linked = []
        for association in associations:
            refs = graph.refs(
                association,
                "fileSystemId",
                [text(at(association.props, "fileSystemId"))],
                (aws_types.LUSTRE_FILE_SYSTEM,),
            )
            if refs.unresolved:
                unknown_during_preview([association.name, "fileSystemId"])
            if file_system.urn in {ref.urn for ref in refs.internal}:
                linked.append(association)
        what = f"file system {describe(file_system)} ({deployment}, Lustre {version})"
        legacy_names = " and ".join(f"{name} {show(at(file_system.props, name))}" for name in legacy)
        if legacy and linked:
            report(
                f"{what} is linked to S3 twice: {legacy_names} and data repository association "
                f"{', '.join(describe(a) for a in linked)}; ImportPath is not supported on a file system "
                f"with a DRA (source: {API_SOURCE}). Fix: keep the DRA and remove the import/export paths.",
                file_system.urn,
            )
        elif legacy and deployment == "PERSISTENT_2":
            report(
                f"{what} sets {legacy_names}; PERSISTENT_2 does not support ImportPath, ExportPath or "
                f"AutoImportPolicy (source: {API_SOURCE}). Fix: link S3 with a data repository association.",
                file_system.urn,
            )
        elif linked and not supported:
            report(
                f"{what} has data repository association {', '.join(describe(a) for a in linked)}, but DRAs "
                f"work on Lustre 2.12 and 2.15 file systems except SCRATCH_1 (source: {DRA_SOURCE}). Fix: use "
                "SCRATCH_2 or PERSISTENT_2 on Lustre 2.15, or the import/export paths on SCRATCH_1.",
                file_system.urn,
            )
        elif not legacy and not linked and require_link:
            report(
                f"{what} is not linked to S3, so datasets and checkpoints do not flow between the two. Fix: "
                f"add a data repository association{'' if supported else ' (or import/export paths here)'}, "
                f"or set this policy's {REQUIRE_LINK_KEY} config to false for scratch-only file systems.",
                file_system.urn,
            )


def _encrypted(rule: object) -> bool:
    return is_set(text(at(rule, "applyServerSideEncryptionByDefault", "sseAlgorithm")))


def validate_buckets(args: StackValidationArgs, report: ReportViolation) -> None:
    graph = StackGraph(args.resources)
    for bucket in graph.of_type(*aws_types.BUCKETS):
        blocks = bucket_settings(graph, bucket, (aws_types.PUBLIC_ACCESS_BLOCK,))
        if not any(
            all(flag(at(block.props, name)) is True for name in PUBLIC_ACCESS_FLAGS) for block in blocks
        ):
            found = "; ".join(
                ", ".join(f"{name}={show(at(block.props, name))}" for name in PUBLIC_ACCESS_FLAGS)
                for block in blocks
            )
            report(
                f"bucket {describe(bucket)} is not closed to the public: "
                f"{'its public access block sets ' + found if blocks else 'no public access block names it'}. "
                "Fix: add a BucketPublicAccessBlock with block_public_acls, block_public_policy, "
                f"ignore_public_acls and restrict_public_buckets all true (source: {S3_BLOCK_SOURCE}).",
                bucket.urn,
            )
        inline = at(bucket.props, "serverSideEncryptionConfiguration", "rule")
        configured = [
            rule
            for setting in bucket_settings(graph, bucket, aws_types.BUCKET_ENCRYPTION)
            for rule in items(at(setting.props, "rules"))
        ]
        if not (_encrypted(inline) or any(_encrypted(rule) for rule in configured)):
            report(
                f"bucket {describe(bucket)} has no default encryption configuration. Fix: add a "
                "BucketServerSideEncryptionConfiguration with an apply_server_side_encryption_by_default "
                f"rule (aws:kms with the stack's key, or AES256) (source: {S3_ENCRYPTION_SOURCE}).",
                bucket.urn,
            )


FSX_SUBNET = StackValidationPolicy(
    name="fsx-same-subnet",
    description=(
        "FSx for Lustre sits in the nodes' subnet, so in their Availability Zone. Instead of another "
        "subnet, create the file system in the cluster's subnet."
    ),
    validate=validate_fsx_subnet,
    enforcement_level=EnforcementLevel.MANDATORY,
)

FSX_S3_LINK = StackValidationPolicy(
    name="fsx-s3-link",
    description=(
        "FSx for Lustre links S3 through a data repository association or through the legacy import/export "
        "paths (SCRATCH_1, SCRATCH_2, PERSISTENT_1); never both, never import paths on PERSISTENT_2, and never "
        "a DRA where none can be made (SCRATCH_1, Lustre 2.10). FSx encrypts every file system at rest, so no KMS key is required on SCRATCH types."
    ),
    validate=validate_fsx_link,
    enforcement_level=EnforcementLevel.MANDATORY,
    config_schema=PolicyConfigSchema(
        properties={
            REQUIRE_LINK_KEY: {
                "type": "boolean",
                "description": "Every Lustre file system must be linked to S3.",
                "default": True,
            }
        }
    ),
)

S3_BUCKET_PROTECTION = StackValidationPolicy(
    name="s3-bucket-protection",
    description=(
        "S3 buckets block public access and encrypt by default. Instead of relying on account settings, "
        "give each bucket a public access block (all four settings true) and a default encryption rule."
    ),
    validate=validate_buckets,
    enforcement_level=EnforcementLevel.MANDATORY,
)
