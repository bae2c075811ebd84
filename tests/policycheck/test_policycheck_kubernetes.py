"""`gpuforge policy check` on a program written with the real pulumi-kubernetes SDK (the `kubernetes-iac` extra).

No provider plugin runs, and none is needed: `pulumi.runtime.set_mocks` replaces the engine's resource monitor with the
SDK's MockMonitor, so each registration goes to gpuforge's mocks and nothing starts `pulumi-resource-kubernetes`
(the SDK's own `pulumi-plugin.json` only tells the engine which plugin to fetch). What the SDK does without one
is what this file checks:

- a typed resource (`k8s.batch.v1.Job`) registers as `kubernetes:batch/v1:Job`, inputs camelCased by the SDK's
  tables (Args classes and plain dicts with snake_case names alike) and an Output resolved to its value;
- the SDK's own (v1) `yaml.ConfigFile` asks the provider function `kubernetes:yaml:decode` for the file's objects,
  then registers each as a typed child: the mocks answer that function as the provider does;
- a provider-side component (`yaml.v2.ConfigGroup`/`ConfigFile`, `helm.v4.Chart`) registers alone with its inputs:
  the MockMonitor calls the mocks once and nothing constructs its children. gpuforge reads the yaml/v2 objects as
  the provider's Construct does (files, globs, Lists, names), and names a Chart as not checked.

The program is tests/fixtures/policycheck/gpu-jobs: stack `compliant` passes every mandatory rule, stack `breaking`
breaks them in every object.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from policycheck_support import FIXTURES

from gpuforge.cli import main

GPU_JOBS = FIXTURES / "gpu-jobs"
IMAGE, GPU_POD = "kubernetes-image-digest", "kubernetes-gpu-pod"
JOB, POD, DEPLOYMENT = "kubernetes:batch/v1:Job", "kubernetes:core/v1:Pod", "kubernetes:apps/v1:Deployment"
CONFIG_GROUP, CONFIG_FILE = "kubernetes:yaml/v2:ConfigGroup", "kubernetes:yaml/v2:ConfigFile"
CHART = "kubernetes:helm.sh/v4:Chart"
# Every GPU workload of the program, as the policy pack sees it: (type, name). The yaml/v2 children are named as the
# provider names them, `<component>:<namespace>/<name>`; the v1 ConfigFile's as the Python SDK names them.
WORKLOADS = {
    (JOB, "train"),
    (DEPLOYMENT, "serve"),
    (POD, "debug"),
    (JOB, "sweep:sweep-a"),  # the two items of a `kind: List`
    (JOB, "sweep:sweep-b"),
    (JOB, "sweep:sweep-c"),  # a second file of the same glob
    (POD, "sweep:ml/probe"),  # an object of `objs`, its image an Output
    (JOB, "eval:ml/eval"),
    (DEPLOYMENT, "legacy"),  # the v1 ConfigFile's
}


def _check(capsys: pytest.CaptureFixture[str], directory: Path, *args: str) -> tuple[int, Any]:
    code = main(["policy", "check", str(directory), *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


@functools.cache
def _stack(stack: str) -> tuple[int, Any]:
    """`policy check --json` of a gpu-jobs stack, run once for the tests that read it (a run takes seconds)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["policy", "check", str(GPU_JOBS), "--stack", stack, "--json"])
    return code, json.loads(out.getvalue())


def _named(document: Any) -> dict[str, tuple[str, str]]:
    return {resource["urn"]: (resource["type"], resource["name"]) for resource in document["resources"]}


def test_the_breaking_stack_is_refused_on_every_object_with_the_rules_it_breaks() -> None:
    code, document = _stack("breaking")
    assert code == 1
    named = _named(document)
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    messages: dict[tuple[str, str], str] = defaultdict(str)
    for verdict in document["policies"]:
        assert verdict["enforcement"] == "mandatory" or verdict["policy"] == "kubernetes-gpu-shm"
        if verdict["enforcement"] == "mandatory":
            found[named[verdict["urn"]]].append(verdict["policy"])
            messages[named[verdict["urn"]]] += verdict["message"]
    # Each workload: its image by a tag, its GPUs requested without a limit, the GPU taint not tolerated.
    assert {key: sorted(policies) for key, policies in found.items()} == {
        workload: [GPU_POD, GPU_POD, IMAGE] for workload in WORKLOADS
    }
    for workload in WORKLOADS:
        assert "'nvcr.io/nvidia/pytorch:latest', a tag" in messages[workload], workload
        assert "without a limit" in messages[workload] and "does not tolerate the taint" in messages[workload]
    # The paths are the object's own (camelCase, spec.template.spec), whatever casing the program wrote.
    assert (
        "spec.template.spec.containers[0].resources requests nvidia.com/gpu: 1"
        in messages[(DEPLOYMENT, "serve")]
    )
    assert "spec.containers[0].image" in messages[(POD, "debug")]


