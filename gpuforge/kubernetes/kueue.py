"""Kueue's objects for a gpuforge cluster: topology, flavors, team queues and QOS priorities.

Read from the same `gpuforge:scheduler` teams and qos blocks the Slurm path turns into accounts
(components/specs.py TeamSpec, QosSpec), so one stack file describes both schedulers:
- a `Topology` whose levels are the network-node layers AWS labels EKS nodes with
  (`topology.k8s.aws/network-node-layer-1..N`, N from the catalog's `topology_layers`) and
  then the host, so Kueue's topology-aware scheduling places a job under the fewest switches;
- a `ResourceFlavor` per GPU node group, selecting its nodes by the node-group label and
  tolerating the GPU taint;
- per team a `Namespace`, a `ClusterQueue` whose nominal `nvidia.com/gpu` quota is the team's
  gpuQuota, all in one cohort so idle quota is borrowed and reclaimed, and a `LocalQueue`;
- per QOS a Kueue `WorkloadPriorityClass` and a core `PriorityClass` with its priority.

Kueue preempts by priority alone: a workload may preempt any of lower priority. The QOS block
says who preempts whom; where that cannot be said with priorities alone, rendering refuses
(`check_preemption`) instead of quietly preempting differently from Slurm.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gpuforge.errors import InputError
from gpuforge.hardware import InstanceType
from gpuforge.kubernetes.addons import pins
from gpuforge.scheduler import reserved

HOSTNAME_LABEL = "kubernetes.io/hostname"
# EKS labels nodes from DescribeInstanceTopology (cloud-provider-aws #1038); layer 1 is the top.
LAYER_LABEL = "topology.k8s.aws/network-node-layer-{}"
GPU_RESOURCE = "nvidia.com/gpu"
_KUEUE_PREEMPTION = "https://kueue.sigs.k8s.io/docs/concepts/preemption/"
# Priorities above this are reserved for system classes: kubernetes/kubernetes
# pkg/apis/scheduling/types.go, HighestUserDefinablePriority = int32(1000000000).
MAX_USER_PRIORITY = 1_000_000_000


class TeamLike(Protocol):
    """What is read of a team (components.specs.TeamSpec)."""

    @property
    def name(self) -> str: ...
    @property
    def gpu_quota(self) -> int: ...
    @property
    def qos(self) -> tuple[str, ...]: ...


class QosLike(Protocol):
    """What is read of a QOS (components.specs.QosSpec)."""

    @property
    def name(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def preempts(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class GpuNodeGroup:
    """One GPU node group of the cluster: its name (the node-group label's value) and type."""

    name: str
    instance_type: InstanceType
    node_count: int


def dns_label(value: str, *, field: str) -> str:
    """`value` when it is an RFC 1123 label (a Kubernetes namespace or object name); else InputError."""
    problem = reserved.dns_label_problem(field, value, "it cannot name a Kubernetes object")
    reserved.refuse([] if problem is None else [problem])
    return value


def _api() -> str:
    api = pins().addons["kueue"].api_version
    assert api is not None, "kubernetes_addons.yaml: kueue.api_version is required"
    return api


def topology_name(cluster: str) -> str:
    return f"{cluster}-network"


def topology(cluster: str, instance_type: InstanceType) -> dict[str, Any]:
    """The cluster's Topology: one level per network-node layer of its GPU type, then the host.

    A type AWS reports no topology for (catalog `topology_layers` 0) gets the host level only.
    """
    layers = [LAYER_LABEL.format(index) for index in range(1, instance_type.topology_layers + 1)]
    levels = [{"nodeLabel": label} for label in (*layers, HOSTNAME_LABEL)]
    return {
        "apiVersion": _api(),
        "kind": "Topology",
        "metadata": {"name": topology_name(cluster)},
        "spec": {"levels": levels},
    }


def flavor_name(group: GpuNodeGroup) -> str:
    return group.name


def resource_flavor(cluster: str, group: GpuNodeGroup) -> dict[str, Any]:
    """The flavor of one GPU node group: its nodes (node-group label), the GPU taint, the topology."""
    names = pins()
    taint = names.gpu_taint
    return {
        "apiVersion": _api(),
        "kind": "ResourceFlavor",
        "metadata": {"name": flavor_name(group)},
        "spec": {
            "nodeLabels": {names.node_labels.node_group: group.name},
            "tolerations": [{"key": taint.key, "operator": "Exists", "effect": taint.effect}],
            "topologyName": topology_name(cluster),
        },
    }


def cohort_name(cluster: str) -> str:
    return f"{cluster}-teams"


def check_preemption(qos: Sequence[QosLike]) -> bool:
    """Whether any QOS preempts; InputError where Kubernetes or Kueue's priority order cannot carry the block.

    Kueue lets a workload preempt every workload of lower priority, so A preempts B must mean
    priority(A) > priority(B), and a higher priority that does not preempt a lower one cannot be said.
    """
    for item in qos:
        if item.priority > MAX_USER_PRIORITY:
            raise InputError(
                f"gpuforge:scheduler.qos[{item.name}].priority: {item.priority} is above what Kubernetes lets a "
                f"user priority class have (rule: at most {MAX_USER_PRIORITY}; higher values are reserved for "
                "system classes, kubernetes pkg/apis/scheduling/types.go HighestUserDefinablePriority). "
                f"Fix: scale the QOS priorities down to at most {MAX_USER_PRIORITY}, keeping their order."
            )
    by_name = {item.name: item for item in qos}
    preempting = any(item.preempts for item in qos)
    for item in qos:
        for victim_name in item.preempts:
            victim = by_name.get(victim_name)
            if victim is not None and victim.priority >= item.priority:
                raise InputError(
                    f"gpuforge:scheduler.qos: {item.name} (priority {item.priority}) preempts {victim.name} "
                    f"(priority {victim.priority}), but Kueue preempts only workloads of lower priority "
                    f"({_KUEUE_PREEMPTION}). Fix: give {item.name} a higher priority than {victim.name}."
                )
    if not preempting:
        return False
    for high in qos:
        for low in qos:
            if high.priority > low.priority and low.name not in high.preempts:
                raise InputError(
                    f"gpuforge:scheduler.qos: {high.name} (priority {high.priority}) does not preempt "
                    f"{low.name} (priority {low.priority}), but on Kubernetes Kueue lets every workload "
                    f"preempt those of lower priority ({_KUEUE_PREEMPTION}), so the two schedulers would "
                    f"disagree. Fix: add {low.name} to {high.name}'s preempts, or give them the same priority."
                )
    return True


def _preemption(preempts: bool) -> dict[str, Any]:
    """ClusterQueue preemption: a team always reclaims its lent quota; QOS preemption only where asked."""
    if not preempts:
        return {"reclaimWithinCohort": "Any", "withinClusterQueue": "Never"}
    return {
        "reclaimWithinCohort": "Any",
        "borrowWithinCohort": {"policy": "LowerPriority"},
        "withinClusterQueue": "LowerPriority",
    }


def cluster_queue(
    cluster: str, team: TeamLike, groups: Sequence[GpuNodeGroup], *, preempts: bool
) -> dict[str, Any]:
    """The team's ClusterQueue: nominal nvidia.com/gpu = gpuQuota, borrowing idle quota in the cohort.

    Only GPUs are counted: CPU and memory of a GPU node come with its GPUs, and a quota on them would
    be a second limit the Slurm accounts do not have.
    """
    name = dns_label(team.name, field=f"gpuforge:scheduler.teams[{team.name}].name")
    if len(groups) != 1:
        # gpuQuota is one figure over the cluster; per-flavor quotas would multiply it.
        raise ValueError(f"a team's GPU quota is rendered for exactly one GPU node group, not {len(groups)}")
    flavors = [
        {"name": flavor_name(group), "resources": [{"name": GPU_RESOURCE, "nominalQuota": team.gpu_quota}]}
        for group in groups
    ]
    return {
        "apiVersion": _api(),
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohortName": cohort_name(cluster),
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [{"coveredResources": [GPU_RESOURCE], "flavors": flavors}],
            "preemption": _preemption(preempts),
        },
    }


