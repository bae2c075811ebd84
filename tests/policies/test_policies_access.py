"""imds-hop-limit, no-ssh-key, iam-no-wildcard, s3-no-public-principal and s3-tls-only on real cluster output.

Each unsafe case is the cluster's own output with one setting changed the way a user
could change it (a transformation, or DataBucket's policy_statements); the clean
cluster passes every one of these rules.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pulumi
import pulumi_aws as aws
import pytest
from policy_helpers import (
    BUCKET,
    BUCKET_POLICY,
    INSTANCE,
    LAUNCH_TEMPLATE,
    ROLE_POLICY,
    Images,
    edit,
    named,
    of,
    record,
    record_cluster,
    spec,
    verdicts,
)

from gpuforge.components import DataBucket, DataBucketArgs, SchedulerSpec
from gpuforge.policies.runner import Verdict

RESERVED = {"type": "reservation", "reservation_id": "cr-0123456789abcdef0"}
ROLE = "aws:iam/role:Role"
SLURM = SchedulerSpec(type="slurm", controller_instance_type="m7i.2xlarge")
NEW_RULES = ("imds-hop-limit", "no-ssh-key", "iam-no-wildcard", "s3-no-public-principal", "s3-tls-only")


def _found(
    resources: Sequence[Any], images: Images, policy: str, config: Mapping[str, Any] | None = None
) -> list[Verdict]:
    return of(verdicts(resources, images, config), policy)


def test_clean_cluster_passes_the_new_rules(images: Images) -> None:
    for overrides in ({"scheduler": SLURM}, {"node_mode": "instances", "imds_hop_limit": 2}):
        resources = record_cluster(spec(images, capacity=RESERVED, **overrides))
        # Not vacuous: the cluster has what these rules read.
        assert {BUCKET_POLICY, ROLE_POLICY, LAUNCH_TEMPLATE} <= {r.type for r in resources}
        if "scheduler" in overrides:  # the controller's topology policy: named actions on Resource '*'
            topology = json.loads(next(r for r in resources if r.name.endswith("-topology")).inputs["policy"])
            assert topology["Statement"][0]["Resource"] == "*"
        found = [v for v in verdicts(resources, images) if v.policy in NEW_RULES]
        assert found == [], [v.message for v in found]


# --- imds-hop-limit ------------------------------------------------------------------------


def _metadata(hops: int) -> aws.ec2.LaunchTemplateMetadataOptionsArgs:
    return aws.ec2.LaunchTemplateMetadataOptionsArgs(
        http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=hops
    )


def test_hop_limit_above_two_is_refused(images: Images) -> None:
    resources = record_cluster(
        spec(images, capacity=RESERVED), edit(LAUNCH_TEMPLATE, metadata_options=_metadata(3))
    )
    [verdict] = _found(resources, images, "imds-hop-limit")
    assert verdict.enforcement == "mandatory" and verdict.urn == named(resources, LAUNCH_TEMPLATE).urn
    assert (
        "launch template 'demo-nodes-lt' sets metadata_options.http_put_response_hop_limit to 3"
        in verdict.message
    )
    assert "above this policy's maximum of 2" in verdict.message and "Fix: set" in verdict.message


def test_hop_limit_two_passes_and_the_maximum_is_config(images: Images) -> None:
    resources = record_cluster(spec(images, capacity=RESERVED, imds_hop_limit=2))
    assert _found(resources, images, "imds-hop-limit") == []
    [verdict] = _found(resources, images, "imds-hop-limit", {"imds-hop-limit": {"maxHopLimit": 1}})
    assert "to 2, above this policy's maximum of 1" in verdict.message


def test_hop_limit_on_instances(images: Images) -> None:
    resources = record_cluster(
        spec(images, node_mode="instances", capacity=RESERVED),
        edit(
            INSTANCE,
            metadata_options=aws.ec2.InstanceMetadataOptionsArgs(
                http_tokens="required", http_put_response_hop_limit=8
            ),
        ),
    )
    found = _found(resources, images, "imds-hop-limit")
    # The node instances and the Slurm controller, each refused on its own settings.
    assert {v.urn for v in found} == {r.urn for r in resources if r.type == INSTANCE}
    assert all("http_put_response_hop_limit to 8" in v.message for v in found)


# --- no-ssh-key ----------------------------------------------------------------------------


def test_ssh_key_is_refused_unless_allowed(images: Images) -> None:
    resources = record_cluster(spec(images, capacity=RESERVED), edit(LAUNCH_TEMPLATE, key_name="ops-key"))
    [verdict] = _found(resources, images, "no-ssh-key")
    assert verdict.enforcement == "mandatory" and verdict.urn == named(resources, LAUNCH_TEMPLATE).urn
    assert (
        "launch template 'demo-nodes-lt' sets key_name to 'ops-key' (this policy allows none)"
        in verdict.message
    )
    assert "SSM Session Manager" in verdict.message
    assert _found(resources, images, "no-ssh-key", {"no-ssh-key": {"allowedKeyNames": ["ops-key"]}}) == []
    [other] = _found(resources, images, "no-ssh-key", {"no-ssh-key": {"allowedKeyNames": ["break-glass"]}})
    assert "only ['break-glass'] are allowed" in other.message


def test_ssh_key_on_the_slurm_controller(images: Images) -> None:
    resources = record_cluster(
        spec(images, capacity=RESERVED, scheduler=SLURM),
        edit(INSTANCE, name_suffix="slurm-instance", key_name="admin"),
    )
    [verdict] = _found(resources, images, "no-ssh-key")
    assert (
        verdict.urn == named(resources, INSTANCE).urn and "instance 'demo-slurm-instance'" in verdict.message
    )


# --- iam-no-wildcard -----------------------------------------------------------------------


def _document(*statements: Mapping[str, Any], single: bool = False) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": statements[0] if single else list(statements)})


ADMIN = {"Effect": "Allow", "Action": "*", "Resource": "*"}


@pytest.mark.parametrize(
    ("document", "shown"),
    [
        (_document(ADMIN, single=True), "Action ['*'] on Resource ['*']"),
        (
            _document(
                {"Effect": "Allow", "Action": ["s3:GetObject", "*"], "Resource": ["arn:aws:s3:::x", "*"]}
            ),
            "Action ['s3:GetObject', '*'] on Resource ['arn:aws:s3:::x', '*']",
        ),
        (
            _document({"Effect": "Allow", "NotAction": ["iam:*"], "Resource": "*"}),
            "NotAction ['iam:*'] (every other action of every service) on Resource ['*']",
        ),
        (
            _document({"Effect": "Allow", "Action": "*", "NotResource": "arn:aws:s3:::x"}),
            "Action ['*'] on NotResource ['arn:aws:s3:::x'] (every other resource)",
        ),
    ],
    ids=["single-statement", "lists", "not-action", "not-resource"],
)
def test_wildcard_role_policy_is_refused(images: Images, document: str, shown: str) -> None:
    resources = record_cluster(
        spec(images, capacity=RESERVED), edit(ROLE_POLICY, name_suffix="nodes-bucket", policy=document)
    )
    [verdict] = _found(resources, images, "iam-no-wildcard")
    assert verdict.enforcement == "mandatory"
    assert verdict.urn == next(r.urn for r in resources if r.name == "demo-nodes-bucket")
    assert f"'demo-nodes-bucket' ({ROLE_POLICY}) policy Statement[0] allows {shown}" in verdict.message
    assert "Fix: list the actions" in verdict.message


def test_narrow_or_denying_statements_pass(images: Images) -> None:
    narrow = _document(
        {"Effect": "Deny", "Action": "*", "Resource": "*"},
        {"Effect": "Allow", "Action": "ec2:DescribeInstances", "Resource": "*"},
        {"Effect": "Allow", "Action": "*", "Resource": "arn:aws:s3:::x/*"},
    )
    resources = record_cluster(
        spec(images, capacity=RESERVED), edit(ROLE_POLICY, name_suffix="nodes-bucket", policy=narrow)
    )
    assert _found(resources, images, "iam-no-wildcard") == []
    not_action = record_cluster(
        spec(images, capacity=RESERVED),
        edit(
            ROLE_POLICY,
            name_suffix="nodes-bucket",
            policy=_document({"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"}),
        ),
    )
    assert (
        _found(not_action, images, "iam-no-wildcard", {"iam-no-wildcard": {"refuseNotAction": False}}) == []
    )


def test_inline_role_policy_and_managed_policy(images: Images) -> None:
    inline = record_cluster(
        spec(images, capacity=RESERVED),
        edit(
            ROLE,
            name_suffix="nodes-role",
            inline_policies=[aws.iam.RoleInlinePolicyArgs(name="admin", policy=_document(ADMIN))],
        ),
    )
    [verdict] = _found(inline, images, "iam-no-wildcard")
    assert f"'demo-nodes-role' ({ROLE}) inline_policies[0].policy Statement[0] allows" in verdict.message

    def managed() -> None:
        aws.iam.Policy("admin", policy=_document({**ADMIN, "Sid": "Everything"}))
        aws.iam.Policy("broken", policy='{"Statement": [')

    found = _found(record(managed), images, "iam-no-wildcard")
    messages = sorted(v.message for v in found)
    assert len(messages) == 2
    assert (
        "'admin' (aws:iam/policy:Policy) policy Statement[0] ('Everything') allows Action ['*']"
        in messages[0]
    )
    assert "'broken' (aws:iam/policy:Policy) policy: not valid JSON" in messages[1]


# --- s3-no-public-principal ----------------------------------------------------------------


def _bucket_with(*statements: Callable[[pulumi.Output[str]], Mapping[str, Any]]) -> Callable[[], None]:
    """A program with one DataBucket whose policy also holds `statements` (each made from the bucket ARN)."""

    def build() -> None:
        DataBucket("data", DataBucketArgs(policy_statements=lambda arn: [make(arn) for make in statements]))

    return build


def _read(
    principal: Any, condition: Mapping[str, Any] | None = None
) -> Callable[[pulumi.Output[str]], Mapping[str, Any]]:
    def make(arn: pulumi.Output[str]) -> Mapping[str, Any]:
        statement: dict[str, Any] = {
            "Sid": "Read",
            "Effect": "Allow",
            "Principal": principal,
            "Action": "s3:GetObject",
            "Resource": pulumi.Output.concat(arn, "/*"),
        }
        if condition is not None:
            statement["Condition"] = condition
        return statement

    return make


@pytest.mark.parametrize(
    ("principal", "condition"),
    [
        ("*", None),
        ({"AWS": "*"}, None),
        ({"AWS": ["arn:aws:iam::123456789012:root", "*"]}, None),
        ("*", {"Bool": {"aws:SecureTransport": "true"}}),  # TLS is not a restriction on who
        ("*", {"StringLike": {"aws:SourceVpce": "vpce-*"}}),  # a wildcard pins nothing
        ("*", {"StringNotEquals": {"aws:SourceVpce": "vpce-0123456789abcdef0"}}),  # nor does a negation
        ("*", {"IpAddress": {"aws:SourceIp": "0.0.0.0/0"}}),
    ],
    ids=["star", "aws-star", "aws-list", "tls-condition", "wildcard", "negation", "any-address"],
)
def test_public_principal_is_refused(
    images: Images, principal: Any, condition: Mapping[str, Any] | None
) -> None:
    resources = record(_bucket_with(_read(principal, condition)))
    [verdict] = _found(resources, images, "s3-no-public-principal")
    assert verdict.enforcement == "mandatory" and verdict.urn == named(resources, BUCKET_POLICY).urn
    assert (
        f"bucket policy 'data-policy' ({BUCKET_POLICY}) policy Statement[1] ('Read') allows ['s3:GetObject']"
        in (verdict.message)
    )
    assert f"Principal {principal!r}" in verdict.message and "Fix: name the principals" in verdict.message


@pytest.mark.parametrize(
    ("principal", "condition"),
    [
        ({"AWS": "arn:aws:iam::123456789012:root"}, None),
        ("*", {"StringEquals": {"aws:SourceVpce": "vpce-0123456789abcdef0"}}),
        ("*", {"StringEquals": {"AWS:SourceAccount": ["123456789012"]}}),  # keys are case-insensitive
        ("*", {"IpAddress": {"aws:SourceIp": "10.0.0.0/16"}}),
    ],
    ids=["named-account", "fixed-endpoint", "fixed-account", "cidr"],
)
def test_named_or_pinned_principal_passes(
    images: Images, principal: Any, condition: Mapping[str, Any] | None
) -> None:
    resources = record(_bucket_with(_read(principal, condition)))
    assert _found(resources, images, "s3-no-public-principal") == []


def test_restricting_keys_are_config(images: Images) -> None:
    resources = record(_bucket_with(_read("*", {"StringEquals": {"aws:PrincipalOrgID": "o-abcdefghij"}})))
    assert len(_found(resources, images, "s3-no-public-principal")) == 1
    config = {"s3-no-public-principal": {"restrictingConditionKeys": ["aws:PrincipalOrgID"]}}
    assert _found(resources, images, "s3-no-public-principal", config) == []


# --- s3-tls-only ---------------------------------------------------------------------------


def _rewrite(change: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[Any], Any]:
    """A transformation value that rewrites the component's own policy document."""
    return lambda old: pulumi.Output.from_input(old).apply(lambda text: json.dumps(change(json.loads(text))))


