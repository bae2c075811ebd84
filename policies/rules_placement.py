"""Placement of EFA nodes: one subnet, and the right placement group for the capacity they run on.

- On-demand (or Spot) EFA nodes launch into a `cluster` placement group created in
  the stack, so they sit close together.
- Capacity Block nodes take no placement group: AWS places them close together, and
  a group can only narrow where the reserved capacity may land.
- Nodes on an On-Demand Capacity Reservation launch into the reservation's own
  group, or into none when it has none: instances launched into another group do
  not use the reservation. A reservation made outside the stack is named by a
  literal group name (preflight checks it against the reservation).
- EFA's OS-bypass traffic does not route between subnets, so every EFA node of the
  stack sits in one and the same subnet.

This is a stack policy: the group and subnet ids are unknown during preview when
the stack creates them, and the property dependencies say which resources they are.
"""

from __future__ import annotations

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from gpuforge import hardware
from gpuforge.components.cluster_rules import CAPACITY_BLOCK_PLACEMENT_SOURCE
from gpuforge.errors import UnknownInstanceType
from gpuforge.policies import aws_types
from gpuforge.policies.engine_adapter import unknown_during_preview
from gpuforge.policies.props import UNKNOWN, at, is_set, text
from gpuforge.policies.stack_graph import Node, Refs, StackGraph, describe, node_subnets, nodes

CLUSTER = "cluster"
# Policy config: the placement strategies accepted for on-demand EFA nodes. `partition` is opt-in,
# for groups too large for one cluster group (Placement offers it as an option).
STRATEGIES_KEY = "strategies"
# "EFA OS-bypass traffic is limited to a single subnet."
# Source: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html (EFA limitations)
SUBNET_SOURCE = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html"
# Capacity Reservations in cluster placement groups: instances use such a reservation
# when they launch into its group.
# Source: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/cr-cpg.html
RESERVATION_GROUP_SOURCE = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/cr-cpg.html"
PLACEMENT_SOURCE = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-strategies.html"


def efa_type(node: Node) -> hardware.InstanceType | None:
    """The node's instance type when it is EFA-capable and known to the hardware catalog."""
    name = node.instance_type
    if not isinstance(name, str):
        return None  # unset or not known at preview: efa-network-interfaces reports it
    try:
        instance = hardware.get(name)
    except UnknownInstanceType:
        return None  # efa-network-interfaces reports it
    return instance if instance.efa_supported and instance.efa_cards else None


def placement_group(graph: StackGraph, node: Node) -> Refs:
    """The placement group a node launches into: the group's or instance's own, else the template's."""
    launcher = node.launcher
    for prop in ("placementGroup", "placementGroupId"):
        value = text(at(launcher.props, prop))
        if is_set(value):
            return graph.refs(
                launcher, prop, [value], (aws_types.PLACEMENT_GROUP,), ("id", "name", "placementGroupId")
            )
    if node.template is not None:
        for key in ("groupName", "groupId"):
            value = text(at(node.template.props, "placement", key))
            if is_set(value):
                return graph.refs(
                    node.template,
                    "placement",
                    [value],
                    (aws_types.PLACEMENT_GROUP,),
                    ("id", "name", "placementGroupId"),
                )
    return Refs((), (), False)


def _reservation_group(graph: StackGraph, node: Node, reservation: object) -> Refs | None:
    """The placement group of the node's reservation when the stack creates the reservation, else None."""
    source = node.source("capacityReservationSpecification")
    if source is None:
        return None
    refs = graph.refs(
        source, "capacityReservationSpecification", [reservation], (aws_types.CAPACITY_RESERVATION,)
    )
    if not refs.internal:
        return None
    held = refs.internal[0]
    arn = text(at(held.props, "placementGroupArn"))
    if not is_set(arn):
        return Refs((), (), False)
    return graph.refs(held, "placementGroupArn", [arn], (aws_types.PLACEMENT_GROUP,), ("arn",))


