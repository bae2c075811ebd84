"""Offline Pulumi runs: mocks that answer like AWS and record every resource.

`install()` points the Pulumi SDK at `GpuforgeMocks` (the SDK's own mock monitor,
no engine, no provider plugin). The mocks

- answer each resource with the outputs the AWS provider would report: ids in
  AWS's formats (sg-0123..., lt-..., fs-..., subnet-..., vol-...), ARNs, FSx DNS and
  mount names, Secrets Manager ARNs with their random suffix, Pulumi-style auto-names
  (`<name>-<7 hex>`), and the random provider's bytes. Ids and bytes are derived from
  the resource's URN, so a run is reproducible;
- answer the provider functions (invokes) the components call; an invoke with no
  answer fails loudly, never with an empty result;
- record every registered resource (type, name, inputs, outputs, URN, parent
  URN, dependencies and ignored changes) and every invoke, so tests and `gpuforge plan` can walk the resource tree.

Limits: the mocks validate nothing (enums, sizes, references) - the components
do that themselves - and inputs arrive as the engine sends them: camelCased
names, numbers as floats. An existing subnet's CIDR block (`getSubnet`) cannot be
known offline: it is the block given in `subnet_cidrs`, else a /24 of 10.0.0.0/16
derived from the subnet id. The random provider's outputs are secrets under the
engine; the mocks return them as plain values, as the SDK's mocks do for every output.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import ipaddress
import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi.runtime.mocks import MockCallArgs, MockMonitor, MockResourceArgs

from gpuforge.errors import GpuforgeError

DEFAULT_ACCOUNT = "123456789012"
DEFAULT_REGION = "us-east-1"

# Region descriptions as the provider's getRegion returns them ("Location (Region name)"
# in the v7 provider documentation). Only regions with the GPU types gpuforge knows.
_REGION_DESCRIPTIONS = {
    "us-east-1": "US East (N. Virginia)",
    "us-east-2": "US East (Ohio)",
    "us-west-2": "US West (Oregon)",
    "eu-north-1": "Europe (Stockholm)",
    "eu-west-1": "Europe (Ireland)",
    "ap-northeast-1": "Asia Pacific (Tokyo)",
    "ap-southeast-2": "Asia Pacific (Sydney)",
}


@dataclass(frozen=True)
class RecordedResource:
    """One resource registration as the engine would have seen it."""

    type: str
    name: str
    inputs: Mapping[str, Any]
    outputs: Mapping[str, Any]
    id: str
    urn: str | None
    parent_urn: str | None
    custom: bool
    # URNs this resource waits for (explicit depends_on and the resources its inputs came from).
    dependencies: tuple[str, ...] = ()
    # Input names (as the engine spells them) that an update leaves alone.
    ignore_changes: tuple[str, ...] = ()
    # Input name -> URNs its value came from; the engine hands these to stack policies.
    property_dependencies: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def is_component(self) -> bool:
        return not self.custom


@dataclass(frozen=True)
class RecordedCall:
    token: str
    args: Mapping[str, Any]
    result: Mapping[str, Any]


@dataclass
class TreeNode:
    resource: RecordedResource
    children: list[TreeNode] = field(default_factory=list)


@dataclass(frozen=True)
class _Registration:
    """What the engine request carries and the SDK's Mocks API leaves out."""

    urn: str
    parent_urn: str | None
    dependencies: tuple[str, ...]
    ignore_changes: tuple[str, ...]
    property_dependencies: Mapping[str, tuple[str, ...]]


# The monitor sets this for the registration in flight, on the thread that calls
# new_resource, so the mocks can record it.
_in_flight = threading.local()


class RecordingMonitor(MockMonitor):
    """The SDK's mock monitor, passing each registration's URN, parent and options to the mocks."""

    def RegisterResource(self, request: Any) -> Any:  # the gRPC method name
        with _registering(self, request):
            return super().RegisterResource(request)  # type: ignore[no-untyped-call]  # the SDK's method is untyped

    def ReadResource(self, request: Any) -> Any:  # the gRPC method name
        with _registering(self, request):
            return super().ReadResource(request)  # type: ignore[no-untyped-call]  # the SDK's method is untyped


@contextlib.contextmanager
def _registering(monitor: MockMonitor, request: Any) -> Iterator[None]:
    _in_flight.registration = _Registration(
        urn=monitor.make_urn(request.parent, request.type, request.name),
        parent_urn=request.parent or None,
        dependencies=tuple(getattr(request, "dependencies", ())),
        ignore_changes=tuple(getattr(request, "ignoreChanges", ())),
        property_dependencies={
            key: tuple(value.urns) for key, value in getattr(request, "propertyDependencies", {}).items()
        },
    )
    try:
        yield
    finally:
        _in_flight.registration = None


