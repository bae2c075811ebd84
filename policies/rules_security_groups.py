"""Security groups of the nodes: EFA's self-referencing rules, and no ingress from anywhere.

A rule can be written inline on the group (`ingress`/`egress`), as a
`SecurityGroupRule`, or as a `vpc.SecurityGroupIngressRule`/`EgressRule`. The
separate rules name their group by id, which is unknown during preview when the
stack creates the group, so these are stack policies that follow the rules'
property dependencies to their groups.
"""

from __future__ import annotations

from dataclasses import dataclass

from pulumi_policy import (
    EnforcementLevel,
    PolicyResource,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from gpuforge.policies import aws_types
from gpuforge.policies.engine_adapter import unknown_during_preview
from gpuforge.policies.props import UNKNOWN, at, flag, items, text, texts
from gpuforge.policies.rules_placement import efa_type
from gpuforge.policies.stack_graph import StackGraph, describe, merge, node_security_groups, nodes

ALL_TRAFFIC = ("-1", "all")
ANYWHERE = ("0.0.0.0/0", "::/0")
# "The security group must allow all inbound and outbound traffic to and from the security
# group itself." Source: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html
EFA_GROUP_SOURCE = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html"
DIRECTIONS = ("ingress", "egress")


@dataclass(frozen=True)
class Rule:
    """One security group rule, wherever it was written."""

    group: PolicyResource
    direction: str
    all_traffic: bool
    to_self: bool
    cidrs: tuple[object, ...]
    declared_on: PolicyResource


def _rules(graph: StackGraph) -> list[Rule]:
    """Every rule of every security group the stack creates: inline ones and separate resources."""
    found: list[Rule] = []
    for group in graph.of_type(aws_types.SECURITY_GROUP):
        for direction in DIRECTIONS:
            # An inline list the program did not set is computed by the provider (unknown at preview);
            # the separate rules it would list are read from their own resources below.
            for entry in items(at(group.props, direction)):
                if entry is UNKNOWN:
                    continue
                found.append(
                    Rule(
                        group,
                        direction,
                        text(at(entry, "protocol")) in ALL_TRAFFIC,
                        flag(at(entry, "self")) is True,
                        (*texts(at(entry, "cidrBlocks")), *texts(at(entry, "ipv6CidrBlocks"))),
                        group,
                    )
                )
    for resource in graph.of_type(
        aws_types.SECURITY_GROUP_RULE, aws_types.INGRESS_RULE, aws_types.EGRESS_RULE
    ):
        found.extend(_separate(graph, resource))
    return found


def _separate(graph: StackGraph, resource: PolicyResource) -> list[Rule]:
    props = resource.props
    owners = graph.refs(
        resource, "securityGroupId", [text(at(props, "securityGroupId"))], (aws_types.SECURITY_GROUP,)
    )
    if owners.unresolved:
        unknown_during_preview([resource.name, "securityGroupId"])
    if resource.resource_type == aws_types.SECURITY_GROUP_RULE:
        direction = text(at(props, "type"))
        protocol = text(at(props, "protocol"))
        peer_prop = "sourceSecurityGroupId"
        cidrs = (*texts(at(props, "cidrBlocks")), *texts(at(props, "ipv6CidrBlocks")))
        self_flag = flag(at(props, "self")) is True
    else:
        direction = "ingress" if resource.resource_type == aws_types.INGRESS_RULE else "egress"
        protocol = text(at(props, "ipProtocol"))
        peer_prop = "referencedSecurityGroupId"
        cidrs = tuple(
            value for key in ("cidrIpv4", "cidrIpv6") if (value := text(at(props, key))) is not None
        )
        self_flag = False
    peer = text(at(props, peer_prop))
    peers = graph.refs(resource, peer_prop, [peer] if peer is not None else [], (aws_types.SECURITY_GROUP,))
    if UNKNOWN in (direction, protocol):
        unknown_during_preview([resource.name, "type"])
    return [
        Rule(
            group,
            str(direction),
            protocol in ALL_TRAFFIC,
            self_flag or group.urn in {p.urn for p in peers.internal},
            cidrs,
            resource,
        )
        for group in owners.internal
    ]


def validate_efa_group(args: StackValidationArgs, report: ReportViolation) -> None:
    graph = StackGraph(args.resources)
    rules: list[Rule] | None = None
    for node in nodes(graph):
        if efa_type(node) is None:
            continue
        groups = node_security_groups(graph, node)
        if groups.unresolved and not groups.internal:
            unknown_during_preview([node.launcher.name, "securityGroups"])
        rules = _rules(graph) if rules is None else rules
        missing: list[str] = []
        for group in groups.internal:
            directions = {
                rule.direction
                for rule in rules
                if rule.group.urn == group.urn and rule.all_traffic and rule.to_self
            }
            if set(DIRECTIONS) <= directions:
                break
            lacking = " and ".join(f"all {d} from/to itself" for d in DIRECTIONS if d not in directions)
            missing.append(f"{describe(group)} lacks {lacking}")
        else:
            missing += [
                f"{name!r} is not created in this stack, so its rules cannot be checked"
                for name in groups.external
            ]
            if not groups.identities:
                missing.append("the EFA interfaces have no security group")
            report(
                f"{node.describe()}: no security group of its EFA interfaces allows all traffic to and from "
                f"itself in both directions ({'; '.join(missing)}); without it EFA's OS-bypass traffic is "
                f"dropped (source: {EFA_GROUP_SOURCE}). Fix: give the group an all-traffic ingress rule and "
                "an all-traffic egress rule that reference the group itself (ClusterNetwork creates them).",
                (node.template or node.launcher).urn,
            )


def validate_open_ingress(args: StackValidationArgs, report: ReportViolation) -> None:
    graph = StackGraph(args.resources)
    groups = merge(node_security_groups(graph, node) for node in nodes(graph))
    if groups.unresolved and not groups.internal:
        unknown_during_preview(["nodes", "securityGroups"])
    node_groups = {group.urn for group in groups.internal}
    for name in groups.external:
        report(
            f"node security group {name!r} is not created in this stack, so its ingress cannot be checked. "
            "Fix: create the nodes' security group in the stack (ClusterNetwork does).",
            None,
        )
    for rule in _rules(graph) if node_groups else []:
        if rule.group.urn not in node_groups or rule.direction != "ingress":
            continue
        if UNKNOWN in rule.cidrs:
            unknown_during_preview([rule.declared_on.name, "cidr"])
        for cidr in rule.cidrs:
            if cidr in ANYWHERE:
                report(
                    f"{describe(rule.declared_on)} lets {cidr} into node security group {describe(rule.group)}: "
                    "anyone on the internet may reach the nodes' ports. Fix: remove the rule; reach nodes "
                    "through Session Manager, and allow peers by security group instead of by address.",
                    rule.declared_on.urn,
                )


EFA_SECURITY_GROUP = StackValidationPolicy(
    name="efa-security-group",
    description=(
        "The security group of EFA interfaces allows all traffic to and from itself, both ways. Instead "
        "of port-by-port or one-way rules, add all-traffic ingress and egress rules that reference the "
        "group itself."
    ),
    validate=validate_efa_group,
    enforcement_level=EnforcementLevel.MANDATORY,
)

NODE_OPEN_INGRESS = StackValidationPolicy(
    name="node-open-ingress",
    description=(
        "Node security groups take no ingress from 0.0.0.0/0 or ::/0. Instead, reach nodes through "
        "Session Manager and allow peers by security group."
    ),
    validate=validate_open_ingress,
    enforcement_level=EnforcementLevel.MANDATORY,
)
