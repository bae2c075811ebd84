"""Following references between resources inside a stack policy.

A launch template names its security groups and subnet by id, an Auto Scaling group
names its launch template and placement group, a rule names its security group.
During `pulumi preview` those ids are unknown when the referenced resource is
created in the same stack, but the engine still tells a stack policy which
resources each property depends on (`PolicyResource.property_dependencies`).
`StackGraph.refs` uses both: the dependencies (always there under the engine) and
the values (always known offline, where the mocks' ids are literal), so a rule
finds the same resources online and offline, in preview and in an update.

A reference that is neither a resource of the stack nor known is "unresolved"; a
rule that needs it stops with the engine's "can't run during preview" advisory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from pulumi_policy import PolicyResource

from gpuforge.policies import aws_types
from gpuforge.policies.engine_adapter import unknown_during_preview
from gpuforge.policies.props import UNKNOWN, at, is_set, items, text, texts


@dataclass(frozen=True)
class Refs:
    """What a property refers to among resources of some types."""

    internal: tuple[PolicyResource, ...]
    """Resources of this stack, in stack order."""
    external: tuple[str, ...]
    """Literal ids or names that match no resource of the stack (made elsewhere)."""
    unresolved: bool
    """An unknown value that no dependency explains."""

    @property
    def identities(self) -> frozenset[str]:
        """One key per referenced thing: a URN inside the stack, the literal id outside it."""
        return frozenset(resource.urn for resource in self.internal) | frozenset(self.external)

    def describe(self) -> str:
        names = [describe(resource) for resource in self.internal] + [repr(value) for value in self.external]
        return ", ".join(names) if names else "none"


def describe(resource: PolicyResource) -> str:
    """How messages name a resource: its logical name and type token."""
    return f"{resource.name!r} ({resource.resource_type})"


class StackGraph:
    """The stack's resources, with lookups by type and by reference."""

    def __init__(self, resources: Iterable[PolicyResource]) -> None:
        self.resources = list(resources)
        # Indexes, so that the stack policies stay linear in the stack's size (every node
        # group looks up its subnets, groups and templates).
        self._position = {resource.urn: index for index, resource in enumerate(self.resources)}
        self._by_type: dict[str, list[PolicyResource]] = {}
        for resource in self.resources:
            self._by_type.setdefault(resource.resource_type, []).append(resource)
        self._template_refs: dict[tuple[str, str], Refs] = {}

    def template_refs(self, template: PolicyResource, what: str, compute: Callable[[], Refs]) -> Refs:
        """`compute()` once per launch template and `what`: every instance launched from one
        template shares its interfaces, so reading its 32 interfaces again for each of 2,048
        instances made the stack policies quadratic in practice. A graph lives for one
        policy's call, when no resource changes, so a remembered answer is never stale."""
        key = (template.urn, what)
        if key not in self._template_refs:
            self._template_refs[key] = compute()
        return self._template_refs[key]

    def _in_stack_order(self, resources: Iterable[PolicyResource]) -> list[PolicyResource]:
        inside = [resource for resource in resources if resource.urn in self._position]
        return sorted(inside, key=lambda resource: self._position[resource.urn])

    def of_type(self, *types: str) -> list[PolicyResource]:
        return self._in_stack_order(
            resource for kind in dict.fromkeys(types) for resource in self._by_type.get(kind, [])
        )

    def refs(
        self,
        resource: PolicyResource,
        prop: str,
        values: Sequence[object],
        types: Sequence[str],
        keys: Sequence[str] = ("id",),
    ) -> Refs:
        """The resources of `types` that `values`, read from top-level property `prop`, refer to.

        A known value matches a resource whose output at one of `keys` equals it; an
        unknown value is explained by the property's dependencies on resources of `types`.
        """
        dependencies = [
            dep for dep in resource.property_dependencies.get(prop, []) if dep.resource_type in types
        ]
        internal = {dep.urn: dep for dep in dependencies}
        external: list[str] = []
        unresolved = False
        candidates = self.of_type(*types)
        for value in values:
            if value is UNKNOWN:
                unresolved = unresolved or not dependencies
                continue
            match = next(
                (
                    candidate
                    for candidate in candidates
                    if any(at(candidate.props, key) == value for key in keys)
                ),
                None,
            )
            if match is None:
                external.append(str(value))
            else:
                internal[match.urn] = match
        ordered = tuple(self._in_stack_order(internal.values()))
        return Refs(ordered, tuple(dict.fromkeys(external)), unresolved)


@dataclass(frozen=True)
class Node:
    """A group of nodes: an Auto Scaling group or an instance, and the launch template it launches from.

    An instance's own settings take precedence over its template's; an Auto Scaling
    group's nodes take theirs from the template.
    """

    launcher: PolicyResource
    template: PolicyResource | None
    external_template: str | None = None
    """The id or name of a launch template the stack does not create (its settings cannot be read)."""

    @property
    def is_instance(self) -> bool:
        return self.launcher.resource_type in aws_types.INSTANCES

    def source(self, *path: str) -> PolicyResource | None:
        """The resource whose props set `path` (the instance first, then the template)."""
        if self.is_instance and is_set(at(self.launcher.props, *path)):
            return self.launcher
        if self.template is not None and is_set(at(self.template.props, *path)):
            return self.template
        return None

    def setting(self, *path: str) -> object:
        source = self.source(*path)
        return None if source is None else at(source.props, *path)

    @property
    def instance_type(self) -> object:
        return text(self.setting("instanceType"))

    def describe(self) -> str:
        template = f" from launch template {self.template.name!r}" if self.template is not None else ""
        return f"{describe(self.launcher)}{template}"


