"""Bucket policies: nothing granted to anyone at all, and every bucket refuses requests without TLS.

`s3-no-public-principal` reads each bucket policy: an Allow statement for Principal
`"*"` (or `{"AWS": "*"}`) grants to every principal, anonymous ones included,
unless a condition pins who may use it. S3 itself counts a policy as not public
only when it grants to fixed values of a short list of condition keys (a set of
CIDRs with aws:SourceIp; a fixed aws:SourceArn, aws:SourceVpc, aws:SourceVpce,
aws:SourceOwner, aws:SourceAccount, s3:x-amz-server-side-encryption-aws-kms-key-id
or aws:userid), so this rule takes the same list, as config.
Source: https://docs.aws.amazon.com/AmazonS3/latest/userguide/access-control-block-public-access.html#access-control-block-public-access-policy-status

`s3-tls-only` asks each bucket of the stack for a bucket policy that denies every
S3 action, to everyone, on the bucket and its objects, when `aws:SecureTransport`
is false: S3 accepts plain HTTP requests unless a policy refuses them. S3 keeps
one policy per bucket (each PutBucketPolicy replaces the last), so a bucket named
by two BucketPolicy resources is refused too: one of them is silently lost.
Source: https://docs.aws.amazon.com/AmazonS3/latest/userguide/security-best-practices.html (Enforce encryption of data in transit)
        https://repost.aws/knowledge-center/s3-bucket-policy-for-config-rule
        https://docs.aws.amazon.com/AmazonS3/latest/API/API_PutBucketPolicy.html

During `pulumi preview` a policy that names the bucket's ARN is unknown when the
stack creates the bucket; both rules then stop with the engine's "can't run ...
during preview" advisory and run for real during `pulumi up`. A bucket with no
bucket policy at all is refused in preview too (found through dependencies).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

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

from gpuforge.errors import InputError
from gpuforge.policies import aws_types
from gpuforge.policies.engine_adapter import unknown_during_preview
from gpuforge.policies.policy_documents import ANYONE, Statement, document, statements, strings
from gpuforge.policies.props import UNKNOWN, at, text
from gpuforge.policies.stack_graph import StackGraph, bucket_settings, describe

RESTRICTING_KEYS_KEY = "restrictingConditionKeys"
S3_FIXED_VALUE_KEYS = (
    "aws:SourceIp",
    "aws:SourceArn",
    "aws:SourceVpc",
    "aws:SourceVpce",
    "aws:SourceOwner",
    "aws:SourceAccount",
    "s3:x-amz-server-side-encryption-aws-kms-key-id",
    "aws:userid",
)
PUBLIC_SOURCE = (
    "https://docs.aws.amazon.com/AmazonS3/latest/userguide/access-control-block-public-access.html"
    "#access-control-block-public-access-policy-status"
)
TLS_SOURCE = "https://docs.aws.amazon.com/AmazonS3/latest/userguide/security-best-practices.html"
ONE_POLICY_SOURCE = "https://docs.aws.amazon.com/AmazonS3/latest/API/API_PutBucketPolicy.html"
SECURE_TRANSPORT = "aws:securetransport"
ALL_S3_ACTIONS = ("*", "s3:*")
ANY_ADDRESS = ("0.0.0.0/0", "::/0")
# Operators that pass when the key is absent or negate a match, so they pin nothing.
_NOT_PINNING = re.compile(r"(?i)(not|null|ifexists$|^forallvalues:)")
TLS_FIX = (
    "Fix: put a statement in the bucket's one policy that denies Action 's3:*' to Principal '*' on the "
    "bucket ARN and ARN/* with Condition {'Bool': {'aws:SecureTransport': 'false'}} (DataBucket writes it)"
)


def _pinned(values: Any) -> bool:
    """Fixed values: at least one, none empty, none with a wildcard."""
    found = strings(values)
    return bool(found) and all(value and "*" not in value and "?" not in value for value in found)


def _restricted(condition: Mapping[str, Any], keys: Sequence[str]) -> bool:
    """True when a condition pins the grant to fixed values of one of `keys` (as S3 judges 'public')."""
    wanted = {key.lower() for key in keys}
    for operator, tests in condition.items():
        if _NOT_PINNING.search(str(operator)) or not isinstance(tests, Mapping):
            continue
        for key, values in tests.items():
            if str(key).lower() not in wanted or not _pinned(values):
                continue
            if str(key).lower() == "aws:sourceip" and any(v in ANY_ADDRESS for v in strings(values)):
                continue
            return True
    return False


def _document_or_report(
    raw: object, where: str, path: list[str], report: ReportViolation, urn: str | None
) -> Mapping[str, Any] | None:
    """The parsed document, or None (reported when it is not JSON); stops the rule when unknown."""
    try:
        parsed = document(raw, where)
    except InputError as error:
        report(f"{error.message} S3 cannot apply it, and nobody can check what it grants.", urn)
        return None
    if parsed is UNKNOWN:
        unknown_during_preview(path)
    return parsed


def validate_public_principal(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != aws_types.BUCKET_POLICY:
        return
    keys = [str(key) for key in args.get_config()[RESTRICTING_KEYS_KEY]]
    what = f"bucket policy {args.name!r} ({args.resource_type}) policy"
    parsed = _document_or_report(at(args.props, "policy"), what, [args.name, "policy"], report, None)
    if parsed is None:
        return
    for statement in statements(parsed):
        if statement.allows and statement.for_anyone and not _restricted(statement.condition, keys):
            found = dict(statement.condition) if statement.condition else "no Condition"
            report(
                f"{what} {statement.name} allows {list(statement.actions or statement.not_actions)!r} to "
                f"Principal {statement.principal!r} with {found}: every principal, anonymous ones included, "
                f"gets that access. Fix: name the principals (account, role or service ARNs), or pin the "
                f"statement with a fixed value of one of {keys} (source: {PUBLIC_SOURCE}).",
                None,
            )


def _bucket_arns(bucket: PolicyResource) -> tuple[str, ...] | None:
    """The ARN forms that name `bucket`; None when neither its ARN nor its name is known."""
    arn = text(at(bucket.props, "arn"))
    if isinstance(arn, str):
        return (arn,)
    name = text(at(bucket.props, "bucket"))
    if isinstance(name, str):
        # The partition is not known without the ARN; every partition's form names this bucket.
        return tuple(f"arn:{partition}:s3:::{name}" for partition in ("aws", "aws-cn", "aws-us-gov"))
    return None


def _covers(resources: tuple[str, ...], arns: tuple[str, ...]) -> bool:
    """The statement's resources take in the bucket itself and every object in it."""
    if ANYONE in resources:
        return True
    return any(arn in resources for arn in arns) and any(f"{arn}/*" in resources for arn in arns)


