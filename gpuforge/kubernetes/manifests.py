"""`render_addons`: every Kubernetes object gpuforge applies for the add-ons, as YAML files.

One file per object (`<kind>/<name>.yaml`, namespaced ones `<kind>/<namespace>.<name>.yaml`),
Kueue's chart values as `addons/kueue-values.yaml`, and `index.yaml` naming each add-on's
version, images by digest with their sources, and what was not rendered and why. Each file's
first line names the file and the cluster (`gpuforge.rendered_set` recognises a render by it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

import yaml

from gpuforge.errors import InputError
from gpuforge.kubernetes import kueue, node_agent
from gpuforge.kubernetes.addons import (
    DATA_FILE,
    Addon,
    Image,
    efa_device_plugin,
    kueue_values,
    nvidia_device_plugin,
    ownership_labels,
    pins,
)
from gpuforge.kubernetes.check import check_object
from gpuforge.kubernetes.kueue import GpuNodeGroup, QosLike, TeamLike
from gpuforge.scheduler import reserved

if TYPE_CHECKING:
    from gpuforge.stack_config import StackConfig

# `gpuforge scheduler render` writes these for a `type: kubernetes` stack (the Slurm files for a Slurm one).
HEADER = "# gpuforge scheduler render: {path} for cluster {cluster}"
INDEX = "index.yaml"


def _header(path: str, cluster: str) -> str:
    return HEADER.format(path=path, cluster=cluster)


def rendered_for(cluster: str) -> Callable[[PurePosixPath, str], bool]:
    """The rendered_set.Recognise of this renderer: the header line of `cluster`'s own files."""

    def recognise(path: PurePosixPath, first_line: str) -> bool:
        return first_line == _header(str(path), cluster)

    return recognise


def _dump(path: str, cluster: str, document: dict[str, Any]) -> str:
    return _header(path, cluster) + "\n" + yaml.safe_dump(document, sort_keys=False, default_flow_style=False)


def _path(obj: dict[str, Any]) -> str:
    metadata = obj["metadata"]
    name = f"{metadata['namespace']}.{metadata['name']}" if "namespace" in metadata else metadata["name"]
    return f"{obj['kind'].lower()}/{name}.yaml"


def _addon_objects(addon: Addon, build: Callable[[Image], dict[str, Any]]) -> list[dict[str, Any]]:
    return [] if addon.unsourced else [build(addon.images[0])]


def _index_entry(addon: Addon, files: list[str]) -> dict[str, Any]:
    entry: dict[str, Any] = {"version": addon.version, "source": addon.source}
    if addon.chart is not None:
        entry["chart"] = addon.chart.model_dump(exclude_none=True)
    entry["images"] = [image.model_dump(exclude_none=True) for image in addon.images]
    if addon.unsourced:
        entry["rendered"] = False
        entry["why_not"] = addon.unsourced
    else:
        entry["rendered"] = True
        entry["files"] = files
    return entry


def _stamp(cluster: str, objects: Sequence[dict[str, Any]]) -> None:
    """Give every object the cluster's ownership labels, the one place they are set (addons.MANAGED_BY_LABEL)."""
    for obj in objects:
        obj["metadata"]["labels"] = {**obj["metadata"].get("labels", {}), **ownership_labels(cluster)}


def _refuse_broken(cluster: str, objects: Sequence[dict[str, Any]]) -> None:
    """InputError naming each object that breaks a mandatory Kubernetes rule (the policy pack's own rules,
    `gpuforge.kubernetes.check.check_object`), so that what the pack would refuse is never written."""
    broken = [
        finding
        for obj in objects
        for finding in check_object(obj, f"{_path(obj)} {obj['kind']}/{obj['metadata']['name']}")
        if finding.mandatory
    ]
    if broken:
        lines = "\n".join(f"  {finding.where}: {finding.policy}: {finding.message}" for finding in broken)
        raise InputError(
            f"cluster {cluster}: {len(broken)} rendered object(s) break a mandatory Kubernetes rule, so nothing "
            f"was written:\n{lines}\nFix: correct what they are built from (the add-on pins in gpuforge/"
            f"{DATA_FILE}, the stack's gpuforge:scheduler block), then render again."
        )


