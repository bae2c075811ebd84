"""Every use of a private piece of pulumi_policy, in one module.

pulumi_policy's public API is for writing policies; it has no API for running them
without the Pulumi engine. The offline runner (`gpuforge.policies.runner`) needs
three private pieces, and this module is the only place that touches them:

- `pulumi_policy.policy._PolicyAnalyzerServicer`, the object the engine talks to over
  gRPC. The runner calls its `Configure`, `Analyze` and `AnalyzeStack` methods
  directly, with the protobuf requests the engine would send, so pulumi_policy itself
  deserializes the properties, wraps them in its proxies, hands each policy its
  config, applies enforcement levels, links parents and dependencies, and turns an
  unknown value into the advisory "can't run ... during preview" diagnostic. The same
  rule functions then run offline exactly as under `pulumi preview`.
- `pulumi_policy.proxy.UnknownValueError`, which the props proxies raise when a rule
  reads a value that is unknown during preview. `lookup` turns it into `UNKNOWN`, so a
  rule can treat "not known at preview" as a finding of its own where that is the
  right answer (an AMI id that is not a literal is not pinned).
- `pulumi_policy.proxy.UNKNOWN_STRING_VALUE`, the sentinel the engine sends in place of
  an unknown value.

These pieces are pinned to pulumi-policy 1.21.0 (pyproject.toml pins the same), and
`check_version` refuses any other version before they are used;
tests/policies/test_engine_adapter.py exercises each of them.
"""

from __future__ import annotations

import enum
import importlib.metadata
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final, Literal, NoReturn

import pulumi
import pulumi_policy.policy
from google.protobuf import json_format, struct_pb2
from google.protobuf.message import Message
from pulumi.output import Unknown as SdkUnknown
from pulumi.runtime import proto
from pulumi_policy import EnforcementLevel, Policy
from pulumi_policy.policy import _PolicyAnalyzerServicer
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, UnknownValueError

from gpuforge.errors import GpuforgeError

PINNED_VERSION: Final = "1.21.0"

# The engine marshals properties for policy packs with SkipInternalKeys: keys that
# start with "__" (the provider's bookkeeping, such as "__defaults") never reach a policy.
_INTERNAL_PREFIX = "__"

_LEVEL_TO_PROTO: Final = {
    EnforcementLevel.ADVISORY: proto.ADVISORY,
    EnforcementLevel.MANDATORY: proto.MANDATORY,
    EnforcementLevel.REMEDIATE: proto.REMEDIATE,
    EnforcementLevel.DISABLED: proto.DISABLED,
}
_PROTO_TO_LEVEL: Final = {value: level for level, value in _LEVEL_TO_PROTO.items()}


class Sentinel(enum.Enum):
    """What `lookup` returns instead of a value."""

    UNKNOWN = "unknown"
    """A value the engine does not know yet (during preview: an id created in the same stack)."""
    MISSING = "missing"
    """A key or index that is not there at all."""


UNKNOWN: Final = Sentinel.UNKNOWN
MISSING: Final = Sentinel.MISSING
Unknown = Literal[Sentinel.UNKNOWN]


def check_version() -> None:
    """Refuse to run on a pulumi_policy other than the one these private pieces were read from."""
    found = importlib.metadata.version("pulumi-policy")
    if found != PINNED_VERSION:
        raise GpuforgeError(
            f"gpuforge's offline policy runner is pinned to pulumi-policy=={PINNED_VERSION} "
            f"(it calls private parts of it, see gpuforge/policies/engine_adapter.py), but "
            f"pulumi-policy {found} is installed. Fix: `pip install pulumi-policy=={PINNED_VERSION}`, "
            "or re-read that package and update engine_adapter.py and its tests together."
        )


