"""The pinned add-ons: digests with sources, device plugins on the right nodes, schema-valid."""

from __future__ import annotations

import re

import pytest
import yaml
from k8s_schemas import validate_core
from kube_support import KUBERNETES_VERSIONS, group
from kubernetes_validate import ValidationError as K8sValidationError
from pydantic import ValidationError

from gpuforge import hardware
from gpuforge.kubernetes import addons
from gpuforge.kubernetes.addons import (
    Image,
    efa_device_plugin,
    kueue_values,
    node_labels,
    nvidia_device_plugin,
    pins,
)
from gpuforge.kubernetes.manifests import INDEX, render_addons

_DIGEST_REF = re.compile(r"[a-z0-9./-]+@sha256:[0-9a-f]{64}")


def test_every_pinned_image_has_a_sourced_digest_or_says_why_not() -> None:
    for name, addon in pins().addons.items():
        for image in addon.images:
            if image.digest is None:
                assert image.unsourced and "Fix:" in image.unsourced, name
            else:
                assert _DIGEST_REF.fullmatch(image.reference), name
                assert image.digest_source and image.digest in image.digest_source, name


def test_kueue_is_pinned_by_the_digest_its_release_issue_published() -> None:
    kueue = pins().addons["kueue"]
    assert kueue.version == "v0.17.6" and kueue.api_version == "kueue.x-k8s.io/v1beta2"
    image = kueue.images[0]
    assert image.reference == (
        "registry.k8s.io/kueue/kueue@sha256:f4a07665a531b9c1e71e3fa73d2c5230a038f84cfdb4c4262c3d71fec4576c09"
    )
    assert "kubernetes-sigs/kueue issue #12428" in (image.digest_source or "")


@pytest.mark.parametrize(
    "fields",
    [
        {"digest": "sha256:" + "0" * 64},  # a digest with no source
        {"digest": None},  # no digest and no reason
        {"digest": "v0.17.6", "digest_source": "x"},  # a tag is not a digest
        {"digest": "sha256:" + "0" * 63, "digest_source": "x"},
    ],
)
def test_an_image_without_a_sourced_digest_is_refused(fields: dict[str, str | None]) -> None:
    with pytest.raises(ValidationError):
        Image(repository="registry.invalid/x", tag="t", **fields)  # type: ignore[arg-type]


def test_efa_label_follows_the_catalog_for_every_type() -> None:
    efa_label = pins().node_labels.efa
    for name in hardware.catalog():
        instance_type = hardware.get(name)
        labels = node_labels(instance_type, "g")
        assert (labels.get(efa_label) == "true") == (instance_type.max_efa_interfaces > 0), name
        assert labels[pins().node_labels.gpu_instance_type] == name


def test_a_cpu_node_has_no_gpu_label() -> None:
    labels = node_labels(hardware.get("p5.48xlarge"), "system", gpu=False)
    assert pins().node_labels.gpu_instance_type not in labels


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_nvidia_device_plugin_runs_only_on_gpuforge_gpu_nodes(test_image: Image, version: str) -> None:
    daemonset = nvidia_device_plugin(test_image)
    validate_core(daemonset, version)
    spec = daemonset["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [{"matchExpressions": [{"key": "gpuforge.dev/gpu-instance-type", "operator": "Exists"}]}]
    assert spec["containers"][0]["image"] == test_image.reference
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_efa_device_plugin_selects_the_catalog_label_not_type_names(test_image: Image, version: str) -> None:
    daemonset = efa_device_plugin(test_image)
    validate_core(daemonset, version)
    text = yaml.safe_dump(daemonset)
    assert "node.kubernetes.io/instance-type" not in text
    assert not any(name in text for name in hardware.catalog())
    spec = daemonset["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [
        {"matchExpressions": [{"key": "gpuforge.dev/efa", "operator": "In", "values": ["true"]}]}
    ]
    assert spec["hostNetwork"] is True
    # A node labelled from the catalog matches the term exactly when its type has EFA.
    for name in hardware.catalog():
        labels = node_labels(hardware.get(name), "g")
        assert (labels.get("gpuforge.dev/efa") in {"true"}) == (hardware.get(name).max_efa_interfaces > 0)


def test_the_schema_check_can_fail(test_image: Image) -> None:
    daemonset = nvidia_device_plugin(test_image)
    daemonset["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = 3
    with pytest.raises(K8sValidationError):
        validate_core(daemonset, KUBERNETES_VERSIONS[-1])


def test_kueue_values_name_the_manager_by_digest() -> None:
    image = pins().addons["kueue"].images[0]
    manager = kueue_values(image)["controllerManager"]["manager"]["image"]
    # Kueue's chart writes `repository:tag`; this tag makes it `repository:vX@sha256:...`.
    assert f"{manager['repository']}:{manager['tag']}" == f"{image.repository}:{image.tag}@{image.digest}"


_DAEMONSETS = {
    "nvidia-device-plugin": "daemonset/kube-system.nvidia-device-plugin.yaml",
    "aws-efa-k8s-device-plugin": "daemonset/kube-system.aws-efa-k8s-device-plugin.yaml",
}


def test_a_device_plugin_renders_exactly_when_its_digest_is_sourced() -> None:
    files = render_addons("p5-eks", [group()], [], [])
    index = yaml.safe_load(files[INDEX])
    for name, path in _DAEMONSETS.items():
        addon = pins().addons[name]
        assert index["addons"][name]["rendered"] is (addon.unsourced is None), name
        assert (path in files) is (addon.unsourced is None), name
        if addon.unsourced:
            assert index["addons"][name]["why_not"] == addon.unsourced
    assert index["addons"]["kueue"]["rendered"] is True
    assert "addons/kueue-values.yaml" in files


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_shipped_nvidia_plugin_is_rendered_by_nvidias_published_digest(version: str) -> None:
    files = render_addons("p5-eks", [group()], [], [])
    daemonset = yaml.safe_load(files[_DAEMONSETS["nvidia-device-plugin"]])
    validate_core(daemonset, version)
    assert daemonset["spec"]["template"]["spec"]["containers"][0]["image"] == (
        "nvcr.io/nvidia/k8s-device-plugin@sha256:3c54348fe5a57e5700e7d8068e7531d2ef2d5f3ccb70c8f6bac0953432527abd"
    )


def test_the_efa_plugin_without_a_sourced_digest_renders_nothing_and_says_why() -> None:
    assert pins().addons["aws-efa-k8s-device-plugin"].unsourced  # no published digest found (data file)
    files = render_addons("p5-eks", [group()], [], [])
    assert _DAEMONSETS["aws-efa-k8s-device-plugin"] not in files
    assert not any(
        "aws-efa-k8s-device-plugin:" in text and "image:" in text
        for text in files.values()
        if "kind:" in text
    )


def test_a_sourced_device_plugin_is_rendered(monkeypatch: pytest.MonkeyPatch, test_image: Image) -> None:
    table = pins()
    sourced = table.addons["aws-efa-k8s-device-plugin"].model_copy(update={"images": (test_image,)})
    patched = table.model_copy(update={"addons": {**table.addons, "aws-efa-k8s-device-plugin": sourced}})
    monkeypatch.setattr(addons, "pins", lambda: patched)
    monkeypatch.setattr("gpuforge.kubernetes.manifests.pins", lambda: patched)
    files = render_addons("p5-eks", [group()], [], [])
    assert test_image.reference in files[_DAEMONSETS["aws-efa-k8s-device-plugin"]]