def _check_group(
    graph: StackGraph,
    node: Node,
    instance: hardware.InstanceType,
    report: ReportViolation,
    strategies: tuple[str, ...],
) -> None:
    urn = node.launcher.urn
    group = placement_group(graph, node)
    if group.unresolved:
        unknown_during_preview([node.launcher.name, "placementGroup"])
    market = text(node.setting("instanceMarketOptions", "marketType"))
    target = ("capacityReservationSpecification", "capacityReservationTarget")
    reservation = text(node.setting(*target, "capacityReservationId"))
    reservation_group = text(node.setting(*target, "capacityReservationResourceGroupArn"))
    if UNKNOWN in (market, reservation, reservation_group):
        unknown_during_preview([node.launcher.name, "capacity"])

    if market == "capacity-block":
        if group.identities:
            report(
                f"{node.describe()} runs on a Capacity Block but launches into placement group "
                f"{group.describe()}. AWS places Capacity Block instances close together; a group can only "
                f"narrow where the reserved capacity may land (source: {CAPACITY_BLOCK_PLACEMENT_SOURCE}). "
                "Fix: remove the placement group.",
                urn,
            )
        return

    if reservation is not None or reservation_group is not None:
        own = _reservation_group(graph, node, reservation) if reservation is not None else None
        if own is not None and own.identities != group.identities:
            want = (
                f"its group {own.describe()}" if own.identities else "no group, as the reservation has none"
            )
            report(
                f"{node.describe()} uses capacity reservation {reservation!r} but launches into placement group "
                f"{group.describe()}; instances outside the reservation's own group do not use it "
                f"(source: {RESERVATION_GROUP_SOURCE}). Fix: launch into {want}.",
                urn,
            )
        elif own is None and group.internal:
            report(
                f"{node.describe()} uses capacity reservation {reservation or reservation_group!r}, made outside "
                f"the stack, but launches into placement group {group.describe()} that the stack creates; "
                f"instances outside the reservation's own group do not use it (source: {RESERVATION_GROUP_SOURCE}). "
                "Fix: name the reservation's own placement group (capacity.placement_group), or none.",
                urn,
            )
        return

    if not group.identities:
        report(
            f"{node.describe()}: on-demand {instance.name} EFA nodes without a placement group can land far "
            "apart, and EFA collectives slow down with every hop. Fix: launch them into a cluster placement "
            f"group (Placement creates one for on-demand capacity), or run them on a Capacity Block or an "
            f"ODCR (source: {PLACEMENT_SOURCE}).",
            urn,
        )
        return
    for name in group.external:
        report(
            f"{node.describe()} launches into placement group {name!r}, which the stack does not create, so "
            "its strategy cannot be checked. Fix: create the cluster placement group in the stack "
            "(Placement does for on-demand capacity).",
            urn,
        )
    for created in group.internal:
        strategy = text(at(created.props, "strategy"))
        if strategy is UNKNOWN:
            unknown_during_preview([created.name, "strategy"])
        if strategy not in strategies:
            report(
                f"{node.describe()} launches into placement group {describe(created)} with strategy "
                f"{strategy!r}; EFA nodes need the low latency of the 'cluster' strategy "
                f"(source: {PLACEMENT_SOURCE}). Fix: set strategy to 'cluster', or, for a group too large "
                f"for one cluster group, allow 'partition' in this policy's `{STRATEGIES_KEY}` config.",
                urn,
            )


def validate_placement(args: StackValidationArgs, report: ReportViolation) -> None:
    graph = StackGraph(args.resources)
    strategies = tuple(args.get_config()[STRATEGIES_KEY])
    subnets: dict[str, Refs] = {}
    for node in nodes(graph):
        if node.external_template is not None and node.instance_type is None:
            report(
                f"{describe(node.launcher)} launches from launch template {node.external_template!r}, which the "
                "stack does not create, so its instance type, AMI, interfaces and hardening cannot be checked. "
                "Fix: create the launch template in the stack (GpuNodeGroup does).",
                node.launcher.urn,
            )
            continue
        instance = efa_type(node)
        if instance is None:
            continue
        _check_group(graph, node, instance, report, strategies)
        refs = node_subnets(graph, node)
        if refs.unresolved:
            unknown_during_preview([node.launcher.name, "subnets"])
        if len(refs.identities) != 1:
            report(
                f"{node.describe()} spans {len(refs.identities)} subnets ({refs.describe()}); EFA traffic does "
                f"not route between subnets (source: {SUBNET_SOURCE}). Fix: put the nodes in exactly one subnet.",
                node.launcher.urn,
            )
            continue
        subnets[node.describe()] = refs
    if len({ref.identities for ref in subnets.values()}) > 1:
        spread = "; ".join(f"{name} in {ref.describe()}" for name, ref in subnets.items())
        report(
            f"the stack's EFA nodes sit in different subnets ({spread}); EFA traffic does not route between "
            f"subnets (source: {SUBNET_SOURCE}). Fix: put every EFA node group in the cluster's one subnet.",
            None,
        )


EFA_PLACEMENT = StackValidationPolicy(
    name="efa-placement",
    description=(
        "EFA nodes sit in one subnet and in a cluster placement group, except on a Capacity Block (no "
        "group) or an On-Demand Capacity Reservation with its own group (that group). Instead of loose "
        "on-demand nodes, launch them into a cluster placement group or onto reserved capacity."
    ),
    validate=validate_placement,
    enforcement_level=EnforcementLevel.MANDATORY,
    config_schema=PolicyConfigSchema(
        properties={
            STRATEGIES_KEY: {
                "type": "array",
                "items": {"enum": ["cluster", "partition"]},
                "minItems": 1,
                "description": "Placement strategies accepted for on-demand EFA nodes.",
                "default": [CLUSTER],
            }
        }
    ),
)
