"""Kubernetes rules: what runs on a gpuforge EKS cluster is pinned, and a GPU pod is shaped to land and run.

One definition per rule, used twice:
- under `pulumi preview --policy-pack policies/`, on pulumi-kubernetes resources. Their type token is
  `kubernetes:<group/version>:<Kind>` (`kubernetes:apps/v1:DaemonSet`, `kubernetes:batch/v1:Job`, a custom
  resource such as JobSet as `kubernetes:jobset.x-k8s.io/v1alpha2:JobSet`), and their props are the object's
  own fields (`spec.template.spec.containers`), as in Pulumi's Kubernetes policy template
  (github.com/pulumi/templates-policy, kubernetes-typescript/index.ts at 976f93f, reads `svc.spec.type`).
  A `kubernetes:yaml/v2:ConfigGroup` (or ConfigFile) is a component that "creates a set of Kubernetes
  resources" (https://www.pulumi.com/registry/packages/kubernetes/api-docs/yaml/v2/configgroup/): each object
  is a resource of its own type and is checked there, the group itself is not. (pulumi-kubernetes is not
  installed here, so this path has not been run under a live engine.) A `helm.sh/v3:Release` renders its
  images on the server and is not checked: Kueue's chart values are checked where they are made;
- offline, on manifests (`gpuforge kubernetes check FILE...`, `gpuforge.kubernetes.check`).

The checks read objects through `props.at`, which serves plain dicts and the engine's proxies alike; a value
unknown during preview stops the rule with the engine's advisory "can't run during preview".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from pulumi_policy import EnforcementLevel, ReportViolation, ResourceValidationArgs, ResourceValidationPolicy

from gpuforge.kubernetes.addons import pins
from gpuforge.policies.engine_adapter import MISSING, UNKNOWN, elements, unknown_during_preview
from gpuforge.policies.props import at

GPU_RESOURCE: Final = "nvidia.com/gpu"
# Kueue adds its ResourceFlavor's tolerations (gpuforge's flavor carries the GPU taint's) to the pods of a
# workload it admits: https://kueue.sigs.k8s.io/docs/concepts/resource_flavor/ (ResourceFlavor tolerations).
KUEUE_QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
SHM_PATH: Final = "/dev/shm"
_DIGEST_REFERENCE = re.compile(r"[^@\s]+@sha256:[0-9a-f]{64}")
_CONTAINER_LISTS: Final = ("containers", "initContainers", "ephemeralContainers")

# Where each pod-template-bearing kind keeps its pod spec; "*" is every element of a list, "{}" every value of
# an object.
POD_SPEC_PATHS: Final[dict[str, tuple[str, ...]]] = {
    "Pod": ("spec",),
    "PodTemplate": ("template", "spec"),
    "Deployment": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "ReplicationController": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
    "JobSet": ("spec", "replicatedJobs", "*", "template", "spec", "template", "spec"),
    # Kubeflow's training operators key their replica specs by role (Launcher, Worker, Master).
    "MPIJob": ("spec", "mpiReplicaSpecs", "{}", "template", "spec"),
    "PyTorchJob": ("spec", "pytorchReplicaSpecs", "{}", "template", "spec"),
}


@dataclass(frozen=True)
class PodSpec:
    """One pod spec of an object, with the dotted path it sits at (for messages)."""

    path: str
    spec: Any


def _items(value: Any, path: str) -> list[Any]:
    """A list field's elements; [] when unset; stops the rule when the list is unknown during preview."""
    if value is UNKNOWN:
        unknown_during_preview(path.split("."))
    if value is MISSING or value is None:
        return []
    return elements(value)


def _keys(value: Any, path: str) -> list[str]:
    """An object field's keys; [] when unset; stops the rule when the object is unknown during preview."""
    if value is UNKNOWN:
        unknown_during_preview(path.split("."))
    if not isinstance(value, Mapping):
        return []
    return sorted(str(key) for key in value)


def pod_specs(kind: str, obj: Any) -> Iterator[PodSpec]:
    """Every pod spec of `obj` (a `kind` that bears none yields nothing)."""
    steps = POD_SPEC_PATHS.get(kind)
    if steps is None:
        return
    found: list[tuple[str, Any]] = [("", obj)]
    for step in steps:
        following: list[tuple[str, Any]] = []
        for path, value in found:
            if step == "*":
                following += [(f"{path}[{index}]", item) for index, item in enumerate(_items(value, path))]
            elif step == "{}":
                following += [(f"{path}.{key}", at(value, key)) for key in _keys(value, path)]
            else:
                inner = at(value, step)
                if inner is UNKNOWN:
                    unknown_during_preview([*path.split("."), step])
                if inner is not MISSING and inner is not None:
                    following.append((f"{path}.{step}" if path else step, inner))
        found = following
    yield from (PodSpec(path, spec) for path, spec in found)


