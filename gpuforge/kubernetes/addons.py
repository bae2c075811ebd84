"""The pinned Kubernetes add-ons: the NVIDIA and EFA device plugins and Kueue's controller values.

The pins live in `gpuforge/data/kubernetes_addons.yaml`. An image is applied only as
`repository@sha256:digest` with the digest copied from a named published source; an add-on
with an image whose digest no source gives is not rendered at all (`Addon.unsourced`), because
rendering it by tag would apply whatever the tag points at on the day.

Which nodes an add-on runs on is decided by labels gpuforge sets from the hardware catalog
(`node_labels`), never by a list of instance-type names: the EFA device plugin runs where the
catalog says the type has EFA interfaces, so a new EFA type needs no edit here.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpuforge.hardware import InstanceType

DATA_FILE = "data/kubernetes_addons.yaml"
NAMESPACE = "kube-system"
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# The kubelet's device-plugin socket folder: both device plugins register there.
DEVICE_PLUGINS_DIR = "/var/lib/kubelet/device-plugins"
# Every object gpuforge renders carries both labels (`ownership_labels`, stamped once by
# manifests.render_addons): `gpuforge scheduler apply` prunes only objects with both, so it never
# deletes what a person, a chart, or another gpuforge cluster on the same API server made.
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpuforge"
CLUSTER_LABEL = "gpuforge.dev/cluster"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Image(_Strict):
    """One container image: applied by digest only, the tag kept for people and `--why`."""

    repository: str
    tag: str
    digest: str | None
    digest_source: str | None = None
    unsourced: str | None = None
    # AWS serves the image from each region's EKS add-on registry (gpuforge/data/eks_image_registries.yaml):
    # `repository` names one region's copy, and a stack's nodes pull their own region's
    # (`gpuforge.kubernetes.ecr_images`). Unsourced, its digest is read from ECR by `scheduler apply`.
    regional: bool = False

    @model_validator(mode="after")
    def _sourced(self) -> Image:
        if self.digest is None:
            if not self.unsourced:
                raise ValueError(f"{self.repository}:{self.tag}: no digest and no `unsourced` reason")
            return self
        if not _DIGEST.fullmatch(self.digest):
            raise ValueError(f"{self.repository}: digest {self.digest!r} is not sha256:<64 hex>")
        if not self.digest_source:
            raise ValueError(f"{self.repository}@{self.digest}: a digest needs its digest_source")
        return self

    @property
    def reference(self) -> str:
        """`repository@sha256:...`, what a pod spec names; only for a sourced image."""
        if self.digest is None:
            raise ValueError(f"{self.repository}:{self.tag} has no sourced digest")
        return f"{self.repository}@{self.digest}"


class Chart(_Strict):
    name: str
    version: str
    repository: str | None = None
    digest: str | None = None
    digest_source: str | None = None


class Addon(_Strict):
    version: str
    source: str
    images: tuple[Image, ...] = Field(min_length=1)
    chart: Chart | None = None
    api_version: str | None = None

    @property
    def unsourced(self) -> str | None:
        """Why this add-on cannot be rendered (an image without a sourced digest), or None."""
        reasons = [
            f"{image.repository}:{image.tag}: {image.unsourced}"
            for image in self.images
            if image.digest is None
        ]
        return "; ".join(reasons) or None


class NodeLabels(_Strict):
    node_group: str
    gpu_instance_type: str
    efa: str


class Taint(_Strict):
    """The GPU node taint: the node group registers it, the rules and tolerations read it (one source)."""

    key: str
    value: str
    effect: str

    @property
    def registration(self) -> str:
        """`key=value:effect`, the kubelet's `--register-with-taints` form."""
        return f"{self.key}={self.value}:{self.effect}"


class AddonPins(_Strict):
    schema_: int = Field(1, alias="schema")
    node_labels: NodeLabels
    gpu_taint: Taint
    addons: dict[str, Addon]

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def load_pins(path: Traversable | Path) -> AddonPins:
    """An add-on table from a pins file (the shipped one, or a test's)."""
    return AddonPins.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))


@cache
def pins() -> AddonPins:
    """The add-on table shipped in the package."""
    return load_pins(resources.files("gpuforge").joinpath(DATA_FILE))


