"""The offline runner hands rules exactly what pulumi_policy hands them under the engine.

Probe policies (written here, run through the same runner as the pack) record the
arguments they receive for real component output, so these tests pin down what the
engine adapter builds: proxied props, floats, unwrapped secrets, config with schema
defaults, parents and (property) dependencies as PolicyResource objects, enforcement
levels, and the advisory verdict for a rule that reads an unknown value at preview.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi_aws as aws
import pytest
from policy_helpers import LAUNCH_TEMPLATE, Images, Registered, edit, named, record, record_cluster, spec
from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    PolicyResource,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from gpuforge.errors import GpuforgeError, InputError
from gpuforge.policies import engine_adapter
from gpuforge.policies.runner import run_policies

RESERVED = {"type": "reservation", "reservation_id": "cr-0123456789abcdef0"}
SCHEMA = PolicyConfigSchema(
    properties={"threshold": {"type": "integer", "default": 3}, "label": {"type": "string", "default": "x"}}
)


def probes(seen: dict[str, Any]) -> list[Any]:
    """A resource policy and a stack policy that keep what they are given and report once."""

    def on_resource(args: ResourceValidationArgs, report: ReportViolation) -> None:
        if args.resource_type == LAUNCH_TEMPLATE:
            seen["resource"] = args
            seen["config"] = dict(args.get_config())
            report("template seen", None)

    def on_stack(args: StackValidationArgs, report: ReportViolation) -> None:
        seen["stack"] = args.resources
        report("stack seen", args.resources[0].urn)

    return [
        ResourceValidationPolicy(
            name="probe-resource",
            description="Probe.",
            validate=on_resource,
            config_schema=SCHEMA,
            enforcement_level=EnforcementLevel.MANDATORY,
        ),
        StackValidationPolicy(
            name="probe-stack",
            description="Probe.",
            validate=on_stack,
            enforcement_level=EnforcementLevel.ADVISORY,
        ),
    ]


@pytest.fixture(scope="module")
def cluster_resources(images: Images) -> list[Registered]:
    return record_cluster(spec(images, capacity=RESERVED))


def test_resource_args_are_the_engines(cluster_resources: list[Registered]) -> None:
    seen: dict[str, Any] = {}
    found = run_policies(cluster_resources, {"probe-resource": {"label": "given"}}, policies=probes(seen))
    args: ResourceValidationArgs = seen["resource"]
    template = named(cluster_resources, LAUNCH_TEMPLATE)
    assert (args.urn, args.name, args.resource_type) == (template.urn, template.name, LAUNCH_TEMPLATE)
    assert args.opts.parent == template.parent_urn
    # Proxies, not dict and list; numbers as floats, as on the wire.
    assert isinstance(args.props, Mapping) and not isinstance(args.props, dict)
    interfaces = args.props["networkInterfaces"]
    assert isinstance(interfaces, Sequence) and not isinstance(interfaces, list)
    assert interfaces[1]["deviceIndex"] == 1.0 and isinstance(interfaces[1]["deviceIndex"], float)
    # Schema defaults, then the given config on top; numbers come back as floats too.
    assert seen["config"] == {"threshold": 3.0, "label": "given"}
    assert [(v.policy, v.enforcement, v.urn, v.message) for v in found] == [
        ("probe-resource", "mandatory", template.urn, "template seen"),
        ("probe-stack", "advisory", cluster_resources[0].urn, "stack seen"),
    ]


def test_stack_resources_are_linked(cluster_resources: list[Registered]) -> None:
    seen: dict[str, Any] = {}
    run_policies(cluster_resources, policies=probes(seen))
    resources: list[PolicyResource] = seen["stack"]
    by_urn = {resource.urn: resource for resource in resources}
    template = by_urn[named(cluster_resources, LAUNCH_TEMPLATE).urn]
    assert template.parent is not None and template.parent.resource_type == "gpuforge:nodes:GpuNodeGroup"
    # Stack policies see outputs, and the provider's outputs carry the id.
    assert template.props["id"] == named(cluster_resources, LAUNCH_TEMPLATE).id
    groups = [dep.resource_type for dep in template.property_dependencies["networkInterfaces"]]
    assert "aws:ec2/securityGroup:SecurityGroup" in groups and "aws:ec2/subnet:Subnet" in groups
    assert all(isinstance(dep, PolicyResource) for dep in template.dependencies)
    assert {dep.urn for dep in template.dependencies} >= {
        dep.urn for deps in template.property_dependencies.values() for dep in deps
    }


def test_enforcement_levels_from_config(cluster_resources: list[Registered]) -> None:
    policies = probes({})
    advisory = run_policies(cluster_resources, {"probe-resource": "advisory"}, policies=policies)
    assert {v.enforcement for v in advisory} == {"advisory"}
    assert run_policies(cluster_resources, {"all": "disabled"}, policies=policies) == []
    only_stack = run_policies(
        cluster_resources, {"probe-resource": {"enforcementLevel": "disabled"}}, policies=policies
    )
    assert [v.policy for v in only_stack] == ["probe-stack"]
    with pytest.raises(InputError, match="enforcement level 'strict' is not one of"):
        run_policies(cluster_resources, {"probe-stack": "strict"}, policies=policies)
    with pytest.raises(
        InputError, match="'probe-stack' holds properties \\['x'\\], but that policy takes none"
    ):
        run_policies(cluster_resources, {"probe-stack": {"x": 1}}, policies=policies)


def test_secrets_reach_rules_unwrapped(images: Images) -> None:
    seen: dict[str, Any] = {}
    resources = record_cluster(
        spec(images, capacity=RESERVED), edit(LAUNCH_TEMPLATE, user_data=pulumi.Output.secret("c2VjcmV0"))
    )
    assert "4dabf18193072939515e22adb298388d" in named(resources, LAUNCH_TEMPLATE).inputs["userData"]
    run_policies(resources, policies=probes(seen))
    assert seen["resource"].props["userData"] == "c2VjcmV0"


def test_unknown_value_makes_a_rule_advisory_at_preview(images: Images) -> None:
    """pulumi_policy's own downgrade: a mandatory rule that reads an unknown value reports
    "can't run ... during preview" as advisory, and the offline runner reports the same."""

    def reads_subnet(args: ResourceValidationArgs, report: ReportViolation) -> None:
        if args.resource_type == LAUNCH_TEMPLATE:
            report(f"subnet {args.props['networkInterfaces'][0]['subnetId']}", None)

    policy = ResourceValidationPolicy(
        name="reads-subnet",
        description="Reads an id.",
        validate=reads_subnet,
        enforcement_level=EnforcementLevel.MANDATORY,
    )
    known = run_policies(record_cluster(spec(images, capacity=RESERVED)), policies=[policy])
    assert [(v.enforcement, v.message.startswith("subnet subnet-")) for v in known] == [("mandatory", True)]
    preview = run_policies(record_cluster(spec(images, capacity=RESERVED), preview=True), policies=[policy])
    [verdict] = preview
    assert verdict.enforcement == "advisory"
    assert verdict.message == (
        "can't run policy 'reads-subnet' from policy pack 'gpuforge@v0.1.0' during preview: "
        "string value at .networkInterfaces.0.subnetId can't be known during preview"
    )


def test_values_the_runner_cannot_pass_are_named(images: Images) -> None:
    def with_asset() -> None:
        bucket = aws.s3.Bucket("assets")
        aws.s3.BucketObject("readme", bucket=bucket.id, key="README", source=pulumi.StringAsset("hello"))

    with pytest.raises(GpuforgeError, match=r"readme: property source holds StringAsset"):
        run_policies(record(with_asset))


def test_version_pin(monkeypatch: pytest.MonkeyPatch) -> None:
    engine_adapter.check_version()  # the installed pulumi-policy is the pinned one
    assert importlib.metadata.version("pulumi-policy") == engine_adapter.PINNED_VERSION
    monkeypatch.setattr(engine_adapter.importlib.metadata, "version", lambda name: "1.22.0")
    with pytest.raises(GpuforgeError, match=r"pinned to pulumi-policy==1.21.0 .* but pulumi-policy 1.22.0"):
        engine_adapter.check_version()


def test_lookup_never_trips_on_unknowns(images: Images) -> None:
    """`lookup` answers UNKNOWN and MISSING where the proxies would raise or the key is absent."""
    seen: dict[str, Any] = {}
    run_policies(record_cluster(spec(images, capacity=RESERVED), preview=True), policies=probes(seen))
    props = seen["resource"].props
    first = engine_adapter.lookup(props["networkInterfaces"], 0)
    assert engine_adapter.lookup(first, "subnetId") is engine_adapter.UNKNOWN
    assert engine_adapter.lookup(first, "interfaceType") == "interface"
    assert engine_adapter.lookup(first, "noSuchKey") is engine_adapter.MISSING
    assert engine_adapter.lookup(props["networkInterfaces"], 99) is engine_adapter.MISSING
