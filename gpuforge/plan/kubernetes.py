"""The plan's view of a Kubernetes stack's add-ons and Kueue objects.

Summarised from the very files `gpuforge scheduler render` writes (`kubernetes.manifests.stack_addons`),
so the plan cannot show one thing and the render apply another: each add-on's pinned version and image
(or that it renders nothing, and why), Kueue's Topology levels, the ResourceFlavors, per team its
ClusterQueue's GPU quota and LocalQueue, and the priority classes. Beside them, the EKS managed add-ons
EksCluster makes (VPC CNI, kube-proxy, CoreDNS) at the versions gpuforge/data/eks_addons.yaml pins.
"""

from __future__ import annotations

from typing import Any

import yaml

from gpuforge.components import eks_addons
from gpuforge.kubernetes.addons import pins
from gpuforge.kubernetes.kueue import GPU_RESOURCE
from gpuforge.kubernetes.manifests import INDEX, objects_of, stack_addons
from gpuforge.stack_config import StackConfig


def kubernetes_document(config: StackConfig) -> dict[str, Any] | None:
    """The plan's `kubernetes` key: None unless the stack's scheduler is Kubernetes."""
    if config.scheduler.type != "kubernetes":
        return None
    files = stack_addons(config)
    index = yaml.safe_load(files[INDEX])
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in objects_of(files):
        by_kind.setdefault(obj["kind"], []).append(obj)
    addons = {}
    for name, entry in index["addons"].items():
        addon = pins().addons[name]
        image = addon.images[0]
        addons[name] = {
            "version": entry["version"],
            "rendered": entry["rendered"],
            "image": image.reference if image.digest is not None else f"{image.repository}:{image.tag}",
            "why_not": entry.get("why_not"),
        }
    (topology,) = by_kind["Topology"]
    local_queues = {obj["spec"]["clusterQueue"]: obj["metadata"] for obj in by_kind.get("LocalQueue", [])}
    queues = []
    for queue in by_kind.get("ClusterQueue", []):
        name = queue["metadata"]["name"]
        local = local_queues[name]
        quota = sum(
            resource["nominalQuota"]
            for group in queue["spec"]["resourceGroups"]
            for flavor in group["flavors"]
            for resource in flavor["resources"]
            if resource["name"] == GPU_RESOURCE
        )
        queues.append(
            {
                "team": local["namespace"],
                "cluster_queue": name,
                "local_queue": f"{local['namespace']}/{local['name']}",
                "gpu_quota": quota,
            }
        )
    return {
        "addons": addons,
        "eks_addons": {
            name: {"version": pin.version, "source": pin.source}
            for name, pin in eks_addons.for_version(str(config.scheduler.kubernetes_version)).items()
        },
        "topology": {
            "name": topology["metadata"]["name"],
            "levels": [level["nodeLabel"] for level in topology["spec"]["levels"]],
        },
        "flavors": [
            {
                "name": flavor["metadata"]["name"],
                "node_labels": flavor["spec"]["nodeLabels"],
                "tolerates": [toleration["key"] for toleration in flavor["spec"].get("tolerations", [])],
            }
            for flavor in by_kind["ResourceFlavor"]
        ],
        "queues": queues,
        "priority_classes": [
            {"name": obj["metadata"]["name"], "value": obj["value"]}
            for obj in by_kind.get("WorkloadPriorityClass", [])
        ],
        "files": files,
    }


def kubernetes_lines(document: dict[str, Any] | None) -> list[str]:
    """The summary's `add-ons` and `Kueue` lines (README, "Kubernetes add-ons")."""
    if document is None:
        return []
    addons = "; ".join(
        f"{name} {addon['version']} ({addon['image']})"
        if addon["rendered"]
        else f"{name} {addon['version']} NOT RENDERED: its image {addon['image']} has no digest from a published "
        "source and gpuforge applies no image by tag (the reason and the fix: `why_not` in index.yaml and --json)"
        for name, addon in document["addons"].items()
    )
    topology = document["topology"]
    kueue = [
        f"Topology {topology['name']}: {' > '.join(topology['levels'])}",
        *(
            f"ResourceFlavor {flavor['name']} ("
            + ", ".join(f"{key}={value}" for key, value in flavor["node_labels"].items())
            + (f", tolerates {', '.join(flavor['tolerates'])}" if flavor["tolerates"] else "")
            + ")"
            for flavor in document["flavors"]
        ),
        *(
            f"ClusterQueue {queue['cluster_queue']} {queue['gpu_quota']} {GPU_RESOURCE} "
            f"(LocalQueue {queue['local_queue']})"
            for queue in document["queues"]
        ),
    ]
    if document["priority_classes"]:
        kueue.append(
            "priority classes "
            + ", ".join(f"{item['name']} {item['value']}" for item in document["priority_classes"])
        )
    first, *rest = kueue
    managed = ", ".join(f"{name} {addon['version']}" for name, addon in document["eks_addons"].items())
    return [
        f"  add-ons    {addons}",
        f"             EKS add-ons (EKS manages their images): {managed}",
        f"  Kueue      {first}",
        *(f"             {line}" for line in rest),
    ]
