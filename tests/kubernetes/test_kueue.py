"""Kueue objects from the teams and QOS blocks: each kind against its schema, quotas, preemption, diffs."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
import yaml
from k8s_schemas import CRD_SHA256, crd_sums, validate, validate_core, validate_kueue
from kube_support import KUBERNETES_VERSIONS, group, qos, team

from gpuforge.components.specs import QosSpec, TeamSpec
from gpuforge.errors import InputError
from gpuforge.kubernetes import kueue
from gpuforge.kubernetes.manifests import objects_of, render_addons


def _kinds(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def test_vendored_crds_are_the_files_their_readme_names() -> None:
    assert crd_sums() == CRD_SHA256


@pytest.mark.parametrize(
    ("instance_type", "layers"),
    [("p5.48xlarge", 3), ("p4d.24xlarge", 3), ("p6-b200.48xlarge", 4), ("g5.48xlarge", 0)],
)
def test_topology_has_the_types_network_layers_then_the_host(instance_type: str, layers: int) -> None:
    topology = kueue.topology("p5-eks", group(instance_type).instance_type)
    validate_kueue(topology)
    expected = [f"topology.k8s.aws/network-node-layer-{n}" for n in range(1, layers + 1)]
    assert [level["nodeLabel"] for level in topology["spec"]["levels"]] == [
        *expected,
        "kubernetes.io/hostname",
    ]
    assert (
        group(instance_type).instance_type.topology_layers == layers
    )  # the catalog's figure, with its source


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_rendered_object_fits_its_schema(
    teams: list[TeamSpec], qos_block: list[QosSpec], version: str
) -> None:
    objects = objects_of(render_addons("p5-eks", [group()], teams, qos_block))
    kinds = {obj["kind"] for obj in objects}
    assert {
        "Topology",
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
        "WorkloadPriorityClass",
        "PriorityClass",
        "Namespace",
    } <= kinds
    for obj in objects:
        validate(obj, version)


def test_resource_flavor_selects_the_node_group_and_names_the_topology() -> None:
    flavor = kueue.resource_flavor("p5-eks", group())
    validate_kueue(flavor)
    assert flavor["spec"]["nodeLabels"] == {"gpuforge.dev/node-group": "p5-eks-gpu"}
    assert (
        flavor["spec"]["topologyName"] == kueue.topology("p5-eks", group().instance_type)["metadata"]["name"]
    )


def test_cluster_queue_quota_is_the_teams_and_all_share_one_cohort(
    teams: list[TeamSpec], qos_block: list[QosSpec]
) -> None:
    objects = objects_of(render_addons("p5-eks", [group()], teams, qos_block))
    queues = {obj["metadata"]["name"]: obj for obj in _kinds(objects, "ClusterQueue")}
    node = group().instance_type  # p5.48xlarge: 8 GPUs, 192 vCPUs, 2 TiB, 32 EFA interfaces (the catalog)
    for item in teams:
        spec = queues[item.name]["spec"]
        [resource_group] = spec["resourceGroups"]
        [flavor] = resource_group["flavors"]
        quotas = {resource["name"]: resource["nominalQuota"] for resource in flavor["resources"]}
        assert resource_group["coveredResources"] == list(quotas)
        # The GPUs are the team's; CPU, memory and EFA the same share of the node group's, per GPU.
        assert quotas == {
            "nvidia.com/gpu": item.gpu_quota,
            "vpc.amazonaws.com/efa": item.gpu_quota * len(node.efa_cards) // node.gpu_count,
            "cpu": item.gpu_quota * node.vcpus // node.gpu_count,
            "memory": f"{item.gpu_quota * node.memory_mib // node.gpu_count}Mi",
        }
        assert spec["preemption"]["reclaimWithinCohort"] == "Any"
    assert len({queue["spec"]["cohortName"] for queue in queues.values()}) == 1
    local = {
        obj["metadata"]["namespace"]: obj["spec"]["clusterQueue"] for obj in _kinds(objects, "LocalQueue")
    }
    assert local == {"llm": "llm", "vision": "vision"}


def test_production_preempts_research_by_priority(teams: list[TeamSpec], qos_block: list[QosSpec]) -> None:
    objects = objects_of(render_addons("p5-eks", [group()], teams, qos_block))
    workload = {obj["metadata"]["name"]: obj["value"] for obj in _kinds(objects, "WorkloadPriorityClass")}
    # gpuforge-acceptance: `gpuforge validate`'s Jobs, above every QOS (tests/kubernetes/test_kueue_admits.py).
    assert workload == {"production": 1000, "research": 100, "gpuforge-acceptance": 1_000_000_000}
    core = {obj["metadata"]["name"]: obj["preemptionPolicy"] for obj in _kinds(objects, "PriorityClass")}
    assert core == {"production": "PreemptLowerPriority", "research": "Never", "gpuforge-acceptance": "Never"}
    for queue in _kinds(objects, "ClusterQueue"):
        assert queue["spec"]["preemption"]["withinClusterQueue"] == "LowerPriority"


def test_no_preemption_in_the_block_means_none_within_a_queue(teams: list[TeamSpec]) -> None:
    objects = objects_of(
        render_addons("p5-eks", [group()], teams, [qos("production", 1000), qos("research", 1000)])
    )
    for queue in _kinds(objects, "ClusterQueue"):
        assert queue["spec"]["preemption"]["withinClusterQueue"] == "Never"


@pytest.mark.parametrize(
    ("block", "words"),
    [
        ([qos("production", 100, "research"), qos("research", 1000)], "give production a higher priority"),
        (
            [qos("production", 1000, "research"), qos("research", 100), qos("batch", 10)],
            "add batch to production's preempts",
        ),
    ],
)
def test_a_preemption_kueue_cannot_express_is_refused(
    teams: list[TeamSpec], block: list[QosSpec], words: str
) -> None:
    with pytest.raises(InputError, match=words):
        render_addons("p5-eks", [group()], [team("llm", 16, "production")], block)


def test_a_team_name_kubernetes_cannot_carry_is_refused(qos_block: list[QosSpec]) -> None:
    with pytest.raises(
        InputError, match=r"teams\[llm_a\].name = 'llm_a': .* not a namespace name \(rule: an RFC 1123"
    ):
        render_addons("p5-eks", [group()], [team("llm_a", 8)], qos_block)


def test_the_crd_check_can_fail() -> None:
    topology = kueue.topology("p5-eks", group().instance_type)
    topology["spec"]["levels"] = [{"nodeLabel": f"l{n}"} for n in range(17)]  # the CRD allows 16
    with pytest.raises(jsonschema.ValidationError):
        validate_kueue(topology)
    queue = kueue.cluster_queue("p5-eks", team("llm", 8), [group()], preempts=False)
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "eight"
    with pytest.raises(jsonschema.ValidationError):
        validate_kueue(queue)
    with pytest.raises(Exception, match="Additional properties"):
        validate_core({**kueue.priority_class(qos("x", 1)), "preempts": "y"}, KUBERNETES_VERSIONS[-1])


def _render(teams: list[TeamSpec], block: list[QosSpec]) -> dict[str, str]:
    return render_addons("p5-eks", [group()], teams, block)


def _changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {path for path in before.keys() | after.keys() if before.get(path) != after.get(path)}


def test_a_quota_change_changes_exactly_that_teams_cluster_queue(
    teams: list[TeamSpec], qos_block: list[QosSpec]
) -> None:
    before = _render(teams, qos_block)
    after = _render([team("llm", 24, "production", "research"), teams[1]], qos_block)
    assert _changed(before, after) == {"clusterqueue/llm.yaml"}
    assert (
        yaml.safe_load(after["clusterqueue/llm.yaml"])["spec"]["resourceGroups"][0]["flavors"][0][
            "resources"
        ][0]["nominalQuota"]
        == 24
    )


def test_a_new_team_adds_exactly_its_namespace_and_queues(
    teams: list[TeamSpec], qos_block: list[QosSpec]
) -> None:
    before = _render(teams, qos_block)
    after = _render([*teams, team("speech", 4, "research")], qos_block)
    assert _changed(before, after) == {
        "namespace/speech.yaml",
        "clusterqueue/speech.yaml",
        "localqueue/speech.speech.yaml",
    }


def test_a_new_qos_adds_exactly_its_priority_classes(teams: list[TeamSpec]) -> None:
    block = [qos("production", 1000, "research"), qos("research", 100)]
    before = _render(teams, block)
    after = _render(teams, [*block, qos("urgent", 1000, "research")])
    assert _changed(before, after) == {"workloadpriorityclass/urgent.yaml", "priorityclass/urgent.yaml"}


def test_a_qos_priority_change_changes_exactly_its_priority_classes(teams: list[TeamSpec]) -> None:
    before = _render(teams, [qos("production", 1000, "research"), qos("research", 100)])
    after = _render(teams, [qos("production", 2000, "research"), qos("research", 100)])
    assert _changed(before, after) == {
        "workloadpriorityclass/production.yaml",
        "priorityclass/production.yaml",
    }


@pytest.mark.parametrize("priority", [1_000_000_001, 1_000_000_000])
def test_a_qos_priority_not_below_the_acceptance_class_is_refused(
    teams: list[TeamSpec], priority: int
) -> None:
    # Slurm takes priorities up to 2^32-3; Kubernetes reserves those above 1e9 for system classes, and gpuforge's
    # acceptance class holds 1e9 itself, so that no team job preempts `gpuforge validate`'s Jobs.
    block = [qos("production", priority, "research"), qos("research", 100)]
    with pytest.raises(
        InputError,
        match=rf"qos\[production\].priority: {priority} is not below .* gpuforge-acceptance .* at most 999999999",
    ):
        render_addons("p5-eks", [group()], teams, block)
    render_addons(
        "p5-eks", [group()], teams, [qos("production", 999_999_999, "research"), qos("research", 100)]
    )