def _containers(pod: PodSpec, lists: tuple[str, ...] = _CONTAINER_LISTS) -> Iterator[tuple[str, Any]]:
    for field in lists:
        for index, container in enumerate(_items(at(pod.spec, field), f"{pod.path}.{field}")):
            yield f"{pod.path}.{field}[{index}]", container


def _text(value: Any, path: str) -> str | None:
    if value is UNKNOWN:
        unknown_during_preview(path.split("."))
    if value is MISSING or value is None:
        return None
    return str(value)


def _image_fix(image: str) -> str:
    name_part, _, _ = image.partition("@")
    slash = name_part.rfind("/")
    colon = name_part.rfind(":")
    repository = name_part[:colon] if colon > slash else name_part
    tag = name_part[colon + 1 :] if colon > slash else "latest"
    return (
        f"Fix: name it by digest, {repository}@sha256:<digest> (or {repository}:{tag}@sha256:<digest> to keep "
        f"the tag for people), with the digest the registry gives now, e.g. `crane digest {repository}:{tag}` "
        f"or `docker buildx imagetools inspect {repository}:{tag}`."
    )


def unpinned_images(kind: str, obj: Any) -> list[str]:
    """Each container image (init and ephemeral ones too) named by tag and not by `@sha256:<64 hex>`."""
    found = []
    for pod in pod_specs(kind, obj):
        for path, container in _containers(pod):
            image = _text(at(container, "image"), f"{path}.image")
            if image is None or _DIGEST_REFERENCE.fullmatch(image):
                continue
            found.append(
                f"{path}.image is {image!r}, a tag: the registry can point it at other content between "
                f"one pull and the next, so nodes run different code under one name. {_image_fix(image)}"
            )
    return found


def _gpu_quantity(container: Any, path: str, section: str) -> str | None:
    """The GPU count as written; a whole number in canonical form, since the engine passes numbers as floats
    (8 arrives as 8.0) and YAML may quote it ("8")."""
    value = _text(at(container, "resources", section, GPU_RESOURCE), f"{path}.resources.{section}")
    if value is None:
        return None
    try:
        number = Decimal(value)
    except InvalidOperation:
        return value
    return str(int(number)) if number.is_finite() and number == number.to_integral_value() else value


def _requests_gpus(value: str | None) -> bool:
    return value is not None and value != "0"


def _gpu_containers(pod: PodSpec) -> list[tuple[str, Any]]:
    """The containers that ask for GPUs, in requests or limits (ephemeral containers take no resources)."""
    return [
        (path, container)
        for path, container in _containers(pod, ("containers", "initContainers"))
        if _requests_gpus(_gpu_quantity(container, path, "requests"))
        or _requests_gpus(_gpu_quantity(container, path, "limits"))
    ]


def _tolerates_gpu_taint(toleration: Any, path: str) -> bool:
    """Kubernetes' matching: https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/."""
    taint = pins().gpu_taint
    operator = _text(at(toleration, "operator"), f"{path}.operator") or "Equal"
    key = _text(at(toleration, "key"), f"{path}.key") or ""
    effect = _text(at(toleration, "effect"), f"{path}.effect") or ""
    if effect not in ("", taint.effect):
        return False
    if operator == "Exists":
        return key in ("", taint.key)
    # The value as components/eks_nodes.py registers it (gpu_taint in gpuforge/data/kubernetes_addons.yaml).
    return key == taint.key and _text(at(toleration, "value"), f"{path}.value") == taint.value


def _queued_by_kueue(obj: Any) -> bool:
    return _text(at(obj, "metadata", "labels", KUEUE_QUEUE_LABEL), "metadata.labels") is not None


def gpu_pod_shape(kind: str, obj: Any) -> list[str]:
    """A GPU pod tolerates the GPU taint, and each GPU container's requests equal its limits."""
    taint = pins().gpu_taint
    found = []
    for pod in pod_specs(kind, obj):
        gpu = _gpu_containers(pod)
        if not gpu:
            continue
        tolerations = _items(at(pod.spec, "tolerations"), f"{pod.path}.tolerations")
        tolerated = any(
            _tolerates_gpu_taint(item, f"{pod.path}.tolerations[{index}]")
            for index, item in enumerate(tolerations)
        )
        if not tolerated and not _queued_by_kueue(obj):
            found.append(
                f"{pod.path} requests {GPU_RESOURCE} but does not tolerate the taint {taint.key}:{taint.effect} "
                "every gpuforge GPU node carries, so it never schedules (it stays Pending). Fix: add to "
                f"{pod.path}.tolerations {{key: {taint.key}, operator: Exists, effect: {taint.effect}}}, or submit "
                f"it through Kueue (label metadata.labels.{KUEUE_QUEUE_LABEL}), whose GPU flavor adds it."
            )
        for path, container in gpu:
            requests = _gpu_quantity(container, path, "requests")
            limits = _gpu_quantity(container, path, "limits")
            if limits is None:
                found.append(
                    f"{path}.resources requests {GPU_RESOURCE}: {requests} without a limit; Kubernetes takes GPUs "
                    "only in limits (https://kubernetes.io/docs/tasks/manage-gpus/scheduling-gpus/) and refuses "
                    f"the pod. Fix: set {path}.resources.limits.{GPU_RESOURCE}: {requests}."
                )
            elif requests is not None and requests != limits:
                found.append(
                    f"{path}.resources: {GPU_RESOURCE} requests {requests} but limits {limits}; GPUs cannot be "
                    "overcommitted, so requests must equal limits "
                    "(https://kubernetes.io/docs/tasks/manage-gpus/scheduling-gpus/). Fix: set both to the GPUs "
                    f"the container uses, or drop requests.{GPU_RESOURCE} (it defaults to the limit)."
                )
    return found


