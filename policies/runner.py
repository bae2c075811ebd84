"""The offline policy runner: the pack's own rules on the resources a mocked run registered.

`gpuforge plan` runs a stack's program under the Pulumi SDK's mocks
(`gpuforge.pulumi_mocks`) and passes the recorded resources here.
`run_policies` then does what the engine and pulumi_policy do during
`pulumi preview --policy-pack policies/`:

1. reconcile the policy config as the engine does: each policy's enforcement level,
   its schema defaults, then the given config on top (an `"all"` level first, then
   per policy), validated against each policy's JSON schema;
2. send every resource's inputs to the resource policies (the engine analyzes each
   registration), then every resource's outputs, parents and dependencies to the stack
   policies (the engine's AnalyzeStack at the end of the run).

Both steps go through pulumi_policy's own analyzer (see `engine_adapter`), so the
props a rule sees are deserialized and proxied as under the engine, and a rule that
reads an unknown value gets the same advisory "can't run ... during preview" verdict.

One difference from the engine, on purpose: a config entry that names no policy of
the pack is an error here (the engine ignores it), so a typo cannot switch a rule off
silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import jsonschema
from pulumi_policy import EnforcementLevel, Policy

from gpuforge.errors import InputError
from gpuforge.policies.engine_adapter import Analyzer, Diagnostic, WireResource
from gpuforge.policies.pack import PACK_ENFORCEMENT_LEVEL, PACK_NAME, PACK_VERSION, POLICIES

Enforcement = Literal["mandatory", "advisory", "disabled"]

_LEVELS: dict[str, EnforcementLevel] = {level.value: level for level in EnforcementLevel}
# How a diagnostic's level reads in a verdict; pulumi_policy already reports a violated
# remediation policy as mandatory.
_ENFORCEMENT: dict[EnforcementLevel, Enforcement] = {
    EnforcementLevel.ADVISORY: "advisory",
    EnforcementLevel.DISABLED: "disabled",
}
_CONFIG_DOC = "https://www.pulumi.com/docs/iac/using-pulumi/crossguard/configuration/"


@dataclass(frozen=True)
class Verdict:
    """One policy violation: which policy, how it is enforced, on which resource, and what to do.

    `urn` is None for a stack-level verdict. `enforcement` is the level the engine would
    apply: a mandatory rule that could not run during preview comes back advisory.
    """

    policy: str
    enforcement: Enforcement
    urn: str | None
    message: str


class RegisteredResource(Protocol):
    """What the runner reads from a recorded resource (`gpuforge.pulumi_mocks.RecordedResource`).

    A recorder that also keeps the registration's `dependencies` (URNs),
    `property_dependencies` (property name -> URNs) and `ignore_changes` gets them
    passed on as the engine passes them. Without property dependencies the stack
    policies match references by value, which works offline because the mocks' ids
    are known; during a preview the engine always has them.
    """

    @property
    def type(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def inputs(self) -> Mapping[str, Any]: ...
    @property
    def outputs(self) -> Mapping[str, Any]: ...
    @property
    def id(self) -> str: ...
    @property
    def urn(self) -> str | None: ...
    @property
    def parent_urn(self) -> str | None: ...
    @property
    def custom(self) -> bool: ...


def run_policies(
    resources: Iterable[RegisteredResource],
    config: Mapping[str, Any] | None = None,
    *,
    policies: Sequence[Policy] = POLICIES,
) -> list[Verdict]:
    """Every violation the pack reports on `resources`: resource policies first, then stack policies.

    `config` has the shape of `pulumi preview --policy-pack-config` files: policy name ->
    enforcement level, or an object of properties with an optional `enforcementLevel`;
    `"all"` may set one level for every policy.
    """
    wire = [to_wire(resource) for resource in resources]
    analyzer = Analyzer(PACK_NAME, PACK_VERSION, policies, PACK_ENFORCEMENT_LEVEL)
    analyzer.configure(reconcile_config(policies, config or {}))
    verdicts: list[Verdict] = []
    for inputs, _ in wire:
        verdicts.extend(_verdict(diagnostic, inputs.urn) for diagnostic in analyzer.analyze(inputs))
    stack = [outputs for _, outputs in wire]
    verdicts.extend(_verdict(diagnostic, None) for diagnostic in analyzer.analyze_stack(stack))
    return verdicts


def reconcile_config(
    policies: Sequence[Policy], config: Mapping[str, Any]
) -> dict[str, tuple[EnforcementLevel, dict[str, Any]]]:
    """Each policy's enforcement level and properties, as the engine reconciles them.

    Defaults come from each policy's config schema, then `config` is applied: an `"all"`
    enforcement level first, then each policy's own entry. The result is checked
    against the schemas, as the engine does before it configures a pack.
    """
    result: dict[str, tuple[EnforcementLevel, dict[str, Any]]] = {}
    for policy in policies:
        defaults = {
            key: schema["default"]
            for key, schema in (policy.config_schema.properties if policy.config_schema else {}).items()
            if "default" in schema
        }
        result[policy.name] = (policy.enforcement_level or PACK_ENFORCEMENT_LEVEL, defaults)

    known = {policy.name for policy in policies}
    unknown = sorted(set(config) - known - {"all"})
    if unknown:
        raise InputError(
            f"policy config names {unknown}, which are not policies of the {PACK_NAME} pack. "
            f"Fix: use one of {sorted(known)} (or 'all' for an enforcement level)."
        )
    if "all" in config:
        all_level, all_properties = _entry("all", config["all"])
        if all_properties:
            raise InputError(
                f"policy config 'all' holds properties {sorted(all_properties)}; 'all' only sets an "
                "enforcement level. Fix: move the properties under the policy they belong to."
            )
        if all_level is not None:
            result = {name: (all_level, properties) for name, (_, properties) in result.items()}
    for name, raw in config.items():
        if name == "all":
            continue
        level, properties = _entry(name, raw)
        current_level, current_properties = result[name]
        result[name] = (level or current_level, {**current_properties, **properties})

    for policy in policies:
        _validate(policy, result[policy.name][1])
    return result


def _entry(name: str, raw: Any) -> tuple[EnforcementLevel | None, dict[str, Any]]:
    """One config entry: a level string, or an object with an optional enforcementLevel."""
    if isinstance(raw, str):
        return _level(name, raw), {}
    if isinstance(raw, Mapping):
        properties = {str(key): value for key, value in raw.items() if key != "enforcementLevel"}
        level = raw.get("enforcementLevel")
        return (_level(name, level) if level is not None else None), properties
    raise InputError(
        f"policy config {name!r} is {raw!r}; an entry is an enforcement level or an object of "
        f'properties. Fix: write e.g. "advisory" or {{"enforcementLevel": "advisory"}} ({_CONFIG_DOC}).'
    )


def _level(name: str, value: Any) -> EnforcementLevel:
    if isinstance(value, str) and value in _LEVELS:
        return _LEVELS[value]
    raise InputError(
        f"policy config {name!r}: enforcement level {value!r} is not one of {sorted(_LEVELS)}. "
        f"Fix: use one of those ({_CONFIG_DOC})."
    )


def _validate(policy: Policy, properties: Mapping[str, Any]) -> None:
    schema = policy.config_schema
    if schema is None:
        if properties:
            raise InputError(
                f"policy config {policy.name!r} holds properties {sorted(properties)}, but that policy "
                "takes none. Fix: remove them, or set only its enforcementLevel."
            )
        return
    document: dict[str, Any] = {"type": "object", "properties": schema.properties}
    if schema.required:
        document["required"] = schema.required
    errors = sorted(jsonschema.Draft7Validator(document).iter_errors(dict(properties)), key=str)
    if errors:
        details = "; ".join(
            f"{'.'.join(str(part) for part in error.absolute_path) or '(object)'}: {error.message}"
            for error in errors
        )
        raise InputError(
            f"policy config {policy.name!r} is invalid: {details}. Fix: give values of the types its "
            f"config schema states: {schema.properties}."
        )


def to_wire(resource: RegisteredResource) -> tuple[WireResource, WireResource]:
    """The resource as the engine sends it to resource policies (inputs) and stack policies (outputs).

    Stack policies see outputs, and the AWS provider's outputs carry the resource's `id`;
    the mocks keep the id beside the outputs, so it is put back here.
    """
    if resource.urn is None:
        raise InputError(
            f"resource {resource.name!r} ({resource.type}) was recorded without a URN, so policies "
            "cannot name it. Fix: run the program under gpuforge.pulumi_mocks.install(), whose "
            "monitor passes each registration's URN to the mocks."
        )
    dependencies: Sequence[str] = getattr(resource, "dependencies", ())
    property_dependencies: Mapping[str, Sequence[str]] = getattr(resource, "property_dependencies", {})
    ignore_changes: Sequence[str] = getattr(resource, "ignore_changes", ())
    outputs = dict(resource.outputs)
    if resource.custom and resource.id:
        outputs["id"] = resource.id

    def shaped(properties: Mapping[str, Any]) -> WireResource:
        return WireResource(
            urn=resource.urn or "",
            type=resource.type,
            name=resource.name,
            properties=properties,
            parent=resource.parent_urn,
            dependencies=dependencies,
            property_dependencies=property_dependencies,
            ignore_changes=ignore_changes,
        )

    return shaped(resource.inputs), shaped(outputs)


def _verdict(diagnostic: Diagnostic, resource_urn: str | None) -> Verdict:
    """A diagnostic as a Verdict: the rule's own message, without the description the pack prefixes."""
    prefix = diagnostic.description + "\n"
    message = diagnostic.message
    if message.startswith(prefix):
        message = message[len(prefix) :]
    enforcement: Enforcement = _ENFORCEMENT.get(diagnostic.enforcement_level, "mandatory")
    return Verdict(
        policy=diagnostic.policy_name,
        enforcement=enforcement,
        urn=resource_urn or diagnostic.urn or None,
        message=message,
    )
