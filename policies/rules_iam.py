"""IAM: no identity policy allows every action on every resource.

An Allow statement with `Action: "*"` on `Resource: "*"` is administrator access:
whoever holds the role (every process on a node, through its instance profile)
can do anything in the account. So is `NotAction` (every action but a few) on
every resource, and `Action: "*"` with `NotResource` (every resource but a few).
The rule reads every place an identity policy document can be written: managed
policies, role, user and group policies, and a role's inline policies.

During `pulumi preview` a document that names an ARN the stack creates (a bucket,
an Auto Scaling group, a secret) is unknown; the rule then stops with the engine's
"can't run ... during preview" advisory and runs for real during `pulumi up`,
before the policy is created. A document of literals is judged in preview too.
"""

from __future__ import annotations

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)

from gpuforge.errors import InputError
from gpuforge.policies import aws_types
from gpuforge.policies.engine_adapter import unknown_during_preview
from gpuforge.policies.policy_documents import ANYONE, Statement, document, statements
from gpuforge.policies.props import UNKNOWN, at, items

NOT_ACTION_KEY = "refuseNotAction"
LEAST_PRIVILEGE_SOURCE = (
    "https://docs.aws.amazon.com/IAM/latest/UserGuide/best-practices.html#grant-least-privilege"
)
NOT_ACTION_SOURCE = (
    "https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_notaction.html"
)


def _documents(args: ResourceValidationArgs) -> list[tuple[str, object]]:
    """(property as a program writes it, raw value) of every policy document on the resource."""
    if args.resource_type in aws_types.IAM_POLICY_DOCUMENTS:
        return [("policy", at(args.props, "policy"))]
    if args.resource_type == aws_types.IAM_ROLE:
        return [
            (f"inline_policies[{index}].policy", at(inline, "policy"))
            for index, inline in enumerate(items(at(args.props, "inlinePolicies")))
        ]
    return []


def _grant(statement: Statement, refuse_not_action: bool) -> str | None:
    """What an Allow statement grants that amounts to everything; None when it does not."""
    every_resource = ANYONE in statement.resources or bool(statement.not_resources)
    if not statement.allows or not every_resource:
        return None
    on = (
        f"Resource {list(statement.resources)!r}"
        if ANYONE in statement.resources
        else f"NotResource {list(statement.not_resources)!r} (every other resource)"
    )
    if ANYONE in statement.actions:
        return f"Action {list(statement.actions)!r} on {on}"
    if refuse_not_action and statement.not_actions:
        return f"NotAction {list(statement.not_actions)!r} (every other action of every service) on {on}"
    return None


def validate_iam_wildcard(args: ResourceValidationArgs, report: ReportViolation) -> None:
    refuse_not_action = bool(args.get_config()[NOT_ACTION_KEY])
    what = f"{args.name!r} ({args.resource_type})"
    for field, raw in _documents(args):
        try:
            parsed = document(raw, f"{what} {field}")
        except InputError as error:
            report(f"{error.message} IAM cannot apply it, and nobody can check what it grants.", None)
            continue
        if parsed is UNKNOWN:
            unknown_during_preview([args.name, field])
        if parsed is None:
            continue
        for statement in statements(parsed):
            grant = _grant(statement, refuse_not_action)
            if grant is not None:
                report(
                    f"{what} {field} {statement.name} allows {grant}: administrator access for whoever "
                    "holds it (on a node, every process, through the instance profile). Fix: list the "
                    f"actions the role needs and the ARNs they act on (source: {LEAST_PRIVILEGE_SOURCE}"
                    f"; NotAction: {NOT_ACTION_SOURCE}).",
                    None,
                )


IAM_NO_WILDCARD = ResourceValidationPolicy(
    name="iam-no-wildcard",
    description=(
        "No IAM policy allows every action on every resource. Instead of Action '*' (or NotAction) on "
        "Resource '*', list the actions a role needs and the ARNs they act on."
    ),
    validate=validate_iam_wildcard,
    enforcement_level=EnforcementLevel.MANDATORY,
    config_schema=PolicyConfigSchema(
        properties={
            NOT_ACTION_KEY: {
                "type": "boolean",
                "description": (
                    "Also refuse Allow statements with NotAction on every resource (every action but a few)."
                ),
                "default": True,
            }
        }
    ),
)