def ownership_labels(cluster: str) -> dict[str, str]:
    """The labels that make an object this gpuforge cluster's (see MANAGED_BY_LABEL)."""
    return {MANAGED_BY_LABEL: MANAGED_BY, CLUSTER_LABEL: cluster}


def node_labels(instance_type: InstanceType, node_group: str, *, gpu: bool = True) -> dict[str, str]:
    """The labels a gpuforge node of `node_group` joins with; the join configuration writes these.

    `efa` comes from the catalog (max EFA interfaces > 0), so the EFA plugin follows AWS's data.
    """
    names = pins().node_labels
    labels = {names.node_group: node_group}
    if gpu:
        labels[names.gpu_instance_type] = instance_type.name
    if instance_type.max_efa_interfaces > 0:
        labels[names.efa] = "true"
    return labels


def _gpu_toleration() -> dict[str, str]:
    taint = pins().gpu_taint
    return {"key": taint.key, "operator": "Exists", "effect": taint.effect}


def _daemonset(
    name: str,
    node_affinity: list[dict[str, Any]],
    container: dict[str, Any],
    volumes: list[dict[str, Any]],
    *,
    host_network: bool = False,
) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": name, MANAGED_BY_LABEL: MANAGED_BY}
    spec: dict[str, Any] = {
        "tolerations": [_gpu_toleration()],
        # Without its device plugin a GPU node offers no GPUs: it must survive node pressure.
        "priorityClassName": "system-node-critical",
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": node_affinity}]
                }
            }
        },
        "containers": [container],
        "volumes": volumes,
    }
    if host_network:
        spec["hostNetwork"] = True
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": dict(labels)},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


def _host_path(name: str, path: str, kind: str) -> dict[str, Any]:
    return {"name": name, "hostPath": {"path": path, "type": kind}}


def nvidia_device_plugin(image: Image) -> dict[str, Any]:
    """The NVIDIA device plugin DaemonSet, on gpuforge GPU nodes only (they carry the instance-type label).

    As the plugin's own static manifest at the pinned tag, less its tag: the driver and toolkit are in
    the node image. FAIL_ON_INIT_ERROR stays true (the default): a GPU node whose plugin cannot see its
    GPUs must show a failing pod, not a node that silently offers none.
    """
    label = pins().node_labels.gpu_instance_type
    container = {
        "name": "nvidia-device-plugin-ctr",
        "image": image.reference,
        "imagePullPolicy": "IfNotPresent",
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "kubelet-device-plugins-dir", "mountPath": DEVICE_PLUGINS_DIR}],
    }
    return _daemonset(
        "nvidia-device-plugin",
        [{"key": label, "operator": "Exists"}],
        container,
        [_host_path("kubelet-device-plugins-dir", DEVICE_PLUGINS_DIR, "Directory")],
    )


def efa_device_plugin(image: Image) -> dict[str, Any]:
    """The EFA device plugin DaemonSet, only on nodes whose type has EFA in the catalog (`gpuforge.dev/efa`).

    Host network, privileged and the /dev/infiniband mount are what its chart's DaemonSet needs to
    open the EFA devices; the Neuron tools mount is dropped (gpuforge builds no Trainium nodes).
    """
    label = pins().node_labels.efa
    container = {
        "name": "aws-efa-k8s-device-plugin",
        "image": image.reference,
        "imagePullPolicy": "IfNotPresent",
        "securityContext": {"allowPrivilegeEscalation": True, "privileged": True, "runAsUser": 0},
        "volumeMounts": [
            {"name": "device-plugin", "mountPath": DEVICE_PLUGINS_DIR},
            {"name": "infiniband-volume", "mountPath": "/dev/infiniband/"},
        ],
    }
    return _daemonset(
        "aws-efa-k8s-device-plugin",
        [{"key": label, "operator": "In", "values": ["true"]}],
        container,
        [
            _host_path("device-plugin", DEVICE_PLUGINS_DIR, "Directory"),
            _host_path("infiniband-volume", "/dev/infiniband/", "Directory"),
        ],
        host_network=True,
    )


