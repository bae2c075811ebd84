"""The Kubernetes rules: kubernetes-image-digest, kubernetes-gpu-pod, kubernetes-workload-checked (mandatory),
kubernetes-gpu-shm (advisory).

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
from gpuforge.policies.kubernetes_objects import (
    KUEUE_INTEGRATIONS,
    UNJUDGED,
    WORKLOADS,
    ObjectType,
    type_of,
)
from gpuforge.policies.pack import POLICIES
from gpuforge.policies.runner import Verdict, run_policies
from gpuforge.pulumi_mocks import RecordedResource

IMAGE, GPU, SHM = "kubernetes-image-digest", "kubernetes-gpu-pod", "kubernetes-gpu-shm"
WORKLOAD = "kubernetes-workload-checked"
RULES = (IMAGE, GPU, SHM, WORKLOAD)
CLEAN: dict[str, list[str]] = {rule: [] for rule in RULES}
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
    "TFJob": "kubeflow.org/v1",
    "XGBoostJob": "kubeflow.org/v1",
    "PaddleJob": "kubeflow.org/v1",
    "JAXJob": "kubeflow.org/v1",
    "ReplicationController": "v1",
    "LeaderWorkerSet": "leaderworkerset.x-k8s.io/v1",
    "RayCluster": "ray.io/v1",
    "RayJob": "ray.io/v1",
    "RayService": "ray.io/v1",
    "TrainingRuntime": "trainer.kubeflow.org/v1alpha1",
    "ClusterTrainingRuntime": "trainer.kubeflow.org/v1alpha1",
    "Workload": "kueue.x-k8s.io/v1beta1",
    "AppWrapper": "workload.codeflare.dev/v1beta2",
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
    job_set_entry = {"name": "workers", "template": {"spec": {"template": template}}}
    bodies: dict[str, dict[str, Any]] = {
        "Pod": spec,
        "Deployment": {"selector": selector, "template": template},
        "DaemonSet": {"selector": selector, "template": template},
        "StatefulSet": {"selector": selector, "serviceName": "train", "template": template},
        "ReplicaSet": {"selector": selector, "template": template},
        "Job": {"template": template},
        "CronJob": {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": template}}},
        "JobSet": {"replicatedJobs": [job_set_entry]},
        "MPIJob": {"mpiReplicaSpecs": {"Worker": {"replicas": 2, "template": template}}},
        "PyTorchJob": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template}}},
        "TFJob": {"tfReplicaSpecs": {"Worker": {"replicas": 1, "template": template}}},
        "XGBoostJob": {"xgbReplicaSpecs": {"Master": {"replicas": 1, "template": template}}},
        "PaddleJob": {"paddleReplicaSpecs": {"Worker": {"replicas": 1, "template": template}}},
        "JAXJob": {"jaxReplicaSpecs": {"Worker": {"replicas": 1, "template": template}}},
        "ReplicationController": {"selector": {"app": "train"}, "template": template},
        "LeaderWorkerSet": {"leaderWorkerTemplate": {"size": 2, "workerTemplate": template}},
        "RayCluster": {"headGroupSpec": {"rayStartParams": {}, "template": template}},
        "RayJob": {
            "entrypoint": "python train.py",
            "rayClusterSpec": {"headGroupSpec": {"template": template}},
        },
        "RayService": {"rayClusterConfig": {"headGroupSpec": {"template": template}}},
        "TrainingRuntime": {"template": {"spec": {"replicatedJobs": [job_set_entry]}}},
        "ClusterTrainingRuntime": {"template": {"spec": {"replicatedJobs": [job_set_entry]}}},
        "Workload": {"podSets": [{"name": "main", "count": 1, "template": template}]},
    }
    if kind == "AppWrapper":  # its components are whole objects (built only here: wrap calls itself)
        bodies[kind] = {"components": [{"template": wrap("Job", spec)}]}
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
        name = f"{obj.get('metadata', {}).get('name', obj['kind'].lower())}-{index}"
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
    assert both(job(kind=kind)) == CLEAN


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

    assert both(job(cpu_only)) == CLEAN


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
    assert all(both(obj) == CLEAN for obj in objects)
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
        ("a: [\n", "not valid YAML"),
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
    assert all(both(obj) == CLEAN for obj in objects)
    worker = objects[-1]["spec"]["template"]["spec"]
    worker["containers"][0]["image"] = "registry.invalid/nccl-tests:latest"
    (message,) = both(objects[-1])[IMAGE]
    assert message.startswith("spec.template.spec.containers[0].image")


# --- every object, every pod template (issue 28, class 1: false passes) -------------------------------------------


def _type(obj: dict[str, Any]) -> ObjectType:
    found = type_of(obj["apiVersion"], obj["kind"])
    assert found is not None
    return found


def test_every_kind_the_rules_read_is_exercised_by_these_tests() -> None:
    """Each kind of WORKLOADS passes and refuses above (the parametrized tests run over API_VERSIONS); the apps
    kinds of the retired extensions group share apps' layout, PodTemplate has its own test below."""
    exercised = {_type(wrap(kind, pod_spec())) for kind in API_VERSIONS}
    untested = {t for t in WORKLOADS if t.group != "extensions"} - exercised - {ObjectType("", "PodTemplate")}
    assert untested == set()