def local_queue(team: TeamLike) -> dict[str, Any]:
    """The team's LocalQueue in its namespace: what a job names with `kueue.x-k8s.io/queue-name`."""
    return {
        "apiVersion": _api(),
        "kind": "LocalQueue",
        "metadata": {"name": team.name, "namespace": team.name},
        "spec": {"clusterQueue": team.name},
    }


def namespace(team: TeamLike) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team.name}}


def workload_priority_class(item: QosLike) -> dict[str, Any]:
    """The QOS as a Kueue WorkloadPriorityClass: the priority Kueue admits and preempts by."""
    name = dns_label(item.name, field=f"gpuforge:scheduler.qos[{item.name}].name")
    return {
        "apiVersion": _api(),
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": name},
        "value": item.priority,
        "description": f"gpuforge QOS {item.name}",
    }


def priority_class(item: QosLike) -> dict[str, Any]:
    """The QOS as a core PriorityClass, for the pods of an admitted workload (kube-scheduler's order)."""
    name = dns_label(item.name, field=f"gpuforge:scheduler.qos[{item.name}].name")
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": item.priority,
        "globalDefault": False,
        "preemptionPolicy": "PreemptLowerPriority" if item.preempts else "Never",
        "description": f"gpuforge QOS {item.name}",
    }
