"""`gpuforge policy kubernetes`: every object `kubectl apply -f` would create is checked, and what it cannot judge
fails unless accepted by name (issue 28, class 1: false passes), and hostile files end in a clear exit 2.

The manifests are written as a user writes them, one YAML text each. Each false pass here exited 0 before.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest
from fuzzing import FUZZ, SECONDS_PER_INPUT, alias_bomb, bounded, deep, yaml_texts
from hypothesis import given

from gpuforge.cli import main
from gpuforge.kubernetes.check import check_files
from gpuforge.loading import MAX_CONFIG_BYTES
from gpuforge.policies.kubernetes_objects import MAX_NESTING

# A digest for tests only: the sha256 of a test string, never an image anyone ships.
PINNED = "registry.invalid/train@sha256:" + hashlib.sha256(b"gpuforge policy check test").hexdigest()
TOLERATION = "tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]"
# The canonical bad pod: an image by tag, GPUs requested without a limit, no toleration.
BAD_POD = """
          containers:
          - name: train
            image: vllm/vllm-openai:latest
            resources: {requests: {nvidia.com/gpu: 8}}"""
GOOD_POD = f"""
          {TOLERATION}
          containers:
          - name: train
            image: {PINNED}
            resources: {{limits: {{cpu: 1}}}}"""


def _run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, *flags: str
) -> tuple[int, str, str, Path]:
    path = tmp_path / "manifest.yaml"
    path.write_text(text, encoding="utf-8")
    code = main(["policy", "kubernetes", *flags, str(path)])
    out, err = capsys.readouterr()
    return code, out, err, path


# --- what kubectl apply would create, the policy sees ----------------------------------------------------------

LIST = f"""
apiVersion: v1
kind: List
items:
- apiVersion: batch/v1
  kind: Job
  metadata: {{name: fine}}
  spec:
    template:
      spec:{GOOD_POD}
- apiVersion: batch/v1
  kind: Job
  metadata: {{name: bad}}
  spec:
    template:
      spec:{BAD_POD}
"""
JOB_LIST = f"""
apiVersion: batch/v1
kind: JobList
items:
- metadata: {{name: untyped}}
  spec:
    template:
      spec:{BAD_POD}
"""
NESTED_LIST = f"""
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: List
  items:
  - apiVersion: batch/v1
    kind: Job
    metadata: {{name: deep}}
    spec:
      template:
        spec:{BAD_POD.replace(chr(10), chr(10) + "  ")}
"""


SECOND_DOCUMENT = f"""
apiVersion: batch/v1
kind: Job
metadata: {{name: ok}}
spec:
  template:
    spec:{GOOD_POD.replace(chr(10) + "    ", chr(10))}
