"""The shipped stacks pass every mandatory rule; the "unpinned" variants fail with the right rule.

Each shipped stack (stacks/*/Pulumi.<stack>.yaml) runs its own program under the
mocks, as `gpuforge plan` runs it, against a catalog that records its matrix's AMI.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulumi
import pulumi_aws as aws
import pytest
from policy_helpers import (
    ASG,
    BUCKET,
    BUCKET_POLICY,
    LAUNCH_TEMPLATE,
    ROLE_POLICY,
    Images,
    cluster,
    edit,
    mandatory,
    record,
    verdicts,
)

from gpuforge.components import GpuClusterSpec
from gpuforge.plan.run import load, run_stack
from gpuforge.policies.runner import run_policies
from gpuforge.stack_config import cluster_spec, load_stack_config, resolve_ami

STACKS = Path(__file__).resolve().parents[2] / "stacks"
SHIPPED = sorted(
    (path.parent, path.stem.removeprefix("Pulumi."))
    for path in STACKS.glob("*/Pulumi.*.yaml")
    if path.name != "Pulumi.yaml"
)


def test_stacks_are_shipped() -> None:
    assert SHIPPED, "no stacks under stacks/"


# Rules that read node access, IAM documents and bucket policies (issue 16): the shipped stacks
# must give each of them something to judge, and pass.
ACCESS_RULES = {
    "imds-hop-limit": LAUNCH_TEMPLATE,
    "no-ssh-key": LAUNCH_TEMPLATE,
    "iam-no-wildcard": ROLE_POLICY,
    "s3-no-public-principal": BUCKET_POLICY,
    "s3-tls-only": BUCKET_POLICY,
}


@pytest.mark.parametrize(("stack_dir", "stack"), SHIPPED, ids=[f"{d.name}/{s}" for d, s in SHIPPED])
def test_shipped_stack_passes_every_mandatory_rule(images: Images, stack_dir: Path, stack: str) -> None:
    run = run_stack(load(stack_dir, stack, images.catalog))
    found = run_policies(run.resources, images.config())
    assert mandatory(found) == [], [f"{v.policy}: {v.message}" for v in mandatory(found)]
    assert {v.policy for v in found} & set(ACCESS_RULES) == set()
    assert set(ACCESS_RULES.values()) <= {resource.type for resource in run.resources}
    # The TLS-only deny is in the stack's own bucket policy, for the stack's own bucket.
    [bucket] = [resource for resource in run.resources if resource.type == BUCKET]
    [policy] = [resource for resource in run.resources if resource.type == BUCKET_POLICY]
    [tls] = [s for s in json.loads(policy.inputs["policy"])["Statement"] if s["Effect"] == "Deny"]
    assert tls["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert tls["Resource"] == [bucket.outputs["arn"], f"{bucket.outputs['arn']}/*"]


def _p5_prod(images: Images) -> GpuClusterSpec:
    config = load_stack_config(STACKS / "training", "p5-prod")
    config = config.model_copy(update={"catalog_path": images.catalog})
    return cluster_spec(config, resolve_ami(config))


def _unknown_ami(images: Images) -> GpuClusterSpec:
    base = _p5_prod(images)
    return base.model_copy(update={"ami": base.ami.model_copy(update={"ami_id": "ami-0fedcba9876543210"})})


def _broken_matrix(images: Images) -> GpuClusterSpec:
    return _p5_prod(images).model_copy(update={"ami": images.pins["p5-h100-broken"]})


def _on_demand(images: Images) -> GpuClusterSpec:
    return GpuClusterSpec.model_validate({**_p5_prod(images).model_dump(), "capacity": {"type": "on-demand"}})


UNPINNED: dict[
    str, tuple[Callable[[Images], GpuClusterSpec], list[pulumi.ResourceTransformation], str, str]
] = {
    "ami-not-in-catalog": (_unknown_ami, [], "ami-pinned", "is not in the image catalog"),
    "matrix-fails-check": (_broken_matrix, [], "ami-pinned", "fails `gpuforge matrix check`"),
    "p5-one-efa": (
        _p5_prod,
        [edit(LAUNCH_TEMPLATE, network_interfaces=lambda current: current[:2])],
        "efa-network-interfaces",
        "takes one EFA on each of its 32 EFA cards",
    ),
    "on-demand-no-group": (
        _on_demand,
        [edit(ASG, placement_group=None)],
        "efa-placement",
        "without a placement group",
    ),
    "imdsv1": (
        _p5_prod,
        [
            edit(
                LAUNCH_TEMPLATE,
                metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(http_tokens="optional"),
            )
        ],
        "imdsv2-required",
        "http_tokens is 'optional'",
    ),
}


@pytest.mark.parametrize("case", sorted(UNPINNED))
def test_unpinned_stack_fails_with_the_right_rule(images: Images, case: str) -> None:
    make_spec, transformations, policy, message = UNPINNED[case]
    resources = record(cluster(make_spec(images), *transformations))
    failures = mandatory(verdicts(resources, images))
    assert {v.policy for v in failures} == {policy}
    assert all(message in v.message and "Fix:" in v.message for v in failures)
    # The nodes fail; where the AMI is at fault, so does the Slurm controller, which boots the same AMI.
    failing = sorted(resource.name for resource in resources if resource.urn in {v.urn for v in failures})
    nodes = [name for name in failing if name.startswith("p5-prod-nodes")]
    assert len(nodes) == 1
    assert failing == sorted([*nodes, *(["p5-prod-slurm-instance"] if policy == "ami-pinned" else [])])


def _policy(change: Callable[[dict[str, Any]], None]) -> Callable[[Any], Any]:
    """A transformation value that changes the component's own policy document in place."""

    def rewrite(text: str) -> str:
        document = json.loads(text)
        change(document)
        return json.dumps(document)

    return lambda old: pulumi.Output.from_input(old).apply(rewrite)


