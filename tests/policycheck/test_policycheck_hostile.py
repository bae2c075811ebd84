"""Hostile input to the policy-check loaders: Pulumi.yaml, the stack config file and the mock-answers file.

Random shapes, deep nesting, aliases, duplicate keys and odd encodings, in the manner of
tests/core/test_hostile_input.py: each input ends as a value or a GpuforgeError within a
time bound, never another exception or a hang. No program runs here (that is the other
tests'), only the readers.

    GPUFORGE_FUZZ_EXAMPLES=3000 .venv/bin/pytest tests/policycheck/test_policycheck_hostile.py
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuforge.errors import GpuforgeError
from gpuforge.policycheck.answers import load_answers
from gpuforge.policycheck.project import load_project

EXAMPLES = int(os.environ.get("GPUFORGE_FUZZ_EXAMPLES", "60"))
SECONDS_PER_INPUT = 5.0
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,  # the bound is checked against wall time below, with a clear message
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=30,
)


def _texts(base: dict[str, Any]) -> st.SearchStrategy[str]:
    """Documents like `base` with one part replaced, duplicated keys, or purely hostile ones."""
    keys = sorted(base)
    return st.one_of(
        st.builds(lambda key, value: yaml.safe_dump({**base, key: value}), st.sampled_from(keys), _values),
        st.builds(lambda key: yaml.safe_dump(base) + f"{key}: again\n", st.sampled_from(keys)),
        st.builds(yaml.safe_dump, _values),
        st.integers(1, 6000).map(lambda n: "a: " + "[" * n + "]" * n),
        st.integers(2, 12).map(
            lambda n: (
                "a0: &a0 [x, x]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]\n" for i in range(1, n))
            )
        ),
        st.text(max_size=200),
    )


_encodings = st.sampled_from(["utf-8", "utf-16", "latin-1"])


def _bounded(call: Callable[[], object]) -> None:
    started = time.monotonic()
    try:
        call()
    except GpuforgeError as error:
        assert "Traceback" not in error.message
    elapsed = time.monotonic() - started
    assert elapsed < SECONDS_PER_INPUT, f"took {elapsed:.1f} s"


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
@given(text=_texts(PROJECT), encoding=_encodings)
def test_project_file(tmp_path: Path, text: str, encoding: str) -> None:
    root = _project(tmp_path, text.encode(encoding, errors="replace"), yaml.safe_dump(STACK).encode())
    _bounded(lambda: load_project(root, stack="dev"))


@FUZZ
@given(
    text=st.one_of(
        _texts(STACK["config"]).map(
            lambda t: "config:\n" + "".join(f"  {line}\n" for line in t.splitlines())
        ),
        _texts(STACK),
    ),
    encoding=_encodings,
)
def test_stack_config_file(tmp_path: Path, text: str, encoding: str) -> None:
    root = _project(tmp_path, yaml.safe_dump(PROJECT).encode(), text.encode(encoding, errors="replace"))
    _bounded(lambda: load_project(root, stack="dev", config_file=root / "Pulumi.dev.yaml"))


ANSWERS = {"invokes": {"aws:ec2/getVpc:getVpc": {"id": "vpc-1", "cidrBlock": "10.0.0.0/16"}}}


@FUZZ
@given(text=_texts(ANSWERS), encoding=_encodings, suffix=st.sampled_from([".yaml", ".json"]))
def test_answers_file(tmp_path: Path, text: str, encoding: str, suffix: str) -> None:
    path = tmp_path / f"answers{suffix}"
    path.write_bytes(text.encode(encoding, errors="replace"))
    _bounded(lambda: load_answers(path))


def test_paths_no_file_can_have_are_bad_input(tmp_path: Path) -> None:
    root = _project(tmp_path, yaml.safe_dump({**PROJECT, "main": "m" * 5000}).encode(), b"config: {}\n")
    _bounded(lambda: load_project(root, stack="dev"))
    root = _project(tmp_path, yaml.safe_dump({**PROJECT, "stackConfigDir": "a\0b"}).encode(), b"config: {}\n")
    _bounded(lambda: load_project(root, stack="dev"))
    _bounded(lambda: load_project(root, stack="dev", config_file=Path("x" * 5000)))
    _bounded(lambda: load_answers(tmp_path / ("y" * 5000)))
