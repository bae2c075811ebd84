"""Kueue's objects for a gpuforge cluster: topology, flavors, team queues and QOS priorities.

Read from the same `gpuforge:scheduler` teams and qos blocks the Slurm path turns into accounts
(components/specs.py TeamSpec, QosSpec), so one stack file describes both schedulers:
- a `Topology` whose levels are the network-node layers AWS labels EKS nodes with
  (`topology.k8s.aws/network-node-layer-1..N`, N from the catalog's `topology_layers`) and
  then the host, so Kueue's topology-aware scheduling places a job under the fewest switches;
- a `ResourceFlavor` per GPU node group, selecting its nodes by the node-group label and
  tolerating the GPU taint;
- per team a `Namespace`, a `ClusterQueue` whose nominal `nvidia.com/gpu` quota is the team's
  gpuQuota, and whose CPU, memory and EFA quotas are the same share of the node group's
  (`team_quotas`), all in one cohort so idle quota is borrowed and reclaimed, and a `LocalQueue`;
- per QOS a Kueue `WorkloadPriorityClass` and a core `PriorityClass` with its priority;
- `gpuforge-acceptance`, both kinds again, above every QOS: the priority of `gpuforge validate`'s Jobs.

What Kueue counts: every resource a pod requests must be covered by its ClusterQueue or excluded in
Kueue's configuration, or Kueue leaves the workload pending for good ("couldn't assign flavors to pod
set main: resource X unavailable in ClusterQueue": kubernetes-sigs/kueue
pkg/scheduler/flavorassigner/flavorassigner.go, findFlavorForPodSets, at tag v0.17.6, commit
7ed46abf7ed7e211bc51956c852e0ffa8153efa4; "By default, administrators must specify all resources required
by Pods in the ClusterQueues `.spec.resourceGroups[*]`", https://kueue.sigs.k8s.io/docs/tasks/manage/administer_cluster_quotas/#exclude-arbitrary-resources-in-the-quota-management).
`COVERED_RESOURCES` are covered, with quotas; `gpuforge.kubernetes.addons.KUEUE_EXCLUDED_RESOURCE_PREFIXES`
are excluded, each with its reason there; `pods` is neither, on purpose: Kueue counts a workload's pods
only where a ClusterQueue covers `pods` (flavorassigner.go, assignFlavors, same commit), and no pod may
request it (https://kueue.sigs.k8s.io/docs/concepts/workload/#reserved-resource-names).

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
from gpuforge.node.context import expects_efa
from gpuforge.scheduler import reserved

HOSTNAME_LABEL = "kubernetes.io/hostname"
# EKS labels nodes from DescribeInstanceTopology (cloud-provider-aws #1038); layer 1 is the top.
LAYER_LABEL = "topology.k8s.aws/network-node-layer-{}"
GPU_RESOURCE = "nvidia.com/gpu"
# The EFA device plugin's resource (gpuforge.kubernetes.addons.efa_device_plugin): one per EFA interface.
EFA_RESOURCE = "vpc.amazonaws.com/efa"
# What every team's ClusterQueue covers, in one resource group: they are one node group's, so Kueue must give
# them the same flavor ("To tie two or more resources to the same set of flavors, list them in the same resource
# group", https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/#resource-groups).
COVERED_RESOURCES = (GPU_RESOURCE, EFA_RESOURCE, "cpu", "memory")
_KUEUE_PREEMPTION = "https://kueue.sigs.k8s.io/docs/concepts/preemption/"
# Priorities above this are reserved for system classes: kubernetes/kubernetes
# pkg/apis/scheduling/types.go, HighestUserDefinablePriority = int32(1000000000).
MAX_USER_PRIORITY = 1_000_000_000
# `gpuforge validate`'s Jobs run at the highest priority a user class may have, and every QOS must be below it:
# Kueue preempts only workloads of lower priority, within a ClusterQueue and when borrowing
# (ClusterQueue .spec.preemption, withinClusterQueue and borrowWithinCohort LowerPriority:
# https://kueue.sigs.k8s.io/docs/concepts/preemption/), so no team job can preempt an acceptance run that way.
ACCEPTANCE_PRIORITY_CLASS = reserved.ACCEPTANCE_PRIORITY_CLASS
ACCEPTANCE_PRIORITY = MAX_USER_PRIORITY


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
        if item.priority >= ACCEPTANCE_PRIORITY:
            raise InputError(
                f"gpuforge:scheduler.qos[{item.name}].priority: {item.priority} is not below gpuforge's acceptance "
                f"class {ACCEPTANCE_PRIORITY_CLASS} ({ACCEPTANCE_PRIORITY}, the highest Kubernetes lets a user "
                "priority class have: higher values are reserved for system classes, kubernetes "
                "pkg/apis/scheduling/types.go HighestUserDefinablePriority), which `gpuforge validate`'s Jobs run at "
                "so that no team job preempts them (rule: at most "
                f"{ACCEPTANCE_PRIORITY - 1}). Fix: scale the QOS priorities down to at most {ACCEPTANCE_PRIORITY - 1}, "
                "keeping their order."
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


@dataclass(frozen=True)
class NodeResources:
    """What one node of a type offers the pods Kueue admits, from the hardware catalog (one source of facts).

    The type's capacity as AWS describes it (DescribeInstanceTypes): GPUs, vCPUs, memory, and the EFA
    interfaces gpuforge attaches (every one the type has: gpuforge.node.context.expects_efa). The kubelet's
    allocatable is this less what it keeps back: gpuforge's KubeletConfiguration reserves no CPU or memory
    (components/eks_join.py sets no kubeReserved or systemReserved), so that is the kernel's own memory, the
    image's huge pages (images/scripts/80-system.sh) and the kubelet's eviction threshold, which only the
    running node knows. Quotas are a team's share of the pool; whether a pod fits a node is checked against
    each Node's own allocatable by Kueue's topology-aware scheduling (every gpuforge flavor names a Topology:
    `resource_flavor`) and by kube-scheduler.
    """

    gpus: int
    efa: int
    cpu_millis: int
    memory_mib: int


def node_resources(instance_type: InstanceType) -> NodeResources:
    """One node of `instance_type`: what Kueue's quotas are shares of, and what `gpuforge validate` requests."""
    return NodeResources(
        gpus=instance_type.gpu_count,
        efa=len(instance_type.efa_cards) if expects_efa(instance_type) else 0,
        cpu_millis=instance_type.vcpus * 1000,
        memory_mib=instance_type.memory_mib,
    )