def test_the_compliant_stack_passes_and_every_object_was_checked() -> None:
    code, document = _stack("compliant")
    assert code == 0, document["policies"]
    assert document["policies"] == []
    named = _named(document)
    # Not a vacuous pass: every workload reached the policies, with the fields the rules read.
    assert set(named.values()) >= WORKLOADS
    by_name = {(resource["type"], resource["name"]): resource for resource in document["resources"]}
    train = by_name[(JOB, "train")]["inputs"]["spec"]["template"]["spec"]
    assert train["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert train["containers"][0]["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]
    assert train["containers"][0]["image"].startswith("registry.invalid/train@sha256:")  # the Output's value
    serve = by_name[(DEPLOYMENT, "serve")]["inputs"]["spec"]
    assert serve["selector"] == {"matchLabels": {"app": "serve"}}
    # The yaml/v2 objects are children of their component, as the provider registers them.
    sweep = next(urn for urn, key in named.items() if key == (CONFIG_GROUP, "sweep"))
    children = {
        key
        for resource in document["resources"]
        if resource["parent"] == sweep
        for key in [named[resource["urn"]]]
    }
    assert children == {
        (JOB, "sweep:sweep-a"),
        (JOB, "sweep:sweep-b"),
        (JOB, "sweep:sweep-c"),
        ("kubernetes:core/v1:ConfigMap", "sweep:ml/sweep-grid"),
        (POD, "sweep:ml/probe"),
    }


def test_a_helm_chart_is_named_as_not_checked(capsys: pytest.CaptureFixture[str]) -> None:
    _, document = _stack("compliant")
    (chart,) = document["not_checked"]
    assert (chart["type"], chart["urn"].rsplit("::", 1)[1]) == (CHART, "dashboards")
    assert "Helm" in chart["reason"]
    assert main(["policy", "check", str(GPU_JOBS), "--stack", "compliant"]) == 0
    out = capsys.readouterr().out
    assert (
        f"Not checked (no policy saw their Kubernetes objects)\n  {CHART} dashboards: the provider renders"
        in out
    )


def _program(tmp_path: Path, body: str, files: dict[str, str] | None = None) -> Path:
    (tmp_path / "Pulumi.yaml").write_text("name: k8s\nruntime: python\n", encoding="utf-8")
    (tmp_path / "Pulumi.dev.yaml").write_text("config: {}\n", encoding="utf-8")
    (tmp_path / "__main__.py").write_text(
        "import pulumi_kubernetes as k8s\n" + textwrap.dedent(body), encoding="utf-8"
    )
    for name, text in (files or {}).items():
        (tmp_path / name).write_text(textwrap.dedent(text), encoding="utf-8")
    return tmp_path


def _fails(capsys: pytest.CaptureFixture[str], project: Path) -> str:
    assert main(["policy", "check", str(project)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    return captured.err


def test_a_config_file_that_does_not_exist_is_bad_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    project = _program(tmp_path, 'k8s.yaml.v2.ConfigFile("jobs", file="manifests/jobs.yaml")\n')
    err = _fails(capsys, project)
    assert f"{CONFIG_FILE} jobs" in err and str(tmp_path / "manifests" / "jobs.yaml") in err
    assert "no such file" in err and "Fix:" in err


def test_an_object_without_a_name_is_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    project = _program(
        tmp_path,
        """\
        k8s.yaml.v2.ConfigGroup("jobs", yaml="apiVersion: batch/v1\\nkind: Job\\nspec: {}\\n")
        """,
    )
    err = _fails(capsys, project)
    assert f"{CONFIG_GROUP} jobs" in err and ".metadata.name" in err and "Fix:" in err


def test_bad_yaml_in_a_v1_config_file_is_bad_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    project = _program(
        tmp_path, 'k8s.yaml.ConfigFile("jobs", file="jobs.yaml")\n', {"jobs.yaml": "kind: Job\n  bad: [\n"}
    )
    err = _fails(capsys, project)
    assert (
        f"{project / '__main__.py'}: the YAML a yaml.ConfigFile or yaml.ConfigGroup read (starting 'kind: Job"
        in err
    )
    assert "not valid YAML" in err and "line 2, column 6" in err


def test_a_manifest_fetched_over_the_network_is_named_as_not_checked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = "https://registry.invalid/jobs.yaml"
    project = _program(tmp_path, f'k8s.yaml.v2.ConfigGroup("remote", files=["{url}"])\n')
    code, document = _check(capsys, project)
    assert code == 0
    (entry,) = document["not_checked"]
    assert entry["type"] == CONFIG_GROUP and url in entry["reason"]


def test_a_program_whose_sdk_is_not_installed_is_told_where_to_install_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    project = _program(tmp_path, "import pulumi_gpuforge_absent_sdk\n")
    err = _fails(capsys, project)
    assert "imports 'pulumi_gpuforge_absent_sdk'" in err and "not installed in the Python environment" in err
    assert "Fix: `pip install <its package>` into that environment" in err
