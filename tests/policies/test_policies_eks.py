"""The EKS rules under the policy pack: eks-private-endpoint, eks-secrets-encrypted, eks-control-plane-logs,
eks-access-entries, eks-addon-pinned.

The passing case is a whole p5 cluster with `scheduler.type: kubernetes` under the mocks (every mandatory rule of
the pack, IAM and network included); each violating case changes one EksCluster setting through a Pulumi
transformation, as a user could.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_aws as aws
import pytest
from policy_helpers import Images, cluster, edit, mandatory, of, record, spec, verdicts

from gpuforge.components.specs import SchedulerSpec
from gpuforge.policies.pack import POLICIES

EKS = "aws:eks/cluster:Cluster"
ADDON = "aws:eks/addon:Addon"
KUBERNETES = SchedulerSpec(
    type="kubernetes",
    kubernetes_version="1.35",
    system_node_type="m7i.xlarge",
    admin_role_arn="arn:aws:iam::123456789012:role/platform-admin",
)


def eks_verdicts(
    images: Images, *transformations: pulumi.ResourceTransformation, preview: bool = False
) -> Any:
    resources = record(cluster(spec(images, scheduler=KUBERNETES), *transformations), preview=preview)
    return verdicts(resources, images)


def test_the_pack_holds_the_five_rules() -> None:
    names = {policy.name for policy in POLICIES}
    assert {
        "eks-private-endpoint",
        "eks-secrets-encrypted",
        "eks-control-plane-logs",
        "eks-access-entries",
        "eks-addon-pinned",
    } <= names


@pytest.mark.parametrize("preview", [False, True])
def test_an_eks_cluster_passes_every_mandatory_rule(images: Images, preview: bool) -> None:
    assert mandatory(eks_verdicts(images, preview=preview)) == []


def _vpc(**changes: Any) -> Any:
    """A vpc_config like the old one with `changes` (None: the setting left out)."""
    fields = ("subnet_ids", "security_group_ids", "endpoint_private_access", "endpoint_public_access")
    return lambda old: aws.eks.ClusterVpcConfigArgs(
        **{field: changes[field] if field in changes else getattr(old, field) for field in fields}
    )


@pytest.mark.parametrize(
    ("changes", "policy", "expected"),
    [
        (
            {"vpc_config": _vpc(endpoint_public_access=True)},
            "eks-private-endpoint",
            "endpointPublicAccess True",
        ),
        (
            {"vpc_config": _vpc(endpoint_public_access=None)},
            "eks-private-endpoint",
            "endpointPublicAccess unset",
        ),
        (
            {"vpc_config": _vpc(endpoint_private_access=False)},
            "eks-private-endpoint",
            "endpointPrivateAccess False",
        ),
        ({"encryption_config": None}, "eks-secrets-encrypted", "not envelope-encrypted"),
        ({"enabled_cluster_log_types": ["api"]}, "eks-control-plane-logs", "audit, authenticator"),
        ({"access_config": None}, "eks-access-entries", "authenticationMode unset"),
        (
            {"access_config": {"authentication_mode": "API_AND_CONFIG_MAP"}},
            "eks-access-entries",
            "authenticationMode 'API_AND_CONFIG_MAP'",
        ),
    ],
)
def test_each_weakened_setting_is_refused(
    images: Images, changes: dict[str, Any], policy: str, expected: str
) -> None:
    found = of(mandatory(eks_verdicts(images, edit(EKS, **changes))), policy)
    assert len(found) == 1, found
    assert expected in found[0].message and "Fix:" in found[0].message


@pytest.mark.parametrize("version", [None, ""])
def test_an_addon_without_a_version_is_refused(images: Images, version: str | None) -> None:
    """Left unset, EKS installs its default version for the cluster's minor, which moves as EKS publishes."""
    found = of(
        mandatory(eks_verdicts(images, edit(ADDON, name_suffix="-coredns", addon_version=version))),
        "eks-addon-pinned",
    )
    assert len(found) == 1, found
    assert "'coredns'" in found[0].message and "addonVersion" in found[0].message
    assert "Fix:" in found[0].message and "gpuforge/data/eks_addons.yaml" in found[0].message
