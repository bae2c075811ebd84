"""What the pack does during `pulumi preview`, when ids of resources created in the stack are unknown.

The mandatory rules read literals (instance type, interface layout, metadata options,
placement strategy) or follow property dependencies, so they stay mandatory in preview:
a clean cluster passes, and each broken one fails with the same rule as after the
update. Without property dependencies, the stack policies that need ids come back as
pulumi_policy's advisory "can't run ... during preview".
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pulumi_aws as aws
import pytest
from policy_helpers import (
    ASG,
    BUCKET_POLICY,
    EGRESS,
    FSX,
    INGRESS,
    LAUNCH_TEMPLATE,
    Images,
    edit,
    mandatory,
    named,
    record_cluster,
    spec,
    verdicts,
)
from pulumi.output import Unknown

from gpuforge.components import LustreSpec

LUSTRE = LustreSpec(deployment_type="PERSISTENT_2", storage_capacity_gib=2400, throughput_per_tib=250)
BLOCK = {
    "type": "capacity-block",
    "reservation_id": "cr-0123456789abcdef0",
    "start": "2030-01-07T11:30:00Z",
    "end": "2030-01-21T11:30:00Z",
}
CAPACITIES: list[dict[str, Any]] = [
    {"capacity": {"type": "on-demand"}},
    {"capacity": BLOCK},
    {"capacity": {"type": "reservation", "reservation_id": "cr-0123456789abcdef0"}, "node_mode": "instances"},
]
# Policy documents that name an ARN the stack creates (the bucket, the node group, the Slurm key) are
# unknown in preview: these rules come back as the engine's advisory and run for real in `pulumi up`.
DOCUMENT_RULES = {"iam-no-wildcard", "s3-no-public-principal", "s3-tls-only"}


@pytest.mark.parametrize("overrides", CAPACITIES, ids=["on-demand", "capacity-block", "reservation"])
def test_clean_cluster_passes_in_preview(images: Images, overrides: dict[str, Any]) -> None:
    resources = record_cluster(spec(images, lustre=LUSTRE, **overrides), preview=True)
    # Not vacuous: the ids that stack policies follow really are unknown here.
    rule = next(r for r in resources if r.type == INGRESS and r.name.endswith("efa-in-self"))
    assert isinstance(rule.inputs["securityGroupId"], Unknown)
    assert isinstance(named(resources, FSX).inputs["subnetIds"], Unknown)
    found = verdicts(resources, images)
    assert mandatory(found) == []
    waiting = [v for v in found if "during preview" in v.message]
    assert {v.policy for v in waiting} == DOCUMENT_RULES
    assert all(
        v.enforcement == "advisory" and "policy can't be known during preview" in v.message for v in waiting
    ), [v.message for v in waiting]


BROKEN = {
    "efa-network-interfaces": edit(LAUNCH_TEMPLATE, network_interfaces=lambda current: current[:2]),
    "imdsv2-required": edit(LAUNCH_TEMPLATE, metadata_options=None),
    "imds-hop-limit": edit(
        LAUNCH_TEMPLATE,
        metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
            http_tokens="required", http_put_response_hop_limit=3
        ),
    ),
    "no-ssh-key": edit(LAUNCH_TEMPLATE, key_name="ops"),
    # The bucket's policy moved to another bucket: the data bucket has none, which preview sees.
    "s3-tls-only": edit(BUCKET_POLICY, bucket="another-bucket"),
    "efa-placement": edit(ASG, placement_group=None),
    "efa-security-group": edit(
        EGRESS, name_suffix="efa-out-self", ip_protocol="tcp", from_port=443, to_port=443
    ),
    "fsx-s3-link": edit(FSX, import_path="s3://datasets/"),
    "fsx-same-subnet": edit(FSX, subnet_ids="subnet-0aaaaaaaaaaaaaaaa"),
}


@pytest.mark.parametrize("policy", sorted(BROKEN))
def test_violations_stay_mandatory_in_preview(images: Images, policy: str) -> None:
    resources = record_cluster(spec(images, lustre=LUSTRE), BROKEN[policy], preview=True)
    found = verdicts(resources, images)
    assert [v.policy for v in mandatory(found)] == [policy]


def test_without_property_dependencies_stack_policies_cannot_run(images: Images) -> None:
    resources = [
        dataclasses.replace(resource, property_dependencies={})
        for resource in record_cluster(spec(images, lustre=LUSTRE), preview=True)
    ]
    found = verdicts(resources, images)
    assert mandatory(found) == []
    skipped = {v.policy for v in found if "during preview" in v.message}
    assert {"efa-placement", "efa-security-group", "fsx-same-subnet", "fsx-s3-link"} <= skipped
    assert {v.enforcement for v in found if v.policy in skipped} == {"advisory"}
    assert all(
        v.message.startswith(f"can't run policy '{v.policy}' from policy pack 'gpuforge@v0.1.0'")
        for v in found
        if v.policy in skipped
    )
