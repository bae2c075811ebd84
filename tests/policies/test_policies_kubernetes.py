"""The Kubernetes rules: kubernetes-image-digest, kubernetes-gpu-pod (mandatory), kubernetes-gpu-shm (advisory).

Each rule runs twice on the same objects: through the policy pack's offline runner, as pulumi-kubernetes resources
(type `kubernetes:<group/version>:<Kind>`, props the object's fields), and through `gpuforge policy kubernetes`
on YAML files. The passing GPU Job is what the rules' fixes describe; each failing case changes one field.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from policy_helpers import of
from pulumi.output import Unknown

from gpuforge import hardware
from gpuforge.cli import main
from gpuforge.errors import InputError
from gpuforge.kubernetes.addons import Image, efa_device_plugin, kueue_values, pins
from gpuforge.kubernetes.check import check_files, check_object
from gpuforge.kubernetes.kueue import GpuNodeGroup
from gpuforge.kubernetes.manifests import objects_of, render_addons
from gpuforge.policies.pack import POLICIES
from gpuforge.policies.runner import Verdict, run_policies
from gpuforge.pulumi_mocks import RecordedResource

IMAGE, GPU, SHM = "kubernetes-image-digest", "kubernetes-gpu-pod", "kubernetes-gpu-shm"
RULES = (IMAGE, GPU, SHM)
# A digest for tests only: the sha256 of a test string, never an image anyone ships.
DIGEST = "sha256:" + hashlib.sha256(b"gpuforge kubernetes policy test").hexdigest()
PINNED = f"registry.invalid/train@{DIGEST}"
API_VERSIONS = {
    "Pod": "v1",
    "Deployment": "apps/v1",
    "DaemonSet": "apps/v1",
    "StatefulSet": "apps/v1",
    "ReplicaSet": "apps/v1",
    "Job": "batch/v1",
    "CronJob": "batch/v1",
    "JobSet": "jobset.x-k8s.io/v1alpha2",
    "MPIJob": "kubeflow.org/v2beta1",
    "PyTorchJob": "kubeflow.org/v1",
}


def pod_spec() -> dict[str, Any]:
    """A GPU pod spec every rule passes: image by digest, the GPU taint tolerated, requests = limits, /dev/shm."""
    taint = pins().gpu_taint
    return {
        "restartPolicy": "Never",
        "tolerations": [{"key": taint.key, "operator": "Exists", "effect": taint.effect}],
        "containers": [
            {
                "name": "train",
                "image": PINNED,
                "resources": {"requests": {"nvidia.com/gpu": 8}, "limits": {"nvidia.com/gpu": 8}},
                "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
            }
        ],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
    }


def wrap(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    """`spec` as the pod spec of an object of `kind`, where that kind keeps it."""
    template = {"metadata": {"labels": {"app": "train"}}, "spec": spec}
    selector = {"matchLabels": {"app": "train"}}
    bodies: dict[str, dict[str, Any]] = {
        "Pod": spec,
        "Deployment": {"selector": selector, "template": template},
        "DaemonSet": {"selector": selector, "template": template},
        "StatefulSet": {"selector": selector, "serviceName": "train", "template": template},
        "ReplicaSet": {"selector": selector, "template": template},
        "Job": {"template": template},
        "CronJob": {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": template}}},
        "JobSet": {"replicatedJobs": [{"name": "workers", "template": {"spec": {"template": template}}}]},
        "MPIJob": {"mpiReplicaSpecs": {"Worker": {"replicas": 2, "template": template}}},
        "PyTorchJob": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template}}},
    }
    return {
        "apiVersion": API_VERSIONS[kind],
        "kind": kind,
        "metadata": {"name": "train"},
        "spec": bodies[kind],
    }


def job(change: Callable[[dict[str, Any]], None] | None = None, kind: str = "Job") -> dict[str, Any]:
    spec = pod_spec()
    if change is not None:
        change(spec)
    return wrap(kind, spec)


def type_token(obj: dict[str, Any]) -> str:
    """pulumi-kubernetes' type token: `kubernetes:<group/version>:<Kind>`, core objects as `core/v1`."""
    api_version = obj["apiVersion"] if "/" in obj["apiVersion"] else f"core/{obj['apiVersion']}"
    return f"kubernetes:{api_version}:{obj['kind']}"