---
{LIST}"""


@pytest.mark.parametrize(
    ("text", "pod", "document"),
    [
        (LIST, "items[1].spec.template.spec", 0),
        (JOB_LIST, "items[0].spec.template.spec", 0),  # kubectl gives untyped items the List's Job kind
        (NESTED_LIST, "items[0].items[0].spec.template.spec", 0),  # kubectl flattens Lists in Lists
        (SECOND_DOCUMENT, "items[1].spec.template.spec", 1),
    ],
    ids=["list", "joblist-untyped-items", "nested-list", "second-document"],
)
def test_every_item_of_a_list_is_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, pod: str, document: int
) -> None:
    code, out, _, path = _run(tmp_path, capsys, text)
    assert code == 1
    assert (
        f"kubernetes-image-digest (mandatory): {pod}.containers[0].image is 'vllm/vllm-openai:latest'" in out
    )
    assert f"kubernetes-gpu-pod (mandatory): {pod} requests nvidia.com/gpu but does not tolerate" in out
    assert f"{pod}.containers[0].resources requests nvidia.com/gpu: 8 without a limit" in out
    assert out.count("(mandatory)") == 3, out
    assert all(line.startswith(f"{path}#{document} ") for line in out.splitlines()[:-1]), out


def _indent(text: str, spaces: int) -> str:
    return "\n".join(" " * spaces + line if line else line for line in text.strip("\n").splitlines())


# The pod spec sits where each kind's API puts it (sources in gpuforge/policies/kubernetes_objects.py).
POD_SPEC = (
    "containers:\n- name: train\n  image: vllm/vllm-openai:latest\n  resources: {limits: {nvidia.com/gpu: 8}}"
)
KUEUE_KINDS = {
    "RayJob": (
        "ray.io/v1",
        "rayClusterSpec:\n  headGroupSpec:\n    template:\n      spec:\n{pod:8}",
        "spec.rayClusterSpec.headGroupSpec.template.spec",
    ),
    "RayCluster": (
        "ray.io/v1",
        "headGroupSpec:\n  template:\n    spec: {containers: []}\nworkerGroupSpecs:\n- groupName: gpu\n  template:\n"
        "    spec:\n{pod:6}",
        "spec.workerGroupSpecs[0].template.spec",
    ),
    "RayService": (
        "ray.io/v1",
        "rayClusterConfig:\n  headGroupSpec:\n    template:\n      spec:\n{pod:8}",
        "spec.rayClusterConfig.headGroupSpec.template.spec",
    ),
    "LeaderWorkerSet": (
        "leaderworkerset.x-k8s.io/v1",
        "leaderWorkerTemplate:\n  size: 2\n  workerTemplate:\n    spec:\n{pod:6}",
        "spec.leaderWorkerTemplate.workerTemplate.spec",
    ),
    "JobSet": (
        "jobset.x-k8s.io/v1alpha2",
        "replicatedJobs:\n- name: w\n  template:\n    spec:\n      template:\n        spec:\n{pod:10}",
        "spec.replicatedJobs[0].template.spec.template.spec",
    ),
    "TFJob": (
        "kubeflow.org/v1",
        "tfReplicaSpecs:\n  Worker:\n    template:\n      spec:\n{pod:8}",
        "spec.tfReplicaSpecs.Worker.template.spec",
    ),
    "MPIJob": (
        "kubeflow.org/v2beta1",
        "mpiReplicaSpecs:\n  Worker:\n    template:\n      spec:\n{pod:8}",
        "spec.mpiReplicaSpecs.Worker.template.spec",
    ),
    "AppWrapper": (
        "workload.codeflare.dev/v1beta2",
        "components:\n- template:\n    apiVersion: batch/v1\n    kind: Job\n    metadata: {name: inner}\n    spec:\n"
        "      template:\n        spec:\n{pod:10}",
        "spec.components[0].template.spec.template.spec",
    ),
}


def _object(kind: str, api_version: str, spec: str) -> str:
    body = spec.replace("{pod:10}", _indent(POD_SPEC, 10)).replace("{pod:8}", _indent(POD_SPEC, 8))
    body = body.replace("{pod:6}", _indent(POD_SPEC, 6))
    return f"apiVersion: {api_version}\nkind: {kind}\nmetadata: {{name: x}}\nspec:\n{_indent(body, 2)}\n"


@pytest.mark.parametrize("kind", sorted(KUEUE_KINDS))
def test_the_pod_templates_of_the_workloads_kueue_admits_are_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    api_version, spec, pod = KUEUE_KINDS[kind]
    code, out, _, _ = _run(tmp_path, capsys, _object(kind, api_version, spec))
    assert code == 1
    assert f"{kind}/x: kubernetes-image-digest (mandatory): {pod}.containers[0].image is" in out
    assert (
        f"{kind}/x: kubernetes-gpu-pod (mandatory): {pod} requests nvidia.com/gpu but does not tolerate"
        in out
    )


UNJUDGED = {
    "trainjob": (
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: x}\nspec:\n"
        "  runtimeRef: {name: torch-distributed}\n  trainer: {image: 'pytorch/pytorch:latest'}\n",
        "TrainJob",
        "its pods are the pod templates of the training runtime spec.runtimeRef names",
    ),
    "sparkapplication": (
        "apiVersion: sparkoperator.k8s.io/v1beta2\nkind: SparkApplication\nmetadata: {name: x}\nspec:\n"
        "  type: Python\n",
        "SparkApplication",
        "the Spark operator builds its driver and executor pods",
    ),
    "unknown-kind-with-a-pod-template": (
        _object("Trainer", "example.com/v1", "worker:\n  template:\n    spec:\n{pod:6}"),
        "Trainer",
        "it makes pods (spec.worker.template.spec.containers)",
    ),
    "unknown-kind-requesting-gpus": (
        "apiVersion: example.com/v1\nkind: Inference\nmetadata: {name: x}\nspec:\n"
        "  resources: {limits: {nvidia.com/gpu: 8}}\n",
        "Inference",
        "it makes pods (spec.resources.limits.nvidia.com/gpu)",
    ),
}


@pytest.mark.parametrize("case", sorted(UNJUDGED))
def test_a_workload_the_rules_cannot_judge_fails_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    text, kind, reason = UNJUDGED[case]
    code, out, _, _ = _run(tmp_path, capsys, text)
    assert code == 1
    assert f"{kind}/x: kubernetes-workload-checked (mandatory): {kind} (" in out
    assert "was not checked" in out and reason in out
    assert f"--allow-unchecked {kind}" in out


def test_allow_unchecked_accepts_that_kind_by_name_and_says_it_was_not_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, _, _ = UNJUDGED["trainjob"]
    spark, _, _ = UNJUDGED["sparkapplication"]
    code, out, _, _ = _run(tmp_path, capsys, text, "--allow-unchecked", "TrainJob")
    assert code == 0
    assert "TrainJob/x: kubernetes-workload-checked (not checked, allowed): TrainJob (" in out
    assert out.rstrip().endswith(
        "0 mandatory, 0 advisory finding(s), 1 object(s) not checked (--allow-unchecked) in 1 file(s)"
    )
    code, out, _, _ = _run(tmp_path, capsys, text + "---\n" + spark, "--allow-unchecked", "TrainJob")
    assert code == 1  # another kind is not accepted with it
    assert "SparkApplication/x: kubernetes-workload-checked (mandatory)" in out


def test_allow_unchecked_cannot_turn_off_the_rules_of_a_kind_they_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err, _ = _run(tmp_path, capsys, LIST, "--allow-unchecked", "Job")
    assert code == 2
    assert "--allow-unchecked Job: the rules read that kind's pods" in err and "Fix:" in err


def test_allow_unchecked_names_a_kind_of_one_api_group_by_its_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`Job` of example.com is not batch's Job: the rules cannot read it, and only its group's name accepts it."""
    text = "apiVersion: example.com/v1\nkind: Job\nmetadata: {name: x}\nspec: {image: a}\n"
    assert _run(tmp_path, capsys, text)[0] == 1
    assert _run(tmp_path, capsys, text, "--allow-unchecked", "Job.example.com")[0] == 0
    assert _run(tmp_path, capsys, text, "--allow-unchecked", "Job")[0] == 2  # batch's Job is read


