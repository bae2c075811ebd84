"""Kueue admits what users and gpuforge submit: every resource their pods request is counted or excluded.

Kueue leaves a workload pending for good when one of its pods requests a resource that its ClusterQueue does not
cover and Kueue's configuration does not exclude ("couldn't assign flavors to pod set main: resource X
unavailable in ClusterQueue": kubernetes-sigs/kueue pkg/scheduler/flavorassigner/flavorassigner.go at tag
v0.17.6). Held against a real Kueue v0.17.1, the p5-eks render covered `nvidia.com/gpu` only, so the README's
example job and every Job of `gpuforge validate` (both request `vpc.amazonaws.com/efa`) never ran.

Both sides are read from what `gpuforge scheduler render` writes for stacks/training's p5-eks (the ClusterQueue's
`coveredResources`, and `resources.excludeResourcePrefixes` of the Kueue configuration in the chart values), and
the pods are the README's example job, validate's diag, NVLink and NCCL-pair Jobs built for that stack, and a team
job asking for CPUs, memory and EFA as AWS's EKS EFA samples do.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_support import qos, readme_example, team
from kubernetes.utils import parse_quantity

from gpuforge import hardware
from gpuforge.cli import main
from gpuforge.errors import InputError
from gpuforge.kubernetes.manifests import render_addons
from gpuforge.validate import kubernetes_jobs as kj
from gpuforge.validate.floors import floors_for
from gpuforge.validate.run import Plan

REPO = Path(__file__).resolve().parents[2]
STACK = "p5-eks"
INSTANCE_TYPE = "p5.48xlarge"  # stacks/training/Pulumi.p5-eks.yaml
DIGEST = "sha256:" + "cd" * 32


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("render") / "k8s"
    assert (
        main(["scheduler", "render", str(REPO / "stacks/training"), "--stack", STACK, "--out", str(out)]) == 0
    )
    return {
        path.relative_to(out).as_posix(): yaml.safe_load(path.read_text()) for path in out.rglob("*.yaml")
    }


def _quotas(rendered: Mapping[str, Any], team_name: str) -> tuple[list[str], dict[str, Decimal]]:
    """The team's ClusterQueue: what it covers, and its nominal quota of each (its one flavor)."""
    spec = rendered[f"clusterqueue/{team_name}.yaml"]["spec"]
    covered = [name for group in spec["resourceGroups"] for name in group["coveredResources"]]
    quotas = {
        resource["name"]: parse_quantity(resource["nominalQuota"])
        for group in spec["resourceGroups"]
        for flavor in group["flavors"]
        for resource in flavor["resources"]
    }
    return covered, quotas


def _excluded(rendered: Mapping[str, Any]) -> list[str]:
    """`resources.excludeResourcePrefixes` of the Configuration the chart values hand Kueue's manager."""
    values = rendered["addons/kueue-values.yaml"]
    configuration = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    assert configuration["kind"] == "Configuration"
    return list((configuration.get("resources") or {}).get("excludeResourcePrefixes") or [])


def _validate_jobs() -> Iterator[dict[str, Any]]:
    """The Jobs `gpuforge validate` submits on the p5-eks stack: a diag, an NVLink run, an NCCL pair."""
    nodes = ("node-a", "node-b")
    plan = Plan(nodes, hardware.get(INSTANCE_TYPE), floors_for(INSTANCE_TYPE))
    settings = kj.Workloads(
        namespace="llm",
        queue="llm",
        image=kj.image_from_reference(f"r.invalid/acceptance@{DIGEST}"),
        run_id="t",
    )
    yield kj.diag_job(plan, settings, "diag", "node-a")
    yield kj.nvlink_job(plan, settings, "nvlink", "node-a")
    *_, job = kj.nccl_run(plan, settings, "pair", nodes, {}, ("private", "public"))
    yield job


def _team_job() -> dict[str, Any]:
    """A team's two-node training Job asking for CPUs, memory, the node's EFA interfaces, huge pages and scratch
    space beside its GPUs, as AWS's EKS EFA samples ask (aws-samples/awsome-distributed-training
    micro-benchmarks/nccl-tests/kubernetes: `hugepages-2Mi` and `memory` with the GPUs and EFA)."""
    node = hardware.get(INSTANCE_TYPE)
    amounts = {
        "nvidia.com/gpu": node.gpu_count,
        "vpc.amazonaws.com/efa": node.max_efa_interfaces,
        "cpu": 96,
        "memory": "1000Gi",
        "hugepages-2Mi": "2Gi",
        "ephemeral-storage": "100Gi",
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "llm", "labels": {kj.QUEUE_LABEL: "llm"}},
        "spec": {
            "completions": 2,
            "parallelism": 2,
            "completionMode": "Indexed",
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "train",
                            "image": f"r.invalid/train@{DIGEST}",
                            "resources": {"requests": dict(amounts), "limits": dict(amounts)},
                        }
                    ],
                }
            },
        },
    }