# The integrations Kueue's manager runs: those of charts/kueue/values.yaml at v0.17.6 (kubernetes-sigs/kueue tag
# v0.17.6, commit 7ed46abf7ed7e211bc51956c852e0ffa8153efa4, managerConfig.controllerManagerConfigYaml), written
# out so that a later chart's default cannot drop one gpuforge relies on: `gpuforge validate` submits batch Jobs
# (diag, NVLink, and the Indexed Jobs of its multi-node NCCL runs: gpuforge.validate.kubernetes_mpi). The
# others stay as the chart has them, for the teams' own workloads.
KUEUE_FRAMEWORKS: tuple[str, ...] = (
    "batch/job",
    "kubeflow.org/mpijob",
    "ray.io/rayjob",
    "ray.io/rayservice",
    "ray.io/raycluster",
    "jobset.x-k8s.io/jobset",
    "trainer.kubeflow.org/trainjob",
    "kubeflow.org/paddlejob",
    "kubeflow.org/pytorchjob",
    "kubeflow.org/tfjob",
    "kubeflow.org/xgboostjob",
    "kubeflow.org/jaxjob",
    "workload.codeflare.dev/appwrapper",
    "pod",
    "deployment",
    "statefulset",
    "leaderworkerset.x-k8s.io/leaderworkerset",
)


# Resources Kueue leaves out of quotas and admission (Configuration `resources.excludeResourcePrefixes`: a resource
# is dropped from a workload's requests when its name starts with one of these, kubernetes-sigs/kueue
# pkg/workload/workload.go dropExcludedResources at tag v0.17.6, commit 7ed46abf7ed7e211bc51956c852e0ffa8153efa4;
# https://kueue.sigs.k8s.io/docs/reference/kueue-config.v1beta2/#Resources). Every other resource a pod requests
# must be covered by its team's ClusterQueue (gpuforge.kubernetes.kueue.COVERED_RESOURCES), or Kueue leaves the
# workload pending for good ("resource X unavailable in ClusterQueue"). Each excluded on purpose:
KUEUE_EXCLUDED_RESOURCE_PREFIXES: tuple[str, ...] = (
    # The node's own disk for container layers, logs and emptyDir: its size is the root volume's, not a figure of
    # the instance type (training data lives on /fsx and /scratch, not here), and the kubelet already evicts a pod
    # that writes past its request. A team quota would ration what no GPU waits on.
    "ephemeral-storage",
    # A node-local pool the image reserves at boot (2 MiB pages, images/scripts/80-system.sh) for libfabric's EFA
    # buffers: each EFA pod on a node takes a slice, and kube-scheduler places a pod only where its slice is free.
    # It is not something teams trade: a team's GPU quota already bounds how many EFA pods it runs. Caveat: a pod
    # asking for more than one node's pool is admitted by Kueue and stays Pending ("Insufficient hugepages-2Mi").
    "hugepages-",
)


def kueue_manager_config() -> dict[str, Any]:
    """Kueue's Configuration as the chart's default at v0.17.6 (its commented-out options left out), with the
    integrations of KUEUE_FRAMEWORKS and the resources of KUEUE_EXCLUDED_RESOURCE_PREFIXES excluded. The chart
    takes it as one YAML string and adds its own certificate settings (templates/manager/manager-config.yaml),
    so it is written whole."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {
            "groupKindConcurrency": {
                "Job.batch": 5,
                "Pod": 5,
                "Workload.kueue.x-k8s.io": 5,
                "LocalQueue.kueue.x-k8s.io": 1,
                "ClusterQueue.kueue.x-k8s.io": 1,
                "ResourceFlavor.kueue.x-k8s.io": 1,
            }
        },
        "clientConnection": {"qps": 50, "burst": 100},
        "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
        "resources": {"excludeResourcePrefixes": list(KUEUE_EXCLUDED_RESOURCE_PREFIXES)},
    }


def kueue_values(image: Image) -> dict[str, Any]:
    """Helm values for Kueue's chart at the pinned version: the manager image by digest, and its configuration
    with its integrations, batch Jobs among them, explicit (`kueue_manager_config`).

    The chart writes `repository:tag`; a tag of `vX@sha256:...` makes that a reference the runtime
    resolves by digest (the tag is then ignored), the only way its template takes a digest.
    """
    return {
        "managerConfig": {
            "controllerManagerConfigYaml": yaml.safe_dump(kueue_manager_config(), sort_keys=False)
        },
        "controllerManager": {
            "manager": {
                "image": {
                    "repository": image.repository,
                    "tag": f"{image.tag}@{image.digest}",
                    "pullPolicy": "IfNotPresent",
                }
            }
        },
        "enableKueueViz": False,
    }