@pytest.mark.parametrize("value", ["", "Train Job", "Job.", "Job..example.com", "J\u00f6b", "Job\x1b[2J"])
def test_allow_unchecked_refuses_what_is_no_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["policy", "kubernetes", "--allow-unchecked", value, str(tmp_path / "x.yaml")])
    assert stopped.value.code == 2
    assert "is not a kind" in capsys.readouterr().err


def test_a_hostile_kind_reaches_the_terminal_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = 'apiVersion: example.com/v1\nkind: "Evil\\e[2J"\nmetadata: {name: x}\nspec: {image: a}\n'
    code, out, _, _ = _run(tmp_path, capsys, text)
    assert code == 1
    assert "\x1b" not in out and "Evil\\x1b[2J/x: kubernetes-workload-checked (mandatory)" in out


# --- hostile files: exit 2 naming the file and the document ----------------------------------------------------

JOB_HEAD = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n"
HOSTILE = {
    "items-a-mapping": (
        "apiVersion: v1\nkind: List\nitems: {a: 1}\n",
        "#0",
        "items must be a list of objects",
    ),
    "items-text": (
        "apiVersion: v1\nkind: List\nitems: jobs\n",
        "#0",
        "items must be a list of objects, found text",
    ),
    "item-a-number": ("apiVersion: v1\nkind: List\nitems: [5]\n", "#0", "items[0]: it must be an object"),
    "item-without-kind": (
        "apiVersion: v1\nkind: List\nitems:\n- metadata: {name: a}\n",
        "#0",
        "items[0]: it has no kind and no apiVersion, and its List gives it none",
    ),
    "item-without-apiversion": (
        "apiVersion: v1\nkind: List\nitems:\n- {kind: Job, metadata: {name: a}}\n",
        "#0",
        "items[0]: it has a kind but no apiVersion",
    ),
    "no-apiversion": ("kind: Job\nmetadata: {name: a}\n", "#0", "no string `apiVersion`"),
    "no-kind": ("---\napiVersion: v1\nmetadata: {name: a}\n", "#0", "no string `kind`"),
    "bad-apiversion": ("apiVersion: a/b/c\nkind: Job\n", "#0", "is not `[group/]version`"),
    "containers-a-mapping": (
        JOB_HEAD + "      containers: {name: t, image: 'vllm/vllm-openai:latest'}\n",
        "#0",
        "spec.template.spec.containers is a mapping, where the API takes a list of mappings",
    ),
    "image-a-number": (
        JOB_HEAD + "      containers: [{name: t, image: 5}]\n",
        "#0",
        "spec.template.spec.containers[0].image is a number, where the API takes text",
    ),
    "template-a-list": (
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: x}\nspec:\n  template: []\n",
        "#0",
        "spec.template is a list, where the API takes a mapping",
    ),
    "duplicate-key": (
        JOB_HEAD + "      containers:\n      - name: t\n        image: 'vllm/vllm-openai:latest'\n"
        f"        image: '{PINNED}'\n",
        "#0",
        "duplicate key 'image'",
    ),
    "tab-indentation": ("apiVersion: v1\nkind: Pod\nspec:\n\tcontainers: []\n", "#0", "not valid YAML"),
    "alias-bomb": (alias_bomb(9), "#0", "aliases (*name) are not allowed"),
    "deep-nesting": ("a: " + deep(5000, "[", "]") + "\n", "#0", "nested more than 64 levels deep"),
    "second-document-a-list": (
        "apiVersion: v1\nkind: List\nitems: []\n---\n- a\n",
        "#1",
        "not a Kubernetes object but list",
    ),
    "scalar-document": ("--- 5\n", "#0", "not a Kubernetes object but int"),
    "nested-too-deep": (
        "apiVersion: v1\nkind: List\nitems:\n"
        + "".join(
            " " * (2 * level)
            + "- apiVersion: v1\n"
            + " " * (2 * level + 2)
            + "kind: List\n"
            + " " * (2 * level + 2)
            + "items:\n"
            for level in range(MAX_NESTING + 1)
        )
        + " " * (2 * MAX_NESTING + 2)
        + "- []\n",
        "#0",
        f"objects nested more than {MAX_NESTING} deep are not read",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_document_is_exit_2_naming_the_file_and_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    text, document, problem = HOSTILE[case]
    started = time.monotonic()
    code, out, err, path = _run(tmp_path, capsys, text)
    assert code == 2, out
    assert f"{path}{document}" in err and problem in err and "Fix:" in err, err
    assert "Traceback" not in err and out == ""
    assert time.monotonic() - started < SECONDS_PER_INPUT


def test_a_file_past_the_manifest_cap_is_refused_before_it_is_parsed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata:\n  a: '"
        + "x" * MAX_CONFIG_BYTES
        + "'\n"
    )
    code, _, err, path = _run(tmp_path, capsys, text)
    assert code == 2
    assert f"{path}: cannot read the Kubernetes manifest:" in err and f"({MAX_CONFIG_BYTES})" in err


@pytest.mark.parametrize("special", ["fifo", "directory", "non-utf-8"])
def test_a_file_that_is_no_text_file_is_exit_2_without_blocking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], special: str
) -> None:
    path = tmp_path / "manifest.yaml"
    if special == "fifo":
        os.mkfifo(path)  # nothing ever writes it: a blocking read would hang here
    elif special == "directory":
        path.mkdir()
    else:
        path.write_bytes(b"apiVersion: v1\nkind: Pod\nmetadata: {name: \xff}\n")
    started = time.monotonic()
    assert main(["policy", "kubernetes", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: cannot read the Kubernetes manifest:" in err and "Fix:" in err
    assert ("not UTF-8" if special == "non-utf-8" else "not a regular file") in err
    assert time.monotonic() - started < SECONDS_PER_INPUT


BASE = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "x"},
            "spec": {"template": {"spec": {"containers": [{"name": "t", "image": PINNED}]}}},
        }
    ],
}


@FUZZ
@given(text=yaml_texts(BASE))
def test_any_document_ends_in_findings_or_a_clear_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "fuzz.yaml"
    path.write_text(text, encoding="utf-8")
    bounded(lambda: check_files([path]))