def nodes(graph: StackGraph) -> list[Node]:
    """Every Auto Scaling group and instance (or spot instance request) of the stack, each with its launch template.

    A template reference that is unknown and that no dependency explains stops the
    rule with the engine's "can't run during preview": skipping the node would pass it
    unchecked.
    """
    found = []
    for launcher in graph.of_type(aws_types.AUTOSCALING_GROUP, *aws_types.INSTANCES):
        refs = _template(graph, launcher)
        if refs.unresolved and not refs.internal:
            unknown_during_preview([launcher.name, "launchTemplate"])
        template = refs.internal[0] if refs.internal else None
        found.append(Node(launcher, template, None if template else next(iter(refs.external), None)))
    return found


def _template(graph: StackGraph, launcher: PolicyResource) -> Refs:
    """The launch template that `launcher` names."""
    for prop, path in (
        ("launchTemplate", ("launchTemplate",)),
        ("mixedInstancesPolicy", ("mixedInstancesPolicy", "launchTemplate", "launchTemplateSpecification")),
    ):
        spec = at(launcher.props, *path)
        if not is_set(spec):
            continue
        values = [
            value
            for key in ("id", "name", "launchTemplateId", "launchTemplateName")
            if is_set(value := text(at(spec, key)))
        ]
        return graph.refs(launcher, prop, values, (aws_types.LAUNCH_TEMPLATE,), ("id", "name"))
    return Refs((), (), False)


def node_subnets(graph: StackGraph, node: Node) -> Refs:
    """The subnets a node's interfaces are in: the group's subnets, else the instance's or template's."""
    if not node.is_instance:
        values = texts(at(node.launcher.props, "vpcZoneIdentifiers"))
        return graph.refs(node.launcher, "vpcZoneIdentifiers", values, (aws_types.SUBNET,))
    if is_set(text(at(node.launcher.props, "subnetId"))):
        value = text(at(node.launcher.props, "subnetId"))
        return graph.refs(node.launcher, "subnetId", [value], (aws_types.SUBNET,))
    template = node.template
    if template is None:
        return Refs((), (), False)
    return graph.template_refs(template, "subnets", lambda: _template_subnets(graph, template))


def _template_subnets(graph: StackGraph, template: PolicyResource) -> Refs:
    values = [
        value
        for interface in items(at(template.props, "networkInterfaces"))
        if (value := text(at(interface, "subnetId"))) is not None
    ]
    return graph.refs(template, "networkInterfaces", values, (aws_types.SUBNET,))


def node_security_groups(graph: StackGraph, node: Node) -> Refs:
    """The security groups of a node's interfaces (template interfaces, or the instance's own groups)."""
    refs: list[Refs] = []
    if node.is_instance:
        for prop in ("vpcSecurityGroupIds", "securityGroups"):
            values = texts(at(node.launcher.props, prop))
            refs.append(graph.refs(node.launcher, prop, values, (aws_types.SECURITY_GROUP,), ("id", "name")))
    template = node.template
    if template is not None:
        refs.append(
            graph.template_refs(
                template, "security groups", lambda: _template_security_groups(graph, template)
            )
        )
    return merge(refs)


def _template_security_groups(graph: StackGraph, template: PolicyResource) -> Refs:
    interfaces = items(at(template.props, "networkInterfaces"))
    values = [group for interface in interfaces for group in texts(at(interface, "securityGroups"))]
    if any(interface is UNKNOWN for interface in interfaces):
        values.append(UNKNOWN)
    by_interface = graph.refs(template, "networkInterfaces", values, (aws_types.SECURITY_GROUP,))
    values = texts(at(template.props, "vpcSecurityGroupIds"))
    return merge(
        [by_interface, graph.refs(template, "vpcSecurityGroupIds", values, (aws_types.SECURITY_GROUP,))]
    )


def bucket_settings(graph: StackGraph, bucket: PolicyResource, types: Sequence[str]) -> list[PolicyResource]:
    """The bucket-setting resources of `types` (public access block, encryption, policy) that name `bucket`.

    Each names its bucket by id (the bucket's name); a name that is unknown and that no
    dependency explains stops the rule with the engine's "can't run during preview".
    """
    found = []
    for setting in graph.of_type(*types):
        refs = graph.refs(
            setting, "bucket", [text(at(setting.props, "bucket"))], aws_types.BUCKETS, ("id", "bucket")
        )
        if refs.unresolved:
            unknown_during_preview([setting.name, "bucket"])
        if bucket.urn in {ref.urn for ref in refs.internal}:
            found.append(setting)
    return found


def merge(refs: Iterable[Refs]) -> Refs:
    internal: dict[str, PolicyResource] = {}
    external: list[str] = []
    unresolved = False
    for ref in refs:
        internal.update((resource.urn, resource) for resource in ref.internal)
        external.extend(ref.external)
        unresolved = unresolved or ref.unresolved
    return Refs(tuple(internal.values()), tuple(dict.fromkeys(external)), unresolved)