def _insecure_transport(condition: Mapping[str, Any]) -> bool:
    """`{"Bool": {"aws:SecureTransport": "false"}}` (also BoolIfExists, which holds when the key is absent)."""
    for operator, tests in condition.items():
        if str(operator).lower() not in ("bool", "boolifexists") or not isinstance(tests, Mapping):
            continue
        for key, values in tests.items():
            if str(key).lower() == SECURE_TRANSPORT and [str(v).lower() for v in strings(values)] == [
                "false"
            ]:
                return True
    return False


def denies_insecure_transport(statement: Statement, arns: tuple[str, ...]) -> bool:
    return (
        statement.effect == "Deny"
        and statement.for_anyone
        and any(action.lower() in ALL_S3_ACTIONS for action in statement.actions)
        and _covers(statement.resources, arns)
        and _insecure_transport(statement.condition)
    )


def validate_tls_only(args: StackValidationArgs, report: ReportViolation) -> None:
    graph = StackGraph(args.resources)
    for bucket in graph.of_type(*aws_types.BUCKETS):
        what = f"bucket {describe(bucket)}"
        sources: list[tuple[str, object, PolicyResource]] = [
            (f"bucket policy {describe(policy)} policy", at(policy.props, "policy"), policy)
            for policy in bucket_settings(graph, bucket, (aws_types.BUCKET_POLICY,))
        ]
        # The bucket's own `policy` is deprecated and computed: the provider reads back whatever policy
        # the bucket holds (a BucketPolicy's too), so it counts only where no BucketPolicy names the bucket.
        inline = at(bucket.props, "policy")
        if not sources and inline is not UNKNOWN and text(inline) is not None:
            sources.append((f"{what} policy", inline, bucket))
        if not sources:
            report(
                f"{what} has no bucket policy, so S3 accepts its requests over plain HTTP. {TLS_FIX}, in an "
                f"s3.BucketPolicy (source: {TLS_SOURCE}).",
                bucket.urn,
            )
            continue
        if len(sources) > 1:
            report(
                f"{what} is given {len(sources)} policies ({'; '.join(name for name, _, _ in sources)}), but S3 "
                f"keeps one policy per bucket and each write replaces the last (source: {ONE_POLICY_SOURCE}). "
                "Fix: merge their statements into one BucketPolicy (DataBucketArgs.policy_statements adds "
                "statements to the data bucket's own).",
                bucket.urn,
            )
            continue
        where, raw, owner = sources[0]
        parsed = _document_or_report(raw, where, [owner.name, "policy"], report, bucket.urn)
        if parsed is None:
            continue
        arns = _bucket_arns(bucket)
        if arns is None:
            unknown_during_preview([bucket.name, "arn"])
        found = statements(parsed)
        if not any(denies_insecure_transport(statement, arns) for statement in found):
            denies = [s.name for s in found if s.effect == "Deny"]
            report(
                f"{where} has no statement that denies requests with aws:SecureTransport false on {what} "
                f"and its objects (its {len(found)} statement{'s' if len(found) != 1 else ''}: "
                f"{'Deny in ' + ', '.join(denies) if denies else 'no Deny'}), so S3 accepts them over plain "
                f"HTTP. {TLS_FIX} (source: {TLS_SOURCE}).",
                bucket.urn,
            )


S3_NO_PUBLIC_PRINCIPAL = ResourceValidationPolicy(
    name="s3-no-public-principal",
    description=(
        "No bucket policy grants to every principal. Instead of an Allow for Principal '*' (or AWS '*') "
        "without a condition that pins it, name the principals or pin a fixed source."
    ),
    validate=validate_public_principal,
    enforcement_level=EnforcementLevel.MANDATORY,
    config_schema=PolicyConfigSchema(
        properties={
            RESTRICTING_KEYS_KEY: {
                "type": "array",
                "items": {"type": "string", "minLength": 1},
                "description": (
                    "Condition keys whose fixed values make a Principal '*' statement non-public "
                    "(S3's own list by default)."
                ),
                "default": list(S3_FIXED_VALUE_KEYS),
            }
        }
    ),
)

S3_TLS_ONLY = StackValidationPolicy(
    name="s3-tls-only",
    description=(
        "Every bucket refuses requests without TLS. Instead of relying on clients to use HTTPS, give the "
        "bucket one policy that denies s3:* when aws:SecureTransport is false."
    ),
    validate=validate_tls_only,
    enforcement_level=EnforcementLevel.MANDATORY,
)