def pack(*objects: dict[str, Any]) -> list[Verdict]:
    """The whole policy pack on `objects` registered as pulumi-kubernetes resources."""
    resources = []
    for index, obj in enumerate(objects):
        token = type_token(obj)
        name = f"{obj['metadata']['name']}-{index}"
        resources.append(
            RecordedResource(
                type=token,
                name=name,
                inputs=obj,
                outputs=obj,
                id="",
                urn=f"urn:pulumi:test::gpuforge::{token}::{name}",
                parent_urn=None,
                custom=True,
            )
        )
    return run_policies(resources)


def offline(obj: dict[str, Any]) -> dict[str, list[str]]:
    """The offline check's messages on `obj`, by rule."""
    found = check_object(obj, "test")
    return {rule: [finding.message for finding in found if finding.policy == rule] for rule in RULES}


def both(obj: dict[str, Any]) -> dict[str, list[str]]:
    """Each rule's messages on `obj`, asserting the pack and the offline check agree and nothing else fires."""
    verdicts = pack(obj)
    assert {verdict.policy for verdict in verdicts} <= set(RULES), verdicts
    by_pack = {rule: [verdict.message for verdict in of(verdicts, rule)] for rule in RULES}
    assert by_pack == offline(obj)
    levels = {verdict.policy: verdict.enforcement for verdict in verdicts}
    assert all(levels[rule] == ("advisory" if rule == SHM else "mandatory") for rule in levels), levels
    return by_pack


def test_the_pack_holds_the_three_rules() -> None:
    assert set(RULES) <= {policy.name for policy in POLICIES}


@pytest.mark.parametrize("kind", sorted(API_VERSIONS))
def test_a_gpu_pod_shaped_as_the_fixes_say_passes_in_every_kind(kind: str) -> None:
    assert both(job(kind=kind)) == {IMAGE: [], GPU: [], SHM: []}


@pytest.mark.parametrize("kind", sorted(API_VERSIONS))
@pytest.mark.parametrize("field", ["containers", "initContainers", "ephemeralContainers"])
def test_the_canonical_tag_is_refused_in_every_container_list_of_every_kind(kind: str, field: str) -> None:
    def tagged(spec: dict[str, Any]) -> None:
        spec.setdefault(field, []).append({"name": "extra", "image": "vllm/vllm-openai:latest"})

    messages = both(job(tagged, kind))[IMAGE]
    assert len(messages) == 1
    assert f".{field}[" in messages[0] and "'vllm/vllm-openai:latest'" in messages[0]
    assert messages[0].startswith("spec.")
    assert "Fix: name it by digest, vllm/vllm-openai@sha256:<digest>" in messages[0]


@pytest.mark.parametrize(
    ("image", "refused"),
    [
        ("vllm/vllm-openai", True),  # no tag: the registry's latest
        ("registry.invalid:5000/team/train:v1", True),  # a port is not a tag's colon
        ("registry.invalid/train@sha256:abc", True),  # not 64 hex digits
        (f"registry.invalid:5000/team/train:v1@{DIGEST}", False),  # tag and digest: the digest decides
        (PINNED, False),
    ],
)
def test_only_a_full_sha256_digest_pins_an_image(image: str, refused: bool) -> None:
    def set_image(spec: dict[str, Any]) -> None:
        spec["containers"][0]["image"] = image

    assert bool(both(job(set_image))[IMAGE]) is refused


def test_the_fix_names_the_repository_without_a_port_mistaken_for_a_tag() -> None:
    def set_image(spec: dict[str, Any]) -> None:
        spec["containers"][0]["image"] = "registry.invalid:5000/team/train"

    (message,) = both(job(set_image))[IMAGE]
    assert "registry.invalid:5000/team/train@sha256:<digest>" in message
    assert "registry.invalid:5000/team/train:latest@sha256:<digest>" in message


def _tolerations(*tolerations: dict[str, str]) -> Callable[[dict[str, Any]], None]:
    def change(spec: dict[str, Any]) -> None:
        spec["tolerations"] = list(tolerations)

    return change


