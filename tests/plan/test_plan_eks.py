"""`gpuforge plan` of the shipped p5-eks stack: the EKS control plane, its node groups and the plan's lines."""

from __future__ import annotations

from pathlib import Path

from plan_support import STACK_DIR

from gpuforge.plan.render import summary_lines
from gpuforge.plan.stack_plan import plan


def test_p5_eks_plans_the_control_plane_node_groups_and_the_block_scale_down(catalog_path: Path) -> None:
    result = plan(STACK_DIR, "p5-eks", catalog=catalog_path)
    assert result.mandatory_failures == ()
    types = [resource.type for resource in result.run.resources]
    assert types.count("aws:eks/cluster:Cluster") == 1
    assert types.count("aws:eks/nodeGroup:NodeGroup") == 2  # system (CPU) and GPU
    assert types.count("aws:eks/accessEntry:AccessEntry") == 3  # admin, system nodes, GPU nodes
    assert "aws:autoscaling/group:Group" not in types  # EKS makes the GPU group's Auto Scaling group
    assert "aws:autoscaling/schedule:Schedule" not in types  # EKS adds its own scale-down
    gpu = next(r for r in result.run.resources if r.name == "p5-eks-nodes-group")
    assert gpu.inputs["capacityType"] == "CAPACITY_BLOCK"
    lines = "\n".join(summary_lines(result.summary))
    assert "16 x p5.48xlarge as an EKS managed node group" in lines
    assert "Kubernetes 1.35 on EKS (endpoint private, authentication mode API" in lines
    assert "EKS scales the GPU node group to 0 at 2030-01-21T10:50:00+00:00 (40 minutes" in lines