def lookup(container: Any, key: str | int) -> Any:
    """`container[key]` as the engine's proxies serve it: the value, `UNKNOWN` or `MISSING`.

    Never use `in` or `.get` on the proxies: `Mapping.__contains__` and `.get` read the
    value, so they raise on an unknown one instead of answering.
    """
    try:
        return container[key]
    except UnknownValueError:
        return UNKNOWN
    except (KeyError, IndexError, TypeError):
        return MISSING


def elements(sequence: Any) -> list[Any]:
    """Every element of a proxied list, each one a value or `UNKNOWN`."""
    return [lookup(sequence, index) for index in range(len(sequence))]


def unknown_during_preview(path: Sequence[str | int]) -> NoReturn:
    """Stop a rule the way pulumi_policy does when a rule reads an unknown value.

    For a rule that cannot decide without a value that is only known after the update:
    the analyzer reports "can't run policy ... during preview" as advisory, and the
    rule runs for real on `pulumi up`.
    """
    raise UnknownValueError(UNKNOWN_STRING_VALUE, [str(part) for part in path])


PackConfig = Mapping[str, tuple[EnforcementLevel, Mapping[str, Any]]]
"""Each policy's enforcement level and config properties, reconciled (see runner.reconcile_config)."""


@dataclass(frozen=True)
class Diagnostic:
    """One diagnostic as pulumi_policy reports it to the engine."""

    policy_name: str
    description: str
    message: str
    enforcement_level: EnforcementLevel
    urn: str


@dataclass(frozen=True)
class WireResource:
    """A resource in the shape the engine sends it to a policy pack (before marshalling)."""

    urn: str
    type: str
    name: str
    properties: Mapping[str, Any]
    parent: str | None
    dependencies: Sequence[str]
    property_dependencies: Mapping[str, Sequence[str]]
    ignore_changes: Sequence[str]


class Analyzer:
    """A policy pack's analyzer, driven in-process instead of over gRPC.

    `PolicyPack(...)` builds the same servicer and then blocks serving it; here it is
    built without a server and called the way the engine calls it.
    """

    def __init__(self, name: str, version: str, policies: Sequence[Policy], level: EnforcementLevel) -> None:
        check_version()
        # Untyped in pulumi_policy; its methods take and return protobuf messages.
        self._servicer: Any = _PolicyAnalyzerServicer(name, version, list(policies), level)

    def configure(self, config: PackConfig) -> None:
        """Send the reconciled config: each policy's enforcement level and properties."""
        self._servicer.Configure(configure_request(config), None)

    def analyze(self, resource: WireResource) -> list[Diagnostic]:
        """Run every resource policy on one resource, as `pulumi preview` does for each registration."""
        with _each_message_converted_once():
            return diagnostics(self._servicer.Analyze(analyze_request(resource), None))

    def analyze_stack(self, resources: Sequence[WireResource]) -> list[Diagnostic]:
        """Run every stack policy once over all resources, as the engine does at the end of a run."""
        with _each_message_converted_once():
            return diagnostics(self._servicer.AnalyzeStack(analyze_stack_request(resources), None))


class _ConvertedOnce:
    """`json_format` as pulumi_policy's analyzer sees it during one request: each message converted once.

    The analyzer converts a resource's properties from protobuf again for every policy it
    runs (`deserialize_properties(json_format.MessageToDict(...))` inside its policy loop), so
    each policy added to the pack added a conversion of every resource: 20 of each at 20
    policies, most of the pack's time on a large stack. The request does not change during
    the call and `deserialize_properties` builds new containers without changing its input,
    so handing every policy the one conversion gives each the same props as before.
    """

    def __init__(self) -> None:
        # id -> (message, its dict): the message is held, so its id is not reused meanwhile.
        self._converted: dict[int, tuple[Message, dict[str, Any]]] = {}

    def MessageToDict(self, message: Message, **options: Any) -> dict[str, Any]:
        if options:
            converted: dict[str, Any] = json_format.MessageToDict(message, **options)
            return converted
        held = self._converted.get(id(message))
        if held is None or held[0] is not message:
            held = (message, json_format.MessageToDict(message))
            self._converted[id(message)] = held
        return held[1]

    def __getattr__(self, name: str) -> Any:
        return getattr(json_format, name)