def _public_read(document: dict[str, Any]) -> None:
    arn = document["Statement"][0]["Resource"][0]
    document["Statement"].append(
        {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": f"{arn}/*"}
    )


def _no_tls_deny(document: dict[str, Any]) -> None:
    document["Statement"] = [s for s in document["Statement"] if s["Effect"] != "Deny"]


# The gaps of issue 16: an insecure p5-prod that the other rules let through, one setting at a time.
INSECURE: dict[str, tuple[pulumi.ResourceTransformation, str, str]] = {
    "imds-hop-limit": (
        edit(
            LAUNCH_TEMPLATE,
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                http_tokens="required", http_put_response_hop_limit=3
            ),
        ),
        "p5-prod-nodes-lt",
        "http_put_response_hop_limit to 3, above this policy's maximum of 2",
    ),
    "no-ssh-key": (edit(LAUNCH_TEMPLATE, key_name="ops"), "p5-prod-nodes-lt", "sets key_name to 'ops'"),
    "iam-no-wildcard": (
        edit(
            ROLE_POLICY,
            name_suffix="nodes-bucket",
            policy=json.dumps({"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}),
        ),
        "p5-prod-nodes-bucket",
        "allows Action ['*'] on Resource ['*']",
    ),
    "s3-no-public-principal": (
        edit(BUCKET_POLICY, policy=_policy(_public_read)),
        "p5-prod-data-policy",
        "to Principal '*' with no Condition",
    ),
    "s3-tls-only": (
        edit(BUCKET_POLICY, policy=_policy(_no_tls_deny)),
        "p5-prod-data-bucket",
        "has no statement that denies requests with aws:SecureTransport false",
    ),
}


@pytest.mark.parametrize("case", sorted(INSECURE))
def test_insecure_stack_fails_with_the_right_rule(images: Images, case: str) -> None:
    transformation, resource, message = INSECURE[case]
    resources = record(cluster(_p5_prod(images), transformation))
    failures = mandatory(verdicts(resources, images))
    assert [v.policy for v in failures] == [case], [v.message for v in failures]
    [failure] = failures
    assert message in failure.message and "Fix:" in failure.message
    assert failure.urn == next(r.urn for r in resources if r.name == resource)