def _memory_volumes(pod: PodSpec) -> set[str]:
    names = set()
    for index, volume in enumerate(_items(at(pod.spec, "volumes"), f"{pod.path}.volumes")):
        where = f"{pod.path}.volumes[{index}]"
        if _text(at(volume, "emptyDir", "medium"), f"{where}.emptyDir.medium") == "Memory":
            names.add(_text(at(volume, "name"), f"{where}.name") or "")
    return names


def gpu_shared_memory(kind: str, obj: Any) -> list[str]:
    """Each GPU container mounts a memory-backed emptyDir at /dev/shm.

    NCCL's shared-memory transport and its host buffers live in /dev/shm (NCCL troubleshooting, "Shared memory":
    https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html), and containerd's CRI plugin
    gives a pod's /dev/shm 64 MiB unless a volume replaces it (`defaultShmSize = int64(1024 * 1024 * 64)` in its
    sandbox code, github.com/containerd/containerd).
    """
    found = []
    for pod in pod_specs(kind, obj):
        memory = _memory_volumes(pod)
        for path, container in _gpu_containers(pod):
            mounts = _items(at(container, "volumeMounts"), f"{path}.volumeMounts")
            if any(
                _text(at(mount, "name"), f"{path}.volumeMounts") in memory
                and (_text(at(mount, "mountPath"), f"{path}.volumeMounts") or "").rstrip("/") == SHM_PATH
                for mount in mounts
            ):
                continue
            found.append(
                f"{path} uses GPUs but has no memory-backed volume at {SHM_PATH}: the runtime's default is 64 MiB, "
                "and NCCL fails or falls back to slower paths when its shared-memory segments do not fit. Fix: "
                f"add to {pod.path}.volumes {{name: dshm, emptyDir: {{medium: Memory}}}} and to {path}.volumeMounts "
                f"{{name: dshm, mountPath: {SHM_PATH}}}."
            )
    return found


Check = Callable[[str, Any], list[str]]


@dataclass(frozen=True)
class KubernetesRule:
    """One rule: the pack's policy and, for the offline check, its check and level."""

    check: Check
    policy: ResourceValidationPolicy

    @property
    def name(self) -> str:
        return self.policy.name

    @property
    def mandatory(self) -> bool:
        return self.policy.enforcement_level == EnforcementLevel.MANDATORY


def kind_of(resource_type: str) -> str | None:
    """The Kind of a pulumi-kubernetes type token (`kubernetes:apps/v1:DaemonSet` -> DaemonSet)."""
    provider, _, rest = resource_type.partition(":")
    if provider != "kubernetes" or ":" not in rest:
        return None
    return rest.rsplit(":", 1)[1]


def _policy(name: str, description: str, check: Check, level: EnforcementLevel) -> KubernetesRule:
    def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
        kind = kind_of(args.resource_type)
        if kind is None:
            return
        for message in check(kind, args.props):
            report(message, None)

    return KubernetesRule(
        check,
        ResourceValidationPolicy(
            name=name, description=description, validate=validate, enforcement_level=level
        ),
    )


IMAGE_RULE = _policy(
    "kubernetes-image-digest",
    "Every container image of a Kubernetes pod template is named by digest (repo@sha256:...), never by tag alone.",
    unpinned_images,
    EnforcementLevel.MANDATORY,
)
GPU_POD_RULE = _policy(
    "kubernetes-gpu-pod",
    f"A pod that requests {GPU_RESOURCE} tolerates gpuforge's GPU node taint, and its GPU requests equal its limits.",
    gpu_pod_shape,
    EnforcementLevel.MANDATORY,
)
SHM_RULE = _policy(
    "kubernetes-gpu-shm",
    f"Each GPU container mounts a memory-backed emptyDir at {SHM_PATH} for NCCL.",
    gpu_shared_memory,
    EnforcementLevel.ADVISORY,
)
RULES: Final = (IMAGE_RULE, GPU_POD_RULE, SHM_RULE)
KUBERNETES_IMAGE_DIGEST = IMAGE_RULE.policy
KUBERNETES_GPU_POD = GPU_POD_RULE.policy
KUBERNETES_GPU_SHM = SHM_RULE.policy