def test_every_kind_kueue_admits_is_read_or_refused_as_unchecked() -> None:
    for object_type in KUEUE_INTEGRATIONS:
        assert (object_type in WORKLOADS) != (object_type in UNJUDGED), object_type


def test_a_pod_template_object_is_read() -> None:
    spec = pod_spec()
    spec["containers"][0]["image"] = "vllm/vllm-openai:latest"
    obj = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": {"spec": spec}}
    (message,) = both(obj)[IMAGE]
    assert message.startswith("template.spec.containers[0].image is 'vllm/vllm-openai:latest'")


def _tagged() -> dict[str, Any]:
    spec = pod_spec()
    spec["containers"][0]["image"] = "vllm/vllm-openai:latest"
    return spec


@pytest.mark.parametrize(
    ("obj", "path"),
    [
        (
            wrap("LeaderWorkerSet", pod_spec())
            | {
                "spec": {
                    "leaderWorkerTemplate": {
                        "leaderTemplate": {"spec": _tagged()},
                        "workerTemplate": {"spec": pod_spec()},
                    }
                }
            },
            "spec.leaderWorkerTemplate.leaderTemplate.spec",
        ),
        (
            wrap("RayCluster", pod_spec())
            | {
                "spec": {
                    "headGroupSpec": {"template": {"spec": pod_spec()}},
                    "workerGroupSpecs": [
                        {"groupName": "a", "template": {"spec": pod_spec()}},
                        {"groupName": "b", "template": {"spec": _tagged()}},
                    ],
                }
            },
            "spec.workerGroupSpecs[1].template.spec",
        ),
        (
            wrap("RayJob", pod_spec())
            | {
                "spec": {
                    "rayClusterSpec": {"headGroupSpec": {"template": {"spec": pod_spec()}}},
                    "submitterPodTemplate": {"spec": _tagged()},
                }
            },
            "spec.submitterPodTemplate.spec",
        ),
        (
            wrap("PyTorchJob", pod_spec())
            | {
                "spec": {
                    "pytorchReplicaSpecs": {
                        "Master": {"template": {"spec": pod_spec()}},
                        "Worker": {"template": {"spec": _tagged()}},
                    }
                }
            },
            "spec.pytorchReplicaSpecs.Worker.template.spec",
        ),
        (
            wrap("JobSet", pod_spec())
            | {
                "spec": {
                    "replicatedJobs": [
                        {"name": "a", "template": {"spec": {"template": {"spec": pod_spec()}}}},
                        {"name": "b", "template": {"spec": {"template": {"spec": _tagged()}}}},
                    ]
                }
            },
            "spec.replicatedJobs[1].template.spec.template.spec",
        ),
    ],
    ids=["lws-leader", "ray-worker-group", "rayjob-submitter", "pytorch-worker", "jobset-second"],
)
def test_every_pod_template_of_a_kind_with_several_is_read(obj: dict[str, Any], path: str) -> None:
    (message,) = both(obj)[IMAGE]
    assert message.startswith(f"{path}.containers[0].image is 'vllm/vllm-openai:latest'")


@pytest.mark.parametrize(
    "field", [("autoscalerOptions", "image"), ("historyServerOptions", "collectorOptions", "image")]
)
def test_a_sidecar_image_a_ray_cluster_names_is_pinned_too(field: tuple[str, ...]) -> None:
    obj = wrap("RayCluster", pod_spec())
    place = obj["spec"]
    for step in field[:-1]:
        place = place.setdefault(step, {})
    place[field[-1]] = "rayproject/ray:2.9.0"
    (message,) = both(obj)[IMAGE]
    assert message.startswith(f"spec.{'.'.join(field)} is 'rayproject/ray:2.9.0', a tag")


def _no_toleration(spec: dict[str, Any]) -> None:
    spec["tolerations"] = []