def _share(per_node: int, gpu_quota: int, gpus: int) -> int:
    """`per_node` x gpu_quota / gpus, rounded up: a quota of whole GPUs never lacks the rest of their share."""
    return -(-per_node * gpu_quota // gpus)


def _cpu_quantity(millis: int) -> int | str:
    return millis // 1000 if millis % 1000 == 0 else f"{millis}m"


def team_quotas(gpu_quota: int, instance_type: InstanceType) -> dict[str, int | str]:
    """A team's nominal quota of each of COVERED_RESOURCES: its gpuQuota, and of the rest the same share of the
    node group's as its GPUs are (per GPU, a node's CPUs, memory and EFA interfaces divided by its GPUs).

    Why covered, not excluded: a quota in step with the GPUs is what keeps one team's CPU and memory from
    starving GPUs. Were CPU and memory excluded, Kueue would admit any team's CPU-heavy pods onto GPU nodes
    (the flavor tolerates the GPU taint) until kube-scheduler found no node with CPUs or memory left beside
    idle GPUs, and Kueue's topology-aware scheduling would place pods without looking at either. With every
    team's share in proportion, the teams' quotas add up to the node group's when their gpuQuotas add up to
    its GPUs, and a team using all its CPU or memory quota holds no more of a node than its GPU share (beyond it
    only by borrowing quota another team leaves idle, which that team reclaims when it needs it).
    EFA likewise: covered with the node's interfaces per GPU, so a team's EFA quota is never what holds back a
    job its GPU quota admits, and Kueue places an EFA pod only on a node that offers the interfaces; on a type
    without EFA the quota is 0, and Kueue says a pod asking for one exceeds it.
    """
    node = node_resources(instance_type)
    if node.gpus < 1:
        raise InputError(
            f"instance type {instance_type.name} has no GPUs: Kueue's quotas are shares of a GPU node group. "
            "Fix: give the cluster a GPU instance type from gpuforge's catalog."
        )
    return {
        GPU_RESOURCE: gpu_quota,
        EFA_RESOURCE: _share(node.efa, gpu_quota, node.gpus),
        "cpu": _cpu_quantity(_share(node.cpu_millis, gpu_quota, node.gpus)),
        "memory": f"{_share(node.memory_mib, gpu_quota, node.gpus)}Mi",
    }


def cluster_queue(
    cluster: str, team: TeamLike, groups: Sequence[GpuNodeGroup], *, preempts: bool
) -> dict[str, Any]:
    """The team's ClusterQueue: nominal nvidia.com/gpu = gpuQuota, CPU, memory and EFA in step with it
    (`team_quotas`), borrowing idle quota in the cohort."""
    name = dns_label(team.name, field=f"gpuforge:scheduler.teams[{team.name}].name")
    if len(groups) != 1:
        # gpuQuota is one figure over the cluster; per-flavor quotas would multiply it.
        raise ValueError(f"a team's GPU quota is rendered for exactly one GPU node group, not {len(groups)}")
    flavors = []
    for group in groups:
        quotas = team_quotas(team.gpu_quota, group.instance_type)
        resources = [{"name": resource, "nominalQuota": quotas[resource]} for resource in COVERED_RESOURCES]
        flavors.append({"name": flavor_name(group), "resources": resources})
    return {
        "apiVersion": _api(),
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohortName": cohort_name(cluster),
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [{"coveredResources": list(COVERED_RESOURCES), "flavors": flavors}],
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


def acceptance_workload_priority_class() -> dict[str, Any]:
    """The priority Kueue admits and preempts `gpuforge validate`'s Jobs by (their `kueue.x-k8s.io/priority-class`
    label: Kueue reads a WorkloadPriorityClass from that label before the pods' priorityClassName,
    https://kueue.sigs.k8s.io/docs/concepts/workload_priority_class/; jobframework.ExtractPriority at tag v0.17.6)."""
    return {
        "apiVersion": _api(),
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": ACCEPTANCE_PRIORITY_CLASS},
        "value": ACCEPTANCE_PRIORITY,
        "description": "gpuforge validate: the acceptance runs, above every team QOS",
    }


def acceptance_priority_class() -> dict[str, Any]:
    """The acceptance pods' own priority, above every QOS's, so the kubelet evicts them last under node pressure.

    preemptionPolicy Never: Kueue has made room before it admits the Job (preempting lower workloads where the
    ClusterQueue allows); kube-scheduler preempting pods on top would evict pods of workloads Kueue counts as
    admitted."""
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": ACCEPTANCE_PRIORITY_CLASS},
        "value": ACCEPTANCE_PRIORITY,
        "globalDefault": False,
        "preemptionPolicy": "Never",
        "description": "gpuforge validate: the acceptance runs, above every team QOS",
    }
