"""A rendered object that breaks a mandatory Kubernetes rule is never written; the GPU taint has one source.

The bad pins are written as a pins file (the shipped one with one field changed) and loaded by
`addons.load_pins`, the loader `pins()` itself uses, so the render reads them as it reads the shipped table.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_support import group

from gpuforge.cli import main
from gpuforge.errors import InputError
from gpuforge.kubernetes import addons, manifests
from gpuforge.policies import rules_kubernetes
from gpuforge.policies.kubernetes_objects import ObjectType

STACKS = Path(__file__).resolve().parents[2] / "stacks" / "training"

POD = ObjectType("", "Pod")


def _shipped() -> dict[str, Any]:
    text = resources.files("gpuforge").joinpath(addons.DATA_FILE).read_text(encoding="utf-8")
    document = yaml.safe_load(text)
    assert isinstance(document, dict)
    return document


def _use_pins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit: Callable[[dict[str, Any]], None]
) -> addons.AddonPins:
    document = _shipped()
    edit(document)
    path = tmp_path / "kubernetes_addons.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    table = addons.load_pins(path)
    for module in (addons, manifests, rules_kubernetes):
        monkeypatch.setattr(module, "pins", lambda: table)
    return table


def _whole_reference_as_repository(document: dict[str, Any]) -> None:
    """The mistake of pasting `repo@sha256:...` into `repository`: the reference then has two digests."""
    image = document["addons"]["nvidia-device-plugin"]["images"][0]
    image["repository"] = f"{image['repository']}@{image['digest']}"


def test_a_rendered_object_breaking_a_mandatory_rule_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use_pins(tmp_path, monkeypatch, _whole_reference_as_repository)
    with pytest.raises(InputError) as raised:
        manifests.render_addons("p5-eks", [group()], [], [])
    message = raised.value.message
    assert "DaemonSet/nvidia-device-plugin" in message
    assert "kubernetes-image-digest" in message and "Fix:" in message
    assert addons.DATA_FILE in message  # where the bad pin is


def test_scheduler_render_writes_nothing_when_an_object_breaks_a_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _use_pins(tmp_path, monkeypatch, _whole_reference_as_repository)
    out = tmp_path / "k8s"
    code = main(["scheduler", "render", str(STACKS), "--stack", "p5-eks", "--out", str(out)])
    assert code == 2
    assert "kubernetes-image-digest" in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())


def test_the_shipped_render_passes_every_mandatory_rule() -> None:
    files = manifests.render_addons("p5-eks", [group()], [], [])
    assert any(path.startswith("daemonset/") for path in files)


def test_the_gpu_taint_value_is_read_from_the_pins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def other_value(document: dict[str, Any]) -> None:
        document["gpu_taint"]["value"] = "present"

    table = _use_pins(tmp_path, monkeypatch, other_value)
    assert table.gpu_taint.value == "present"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "containers": [
                {"name": "c", "image": "r@sha256:" + "0" * 64, "resources": {"limits": {"nvidia.com/gpu": 1}}}
            ],
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
            ],
        },
    }
    assert rules_kubernetes.gpu_pod_shape(POD, pod)  # "true" is no longer the taint's value
    pod["spec"]["tolerations"][0]["value"] = "present"
    assert rules_kubernetes.gpu_pod_shape(POD, pod) == []


def test_the_shipped_taint_carries_its_value() -> None:
    taint = addons.pins().gpu_taint
    assert (taint.key, taint.value, taint.effect) == ("nvidia.com/gpu", "true", "NoSchedule")


def test_a_sourced_addon_without_a_renderer_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def sourced_without_renderer(document: dict[str, Any]) -> None:
        document["addons"]["some-operator"] = {
            "version": "v1.0.0",
            "source": "test input",
            "images": [
                {
                    "repository": "registry.invalid/some-operator",
                    "tag": "v1.0.0",
                    "digest": "sha256:" + "1" * 64,
                    "digest_source": "test input",
                }
            ],
        }

    _use_pins(tmp_path, monkeypatch, sourced_without_renderer)
    with pytest.raises(
        InputError, match=r"addons.some-operator has sourced digests but gpuforge has no renderer"
    ):
        manifests.render_addons("p5-eks", [group()], [], [])


def test_kueue_values_integrate_batch_jobs_explicitly() -> None:
    """validate submits batch Jobs only (diag, NVLink, and the Indexed Jobs of its NCCL runs): Kueue must manage
    them whatever a later chart's default list says; the chart's other integrations stay for the teams' jobs."""
    image = addons.pins().addons["kueue"].images[0]
    text = addons.kueue_values(image)["managerConfig"]["controllerManagerConfigYaml"]
    config = yaml.safe_load(text)
    assert (config["apiVersion"], config["kind"]) == ("config.kueue.x-k8s.io/v1beta2", "Configuration")
    frameworks = config["integrations"]["frameworks"]
    assert {"batch/job", "kubeflow.org/mpijob", "jobset.x-k8s.io/jobset"} <= set(frameworks)
    assert len(frameworks) == len(set(frameworks))
    # The chart's own settings kept (charts/kueue/values.yaml at v0.17.6): leader election and the webhook port.
    assert config["leaderElection"] == {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"}
    assert config["webhook"] == {"port": 9443}