class GpuforgeMocks(pulumi.runtime.Mocks):
    """Realistic AWS answers for offline Pulumi runs, and a record of the run."""

    def __init__(
        self,
        *,
        account_id: str = DEFAULT_ACCOUNT,
        region: str = DEFAULT_REGION,
        subnet_cidrs: Mapping[str, str] | None = None,
    ) -> None:
        self.account_id = account_id
        self.region = region
        self.subnet_cidrs = dict(subnet_cidrs or {})
        self.partition = "aws-cn" if region.startswith("cn-") else "aws"
        self._lock = threading.Lock()
        self._resources: list[RecordedResource] = []
        self._calls: list[RecordedCall] = []

    @classmethod
    def replay(cls, resources: Sequence[RecordedResource], *, region: str = DEFAULT_REGION) -> GpuforgeMocks:
        """Mocks that hold a record made elsewhere (`gpuforge policy check`'s child process), so the
        views that walk the resource tree read it as they read a run of their own."""
        mocks = cls(region=region)
        mocks._resources.extend(resources)
        return mocks

    # -- the record ---------------------------------------------------------------

    @property
    def resources(self) -> tuple[RecordedResource, ...]:
        with self._lock:
            return tuple(self._resources)

    @property
    def calls(self) -> tuple[RecordedCall, ...]:
        with self._lock:
            return tuple(self._calls)

    def of_type(self, token: str) -> list[RecordedResource]:
        return [resource for resource in self.resources if resource.type == token]

    def named(self, name: str) -> RecordedResource:
        matches = [resource for resource in self.resources if resource.name == name]
        if len(matches) != 1:
            raise KeyError(f"{len(matches)} recorded resources are named {name!r}")
        return matches[0]

    def children(self, parent: RecordedResource) -> list[RecordedResource]:
        return [resource for resource in self.resources if resource.parent_urn == parent.urn]

    def tree(self) -> list[TreeNode]:
        """The recorded resources as a forest, each parent before its children, in registration order."""
        nodes = {resource.urn: TreeNode(resource) for resource in self.resources}
        roots = []
        for node in nodes.values():
            parent = nodes.get(node.resource.parent_urn)
            if parent is None:
                roots.append(node)
            else:
                parent.children.append(node)
        return roots

    def walk(self) -> Iterator[tuple[int, RecordedResource]]:
        """(depth, resource) for every recorded resource, depth first."""

        def visit(nodes: Sequence[TreeNode], depth: int) -> Iterator[tuple[int, RecordedResource]]:
            for node in nodes:
                yield depth, node.resource
                yield from visit(node.children, depth + 1)

        return visit(self.tree(), 0)

    # -- pulumi.runtime.Mocks ----------------------------------------------------------

    def new_resource(self, args: MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        registration: _Registration | None = getattr(_in_flight, "registration", None)
        urn = registration.urn if registration else None
        inputs = dict(args.inputs)
        if not args.custom:
            resource_id, outputs = "", {}
        else:
            seed = urn or f"{args.typ}::{args.name}"
            answer = _RESOURCE_ANSWERS.get(args.typ, _generic_answer)
            resource_id, extra = answer(self, args.name, inputs, _Hex(seed))
            outputs = {**inputs, **extra}
        with self._lock:
            self._resources.append(
                RecordedResource(
                    type=args.typ,
                    name=args.name,
                    inputs=inputs,
                    outputs=outputs,
                    id=resource_id,
                    urn=urn,
                    parent_urn=registration.parent_urn if registration else None,
                    custom=bool(args.custom),
                    dependencies=registration.dependencies if registration else (),
                    ignore_changes=registration.ignore_changes if registration else (),
                    property_dependencies=registration.property_dependencies if registration else {},
                )
            )
        return resource_id, outputs

    def call(self, args: MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        answer = _CALL_ANSWERS.get(args.token)
        if answer is None:
            raise GpuforgeError(
                f"the offline mocks have no answer for the provider function {args.token!r}. "
                "Fix: add one to gpuforge/pulumi_mocks.py (_CALL_ANSWERS)."
            )
        result = answer(self, dict(args.args))
        with self._lock:
            self._calls.append(RecordedCall(args.token, dict(args.args), result))
        return result, []

    # -- helpers for the answers ---------------------------------------------------

    def arn(self, service: str, resource: str, *, region: bool = True, account: bool = True) -> str:
        return ":".join(
            (
                "arn",
                self.partition,
                service,
                self.region if region else "",
                self.account_id if account else "",
                resource,
            )
        )


def install(
    mocks: GpuforgeMocks | None = None,
    *,
    project: str = "gpuforge",
    stack: str = "dev",
    preview: bool = False,
) -> GpuforgeMocks:
    """Point the Pulumi SDK at `mocks` (new ones by default) and return them.

    Call it before importing a Pulumi program. `preview=False` makes outputs known,
    so `.apply` callbacks run; under `preview=True` they never do.
    """
    mocks = mocks if mocks is not None else GpuforgeMocks()
    pulumi.runtime.set_mocks(
        mocks, project=project, stack=stack, preview=preview, monitor=RecordingMonitor(mocks)
    )
    return mocks


class _Hex:
    """Deterministic hex digits from a seed: the same URN always gets the same ids."""

    def __init__(self, seed: str) -> None:
        self._seed = seed

    def digits(self, count: int, salt: str = "") -> str:
        text = ""
        counter = 0
        while len(text) < count:
            text += hashlib.sha256(f"{self._seed}|{salt}|{counter}".encode()).hexdigest()
            counter += 1
        return text[:count]

    def ec2_id(self, prefix: str, salt: str = "") -> str:
        """An EC2 id in today's long form: prefix, a dash, 17 hex digits."""
        return f"{prefix}-{self.digits(17, salt)}"

    def lower_alnum(self, count: int, salt: str) -> str:
        alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
        return "".join(
            alphabet[int(pair, 16) % len(alphabet)] for pair in _pairs(self.digits(2 * count, salt))
        )

    def upper_alnum(self, count: int, salt: str) -> str:
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
        return "".join(
            alphabet[int(pair, 16) % len(alphabet)] for pair in _pairs(self.digits(2 * count, salt))
        )

    def uuid(self, salt: str) -> str:
        d = self.digits(32, salt)
        return f"{d[:8]}-{d[8:12]}-{d[12:16]}-{d[16:20]}-{d[20:]}"

    def private_ip(self, salt: str = "ip") -> str:
        d = self.digits(4, salt)
        return f"10.0.{int(d[:2], 16) % 128}.{int(d[2:], 16) % 250 + 4}"


def _pairs(text: str) -> list[str]:
    return [text[i : i + 2] for i in range(0, len(text), 2)]


Answer = Callable[[GpuforgeMocks, str, dict[str, Any], _Hex], tuple[str, dict[str, Any]]]


def _autoname(name: str, hexes: _Hex, inputs: Mapping[str, Any], key: str = "name") -> str:
    """The physical name Pulumi gives a resource with no explicit name: `<name>-<7 hex>`."""
    given = inputs.get(key)
    return str(given) if given else f"{name}-{hexes.digits(7, 'autoname')}"


def _generic_answer(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    return f"{name}-{hexes.digits(7, 'id')}", {}


def _ec2(prefix: str, arn_kind: str | None = None) -> Answer:
    def answer(
        mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
    ) -> tuple[str, dict[str, Any]]:
        resource_id = hexes.ec2_id(prefix)
        extra: dict[str, Any] = {"ownerId": mocks.account_id}
        if arn_kind:
            extra["arn"] = mocks.arn("ec2", f"{arn_kind}/{resource_id}")
        return resource_id, extra

    return answer


def _vpc(mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex) -> tuple[str, dict[str, Any]]:
    resource_id, extra = _ec2("vpc", "vpc")(mocks, name, inputs, hexes)
    extra |= {
        "defaultSecurityGroupId": hexes.ec2_id("sg", "default-sg"),
        "defaultNetworkAclId": hexes.ec2_id("acl", "default-acl"),
        "defaultRouteTableId": hexes.ec2_id("rtb", "main-rtb"),
        "mainRouteTableId": hexes.ec2_id("rtb", "main-rtb"),
        "instanceTenancy": inputs.get("instanceTenancy", "default"),
    }
    return resource_id, extra


def _subnet(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    resource_id, extra = _ec2("subnet", "subnet")(mocks, name, inputs, hexes)
    extra["availabilityZone"] = inputs.get("availabilityZone") or f"{mocks.region}a"
    return resource_id, extra


def _security_group(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    resource_id, extra = _ec2("sg", "security-group")(mocks, name, inputs, hexes)
    extra["name"] = _autoname(name, hexes, inputs)
    return resource_id, extra


def _security_group_rule(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    resource_id, extra = _ec2("sgr", "security-group-rule")(mocks, name, inputs, hexes)
    extra["securityGroupRuleId"] = resource_id
    return resource_id, extra


def _vpc_endpoint(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    resource_id, extra = _ec2("vpce", "vpc-endpoint")(mocks, name, inputs, hexes)
    extra["state"] = "available"
    service = str(inputs.get("serviceName", ""))
    if inputs.get("vpcEndpointType") == "Gateway":
        extra["prefixListId"] = f"pl-{hexes.digits(8, 'pl')}"
    else:
        short = service.rsplit(".", 1)[-1]
        extra["dnsEntries"] = [
            {
                "dnsName": f"{resource_id}-{hexes.lower_alnum(8, 'dns')}.{short}.{mocks.region}.vpce.amazonaws.com",
                "hostedZoneId": f"Z{hexes.upper_alnum(13, 'zone')}",
            }
        ]
        extra["networkInterfaceIds"] = [hexes.ec2_id("eni", "endpoint-eni")]
    return resource_id, extra


def _eip(mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex) -> tuple[str, dict[str, Any]]:
    resource_id, extra = _ec2("eipalloc", "elastic-ip")(mocks, name, inputs, hexes)
    # 203.0.113.0/24 is TEST-NET-3, reserved for documentation (RFC 5737).
    extra |= {
        "allocationId": resource_id,
        "publicIp": f"203.0.113.{int(hexes.digits(2, 'ip'), 16) % 254 + 1}",
    }
    return resource_id, extra


def _nat_gateway(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    resource_id, extra = _ec2("nat", "natgateway")(mocks, name, inputs, hexes)
    extra |= {"networkInterfaceId": hexes.ec2_id("eni", "nat-eni"), "privateIp": hexes.private_ip()}
    return resource_id, extra


def _route(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    # The provider's route id: "r-" + route table id + a hash of the destination.
    return f"r-{inputs.get('routeTableId', 'rtb')}{int(hexes.digits(8, 'route'), 16)}", {"state": "active"}


def _placement_group(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    group_name = _autoname(name, hexes, inputs)
    return group_name, {
        "name": group_name,
        "placementGroupId": hexes.ec2_id("pg"),
        "arn": mocks.arn("ec2", f"placement-group/{group_name}"),
    }


def _launch_template(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    resource_id = hexes.ec2_id("lt")
    return resource_id, {
        "name": _autoname(name, hexes, inputs),
        "arn": mocks.arn("ec2", f"launch-template/{resource_id}"),
        "latestVersion": 1,
        "defaultVersion": 1,
    }


def _instance(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    resource_id = hexes.ec2_id("i")
    # EC2 gives the instance the private address it asked for, else one from the subnet.
    ip = str(inputs.get("privateIp") or hexes.private_ip())
    dns_zone = "ec2.internal" if mocks.region == "us-east-1" else f"{mocks.region}.compute.internal"
    return resource_id, {
        "arn": mocks.arn("ec2", f"instance/{resource_id}"),
        "privateIp": ip,
        "privateDns": f"ip-{ip.replace('.', '-')}.{dns_zone}",
        "primaryNetworkInterfaceId": hexes.ec2_id("eni", "primary-eni"),
        "instanceState": "running",
        "availabilityZone": inputs.get("availabilityZone") or f"{mocks.region}a",
    }


def _autoscaling_group(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    group_name = _autoname(name, hexes, inputs)
    return group_name, {
        "name": group_name,
        "arn": mocks.arn(
            "autoscaling", f"autoScalingGroup:{hexes.uuid('asg')}:autoScalingGroupName/{group_name}"
        ),
        "predictedCapacity": 0,
    }


def _autoscaling_schedule(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    action = str(inputs.get("scheduledActionName") or name)
    group = inputs.get("autoscalingGroupName", "")
    return action, {
        "arn": mocks.arn(
            "autoscaling",
            f"scheduledUpdateGroupAction:{hexes.uuid('schedule')}:autoScalingGroupName/{group}"
            f":scheduledActionName/{action}",
        )
    }


def _lustre_file_system(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    resource_id = hexes.ec2_id("fs")
    # SCRATCH_1 file systems mount as "fsx"; the others get a generated 8-character name.
    deployment = inputs.get("deploymentType", "SCRATCH_1")
    mount_name = "fsx" if deployment == "SCRATCH_1" else hexes.lower_alnum(8, "mount")
    return resource_id, {
        "arn": mocks.arn("fsx", f"file-system/{resource_id}"),
        "dnsName": f"{resource_id}.fsx.{mocks.region}.amazonaws.com",
        "mountName": mount_name,
        "networkInterfaceIds": [hexes.ec2_id("eni", "fsx-eni-1"), hexes.ec2_id("eni", "fsx-eni-2")],
        "ownerId": mocks.account_id,
        "vpcId": hexes.ec2_id("vpc", "fsx-vpc"),
        "deploymentType": deployment,
        "fileSystemTypeVersion": inputs.get("fileSystemTypeVersion", "2.10"),
        "storageType": inputs.get("storageType", "SSD"),
    }


def _data_repository_association(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    resource_id = hexes.ec2_id("dra")
    file_system = inputs.get("fileSystemId", "fs")
    return resource_id, {
        "associationId": resource_id,
        "arn": mocks.arn("fsx", f"association/{file_system}/{resource_id}"),
    }


def _bucket(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    bucket = _autoname(name, hexes, inputs, key="bucket").lower()
    return bucket, {
        "bucket": bucket,
        "arn": f"arn:{mocks.partition}:s3:::{bucket}",
        "bucketDomainName": f"{bucket}.s3.amazonaws.com",
        "bucketRegionalDomainName": f"{bucket}.s3.{mocks.region}.amazonaws.com",
        "region": mocks.region,
    }


def _bucket_part(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    """Bucket sub-resources (versioning, encryption, ...) are identified by their bucket."""
    return str(inputs.get("bucket", name)), {}


def _iam_role(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    role = _autoname(name, hexes, inputs)
    return role, {
        "name": role,
        "arn": mocks.arn("iam", f"role/{role}", region=False),
        "uniqueId": f"AROA{hexes.upper_alnum(17, 'unique')}",
    }


def _instance_profile(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    profile = _autoname(name, hexes, inputs)
    return profile, {
        "name": profile,
        "arn": mocks.arn("iam", f"instance-profile/{profile}", region=False),
        "uniqueId": f"AIPA{hexes.upper_alnum(17, 'unique')}",
    }


def _role_policy(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    policy = _autoname(name, hexes, inputs)
    return f"{inputs.get('role', '')}:{policy}", {"name": policy}


def _role_policy_attachment(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    return f"{inputs.get('role', '')}-{int(hexes.digits(12, 'attach'), 16)}", {}


def _ebs_volume(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    resource_id = hexes.ec2_id("vol")
    return resource_id, {
        "arn": mocks.arn("ec2", f"volume/{resource_id}"),
        "iops": inputs.get("iops", 3000),
        "throughput": inputs.get("throughput", 125),
        "kmsKeyId": mocks.arn("kms", f"key/{hexes.uuid('kms')}") if inputs.get("encrypted") else "",
    }


def _volume_attachment(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    # The provider's id: "vai-" and a hash of device name, volume and instance.
    return f"vai-{int(hexes.digits(8, 'vai'), 16)}", {}


def _secret(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    secret_name = _autoname(name, hexes, inputs)
    # Secrets Manager appends a dash and six random characters to the name in the ARN.
    arn = mocks.arn("secretsmanager", f"secret:{secret_name}-{hexes.lower_alnum(6, 'suffix')}")
    return arn, {"name": secret_name, "arn": arn}


def _secret_version(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    version = hexes.uuid("version")
    secret = str(inputs.get("secretId", ""))
    return f"{secret}|{version}", {"arn": secret, "versionId": version, "versionStages": ["AWSCURRENT"]}


def _amp_workspace(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    # Id ws-<uuid> and ARN arn:<partition>:aps:<region>:<account>:workspace/<id>: the RemoteWrite API's
    # example (https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-APIReference-RemoteWrite.html)
    # and the resource types of https://docs.aws.amazon.com/prometheus/latest/userguide/security-iam.html.
    workspace_id = f"ws-{hexes.uuid('workspace')}"
    domain = "amazonaws.com.cn" if mocks.partition == "aws-cn" else "amazonaws.com"
    return workspace_id, {
        "arn": mocks.arn("aps", f"workspace/{workspace_id}"),
        "prometheusEndpoint": f"https://aps-workspaces.{mocks.region}.{domain}/workspaces/{workspace_id}/",
    }


def _sns_topic(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    # A topic's id is its ARN, arn:<partition>:sns:<region>:<account>:<name>
    # (https://docs.aws.amazon.com/sns/latest/api/API_CreateTopic.html, TopicArn).
    topic = _autoname(name, hexes, inputs)
    arn = mocks.arn("sns", topic)
    return arn, {"name": topic, "arn": arn}


def _sns_subscription(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    # A subscription's ARN is its topic's ARN and a UUID (API_Subscribe.html, SubscriptionArn).
    arn = f"{inputs.get('topic', '')}:{hexes.uuid('subscription')}"
    return arn, {"arn": arn}


def _random_bytes(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    data = bytes.fromhex(hexes.digits(2 * int(inputs.get("length", 0)), "bytes"))
    resource_id, _ = _generic_answer(mocks, name, inputs, hexes)
    return resource_id, {"base64": base64.b64encode(data).decode("ascii"), "hex": data.hex()}


def _rds_cluster(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    # The id is the cluster identifier; the endpoint is <id>.cluster-<12 characters>.<region>.rds.amazonaws.com
    # (https://docs.aws.amazon.com/AmazonRDS/latest/AuroraUserGuide/Aurora.Endpoints.Cluster.html). With
    # manageMasterUserPassword RDS makes a secret named rds!cluster-<uuid> (its ARN gets Secrets Manager's
    # six-character suffix), encrypted with aws/secretsmanager unless a key is given
    # (https://docs.aws.amazon.com/AmazonRDS/latest/AuroraUserGuide/rds-secrets-manager.html).
    identifier = _autoname(name, hexes, inputs, "clusterIdentifier")
    suffix = hexes.lower_alnum(12, "endpoint")
    extra: dict[str, Any] = {
        "clusterIdentifier": identifier,
        "arn": mocks.arn("rds", f"cluster:{identifier}"),
        "endpoint": f"{identifier}.cluster-{suffix}.{mocks.region}.rds.amazonaws.com",
        "readerEndpoint": f"{identifier}.cluster-ro-{suffix}.{mocks.region}.rds.amazonaws.com",
        "port": inputs.get("port", 3306),
        "clusterResourceId": f"cluster-{hexes.upper_alnum(26, 'resource')}",
    }
    if inputs.get("manageMasterUserPassword"):
        secret = f"rds!cluster-{hexes.uuid('secret')}-{hexes.lower_alnum(6, 'secret')}"
        extra["masterUserSecrets"] = [
            {
                "secretArn": mocks.arn("secretsmanager", f"secret:{secret}"),
                "kmsKeyId": mocks.arn("kms", f"key/{hexes.uuid('kms')}"),
                "secretStatus": "active",
            }
        ]
    return identifier, extra


def _rds_named(kind: str, key: str) -> Answer:
    """An RDS resource whose id is its (auto)name: cluster instance, subnet group, parameter group."""

    def answer(
        mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
    ) -> tuple[str, dict[str, Any]]:
        resource_name = _autoname(name, hexes, inputs, key)
        return resource_name, {key: resource_name, "arn": mocks.arn("rds", f"{kind}:{resource_name}")}

    return answer


def _kms_key(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    key_id = hexes.uuid("key")
    return key_id, {"keyId": key_id, "arn": mocks.arn("kms", f"key/{key_id}")}


def _eks_cluster(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    # The endpoint has DescribeCluster's shape, https://<32 hex>.<3 characters>.<region>.eks.amazonaws.com
    # (https://docs.aws.amazon.com/eks/latest/APIReference/API_DescribeCluster.html, example response), and
    # EKS makes the cluster security group eks-cluster-sg-<name>-<digits>. The CA is a placeholder, not a certificate.
    cluster = _autoname(name, hexes, inputs)
    vpc_config = dict(inputs.get("vpcConfig") or {})
    vpc_config["clusterSecurityGroupId"] = hexes.ec2_id("sg", "cluster-sg")
    vpc_config["vpcId"] = hexes.ec2_id("vpc", "cluster-vpc")
    ca = base64.b64encode(f"mock CA of {cluster}".encode()).decode("ascii")
    return cluster, {
        "name": cluster,
        "arn": mocks.arn("eks", f"cluster/{cluster}"),
        "endpoint": f"https://{hexes.digits(32, 'endpoint').upper()}.gr7.{mocks.region}.eks.amazonaws.com",
        "certificateAuthority": {"data": ca},
        "vpcConfig": vpc_config,
        "status": "ACTIVE",
    }


def _eks_node_group(
    mocks: GpuforgeMocks, name: str, inputs: dict[str, Any], hexes: _Hex
) -> tuple[str, dict[str, Any]]:
    # EKS names the group's Auto Scaling group eks-<node group>-<uuid>.
    group = _autoname(name, hexes, inputs, "nodeGroupName")
    cluster = str(inputs.get("clusterName", ""))
    return f"{cluster}:{group}", {
        "nodeGroupName": group,
        "arn": mocks.arn("eks", f"nodegroup/{cluster}/{group}/{hexes.uuid('ng')}"),
        "resources": [{"autoscalingGroups": [{"name": f"eks-{group}-{hexes.uuid('asg')}"}]}],
        "status": "ACTIVE",
    }


_RESOURCE_ANSWERS: dict[str, Answer] = {
    "aws:kms/key:Key": _kms_key,
    "aws:eks/cluster:Cluster": _eks_cluster,
    "aws:eks/nodeGroup:NodeGroup": _eks_node_group,
    "aws:ec2/vpc:Vpc": _vpc,
    "aws:ec2/subnet:Subnet": _subnet,
    "aws:ec2/securityGroup:SecurityGroup": _security_group,
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": _security_group_rule,
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": _security_group_rule,
    "aws:ec2/vpcEndpoint:VpcEndpoint": _vpc_endpoint,
    "aws:ec2/routeTable:RouteTable": _ec2("rtb", "route-table"),
    "aws:ec2/routeTableAssociation:RouteTableAssociation": _ec2("rtbassoc"),
    "aws:ec2/route:Route": _route,
    "aws:ec2/internetGateway:InternetGateway": _ec2("igw", "internet-gateway"),
    "aws:ec2/eip:Eip": _eip,
    "aws:ec2/natGateway:NatGateway": _nat_gateway,
    "aws:ec2/placementGroup:PlacementGroup": _placement_group,
    "aws:ec2/launchTemplate:LaunchTemplate": _launch_template,
    "aws:ec2/instance:Instance": _instance,
    "aws:autoscaling/group:Group": _autoscaling_group,
    "aws:autoscaling/schedule:Schedule": _autoscaling_schedule,
    "aws:fsx/lustreFileSystem:LustreFileSystem": _lustre_file_system,
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": _data_repository_association,
    "aws:s3/bucket:Bucket": _bucket,
    "aws:s3/bucketVersioning:BucketVersioning": _bucket_part,
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": _bucket_part,
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": _bucket_part,
    "aws:s3/bucketOwnershipControls:BucketOwnershipControls": _bucket_part,
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration": _bucket_part,
    "aws:s3/bucketPolicy:BucketPolicy": _bucket_part,
    "aws:iam/role:Role": _iam_role,
    "aws:iam/instanceProfile:InstanceProfile": _instance_profile,
    "aws:iam/rolePolicy:RolePolicy": _role_policy,
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": _role_policy_attachment,
    "aws:ebs/volume:Volume": _ebs_volume,
    "aws:ec2/volumeAttachment:VolumeAttachment": _volume_attachment,
    "aws:secretsmanager/secret:Secret": _secret,
    "aws:secretsmanager/secretVersion:SecretVersion": _secret_version,
    "aws:amp/workspace:Workspace": _amp_workspace,
    "aws:sns/topic:Topic": _sns_topic,
    "aws:sns/topicSubscription:TopicSubscription": _sns_subscription,
    "random:index/randomBytes:RandomBytes": _random_bytes,
    "aws:rds/cluster:Cluster": _rds_cluster,
    "aws:rds/clusterInstance:ClusterInstance": _rds_named("db", "identifier"),
    "aws:rds/subnetGroup:SubnetGroup": _rds_named("subgrp", "name"),
    "aws:rds/clusterParameterGroup:ClusterParameterGroup": _rds_named("cluster-pg", "name"),
}


# -- invokes ----------------------------------------------------------------------------

CallAnswer = Callable[[GpuforgeMocks, dict[str, Any]], dict[str, Any]]


def _get_region(mocks: GpuforgeMocks, args: dict[str, Any]) -> dict[str, Any]:
    region = args.get("region") or args.get("name") or mocks.region
    return {
        "id": region,
        "name": region,
        "region": region,
        "endpoint": f"ec2.{region}.amazonaws.com",
        "description": _REGION_DESCRIPTIONS.get(region, region),
    }


def _get_partition(mocks: GpuforgeMocks, args: dict[str, Any]) -> dict[str, Any]:
    suffix = "amazonaws.com.cn" if mocks.partition == "aws-cn" else "amazonaws.com"
    prefix = "cn.com.amazonaws" if mocks.partition == "aws-cn" else "com.amazonaws"
    return {
        "id": mocks.partition,
        "partition": mocks.partition,
        "dnsSuffix": suffix,
        "reverseDnsPrefix": prefix,
    }


def _get_caller_identity(mocks: GpuforgeMocks, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": mocks.account_id,
        "accountId": mocks.account_id,
        "arn": f"arn:{mocks.partition}:sts::{mocks.account_id}:assumed-role/gpuforge-plan/offline",
        "userId": "AROAGPUFORGEPLANOFFLINE:offline",
    }


def _get_policy_document(mocks: GpuforgeMocks, args: dict[str, Any]) -> dict[str, Any]:
    """Render the statements as the provider does: single values as strings, lists sorted."""
    version = args.get("version") or "2012-10-17"
    statements = [_policy_statement(statement) for statement in args.get("statements") or []]
    document: dict[str, Any] = {"Version": version, "Statement": statements}
    if args.get("policyId"):
        document = {"Version": version, "Id": args["policyId"], "Statement": statements}
    pretty = json.dumps(document, indent=2)
    minified = json.dumps(document, separators=(",", ":"))
    return {
        "id": str(int(hashlib.sha256(minified.encode()).hexdigest()[:8], 16)),
        "json": pretty,
        "minifiedJson": minified,
        "statements": args.get("statements") or [],
        "version": version,
    }


def _one_or_many(values: Sequence[str]) -> str | list[str]:
    ordered = sorted(values)
    return ordered[0] if len(ordered) == 1 else ordered


def _policy_statement(statement: Mapping[str, Any]) -> dict[str, Any]:
    rendered: dict[str, Any] = {}
    if statement.get("sid"):
        rendered["Sid"] = statement["sid"]
    rendered["Effect"] = statement.get("effect") or "Allow"
    for key, field_name in (
        ("actions", "Action"),
        ("notActions", "NotAction"),
        ("resources", "Resource"),
        ("notResources", "NotResource"),
    ):
        if statement.get(key):
            rendered[field_name] = _one_or_many(statement[key])
    for key, field_name in (("principals", "Principal"), ("notPrincipals", "NotPrincipal")):
        if statement.get(key):
            rendered[field_name] = {
                principal["type"]: _one_or_many(principal["identifiers"]) for principal in statement[key]
            }
    if statement.get("conditions"):
        conditions: dict[str, dict[str, Any]] = {}
        for condition in statement["conditions"]:
            conditions.setdefault(condition["test"], {})[condition["variable"]] = _one_or_many(
                condition["values"]
            )
        rendered["Condition"] = conditions
    return rendered


def _get_subnet(mocks: GpuforgeMocks, args: dict[str, Any]) -> dict[str, Any]:
    subnet_id = str(args.get("id") or "")
    hexes = _Hex(f"subnet|{subnet_id}")
    cidr = mocks.subnet_cidrs.get(subnet_id) or f"10.0.{int(hexes.digits(2), 16)}.0/24"
    return {
        "id": subnet_id,
        "arn": mocks.arn("ec2", f"subnet/{subnet_id}"),
        "cidrBlock": cidr,
        "vpcId": hexes.ec2_id("vpc", "vpc"),
        "availabilityZone": f"{mocks.region}a",
        "availableIpAddressCount": ipaddress.IPv4Network(cidr).num_addresses - 5,
        "mapPublicIpOnLaunch": False,
        "ownerId": mocks.account_id,
        "state": "available",
        "tags": {},
    }


def _get_availability_zones(mocks: GpuforgeMocks, args: dict[str, Any]) -> dict[str, Any]:
    # Every region gpuforge knows has at least zones a, b and c; the names stand in for the account's.
    names = [f"{mocks.region}{letter}" for letter in "abc"]
    return {
        "id": mocks.region,
        "names": names,
        "groupNames": [mocks.region] * len(names),
        "state": args.get("state"),
    }


_CALL_ANSWERS: dict[str, CallAnswer] = {
    "aws:index/getRegion:getRegion": _get_region,
    "aws:index/getPartition:getPartition": _get_partition,
    "aws:index/getCallerIdentity:getCallerIdentity": _get_caller_identity,
    "aws:iam/getPolicyDocument:getPolicyDocument": _get_policy_document,
    "aws:ec2/getSubnet:getSubnet": _get_subnet,
    "aws:index/getAvailabilityZones:getAvailabilityZones": _get_availability_zones,
}
# The provider functions these mocks answer themselves (a policy check's answers file may not replace them).
ANSWERED_CALLS = frozenset(_CALL_ANSWERS)