def _tls_statement(document: dict[str, Any]) -> dict[str, Any]:
    return next(s for s in document["Statement"] if s["Sid"] == "DenyInsecureTransport")


def _objects_only(document: dict[str, Any]) -> dict[str, Any]:
    statement = _tls_statement(document)
    statement["Resource"] = [resource for resource in statement["Resource"] if resource.endswith("/*")]
    return document


def _condition_true(document: dict[str, Any]) -> dict[str, Any]:
    _tls_statement(document)["Condition"] = {"Bool": {"aws:SecureTransport": "true"}}
    return document


def _allow_instead(document: dict[str, Any]) -> dict[str, Any]:
    _tls_statement(document)["Effect"] = "Allow"
    return document


@pytest.mark.parametrize(
    "change",
    [_objects_only, _condition_true, _allow_instead],
    ids=["objects-only", "condition-true", "allow"],
)
def test_policy_without_the_tls_deny_is_refused(
    images: Images, change: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    resources = record_cluster(spec(images, capacity=RESERVED), edit(BUCKET_POLICY, policy=_rewrite(change)))
    [verdict] = _found(resources, images, "s3-tls-only")
    assert verdict.enforcement == "mandatory" and verdict.urn == named(resources, BUCKET).urn
    assert (
        f"bucket policy 'demo-data-policy' ({BUCKET_POLICY}) policy has no statement that denies requests with "
        f"aws:SecureTransport false on bucket 'demo-data-bucket' ({BUCKET})"
    ) in verdict.message
    assert "Fix: put a statement in the bucket's one policy" in verdict.message


def test_bucket_without_a_policy_is_refused(images: Images) -> None:
    [verdict] = _found(record(lambda: aws.s3.Bucket("plain")), images, "s3-tls-only")
    assert f"bucket 'plain' ({BUCKET}) has no bucket policy, so S3 accepts its requests over plain HTTP" in (
        verdict.message
    )


def test_the_buckets_own_policy_counts_where_no_bucket_policy_names_it(images: Images) -> None:
    arn = "arn:aws:s3:::inline-bucket"
    deny = {
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Action": "*",
        "Resource": [arn, f"{arn}/*"],
        "Condition": {"BoolIfExists": {"aws:SecureTransport": ["false"]}},
    }
    passing = record(lambda: aws.s3.Bucket("inline", bucket="inline-bucket", policy=_document(deny)))
    assert _found(passing, images, "s3-tls-only") == []
    no_deny = {**deny, "Condition": {"Bool": {"aws:SecureTransport": "true"}}}
    failing = record(lambda: aws.s3.Bucket("inline", bucket="inline-bucket", policy=_document(no_deny)))
    [verdict] = _found(failing, images, "s3-tls-only")
    assert f"bucket 'inline' ({BUCKET}) policy has no statement that denies" in verdict.message
    assert "(its 1 statement: Deny in Statement[0])" in verdict.message


def test_a_second_policy_on_the_bucket_is_refused(images: Images) -> None:
    def build() -> None:
        data = DataBucket("data", DataBucketArgs())
        aws.s3.BucketPolicy(
            "extra",
            bucket=data.bucket_name,
            policy=data.arn.apply(
                lambda arn: _document(
                    {
                        "Effect": "Allow",
                        "Principal": {"AWS": "arn:aws:iam::123456789012:root"},
                        "Action": "s3:GetObject",
                        "Resource": f"{arn}/*",
                    }
                )
            ),
        )

    [verdict] = _found(record(build), images, "s3-tls-only")
    assert "is given 2 policies" in verdict.message and "'extra'" in verdict.message
    assert "S3 keeps one policy per bucket" in verdict.message and "policy_statements" in verdict.message


def test_statements_added_to_the_one_policy_pass(images: Images) -> None:
    reader = _read({"AWS": "arn:aws:iam::123456789012:role/reader"})
    found = verdicts(record(_bucket_with(reader)), images)
    assert [v for v in found if v.policy in ("s3-tls-only", "s3-no-public-principal")] == []
