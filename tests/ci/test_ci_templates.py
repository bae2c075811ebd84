"""The CI workflow templates (ci/github-actions/): linted, and their gpuforge commands are ones that run here.

The linters are the package index's own: actionlint (workflow semantics and the shell in `run:`),
zizmor (security: template injection, credentials, unpinned actions) and check-jsonschema's bundled
GitHub workflow schema. The commands are taken from the files, not retyped, and run against the
shipped matrices and stacks, as a CI runner would run them.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from catalog_records import record_every_shipped_matrix

from gpuforge.cli import main

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = REPO / "ci" / "github-actions"
WORKFLOWS = sorted(TEMPLATES.glob("*.yml"))
BIN = Path(sys.executable).parent


def _workflow(name: str) -> dict[Any, Any]:
    data: dict[Any, Any] = yaml.safe_load((TEMPLATES / name).read_text(encoding="utf-8"))
    return data


def _runs(workflow: dict[Any, Any], job: str) -> list[str]:
    return [step["run"] for step in workflow["jobs"][job]["steps"] if "run" in step]


def _gpuforge_commands(workflow: dict[Any, Any], job: str) -> list[list[str]]:
    """The one-line `.venv/bin/gpuforge ...` steps of a job, as argument lists."""
    return [
        shlex.split(run)[1:]
        for run in _runs(workflow, job)
        if "\n" not in run.strip() and run.startswith(".venv/bin/gpuforge ")
    ]


@pytest.mark.parametrize(
    "linter",
    [
        ["actionlint"],
        ["zizmor", "--offline", "--persona", "auditor"],
        ["check-jsonschema", "--builtin-schema", "vendor.github-workflows"],
    ],
    ids=lambda command: command[0],
)
def test_the_templates_pass_each_linter(linter: list[str]) -> None:
    assert WORKFLOWS
    done = subprocess.run(
        [str(BIN / linter[0]), *linter[1:], *map(str, WORKFLOWS)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": f"{BIN}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"), "NO_COLOR": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_zizmor_reports_an_injected_expression_so_its_pass_means_something(tmp_path: Path) -> None:
    workflow = (TEMPLATES / "gpuforge-stacks.yml").read_text(encoding="utf-8")
    injected = workflow.replace('--stack "$STACK"', "--stack ${{ github.head_ref }}", 1)
    assert injected != workflow
    (tmp_path / "injected.yml").write_text(injected, encoding="utf-8")
    done = subprocess.run(
        [str(BIN / "zizmor"), "--offline", str(tmp_path / "injected.yml")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": f"{BIN}:/usr/bin:/bin", "NO_COLOR": "1"},
    )
    assert done.returncode != 0 and "template-injection" in done.stdout + done.stderr


def test_the_matrix_check_step_runs_on_the_shipped_matrices(monkeypatch: pytest.MonkeyPatch) -> None:
    [command] = _gpuforge_commands(_workflow("gpuforge-images.yml"), "check")
    monkeypatch.chdir(REPO)
    # The shell expands the glob; so does this, from the checkout's root.
    argv = [
        match
        for arg in command
        for match in (sorted(str(m.relative_to(REPO)) for m in REPO.glob(arg)) if "*" in arg else [arg])
    ]
    assert argv[:2] == ["matrix", "check"] and len(argv) > 3
    assert main(argv) == 0


def test_the_build_step_uses_flags_image_build_has(capsys: pytest.CaptureFixture[str]) -> None:
    script = _runs(_workflow("gpuforge-images.yml"), "build")[1]
    assert '.venv/bin/gpuforge image build "$matrix" --region "$REGION" "${extra[@]}"' in script
    with pytest.raises(SystemExit):
        main(["image", "build", "--help"])
    usage = capsys.readouterr().out
    for flag in ("--region", "--copy-to", "--share-with"):
        assert flag in usage and flag in script


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkout whose catalog holds an AMI for every shipped matrix, as a repository using gpuforge has.

    The shipped stacks are copied with `gpuforge:catalog` set to that catalog (the program reads it);
    the matrices are the shipped ones. The records are written with the pipeline's own writer; no
    image is built here."""
    root = tmp_path_factory.mktemp("checkout")
    (root / "images").mkdir()
    (root / "images" / "matrices").symlink_to(REPO / "images" / "matrices")
    catalog = record_every_shipped_matrix(root / "images" / "catalog")
    stacks = root / "stacks" / "training"
    shutil.copytree(
        REPO / "stacks" / "training", stacks, ignore=shutil.ignore_patterns("venv", "__pycache__")
    )
    for stack_file in stacks.glob("Pulumi.*.yaml"):
        data = yaml.safe_load(stack_file.read_text(encoding="utf-8"))
        data["config"]["gpuforge:catalog"] = str(catalog)
        stack_file.write_text(yaml.safe_dump(data), encoding="utf-8")
    return root


def _stack_steps() -> Iterator[tuple[str, list[str]]]:
    workflow = _workflow("gpuforge-stacks.yml")
    for stack in workflow["jobs"]["plan"]["strategy"]["matrix"]["stack"]:
        for command in _gpuforge_commands(workflow, "plan"):
            yield stack, command


def test_the_stack_matrix_names_every_shipped_stack() -> None:
    workflow = _workflow("gpuforge-stacks.yml")
    shipped = sorted(
        path.name[len("Pulumi.") : -len(".yaml")]
        for path in (REPO / "stacks" / "training").glob("Pulumi.*.yaml")
    )
    assert sorted(workflow["jobs"]["plan"]["strategy"]["matrix"]["stack"]) == shipped
    assert [command[:2] for _, command in _stack_steps()][:2] == [
        ["plan", "stacks/training"],
        ["policy", "check"],
    ]


@pytest.mark.parametrize(
    ("stack", "command"),
    list(_stack_steps()),
    ids=lambda value: value if isinstance(value, str) else value[0],
)
def test_each_stack_step_passes_on_the_shipped_stacks(
    stack: str,
    command: list[str],
    checkout: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(checkout)
    values = {"$STACK": stack, "$CATALOG": _workflow("gpuforge-stacks.yml")["jobs"]["plan"]["env"]["CATALOG"]}
    argv = [values.get(arg, arg) for arg in command]
    assert main(argv) == 0, capsys.readouterr()
