"""`gpuforge plan` of the shipped p5-eks stack: the EKS control plane, its node groups and the plan's lines."""

from __future__ import annotations

from pathlib import Path

from plan_support import STACK_DIR

from gpuforge.plan.render import plan_document, render_text, summary_lines
from gpuforge.plan.stack_plan import plan


def test_p5_eks_plans_the_control_plane_node_groups_and_the_block_scale_down(catalog_path: Path) -> None:
    result = plan(STACK_DIR, "p5-eks", catalog=catalog_path)
    assert result.mandatory_failures == ()
    types = [resource.type for resource in result.run.resources]
    assert types.count("aws:eks/cluster:Cluster") == 1
    assert types.count("aws:eks/nodeGroup:NodeGroup") == 2  # system (CPU) and GPU
    # admin, system nodes, GPU nodes, the GPU nodes' node agent (STANDARD, its Kubernetes group)
    assert types.count("aws:eks/accessEntry:AccessEntry") == 4
    assert "aws:autoscaling/group:Group" not in types  # EKS makes the GPU group's Auto Scaling group
    assert "aws:autoscaling/schedule:Schedule" not in types  # EKS adds its own scale-down
    gpu = next(r for r in result.run.resources if r.name == "p5-eks-nodes-group")
    assert gpu.inputs["capacityType"] == "CAPACITY_BLOCK"
    lines = "\n".join(summary_lines(result.summary))
    assert "16 x p5.48xlarge as an EKS managed node group" in lines
    assert "Kubernetes 1.35 on EKS (endpoint private, authentication mode API" in lines
    assert "EKS scales the GPU node group to 0 at 2030-01-21T10:50:00+00:00 (40 minutes" in lines


def test_p5_eks_plan_shows_the_addons_and_kueue_objects_scheduler_render_writes(catalog_path: Path) -> None:
    """The plan summarises the same objects `gpuforge scheduler render` writes for the stack."""
    result = plan(STACK_DIR, "p5-eks", catalog=catalog_path)
    text = render_text(result)
    assert (
        "  add-ons    nvidia-device-plugin v0.17.4 (nvcr.io/nvidia/k8s-device-plugin@sha256:3c54348fe5a5"
        in text
    )
    assert "kueue v0.17.6 (registry.k8s.io/kueue/kueue@sha256:" in text
    # The EFA plugin's image has no sourced digest: not applied by tag, and the plan says so and why.
    efa = "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.21-eksbuild.9"
    assert (
        f"aws-efa-k8s-device-plugin v0.5.21-eksbuild.9 NOT RENDERED: its image {efa} has no digest from"
        in text
    )
    levels = "topology.k8s.aws/network-node-layer-1 > topology.k8s.aws/network-node-layer-2 > "
    assert f"  Kueue      Topology p5-eks-network: {levels}topology.k8s.aws/network-node-layer-3 > " in text
    assert "ResourceFlavor p5-eks-gpu (gpuforge.dev/node-group=p5-eks-gpu, tolerates nvidia.com/gpu)" in text
    assert "ClusterQueue llm 96 nvidia.com/gpu (LocalQueue llm/llm)" in text
    assert "ClusterQueue vision 32 nvidia.com/gpu (LocalQueue vision/vision)" in text
    assert "priority classes gpuforge-acceptance 1000000000, production 1000, research 100" in text
    document = plan_document(result)["kubernetes"]
    assert document["addons"]["aws-efa-k8s-device-plugin"]["rendered"] is False
    assert "no published source pairs" in document["addons"]["aws-efa-k8s-device-plugin"]["why_not"]
    assert document["queues"] == [
        {"team": "llm", "cluster_queue": "llm", "local_queue": "llm/llm", "gpu_quota": 96},
        {"team": "vision", "cluster_queue": "vision", "local_queue": "vision/vision", "gpu_quota": 32},
    ]
    assert "clusterqueue/llm.yaml" in document["files"]


def test_p5_eks_plan_shows_the_eks_managed_addons_at_their_pinned_versions(catalog_path: Path) -> None:
    """VPC CNI, kube-proxy and CoreDNS: EKS add-ons at the versions gpuforge/data/eks_addons.yaml pins for 1.35."""
    result = plan(STACK_DIR, "p5-eks", catalog=catalog_path)
    made = {
        r.inputs["addonName"]: r.inputs["addonVersion"]
        for r in result.run.resources
        if r.type == "aws:eks/addon:Addon"
    }
    assert sorted(made) == ["coredns", "kube-proxy", "vpc-cni"]
    document = plan_document(result)["kubernetes"]["eks_addons"]
    assert {name: entry["version"] for name, entry in document.items()} == made
    assert all("EKS user guide" in entry["source"] for entry in document.values())
    listed = ", ".join(f"{name} {version}" for name, version in made.items())
    assert (
        f"             EKS add-ons (EKS manages their images): {listed}" in render_text(result).splitlines()
    )


def test_a_slurm_plan_has_no_kubernetes_objects(catalog_path: Path) -> None:
    result = plan(STACK_DIR, "p5-prod", catalog=catalog_path)
    assert plan_document(result)["kubernetes"] is None
    assert "  add-ons " not in render_text(result)