@pytest.mark.parametrize(
    ("tolerations", "tolerated"),
    [
        ((), False),
        (({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"},), False),
        (({"key": "example.com/other", "operator": "Exists"},), False),
        (({"key": "nvidia.com/gpu", "operator": "Equal", "value": "false", "effect": "NoSchedule"},), False),
        (({"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"},), True),
        (({"key": "nvidia.com/gpu", "value": "true"},), True),  # operator defaults to Equal, any effect
        (({"key": "nvidia.com/gpu", "operator": "Exists"},), True),
        (({"operator": "Exists"},), True),  # tolerates every taint
    ],
)
def test_a_gpu_pod_must_tolerate_the_gpu_taint(
    tolerations: tuple[dict[str, str], ...], tolerated: bool
) -> None:
    messages = both(job(_tolerations(*tolerations)))[GPU]
    if tolerated:
        assert messages == []
    else:
        (message,) = messages
        taint = pins().gpu_taint
        assert f"does not tolerate the taint {taint.key}:{taint.effect}" in message
        assert f"Fix: add to spec.template.spec.tolerations {{key: {taint.key}, operator: Exists" in message


def test_a_job_queued_by_kueue_gets_the_toleration_from_its_flavor() -> None:
    obj = job(_tolerations())
    obj["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "llm"}
    assert both(obj)[GPU] == []


def test_a_pod_without_gpus_needs_no_toleration_and_no_shm() -> None:
    def cpu_only(spec: dict[str, Any]) -> None:
        spec["tolerations"] = []
        spec["volumes"] = []
        spec["containers"][0].pop("volumeMounts")
        spec["containers"][0]["resources"] = {"limits": {"cpu": "1", "nvidia.com/gpu": 0}}

    assert both(job(cpu_only)) == {IMAGE: [], GPU: [], SHM: []}


@pytest.mark.parametrize(
    ("resources", "problem"),
    [
        ({"requests": {"nvidia.com/gpu": 8}, "limits": {"nvidia.com/gpu": 4}}, "requests 8 but limits 4"),
        ({"requests": {"nvidia.com/gpu": "8"}}, "without a limit"),
        ({"limits": {"nvidia.com/gpu": 8}}, None),  # requests default to the limit
        (
            {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": 8}},
            None,
        ),  # one quantity, two spellings
    ],
)
def test_gpu_requests_must_equal_limits(resources: dict[str, Any], problem: str | None) -> None:
    def set_resources(spec: dict[str, Any]) -> None:
        spec["containers"][0]["resources"] = resources

    messages = both(job(set_resources))[GPU]
    if problem is None:
        assert messages == []
    else:
        (message,) = messages
        assert (
            problem in message
            and "spec.template.spec.containers[0].resources" in message
            and "Fix:" in message
        )


@pytest.mark.parametrize(
    "change",
    [
        lambda spec: spec.update(volumes=[]),
        lambda spec: spec.update(volumes=[{"name": "dshm", "emptyDir": {}}]),  # on disk, not memory
        lambda spec: spec["containers"][0].update(volumeMounts=[{"name": "dshm", "mountPath": "/scratch"}]),
    ],
    ids=["no-volume", "disk-emptydir", "other-path"],
)
def test_a_gpu_container_without_memory_at_dev_shm_is_warned(
    change: Callable[[dict[str, Any]], None],
) -> None:
    found = both(job(change))
    assert found[IMAGE] == found[GPU] == []
    (message,) = found[SHM]
    assert "spec.template.spec.containers[0] uses GPUs but has no memory-backed volume at /dev/shm" in message
    assert "Fix: add to spec.template.spec.volumes {name: dshm, emptyDir: {medium: Memory}}" in message


def test_an_image_unknown_during_preview_is_the_engines_advisory_cannot_run() -> None:
    obj = job()
    obj["spec"]["template"]["spec"]["containers"][0]["image"] = Unknown()
    (verdict,) = of(pack(obj), IMAGE)
    assert verdict.enforcement == "advisory"
    assert "can't run policy" in verdict.message


def test_non_kubernetes_and_podless_resources_are_left_alone() -> None:
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "x"},
        "data": {"image": "a:latest"},
    }
    assert pack(config_map) == []


def test_every_rendered_addon_and_kueue_object_passes(tmp_path: Path) -> None:
    group = GpuNodeGroup(name="p5-eks-gpu", instance_type=hardware.get("p5.48xlarge"), node_count=4)
    objects = objects_of(render_addons("p5-eks", [group], [], []))
    test_image = Image(repository="registry.invalid/efa", tag="t", digest=DIGEST, digest_source="test input")
    objects.append(
        efa_device_plugin(test_image)
    )  # not rendered while its digest is unsourced; its builder is
    assert {"DaemonSet", "ResourceFlavor", "Topology"} <= {obj["kind"] for obj in objects}
    assert all(both(obj) == {IMAGE: [], GPU: [], SHM: []} for obj in objects)
    manager = kueue_values(pins().addons["kueue"].images[0])["controllerManager"]["manager"]["image"]
    # The chart joins repository:tag; the rule's own check of that reference.
    chart_pod = wrap(
        "Pod", {"containers": [{"name": "m", "image": f"{manager['repository']}:{manager['tag']}"}]}
    )
    assert offline(chart_pod)[IMAGE] == []


def _write(path: Path, *objects: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump_all(objects), encoding="utf-8")
    return path


def test_the_cli_refuses_the_canonical_bad_job_and_passes_the_fixed_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def canonical(spec: dict[str, Any]) -> None:
        spec["containers"][0]["image"] = "vllm/vllm-openai:latest"

    bad = _write(tmp_path / "bad.yaml", job(), job(canonical))
    assert main(["policy", "kubernetes", str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"{bad}#1 Job/train: {IMAGE} (mandatory):" in out and "'vllm/vllm-openai:latest'" in out
    good_obj = job()
    good_obj["spec"]["template"]["spec"]["volumes"] = []
    good = _write(tmp_path / "good.yaml", good_obj)
    assert main(["policy", "kubernetes", str(good)]) == 0  # an advisory alone passes
    assert f"{good}#0 Job/train: {SHM} (advisory):" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("- a\n- b\n", "not a Kubernetes object but list"),
        ("a: [\n", "not YAML"),
        ("metadata: {}\n", "no string `kind`"),
    ],
)
def test_a_file_that_is_no_manifest_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, problem: str
) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(text, encoding="utf-8")
    assert main(["policy", "kubernetes", str(path)]) == 2
    assert problem in capsys.readouterr().err
    with pytest.raises(InputError, match="Fix:"):
        check_files([path])


def test_the_offline_check_leaves_the_object_unchanged() -> None:
    obj = job()
    before = copy.deepcopy(obj)
    check_object(obj, "test")
    assert obj == before


def test_the_acceptance_workloads_gpuforge_validate_submits_pass() -> None:
    """`gpuforge validate` on Kubernetes submits these Jobs (a diag, and a multi-node NCCL run's Secret, headless
    Service and Indexed Job): the rules hold for gpuforge's own pods."""
    from gpuforge.validate import kubernetes_jobs as jobs
    from gpuforge.validate.floors import floors_for
    from gpuforge.validate.run import Plan

    nodes = ("node-a", "node-b")
    plan = Plan(nodes, hardware.get("p5.48xlarge"), floors_for("p5.48xlarge"))
    settings = jobs.Workloads(
        namespace="llm",
        queue="llm",
        image=jobs.image_from_reference(PINNED),
        run_id="t1",
        timeout_s=900.0,
    )
    objects = [jobs.diag_job(plan, settings, "d", "node-a"), *jobs.nccl_run(plan, settings, "p", nodes, {})]
    assert [obj["kind"] for obj in objects] == ["Job", "Secret", "Service", "Job"]
    assert all(both(obj) == {IMAGE: [], GPU: [], SHM: []} for obj in objects)
    worker = objects[-1]["spec"]["template"]["spec"]
    worker["containers"][0]["image"] = "registry.invalid/nccl-tests:latest"
    (message,) = both(objects[-1])[IMAGE]
    assert message.startswith("spec.template.spec.containers[0].image")
