"""The node agent's Kubernetes identity: a ClusterRole and the binding of a group to it.

The agent drains its own node (gpuforge.node.kubernetes) with a kubeconfig of its own, because
the NodeRestriction admission plugin forbids the kubelet's identity to change its node's taints.
What that identity may do is `gpuforge.node.kubernetes.RBAC_RULES`, the one source of the rules:
the ClusterRole below is built from it. The role is bound to the Kubernetes group `GROUP`, which
the EKS access entry of the agent's IAM role names (components.eks_cluster), so no user name is
ever bound by hand.
"""

from __future__ import annotations

from typing import Any

from gpuforge.node.kubernetes import RBAC_RULES

NAME = "gpuforge-node-agent"
# The Kubernetes group the node agent's IAM role is mapped to by its EKS access entry.
GROUP = "gpuforge:node-agents"
RBAC_API = "rbac.authorization.k8s.io/v1"


def cluster_role() -> dict[str, Any]:
    """What the node agent may do: exactly `RBAC_RULES`, copied so the rendered object owns its lists."""
    rules = [{key: list(values) for key, values in rule.items()} for rule in RBAC_RULES]
    return {"apiVersion": RBAC_API, "kind": "ClusterRole", "metadata": {"name": NAME}, "rules": rules}


def cluster_role_binding() -> dict[str, Any]:
    """`GROUP` (every node agent, by its access entry) gets the ClusterRole `NAME`."""
    return {
        "apiVersion": RBAC_API,
        "kind": "ClusterRoleBinding",
        "metadata": {"name": NAME},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": GROUP}],
    }


def objects() -> list[dict[str, Any]]:
    """The node agent's RBAC objects, as `render_addons` writes them."""
    return [cluster_role(), cluster_role_binding()]
