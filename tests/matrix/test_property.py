"""Property tests: malformed and mutated matrices end in a clean exit 1 or 2, never a crash."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from matrix_cases import key_paths, load

from gpuforge.cli import main
from gpuforge.images.matrix import MONITORING_KEYS

BASE = load("p5-h100-cuda12.yaml")


PATHS = key_paths(BASE, with_mappings=True)

# Values that can never be a valid pin, id, enum member or list of targets.
BAD_VALUES = st.one_of(
    st.none(),
    st.integers(),
    st.floats(allow_nan=True),
    st.booleans(),
    st.sampled_from(["", "latest", "*", ">=1.0", "1.x", "~1.2", "ami-xyz", "not a version", "1.0 || 2.0"]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


def _run(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    path = tmp_path / "m.yaml"
    path.write_text(text, encoding="utf-8")
    code = main(["matrix", "check", str(path), "--json"])
    report = json.loads(capsys.readouterr().out)
    return code, report


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(PATHS), value=BAD_VALUES)
def test_a_bad_value_anywhere_gives_findings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], path: tuple[str, ...], value: Any
) -> None:
    data = copy.deepcopy(BASE)
    node = data
    for key in path[:-1]:
        node = node[key]
    # Free text, and a name, can legitimately be one of the bad-version strings ('latest' is a fine name).
    assume(not (path in {("description",), ("name",)} and isinstance(value, str)))
    # Optional blocks: null is the same as absent.
    # (the monitoring daemons too: a matrix with Slurm that leaves one out only warns, monitoring.pinned;
    # and the Kubernetes node parts, which a Slurm-only matrix leaves out)
    optional = {
        ("description",),
        ("nccl_tests",),
        ("node_exporter",),
        ("prometheus",),
        ("alertmanager",),
        ("kubernetes",),
    }
    assume(not (path in optional and value is None))
    node[path[-1]] = value
    code, report = _run(tmp_path, yaml.safe_dump(data), capsys)
    assert code == 1
    assert report["files"][0]["findings"], f"{'.'.join(path)}={value!r} passed"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(PATHS), extra=st.text(min_size=1, max_size=12))
def test_deleted_or_unknown_keys_give_findings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], path: tuple[str, ...], extra: str
) -> None:
    data = copy.deepcopy(BASE)
    node = data
    for key in path[:-1]:
        node = node[key]
    optional = {
        ("description",),
        ("nvidia", "nvlsm"),
        ("nccl_tests",),
        ("kubernetes",),
        *((key,) for key in MONITORING_KEYS),
    }
    if path in optional or (path[:2] == ("os", "base_ami") and len(path) == 3):
        node[path[-1] + "_" + extra] = "x"  # an unknown key beside it instead
    else:
        del node[path[-1]]
    code, report = _run(tmp_path, yaml.safe_dump(data), capsys)
    assert code == 1 and report["files"][0]["findings"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=200))
def test_arbitrary_text_never_crashes(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> None:
    code, report = _run(tmp_path, text, capsys)
    assert code in (1, 2)
    assert report["files"][0]["findings"]
