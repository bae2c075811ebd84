"""A program cannot rig `gpuforge policy check`: it runs in a child process, and the verdict is the parent's.

The fixture (tests/fixtures/policycheck/rigged) registers a node that breaks three
mandatory policies, then, per stack, tries to end or rig the check: the C-level
`posix._exit(0)`, `os.execv` into a program that exits 0, an `atexit` handler that
exits 0, replacing gpuforge's policy functions or its mocks, or writing a made-up
result to every descriptor it holds. Each ends in the honest verdict (exit 1) or in
bad input (exit 2), never exit 0; and `--json` prints one JSON document whatever the
program prints. The command runs as a user runs it, a process of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from catalog_records import record_every_shipped_matrix
from policycheck_support import FIXTURES, REPO

RIGGED = FIXTURES / "rigged"
GPUFORGE = Path(sys.executable).parent / "gpuforge"
OPEN_NODE = ["imdsv2-required", "no-public-ip", "no-ssh-key"]


def _check(stack: str, catalog: Path, *extra: str) -> tuple[int, Any, str]:
    done = subprocess.run(
        [str(GPUFORGE), "policy", "check", str(RIGGED), "--stack", stack, "--catalog", str(catalog), *extra],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    return done.returncode, json.loads(done.stdout), done.stderr


def _mandatory(document: Any) -> list[str]:
    return sorted(v["policy"] for v in document["policies"] if v["enforcement"] == "mandatory")


@pytest.mark.parametrize(
    ("stack", "how"),
    [
        ("posix-exit", "its process exited with status 0 before it sent gpuforge a result"),
        ("execv", "its process exited with status 0 before it sent gpuforge a result"),
        ("forge-record", "the result it sent is not one gpuforge's run writes"),
    ],
)
def test_a_program_that_ends_or_replaces_its_process_is_bad_input(
    catalog_file: Path, stack: str, how: str
) -> None:
    code, document, _ = _check(stack, catalog_file, "--json")
    assert code == 2, document
    message = document["error"]["message"]
    assert message.startswith(
        f"{RIGGED / '__main__.py'}: the program ended the check before it finished: {how}"
    )
    assert "Fix: let the program return" in message


def test_an_atexit_handler_cannot_change_the_exit_code(catalog_file: Path) -> None:
    code, document, _ = _check("atexit-exit", catalog_file, "--json")
    assert code == 1
    assert _mandatory(document) == OPEN_NODE


def test_replacing_the_policy_functions_changes_no_verdict(catalog_file: Path) -> None:
    code, document, _ = _check("patch-policies", catalog_file, "--json")
    assert code == 1
    assert _mandatory(document) == OPEN_NODE


@pytest.mark.parametrize(
    ("stack", "replaced"),
    [
        ("patch-mocks", "gpuforge.pulumi_mocks.GpuforgeMocks.resources"),
        ("patch-pydantic", "pydantic.main.BaseModel.model_dump_json"),
    ],
)
def test_replacing_what_makes_the_record_is_refused_naming_it(
    catalog_file: Path, stack: str, replaced: str
) -> None:
    code, document, _ = _check(stack, catalog_file, "--json")
    assert code == 2, document
    message = document["error"]["message"]
    assert f"the program replaced {replaced} (at {RIGGED / '__main__.py'}:" in message


def test_json_is_one_document_when_the_program_prints(catalog_file: Path) -> None:
    code, document, err = _check("prints", catalog_file, "--json")
    assert code == 1
    assert _mandatory(document) == OPEN_NODE
    assert "hello from the program" in err


def test_text_view_keeps_the_programs_output_off_stdout(catalog_file: Path) -> None:
    done = subprocess.run(
        [str(GPUFORGE), "policy", "check", str(RIGGED), "--stack", "prints", "--catalog", str(catalog_file)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 1
    assert "hello from the program" not in done.stdout and "hello from the program" in done.stderr
    assert done.stdout.rstrip().endswith("Result: FAIL, 3 mandatory policy violation(s)")


def _rigged_stack(tmp_path: Path, trick: str) -> Path:
    """A copy of stacks/training's dev stack whose program ends with `trick`."""
    target = tmp_path / "stack"
    target.mkdir()
    training = REPO / "stacks" / "training"
    (target / "Pulumi.yaml").write_text(
        (training / "Pulumi.yaml").read_text(encoding="utf-8"), encoding="utf-8"
    )
    program = (training / "__main__.py").read_text(encoding="utf-8") + f"\n{trick}\n"
    (target / "__main__.py").write_text(program, encoding="utf-8")
    data = yaml.safe_load((training / "Pulumi.dev.yaml").read_text(encoding="utf-8"))
    data["config"]["gpuforge:matrix"] = str((training / data["config"]["gpuforge:matrix"]).resolve())
    (target / "Pulumi.dev.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    return target


@pytest.mark.parametrize(
    ("trick", "how"),
    [
        ("import posix; posix._exit(0)", "its process exited with status 0 before it sent gpuforge a result"),
        (
            "import os, sys; os.execv(sys.executable, [sys.executable, '-c', 'pass'])",
            "its process exited with status 0 before it sent gpuforge a result",
        ),
    ],
)
def test_plan_runs_its_program_the_same_way(tmp_path: Path, trick: str, how: str) -> None:
    """`gpuforge plan` of a stack whose program ends its own process is bad input, not exit 0."""
    stack = _rigged_stack(tmp_path, trick)
    catalog = record_every_shipped_matrix(tmp_path / "catalog.json")
    done = subprocess.run(
        [str(GPUFORGE), "plan", str(stack), "--stack", "dev", "--catalog", str(catalog)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 2, done.stdout
    assert done.stdout == ""
    assert f"{stack / '__main__.py'}: the program ended the check before it finished: {how}" in done.stderr