def render_addons(
    cluster: str,
    groups: Sequence[GpuNodeGroup],
    teams: Sequence[TeamLike],
    qos: Sequence[QosLike],
    place: Callable[[Image], Image] | None = None,
) -> dict[str, str]:
    """Every file of the cluster's Kubernetes add-ons and Kueue objects: relative path -> text.

    `place` gives each add-on image as the cluster's nodes pull it (`stack_addons`: the stack region's copy of
    an image AWS serves per region, with the digest ECR names when applying); None keeps the pins as they are.

    Raises InputError for a team or QOS block Kubernetes cannot carry (a name that is not a DNS label,
    or that Kubernetes or an add-on already uses: gpuforge.scheduler.reserved; a preemption Kueue's
    priority order cannot say), or for an object that breaks a mandatory Kubernetes rule of the policy
    pack (an image not by digest, a GPU pod without the taint's toleration), before anything is written.
    """
    if not groups:
        raise InputError(f"cluster {cluster}: no GPU node group to render Kubernetes add-ons for.")
    kueue.dns_label(cluster, field="stack name (the cluster's name)")
    reserved.refuse(reserved.kubernetes_problems(teams, qos))
    table = pins()
    preempts = kueue.check_preemption(qos)
    known = {item.name for item in qos}
    for team in teams:
        unknown = [name for name in team.qos if name not in known]
        if unknown:
            raise InputError(
                f"gpuforge:scheduler.teams[{team.name}].qos: {', '.join(unknown)} is not in gpuforge:scheduler.qos. "
                "Fix: define it there or remove it from the team."
            )
    objects: list[dict[str, Any]] = [kueue.topology(cluster, groups[0].instance_type)]
    objects += [kueue.resource_flavor(cluster, group) for group in groups]
    for team in teams:
        objects += [kueue.namespace(team), kueue.cluster_queue(cluster, team, groups, preempts=preempts)]
        objects.append(kueue.local_queue(team))
    for item in qos:
        objects += [kueue.workload_priority_class(item), kueue.priority_class(item)]
    objects += [kueue.acceptance_workload_priority_class(), kueue.acceptance_priority_class()]
    objects += node_agent.objects()  # the identity the node agent drains its node with
    index: dict[str, Any] = {"cluster": cluster, "addons": {}}
    files: dict[str, str] = {}
    builders: dict[str, Callable[[Image], dict[str, Any]]] = {
        "nvidia-device-plugin": nvidia_device_plugin,
        "aws-efa-k8s-device-plugin": efa_device_plugin,
    }
    for name, build in builders.items():
        addon = table.addons[name]
        if place is not None:
            addon = addon.model_copy(update={"images": tuple(place(image) for image in addon.images)})
        built = _addon_objects(addon, build)
        index["addons"][name] = _index_entry(addon, [_path(obj) for obj in built])
        objects += built
    _stamp(cluster, objects)
    _refuse_broken(cluster, objects)
    for name, addon in table.addons.items():
        if name in builders or name == "kueue":
            continue
        # An add-on gpuforge pins but cannot render yet: only an unsourced one may be in the table.
        if not addon.unsourced:
            raise InputError(
                f"gpuforge/{DATA_FILE}: addons.{name} has sourced digests but gpuforge has no renderer for it. "
                "Fix: add its builder to gpuforge/kubernetes/manifests.py, or remove the entry."
            )
        index["addons"][name] = _index_entry(addon, [])
    kueue_addon = table.addons["kueue"]
    values_path = "addons/kueue-values.yaml"
    index["addons"]["kueue"] = _index_entry(kueue_addon, [] if kueue_addon.unsourced else [values_path])
    if not kueue_addon.unsourced:
        files[values_path] = _dump(values_path, cluster, kueue_values(kueue_addon.images[0]))
    for obj in objects:
        path = _path(obj)
        if path in files:
            raise InputError(
                f"cluster {cluster}: two objects render to {path}. Fix: give the teams distinct names."
            )
        files[path] = _dump(path, cluster, obj)
    files[INDEX] = _dump(INDEX, cluster, index)
    return dict(sorted(files.items()))


def stack_addons(config: StackConfig, *, ecr: Any | None = None) -> dict[str, str]:
    """The add-on files of a stack's cluster: its GPU node group (named as components.eks_nodes
    names it) and the `gpuforge:scheduler` teams and QOS the Slurm accounts are made from.

    An image AWS serves per region is the stack region's copy. With `ecr` (a boto3 ECR client in the stack's
    region: `scheduler apply`), such an image with no published digest gets the digest ECR names for its tag
    now (`gpuforge.kubernetes.ecr_images`); without it (`scheduler render`, offline) it stays unrendered."""
    from gpuforge import hardware
    from gpuforge.kubernetes import ecr_images

    def place(image: Image) -> Image:
        if not image.regional:
            return image
        local = image.model_copy(update={"repository": ecr_images.in_region(image.repository, config.region)})
        if local.digest is not None or ecr is None:
            return local
        return ecr_images.with_digest(
            local, ecr_images.resolve_digest(ecr, local.repository, local.tag), config.region
        )

    group = GpuNodeGroup(
        name=f"{config.stack}-gpu",
        instance_type=hardware.get(config.instance_type),
        node_count=config.node_count,
    )
    return render_addons(config.stack, [group], config.scheduler.teams, config.scheduler.qos, place)


def objects_of(files: dict[str, str]) -> list[dict[str, Any]]:
    """The Kubernetes objects among rendered files (not the index or chart values), for validation."""
    found = []
    for path, text in files.items():
        if path == INDEX or path.startswith("addons/"):
            continue
        document = yaml.safe_load(text)
        assert isinstance(document, dict), path
        found.append(document)
    return found
