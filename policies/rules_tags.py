"""Cost-allocation tags on the resources that cost money: nodes, file systems, buckets.

A node's instances take their tags from the launch template's `instance` tag
specification, the Auto Scaling group's tags propagated at launch, the instance's
own tags and the provider's default tags, so this is a stack policy that joins
them. Which keys count is policy config; the default is the tag gpuforge puts on
every resource of a cluster, so every cost can be traced to its cluster once the
tag is activated for cost allocation.
"""

from __future__ import annotations

from collections.abc import Mapping

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    PolicyResource,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from gpuforge.components.cluster import CLUSTER_TAG
from gpuforge.policies import aws_types
from gpuforge.policies.props import at, flag, items, text
from gpuforge.policies.stack_graph import Node, StackGraph, describe, nodes

REQUIRED_KEY = "requiredTags"
TAG_SOURCE = "https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/cost-alloc-tags.html"


def _keys(mapping: object) -> set[str]:
    """The keys of a tag map; a map that is unknown at preview has none we can see."""
    if not isinstance(mapping, Mapping):
        return set()
    return {str(key) for key in mapping}


def _own_tags(resource: PolicyResource) -> set[str]:
    """A resource's tags, its provider-merged tags, and its provider's default tags."""
    keys = _keys(at(resource.props, "tags")) | _keys(at(resource.props, "tagsAll"))
    if resource.provider is not None:
        keys |= _keys(at(resource.provider.props, "defaultTags", "tags"))
    return keys


def _instance_tags(node: Node) -> set[str]:
    keys: set[str] = set()
    if node.is_instance:
        keys |= _own_tags(node.launcher)
    else:
        for tag in items(at(node.launcher.props, "tags")):
            if flag(at(tag, "propagateAtLaunch")) is True and isinstance(key := text(at(tag, "key")), str):
                keys.add(key)
        if node.launcher.provider is not None:
            keys |= _keys(at(node.launcher.provider.props, "defaultTags", "tags"))
    if node.template is not None:
        for spec in items(at(node.template.props, "tagSpecifications")):
            if text(at(spec, "resourceType")) == "instance":
                keys |= _keys(at(spec, "tags"))
    return keys


def validate_tags(args: StackValidationArgs, report: ReportViolation) -> None:
    required = [str(key) for key in args.get_config()[REQUIRED_KEY]]
    graph = StackGraph(args.resources)
    found: list[tuple[str, str, set[str]]] = [
        (f"the instances of {node.describe()}", node.launcher.urn, _instance_tags(node))
        for node in nodes(graph)
    ]
    for resource in graph.of_type(aws_types.LUSTRE_FILE_SYSTEM, *aws_types.BUCKETS):
        found.append((describe(resource), resource.urn, _own_tags(resource)))
    for what, urn, keys in found:
        missing = [key for key in required if key not in keys]
        if missing:
            report(
                f"{what} lack the cost-allocation tag{'s' if len(missing) > 1 else ''} {', '.join(missing)}, "
                "so their cost cannot be split by those keys. Fix: add the tags (GpuCluster tags everything "
                f"with {CLUSTER_TAG}; add your own through the spec's tags) and activate them for cost "
                f"allocation (source: {TAG_SOURCE}).",
                urn,
            )


COST_ALLOCATION_TAGS = StackValidationPolicy(
    name="cost-allocation-tags",
    description=(
        "Nodes, file systems and buckets carry the cost-allocation tags. Instead of untagged resources, "
        "tag them (the cluster's tags propagate to every node) so the bill can be split per cluster."
    ),
    validate=validate_tags,
    enforcement_level=EnforcementLevel.ADVISORY,
    config_schema=PolicyConfigSchema(
        properties={
            REQUIRED_KEY: {
                "type": "array",
                "items": {"type": "string", "minLength": 1},
                "description": "Tag keys every cost-bearing resource must carry.",
                "default": [CLUSTER_TAG],
            }
        }
    ),
)
