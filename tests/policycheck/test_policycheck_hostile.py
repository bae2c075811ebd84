"""Hostile input to the policy-check loaders: Pulumi.yaml, the stack config file and the mock-answers file.

Random shapes, deep nesting, aliases, duplicate keys and odd encodings, in the manner of
tests/core/test_hostile_input.py: each input ends as a value or a GpuforgeError within a
time bound, never another exception or a hang. No program runs here (that is the other
tests'), only the readers.

    GPUFORGE_FUZZ_EXAMPLES=3000 .venv/bin/pytest tests/policycheck/test_policycheck_hostile.py
"""

from __future__ import annotations

from pathlib import Path

import yaml
from fuzzing import ENCODINGS, FUZZ, bounded, encode, yaml_texts
from hypothesis import given
from hypothesis import strategies as st

from gpuforge.policycheck.answers import load_answers
from gpuforge.policycheck.project import load_project


def _project(tmp_path: Path, project_file: bytes, stack_file: bytes) -> Path:
    root = tmp_path / "project"
    root.mkdir(exist_ok=True)
    (root / "Pulumi.yaml").write_bytes(project_file)
    (root / "Pulumi.dev.yaml").write_bytes(stack_file)
    (root / "__main__.py").write_text("import pulumi\n", encoding="utf-8")
    return root


PROJECT = {
    "name": "infra",
    "runtime": "python",
    "main": ".",
    "stackConfigDir": ".",
    "config": {"size": {"default": 1}},
}
STACK = {"config": {"aws:region": "us-east-1", "size": 2, "token": {"secure": "AAAB"}}}


@FUZZ
@given(text=yaml_texts(PROJECT), encoding=ENCODINGS)
def test_project_file(tmp_path: Path, text: str, encoding: str) -> None:
    root = _project(tmp_path, encode(text, encoding), yaml.safe_dump(STACK).encode())
    bounded(lambda: load_project(root, stack="dev"))


@FUZZ
@given(
    text=st.one_of(
        yaml_texts(STACK["config"]).map(
            lambda t: "config:\n" + "".join(f"  {line}\n" for line in t.splitlines())
        ),
        yaml_texts(STACK),
    ),
    encoding=ENCODINGS,
)
def test_stack_config_file(tmp_path: Path, text: str, encoding: str) -> None:
    root = _project(tmp_path, yaml.safe_dump(PROJECT).encode(), encode(text, encoding))
    bounded(lambda: load_project(root, stack="dev", config_file=root / "Pulumi.dev.yaml"))


ANSWERS = {"invokes": {"aws:ec2/getVpc:getVpc": {"id": "vpc-1", "cidrBlock": "10.0.0.0/16"}}}


@FUZZ
@given(text=yaml_texts(ANSWERS), encoding=ENCODINGS, suffix=st.sampled_from([".yaml", ".json"]))
def test_answers_file(tmp_path: Path, text: str, encoding: str, suffix: str) -> None:
    path = tmp_path / f"answers{suffix}"
    path.write_bytes(encode(text, encoding))
    bounded(lambda: load_answers(path))


def test_paths_no_file_can_have_are_bad_input(tmp_path: Path) -> None:
    root = _project(tmp_path, yaml.safe_dump({**PROJECT, "main": "m" * 5000}).encode(), b"config: {}\n")
    bounded(lambda: load_project(root, stack="dev"))
    root = _project(tmp_path, yaml.safe_dump({**PROJECT, "stackConfigDir": "a\0b"}).encode(), b"config: {}\n")
    bounded(lambda: load_project(root, stack="dev"))
    bounded(lambda: load_project(root, stack="dev", config_file=Path("x" * 5000)))
    bounded(lambda: load_answers(tmp_path / ("y" * 5000)))