@contextmanager
def _each_message_converted_once() -> Iterator[None]:
    """pulumi_policy's analyzer module reads `json_format` through its module global (at the
    pinned version, `check_version`); it is swapped for the duration of one request."""
    module: Any = pulumi_policy.policy
    real = module.json_format
    module.json_format = _ConvertedOnce()
    try:
        yield
    finally:
        module.json_format = real


# The engine's requests. They are public protobuf messages; the same requests reach a
# pack served over gRPC (tests/policies compare the two).


def configure_request(config: PackConfig) -> Any:
    request = proto.ConfigureAnalyzerRequest()
    for policy_name, (level, properties) in config.items():
        entry = request.policyConfig[policy_name]
        entry.enforcementLevel = _LEVEL_TO_PROTO[level]
        entry.properties.update(dict(properties))
    return request


def analyze_request(resource: WireResource) -> Any:
    return proto.AnalyzeRequest(
        type=resource.type,
        properties=_struct(resource.properties, resource.urn),
        urn=resource.urn,
        name=resource.name,
        options=_options(resource),
    )


def analyze_stack_request(resources: Sequence[WireResource]) -> Any:
    request = proto.AnalyzeStackRequest()
    for resource in resources:
        wire = request.resources.add(
            type=resource.type,
            properties=_struct(resource.properties, resource.urn),
            urn=resource.urn,
            name=resource.name,
            options=_options(resource),
            parent=resource.parent or "",
            dependencies=list(resource.dependencies),
        )
        for key, urns in resource.property_dependencies.items():
            if urns:  # the engine skips properties without dependencies
                wire.propertyDependencies[key].urns.extend(urns)
    return request


def diagnostics(response: Any) -> list[Diagnostic]:
    """The diagnostics of an AnalyzeResponse."""
    return [
        Diagnostic(
            policy_name=d.policyName,
            description=d.description,
            message=d.message,
            enforcement_level=_PROTO_TO_LEVEL[d.enforcementLevel],
            urn=d.urn,
        )
        for d in response.diagnostics
    ]


def _options(resource: WireResource) -> Any:
    return proto.AnalyzerResourceOptions(
        parent=resource.parent or "", ignoreChanges=list(resource.ignore_changes)
    )


def _struct(properties: Mapping[str, Any], urn: str) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(_marshal(properties, urn, ()))
    return struct


def _marshal(value: Any, urn: str, path: tuple[str, ...]) -> Any:
    """A recorded Python value as the engine marshals it for a policy pack.

    The SDK's mocks hand over inputs already deserialized: an unknown value is a
    `pulumi.output.Unknown`, a secret is still wrapped in its signature object (the
    engine keeps secrets wrapped too; pulumi_policy unwraps them). Numbers become
    doubles inside the protobuf Struct, as they do on the wire.
    """
    if isinstance(value, SdkUnknown):
        return UNKNOWN_STRING_VALUE
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        return {
            str(key): _marshal(item, urn, (*path, str(key)))
            for key, item in value.items()
            if not str(key).startswith(_INTERNAL_PREFIX)
        }
    if isinstance(value, list | tuple):
        return [_marshal(item, urn, (*path, str(index))) for index, item in enumerate(value)]
    where = ".".join(path) or "(properties)"
    kind = "a resource reference" if isinstance(value, pulumi.Resource) else type(value).__name__
    raise GpuforgeError(
        f"{urn}: property {where} holds {kind}, which the offline policy runner cannot pass to a "
        "policy (it passes strings, numbers, booleans, lists, objects, secrets and unknowns). "
        "Fix: give the resource a plain value there, or extend _marshal in "
        "gpuforge/policies/engine_adapter.py."
    )