def test_a_typed_lists_items_are_checked_with_the_kind_the_list_gives_them() -> None:
    """A JobList's items need no kind (kubectl's decoder gives them Job, the List's apiVersion): each is read."""
    good, bad = job()["spec"], job(_no_toleration)["spec"]
    obj = {
        "apiVersion": "batch/v1",
        "kind": "JobList",
        "items": [{"metadata": {"name": "a"}, "spec": good}, {"metadata": {"name": "b"}, "spec": bad}],
    }
    (message,) = both(obj)[GPU]
    assert message.startswith("items[1].spec.template.spec requests nvidia.com/gpu but does not tolerate")
    assert "label items[1].metadata.labels.kueue.x-k8s.io/queue-name" in message


def test_a_lists_labels_are_not_its_items_but_an_appwrappers_are_its_components() -> None:
    """Kueue reads the queue label of the object it admits: a List is no such object, an AppWrapper is."""
    queued = {"kueue.x-k8s.io/queue-name": "llm"}
    items = {
        "apiVersion": "batch/v1",
        "kind": "JobList",
        "metadata": {"labels": queued},
        "items": [job(_no_toleration)],
    }
    assert len(both(items)[GPU]) == 1
    wrapper = job(_no_toleration, kind="AppWrapper")
    wrapper["metadata"]["labels"] = queued
    assert both(wrapper)[GPU] == []


def test_a_patch_resource_is_read_as_the_kind_it_patches() -> None:
    """`kubernetes:apps/v1:DeploymentPatch` sets a Deployment's fields by server-side apply: its image is what
    the pods run."""
    obj = job(lambda spec: spec["containers"][0].update(image="vllm/vllm-openai:latest"), kind="Deployment")
    obj["kind"] = "DeploymentPatch"
    (verdict,) = of(pack(obj), IMAGE)
    assert "'vllm/vllm-openai:latest'" in verdict.message


def test_a_pulumi_component_is_left_to_the_resources_it_registers() -> None:
    """A ConfigGroup registers each of its objects as a resource of its own, where the rules read it."""
    group = job(lambda spec: spec["containers"][0].update(image="vllm/vllm-openai:latest"))
    props = {"objs": [group]}
    resource = RecordedResource(
        type="kubernetes:yaml/v2:ConfigGroup",
        name="g",
        inputs=props,
        outputs=props,
        id="",
        urn="urn:pulumi:test::gpuforge::kubernetes:yaml/v2:ConfigGroup::g",
        parent_urn=None,
        custom=False,
    )
    assert run_policies([resource]) == []


@pytest.mark.parametrize(
    ("obj", "shows"),
    [
        (
            {
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob",
                "metadata": {"name": "t"},
                "spec": {"runtimeRef": {"name": "torch-distributed"}},
            },
            "TrainJob (trainer.kubeflow.org API group) was not checked: its pods are the pod templates of the "
            "training runtime",
        ),
        (
            {
                "apiVersion": "sparkoperator.k8s.io/v1beta2",
                "kind": "SparkApplication",
                "metadata": {"name": "s"},
                "spec": {"type": "Python"},
            },
            "SparkApplication (sparkoperator.k8s.io API group) was not checked",
        ),
        (
            {
                "apiVersion": "example.com/v1",
                "kind": "Job",
                "metadata": {"name": "x"},
                "spec": {"podTemplate": {"spec": pod_spec()}},
            },
            "Job (example.com API group) was not checked: it is not a kind whose pods these rules know where to "
            "find, yet it makes pods (spec.podTemplate.spec.containers)",
        ),
        (
            {
                "apiVersion": "example.com/v1",
                "kind": "Trainer",
                "metadata": {"name": "x"},
                "spec": {"image": PINNED, "resources": {"limits": {"nvidia.com/gpu": 8}}},
            },
            "it makes pods (spec.image, spec.resources.limits.nvidia.com/gpu)",
        ),
    ],
    ids=["trainjob", "sparkapplication", "job-of-another-group", "image-and-gpus"],
)
def test_a_workload_the_rules_cannot_judge_fails_in_the_pack_and_offline(
    obj: dict[str, Any], shows: str
) -> None:
    found = both(obj)
    (message,) = found[WORKLOAD]
    assert shows in message
    assert f"--allow-unchecked {obj['kind']}" in message
    assert found[IMAGE] == found[GPU] == []


@pytest.mark.parametrize(
    "obj",
    [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"image": "a:latest"}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"clusterIP": "None"}},
        {"apiVersion": "v1", "kind": "List", "items": []},
    ],
    ids=["configmap", "service", "empty-list"],
)
def test_an_object_that_makes_no_pods_passes(obj: dict[str, Any]) -> None:
    assert offline(obj) == CLEAN
