"""The node agent's RBAC objects: rendered from gpuforge.node.kubernetes.RBAC_RULES, bound to the group
the EKS access entry maps the agent's IAM role to, schema-valid."""

from __future__ import annotations

import pytest
import yaml
from k8s_schemas import validate_core
from kube_support import KUBERNETES_VERSIONS, group

from gpuforge.kubernetes import node_agent
from gpuforge.kubernetes.manifests import render_addons
from gpuforge.node.kubernetes import RBAC_RULES

ROLE = "clusterrole/gpuforge-node-agent.yaml"
BINDING = "clusterrolebinding/gpuforge-node-agent.yaml"


def rendered() -> dict[str, str]:
    return render_addons("p5-eks", [group()], [], [])


def test_render_addons_writes_the_node_agents_role_and_binding() -> None:
    files = rendered()
    role = yaml.safe_load(files[ROLE])
    binding = yaml.safe_load(files[BINDING])
    assert role["rules"] == [dict(rule) for rule in RBAC_RULES]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "gpuforge:node-agents"}
    ]


def test_the_role_follows_the_agents_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """One source: a rule added to RBAC_RULES appears in the rendered ClusterRole."""
    extra = {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}
    monkeypatch.setattr(node_agent, "RBAC_RULES", (*RBAC_RULES, extra))
    assert extra in yaml.safe_load(rendered()[ROLE])["rules"]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_node_agents_objects_fit_the_official_schema(version: str) -> None:
    for obj in node_agent.objects():
        validate_core(obj, version)
