"""Shared pieces for the component tests: specs, the mocked run, and readers of what was recorded."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from datetime import UTC, datetime
from functools import cache
from typing import Any

import botocore.session
import pulumi

from gpuforge.components import AmiPin, GpuClusterSpec
from gpuforge.components.specs import NetworkSpec
from gpuforge.pulumi_mocks import GpuforgeMocks, RecordedResource

DIGEST = "3f" * 32
AMI = AmiPin(
    ami_id="ami-0123456789abcdef0",
    region="us-east-1",
    matrix_name="p5-h100-cuda12",
    matrix_version="2025.1",
    matrix_digest=DIGEST,
)
# A fixed "now" for Capacity Block schedules, so the tests do not age.
NOW = datetime(2030, 1, 1, tzinfo=UTC)

LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
ASG = "aws:autoscaling/group:Group"
SCHEDULE = "aws:autoscaling/schedule:Schedule"
PLACEMENT_GROUP = "aws:ec2/placementGroup:PlacementGroup"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EGRESS = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
INSTANCE = "aws:ec2/instance:Instance"
FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"
DRA = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
VPC_ENDPOINT = "aws:ec2/vpcEndpoint:VpcEndpoint"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"


def cluster_spec(**overrides: Any) -> GpuClusterSpec:
    values: dict[str, Any] = {
        "name": "demo",
        "instance_type": "p5.48xlarge",
        "node_count": 2,
        "availability_zone": "us-east-1a",
        "ami": AMI,
    }
    values.update(overrides)
    scheduler = values.get("scheduler")
    kind = scheduler.get("type") if isinstance(scheduler, dict) else getattr(scheduler, "type", None)
    if kind == "kubernetes" and "network" not in overrides:
        # As a stack gets it: the add-on images come from the internet (components.eks_network).
        values["network"] = NetworkSpec(api_access="nat")
    return GpuClusterSpec(**values)


def run(build: Callable[[], pulumi.Output[Any]]) -> Any:
    """Run `build` as a Pulumi program under the installed mocks (preview=False).

    `build` returns an Output whose `.apply` callbacks hold the test's assertions;
    the value it resolves to is returned. If the Output never resolved, the
    assertions never ran, and this fails instead of passing silently.
    """
    resolved: list[Any] = []

    @pulumi.runtime.test
    def program() -> pulumi.Output[None]:
        return build().apply(resolved.append)

    program()
    assert len(resolved) == 1, "the program's output never resolved, so its checks never ran"
    return resolved[0]


def one(mocks: GpuforgeMocks, token: str) -> RecordedResource:
    found = mocks.of_type(token)
    assert len(found) == 1, f"expected one {token}, found {[r.name for r in found]}"
    return found[0]


def user_data(mocks: GpuforgeMocks) -> str:
    template = one(mocks, LAUNCH_TEMPLATE)
    return base64.b64decode(template.inputs["userData"]).decode("utf-8")


def interface_triples(template: RecordedResource) -> list[tuple[int, int, str]]:
    """(card, device, type) of each launch-template interface; the engine sends numbers as floats."""
    return [
        (int(item["networkCardIndex"]), int(item["deviceIndex"]), item["interfaceType"])
        for item in template.inputs["networkInterfaces"]
    ]


def rules_of(mocks: GpuforgeMocks, token: str, group_id: str) -> list[dict[str, Any]]:
    return [dict(rule.inputs) for rule in mocks.of_type(token) if rule.inputs["securityGroupId"] == group_id]


# -- botocore: AWS's own API models, shipped with botocore ----------------------------------


@cache
def service_model(service: str) -> Any:
    return botocore.session.get_session().get_service_model(service)


def enum_of(service: str, shape: str) -> list[str]:
    values = list(service_model(service).shape_for(shape).enum)
    assert values, f"{service} shape {shape} has no enum"
    return values


def member(service: str, shape: str, name: str) -> Any:
    return service_model(service).shape_for(shape).members[name]


def documented_values(service: str, shape: str, name: str) -> list[str]:
    """The values a member's documentation lists after "Valid values:" (members typed as plain strings)."""
    text = plain_documentation(service, shape, name)
    match = re.search(r"Valid values:\s*([a-z| -]+)", text)
    assert match, f"no 'Valid values' in the documentation of {service} {shape}.{name}"
    return [value.strip() for value in match.group(1).split("|")]


def plain_text(html: str) -> str:
    """Documentation HTML as one line of text: block tags become spaces, inline tags vanish."""
    text = re.sub(r"</?(?:p|li|ul|ol|br)\b[^>]*>", " ", html)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", text)).strip()


def plain_documentation(service: str, shape: str, name: str) -> str:
    return plain_text(member(service, shape, name).documentation)
