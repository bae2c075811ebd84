"""Kubernetes rules: what runs on a gpuforge EKS cluster is pinned, a GPU pod is shaped to land and run, and no
workload passes unread.

One definition per rule, used twice:
- under `pulumi preview --policy-pack policies/`, on pulumi-kubernetes resources. Their type token is
  `kubernetes:<group/version>:<Kind>` (`kubernetes:apps/v1:DaemonSet`, `kubernetes:batch/v1:Job`, a custom
  resource such as JobSet as `kubernetes:jobset.x-k8s.io/v1alpha2:JobSet`), and their props are the object's
  own fields (`spec.template.spec.containers`), as in Pulumi's Kubernetes policy template
  (github.com/pulumi/templates-policy, kubernetes-typescript/index.ts at 976f93f, reads `svc.spec.type`).
  A `kubernetes:yaml/v2:ConfigGroup` (or ConfigFile) is a component that "creates a set of Kubernetes
  resources" (https://www.pulumi.com/registry/packages/kubernetes/api-docs/yaml/v2/configgroup/): each object
  is a resource of its own type and is checked there, the group itself is not. (No Pulumi CLI runs here, so
  this path has not run under a live engine. Under the SDK's mocks, in `gpuforge policy check`, the provider
  does not run either: gpuforge reads a yaml/v2 component's objects itself and lists a Helm chart as not
  checked, gpuforge/policycheck/kubernetes_components.py; tests/policycheck/test_policycheck_kubernetes.py
  runs a program written with the real SDK, the `kubernetes-iac` extra.) A `helm.sh/v3:Release` renders its
  images on the server and is not checked: Kueue's chart values are checked where they are made
  (`kubernetes_objects.PULUMI_COMPONENTS`);
- offline, on manifests (`gpuforge policy kubernetes FILE...`, `gpuforge.kubernetes.check`).

Every rule reads objects through `gpuforge.policies.kubernetes_objects`: a List's items, an AppWrapper's
components and the pod specs of every workload kind it knows, at the paths their APIs give.

kubernetes-workload-checked is mandatory, and not a printed note, because a check is only worth its exit code:
CI reads 0 as "checked", so an object whose pods the rules cannot find (a TrainJob, an unknown kind with a pod
template, an image or a GPU request) or that the API server would refuse must fail it. Accepting such a kind is
then a decision someone writes down by name (`gpuforge policy kubernetes --allow-unchecked KIND`, or the pack's
config under `pulumi preview`), never a default.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from pulumi_policy import EnforcementLevel, ReportViolation, ResourceValidationArgs, ResourceValidationPolicy

from gpuforge.kubernetes.addons import pins
from gpuforge.policies.engine_adapter import MISSING, UNKNOWN, elements, unknown_during_preview
from gpuforge.policies.kubernetes_objects import (
    GPU_RESOURCE,
    KUEUE_QUEUE_LABEL,
    ObjectType,
    PodSpec,
    containers,
    image_fields,
    is_list,
    join,
    pod_specs,
    type_of_token,
    unchecked_workloads,
    unreadable,
)
from gpuforge.policies.props import at

SHM_PATH: Final = "/dev/shm"
_DIGEST_REFERENCE = re.compile(r"[^@\s]+@sha256:[0-9a-f]{64}")


def _items(value: Any, path: str) -> list[Any]:
    """A list field's elements; [] when unset or not a list (`unreadable` reports that); stops the rule when
    the list is unknown during preview."""
    if value is UNKNOWN:
        unknown_during_preview(path.split("."))
    if not is_list(value):
        return []
    return elements(value)


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


def unpinned_images(kind: ObjectType, obj: Any) -> list[str]:
    """Each container image (init and ephemeral ones too, and sidecar images a workload names) named by tag and
    not by `@sha256:<64 hex>`."""
    named = [
        (f"{path}.image", at(container, "image"))
        for pod in pod_specs(kind, obj)
        for path, container in containers(pod)
    ]
    named += list(image_fields(kind, obj))
    found = []
    for path, value in named:
        image = _text(value, path)
        if not isinstance(value, str) or image is None or _DIGEST_REFERENCE.fullmatch(image):
            continue  # unset, or not text (kubernetes-workload-checked reports that)
        found.append(
            f"{path} is {image!r}, a tag: the registry can point it at other content between "
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
        for path, container in containers(pod, ("containers", "initContainers"))
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


def gpu_pod_shape(kind: ObjectType, obj: Any) -> list[str]:
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
        if not tolerated and not pod.queued:
            found.append(
                f"{pod.path} requests {GPU_RESOURCE} but does not tolerate the taint {taint.key}:{taint.effect} "
                "every gpuforge GPU node carries, so it never schedules (it stays Pending). Fix: add to "
                f"{pod.path}.tolerations {{key: {taint.key}, operator: Exists, effect: {taint.effect}}}, or submit "
                f"it through Kueue (label {join(pod.queue_path, 'metadata.labels')}.{KUEUE_QUEUE_LABEL}), whose GPU flavor "
                "adds it."
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


def gpu_shared_memory(kind: ObjectType, obj: Any) -> list[str]:
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


Check = Callable[[ObjectType, Any], list[str]]


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


def _policy(name: str, description: str, check: Check, level: EnforcementLevel) -> KubernetesRule:
    def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
        object_type = type_of_token(args.resource_type)
        if object_type is None:
            return
        for message in check(object_type, args.props):
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


def unchecked(kind: ObjectType, obj: Any) -> list[str]:
    """What no other rule could read: objects the API server would refuse, and workloads whose pods the rules
    cannot find (`kubernetes_objects.unreadable`, `.unchecked_workloads`)."""
    return unreadable(kind, obj) + [item.message for item in unchecked_workloads(kind, obj)]


WORKLOAD_RULE = _policy(
    "kubernetes-workload-checked",
    "Every Kubernetes object that makes pods is one whose pods the rules read (a List's items, an AppWrapper's "
    "components and every pod template of a known workload kind); a workload they cannot judge fails.",
    unchecked,
    EnforcementLevel.MANDATORY,
)
RULES: Final = (IMAGE_RULE, GPU_POD_RULE, SHM_RULE, WORKLOAD_RULE)
KUBERNETES_IMAGE_DIGEST = IMAGE_RULE.policy
KUBERNETES_GPU_POD = GPU_POD_RULE.policy
KUBERNETES_GPU_SHM = SHM_RULE.policy
KUBERNETES_WORKLOAD_CHECKED = WORKLOAD_RULE.policy