def _jobs() -> list[tuple[str, dict[str, Any]]]:
    (readme_job,) = [document for document in readme_example() if document["kind"] == "Job"]
    return [
        ("README example", readme_job),
        *((f"validate {job['metadata']['name']}", job) for job in _validate_jobs()),
        ("team job with cpu, memory, EFA", _team_job()),
    ]


def _requests(job: Mapping[str, Any]) -> dict[str, Decimal]:
    """What Kueue counts for the Job: each container's requests (a limit alone stands for its request, as the API
    server defaults it), summed over containers and multiplied by the pods (parallelism)."""
    spec = job["spec"]["template"]["spec"]
    total: dict[str, Decimal] = {}
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        resources = container.get("resources", {})
        amounts = {**resources.get("limits", {}), **resources.get("requests", {})}
        for name, amount in amounts.items():
            total[name] = total.get(name, Decimal(0)) + parse_quantity(amount)
    pods = job["spec"].get("parallelism", 1)
    return {name: amount * pods for name, amount in total.items()}


@pytest.mark.parametrize("what", [name for name, _ in _jobs()])
def test_every_resource_a_submitted_pod_requests_is_covered_or_excluded(
    rendered: dict[str, Any], what: str
) -> None:
    job = dict(_jobs())[what]
    queue = job["metadata"]["labels"][kj.QUEUE_LABEL]
    covered, quotas = _quotas(rendered, queue)
    excluded = _excluded(rendered)
    requests = _requests(job)
    assert requests, what
    for name in requests:
        assert name in covered or any(name.startswith(prefix) for prefix in excluded), (
            f"{what}: Kueue would hold it for good: {name} is neither covered by ClusterQueue {queue} ({covered}) "
            f"nor excluded ({excluded})"
        )
    # And it fits the team's quota: nothing it asks for is a resource the team has none of.
    for name in covered:
        assert requests.get(name, Decimal(0)) <= quotas[name], (what, name, requests.get(name), quotas[name])


def test_the_teams_cpu_memory_and_efa_quotas_add_up_to_the_node_group(rendered: dict[str, Any]) -> None:
    """p5-eks gives its 128 GPUs (16 nodes) to llm (96) and vision (32): their CPU, memory and EFA quotas are the
    same shares of the 16 nodes', so no team's CPU or memory use reaches into GPUs another team holds."""
    node, nodes = hardware.get(INSTANCE_TYPE), 16
    totals: dict[str, Decimal] = {}
    for team_name in ("llm", "vision"):
        _, quotas = _quotas(rendered, team_name)
        for name, amount in quotas.items():
            totals[name] = totals.get(name, Decimal(0)) + amount
    assert totals == {
        "nvidia.com/gpu": nodes * node.gpu_count,
        "vpc.amazonaws.com/efa": nodes * len(node.efa_cards),
        "cpu": nodes * node.vcpus,
        "memory": nodes * node.memory_mib * 2**20,
    }


def test_validates_jobs_run_above_every_team_qos(rendered: dict[str, Any]) -> None:
    """validate's Jobs name the WorkloadPriorityClass Kueue orders them by and their pods the PriorityClass, both
    rendered, above every QOS's: Kueue preempts only lower priorities, so no team job preempts them that way."""
    workload_classes = {
        body["metadata"]["name"]: body["value"]
        for path, body in rendered.items()
        if path.startswith("workloadpriorityclass/")
    }
    pod_classes = {
        body["metadata"]["name"]: body for path, body in rendered.items() if path.startswith("priorityclass/")
    }
    for job in _validate_jobs():
        workload_class = job["metadata"]["labels"][kj.PRIORITY_LABEL]
        pod_class = job["spec"]["template"]["spec"]["priorityClassName"]
        assert workload_class == pod_class == "gpuforge-acceptance"
        others = {name: value for name, value in workload_classes.items() if name != workload_class}
        assert others and all(workload_classes[workload_class] > value for value in others.values()), (
            workload_classes
        )
        assert all(
            pod_classes[pod_class]["value"] > body["value"]
            for name, body in pod_classes.items()
            if name != pod_class
        )
        # Kueue makes room before it admits; kube-scheduler must not evict admitted pods on top.
        assert pod_classes[pod_class]["preemptionPolicy"] == "Never"


def test_a_qos_named_like_the_acceptance_class_is_refused() -> None:
    from kube_support import group

    with pytest.raises(
        InputError, match=r"qos\[gpuforge-acceptance\]\.name = 'gpuforge-acceptance': .*validate"
    ):
        render_addons(
            STACK, [group()], [team("llm", 8, "gpuforge-acceptance")], [qos("gpuforge-acceptance", 10)]
        )
