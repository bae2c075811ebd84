"""How far a node's credentials reach: the IMDS hop limit, and no SSH key pair.

The hop limit is the IP TTL of IMDSv2's token response. At 1 the token stays on
the host; each further hop lets it travel one network hop more: into a container
(2), or off the instance through anything that forwards traffic. AWS recommends 2
for containers; a larger limit only widens who can obtain the node role's
credentials. Unset, EC2 takes 1 (its API default), so an unset limit passes.
Source: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/configuring-instance-metadata-options.html
        https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_LaunchTemplateInstanceMetadataOptionsRequest.html

A key pair on a node is a long-lived credential shared by everyone who has the
private key, and it needs port 22 open. gpuforge's nodes carry the SSM agent and
the SSM core policy, so Session Manager gives a shell with IAM identity and an audit
trail and no open port. A named key can be allowed through the policy's config.
Source: https://docs.aws.amazon.com/systems-manager/latest/userguide/session-manager.html

Both are literals a program writes, known during preview; a value that is not
known there is reported, as the other node rules do.
"""

from __future__ import annotations

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)

from gpuforge.policies.node_settings import NodeSettings, for_each_node
from gpuforge.policies.props import UNKNOWN, integer, is_set, show, text

MAX_HOPS_KEY = "maxHopLimit"
ALLOWED_KEYS_KEY = "allowedKeyNames"
# EC2 takes hop limits from 1 to 64 (API reference above).
HOP_LIMIT_RANGE = (1, 64)
CONTAINER_HOP_LIMIT = 2
IMDS_SOURCE = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/configuring-instance-metadata-options.html"
SESSION_MANAGER_SOURCE = "https://docs.aws.amazon.com/systems-manager/latest/userguide/session-manager.html"


@for_each_node
def validate_hop_limit(node: NodeSettings, args: ResourceValidationArgs, report: ReportViolation) -> None:
    path = ("metadataOptions", "httpPutResponseHopLimit")
    if node.left_to_template(*path):
        return
    if text(node.get("metadataOptions", "httpEndpoint")) == "disabled":
        return  # no IMDS, no token to carry
    maximum = int(args.get_config()[MAX_HOPS_KEY])
    raw = node.get(*path)
    limit = integer(raw)
    if raw is not UNKNOWN and not is_set(raw):
        return  # EC2's default, 1
    if isinstance(limit, int) and limit <= maximum:
        return
    judged = (
        f"{limit}, above this policy's maximum of {maximum}"
        if isinstance(limit, int)
        else f"{show(raw)}, not a whole number this policy can hold to its maximum of {maximum}"
    )
    report(
        f"{node.kind} {args.name!r} sets {node.field(*path)} to {judged}: IMDSv2 tokens, and with them the "
        "node role's credentials, travel as many network hops from the instance as the limit allows. Fix: "
        f"set {node.field(*path)} to 1, or {CONTAINER_HOP_LIMIT} for containers that call IMDS, as AWS "
        f"recommends (source: {IMDS_SOURCE}); raise this policy's {MAX_HOPS_KEY} config only for a reason "
        "you can name.",
        None,
    )


@for_each_node
def validate_no_ssh_key(node: NodeSettings, args: ResourceValidationArgs, report: ReportViolation) -> None:
    if node.left_to_template("keyName"):
        return
    raw = node.get("keyName")
    key = text(raw)
    if key is None:
        return
    allowed = [str(name) for name in args.get_config()[ALLOWED_KEYS_KEY]]
    if isinstance(key, str) and key in allowed:
        return
    listed = f"only {allowed!r} are allowed" if allowed else "this policy allows none"
    report(
        f"{node.kind} {args.name!r} sets {node.field('keyName')} to {show(raw)} ({listed}): an SSH key pair "
        "is a shared, "
        "long-lived credential and needs port 22 open. Fix: remove key_name and reach the nodes through "
        "SSM Session Manager (`aws ssm start-session --target <instance-id>`; gpuforge's node role carries "
        f"the SSM core policy) (source: {SESSION_MANAGER_SOURCE}), or name the key in this policy's "
        f"{ALLOWED_KEYS_KEY} config.",
        None,
    )


IMDS_HOP_LIMIT = ResourceValidationPolicy(
    name="imds-hop-limit",
    description=(
        "Nodes keep IMDSv2 tokens close: a hop limit of at most 2. Instead of a larger "
        "metadata_options.http_put_response_hop_limit, use 1, or 2 for containers that call IMDS."
    ),
    validate=validate_hop_limit,
    enforcement_level=EnforcementLevel.MANDATORY,
    config_schema=PolicyConfigSchema(
        properties={
            MAX_HOPS_KEY: {
                "type": "integer",
                "minimum": HOP_LIMIT_RANGE[0],
                "maximum": HOP_LIMIT_RANGE[1],
                "description": "The largest IMDS PUT response hop limit a node may set.",
                "default": CONTAINER_HOP_LIMIT,
            }
        }
    ),
)

NO_SSH_KEY = ResourceValidationPolicy(
    name="no-ssh-key",
    description=(
        "Nodes carry no SSH key pair. Instead of key_name on a launch template or instance, reach the "
        "nodes through SSM Session Manager."
    ),
    validate=validate_no_ssh_key,
    enforcement_level=EnforcementLevel.MANDATORY,
    config_schema=PolicyConfigSchema(
        properties={
            ALLOWED_KEYS_KEY: {
                "type": "array",
                "items": {"type": "string", "minLength": 1},
                "description": "Key pair names a node may still carry (a break-glass key, say).",
                "default": [],
            }
        }
    ),
)
