"""The cluster's own add-ons (VPC CNI, kube-proxy, CoreDNS) as EKS managed add-ons, pinned per Kubernetes minor.

Under the Pulumi SDK's mocks (preview=False): each add-on's inputs as the AWS provider receives them, the
cluster's bootstrapSelfManagedAddons, the order EKS needs (network add-ons before nodes, CoreDNS after the
system nodes), and the refusal of a Kubernetes minor gpuforge/data/eks_addons.yaml has no versions for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from components_helpers import NOW, cluster_spec, one, run

from gpuforge.components import GpuCluster, eks_addons
from gpuforge.components.specs import SchedulerSpec
from gpuforge.errors import InputError
from gpuforge.pulumi_mocks import GpuforgeMocks

ADDON = "aws:eks/addon:Addon"
CLUSTER = "aws:eks/cluster:Cluster"
ACCESS_ENTRY = "aws:eks/accessEntry:AccessEntry"
SHIPPED = Path(__file__).resolve().parents[2] / "gpuforge" / "data" / "eks_addons.yaml"


def scheduler(version: str) -> SchedulerSpec:
    return SchedulerSpec(
        type="kubernetes",
        kubernetes_version=version,
        system_node_type="m7i.xlarge",
        admin_role_arn="arn:aws:iam::123456789012:role/platform-admin",
    )


def deploy(version: str = "1.35") -> dict[str, Any]:
    spec = cluster_spec(scheduler=scheduler(version))

    def build() -> pulumi.Output[Any]:
        return GpuCluster("demo", spec, now=NOW).summary

    summary: dict[str, Any] = run(build)
    return summary


def addons(mocks: GpuforgeMocks) -> dict[str, Any]:
    return {addon.inputs["addonName"]: addon for addon in mocks.of_type(ADDON)}


def test_each_addon_is_made_at_the_version_the_data_file_pins_for_the_minor(mocks: GpuforgeMocks) -> None:
    deploy()
    shipped = yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))["kubernetes"]["1.35"]
    made = addons(mocks)
    assert sorted(made) == ["coredns", "kube-proxy", "vpc-cni"]
    for name, addon in made.items():
        assert addon.inputs["addonVersion"] == shipped[name]["version"]
        assert addon.inputs["addonVersion"].endswith(tuple(f"-eksbuild.{n}" for n in range(1, 100)))
        assert addon.inputs["clusterName"] == "demo"
        assert addon.inputs["resolveConflictsOnCreate"] == "OVERWRITE"
        assert addon.inputs["resolveConflictsOnUpdate"] == "OVERWRITE"
        # Nothing configured: EKS's defaults for each pinned version (no source asks more of these for EFA).
        assert "configurationValues" not in addon.inputs
        # The node role's AmazonEKS_CNI_Policy serves the VPC CNI; no per-add-on role.
        assert "serviceAccountRoleArn" not in addon.inputs
    assert made["kube-proxy"].inputs["addonVersion"].startswith("v1.35.")


def test_the_cluster_installs_no_unpinned_self_managed_copy(mocks: GpuforgeMocks) -> None:
    deploy()
    assert one(mocks, CLUSTER).inputs["bootstrapSelfManagedAddons"] is False


def test_nodes_wait_for_the_network_addons_and_coredns_for_the_system_nodes(mocks: GpuforgeMocks) -> None:
    """Without the VPC CNI a node never turns Ready, so every node group's access entry waits for it and
    kube-proxy; CoreDNS is a Deployment and waits for the system node group it runs on."""
    deploy()
    made = addons(mocks)
    network = {made["vpc-cni"].urn, made["kube-proxy"].urn}
    node_entries = [entry for entry in mocks.of_type(ACCESS_ENTRY) if entry.inputs["type"] == "EC2_LINUX"]
    assert [entry.name for entry in node_entries] == ["demo-eks-system-nodes-access", "demo-nodes-access"]
    for entry in node_entries:
        assert network <= set(entry.dependencies), entry.name
    system = mocks.named("demo-eks-system")
    assert system.urn in made["coredns"].dependencies
    assert system.urn not in made["vpc-cni"].dependencies
    assert system.urn not in made["kube-proxy"].dependencies


def test_a_minor_without_pinned_addons_is_refused_before_anything(mocks: GpuforgeMocks) -> None:
    spec = cluster_spec(scheduler=scheduler("1.33"))
    with pytest.raises(InputError) as raised:
        GpuCluster("demo", spec, now=NOW)
    message = str(raised.value)
    assert "scheduler.kubernetesVersion = '1.33'" in message
    assert "gpuforge/data/eks_addons.yaml" in message and "1.35" in message
    assert "Fix:" in message and "describe-addon-versions" in message
    assert mocks.resources == ()


def _write(tmp_path: Path, minor: str, entries: dict[str, Any]) -> Path:
    path = tmp_path / "eks_addons.yaml"
    path.write_text(yaml.safe_dump({"schema": 1, "kubernetes": {minor: entries}}), encoding="utf-8")
    return path


def _entries(**changes: Any) -> dict[str, Any]:
    shipped: dict[str, Any] = yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))["kubernetes"]["1.35"]
    entries = {name: dict(entry) for name, entry in shipped.items()}
    for name, change in changes.items():
        if change is None:
            del entries[name]
        else:
            entries[name].update(change)
    return entries


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"coredns": None}, "1.35 lacks coredns"),
        ({"kube-proxy": {"version": "v1.34.6-eksbuild.2"}}, "kube-proxy v1.34.6-eksbuild.2 is not for 1.35"),
        ({"vpc-cni": {"version": "latest"}}, "vpc-cni version 'latest'"),
        ({"coredns": {"source": ""}}, "coredns v1.14.2-eksbuild.4 has no source"),
    ],
)
def test_a_pins_file_breaking_a_rule_is_refused_with_the_entry(
    tmp_path: Path, changes: dict[str, Any], expected: str
) -> None:
    path = _write(tmp_path, "1.35", _entries(**changes))
    with pytest.raises(InputError) as raised:
        eks_addons.load_pins(path)
    assert str(path) in str(raised.value)
    assert expected in str(raised.value)
