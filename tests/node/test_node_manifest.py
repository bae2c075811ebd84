"""The image manifest reader: valid files load, every defect names the file and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuforge.errors import InputError
from gpuforge.node.manifest import REQUIRED_COMPONENTS, load_manifest


def _write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(data))
    return path


def _valid(fixtures: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((fixtures / "manifest/p5-h100.json").read_text())
    return data


def test_shipped_fixture_loads(fixtures: Path) -> None:
    manifest = load_manifest(fixtures / "manifest/p5-h100.json")
    assert manifest.nvidia_driver == "570.133.20"
    assert manifest.kernel_modules == "open"
    assert "p5.48xlarge" in manifest.targets
    assert manifest.nvlsm is None
    assert load_manifest(fixtures / "manifest/p6-b200.json").nvlsm == "2025.03.0"


@pytest.mark.parametrize("key", REQUIRED_COMPONENTS)
def test_each_missing_component_is_named(tmp_path: Path, fixtures: Path, key: str) -> None:
    data = _valid(fixtures)
    del data["components"][key]
    path = _write(tmp_path, data)
    with pytest.raises(InputError) as raised:
        load_manifest(path)
    message = str(raised.value)
    assert str(path) in message and f"'components.{key}'" in message and "missing" in message


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d.pop("matrix"), "'matrix'"),
        (lambda d: d["matrix"].pop("digest"), "'matrix.digest'"),
        (lambda d: d.update(targets=[]), "'targets'"),
        (lambda d: d.update(schema=2), "'schema'"),
        (
            lambda d: d["components"].update(nvidia_kernel_modules="closed"),
            "'components.nvidia_kernel_modules'",
        ),
        (lambda d: d["components"].update(nvidia_driver=570), "'components.nvidia_driver'"),
        (lambda d: d["components"].update(nvlsm=""), "'components.nvlsm'"),
    ],
)
def test_invalid_values_are_rejected_with_the_field(
    tmp_path: Path, fixtures: Path, change: Any, field: str
) -> None:
    data = _valid(fixtures)
    change(data)
    with pytest.raises(InputError, match=field):
        load_manifest(_write(tmp_path, data))


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read the image manifest"):
        load_manifest(tmp_path / "absent.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{\n  'schema': 1\n}")
    with pytest.raises(InputError, match=r"not valid JSON \(line 2"):
        load_manifest(bad)
    with pytest.raises(InputError, match="must be a JSON object"):
        load_manifest(_write(tmp_path, [1, 2]))
