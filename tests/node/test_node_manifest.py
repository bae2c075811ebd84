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
        (lambda d: d["components"].update(prometheus="3.13.2\n"), "'components.prometheus'"),
        (lambda d: d["components"].update(node_exporter=""), "'components.node_exporter'"),
        (lambda d: d["components"].update(alertmanager=33), "'components.alertmanager'"),
    ],
)
def test_invalid_values_are_rejected_with_the_field(
    tmp_path: Path, fixtures: Path, change: Any, field: str
) -> None:
    data = _valid(fixtures)
    change(data)
    with pytest.raises(InputError, match=field):
        load_manifest(_write(tmp_path, data))


def test_the_monitoring_daemons_versions_are_read_when_the_image_has_them(
    tmp_path: Path, fixtures: Path
) -> None:
    # 90-verify.sh writes node_exporter, prometheus and alertmanager for a matrix that pins them.
    data = _valid(fixtures)
    data["components"].update(node_exporter="1.11.1", prometheus="3.13.2", alertmanager="0.33.1")
    components = load_manifest(_write(tmp_path, data)).components
    assert (components["node_exporter"], components["prometheus"], components["alertmanager"]) == (
        "1.11.1",
        "3.13.2",
        "0.33.1",
    )


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read the image manifest"):
        load_manifest(tmp_path / "absent.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{\n  'schema': 1\n}")
    with pytest.raises(InputError, match=r"not valid JSON \(line 2"):
        load_manifest(bad)
    with pytest.raises(InputError, match="must be a JSON object"):
        load_manifest(_write(tmp_path, [1, 2]))


DIGEST = "sha256:a358a9b16ce866baf81facd9e08294c923eb3488ce07c7a216d3ed8a5401357b"


@pytest.mark.parametrize(
    ("field", "section", "key", "value", "shown"),
    [
        ("components.cuda", "components", "cuda", "12.8.1\n", r"'12.8.1\n'"),
        ("components.kernel", "components", "kernel", "6.8.0-1021-aws\r", r"'6.8.0-1021-aws\r'"),
        (
            "components.nvidia_driver",
            "components",
            "nvidia_driver",
            "570.133.20\x1b[31m",
            r"'570.133.20\x1b[31m'",
        ),
        ("components.nccl", "components", "nccl", "2.26.2\t1", r"'2.26.2\t1'"),
        ("components.slurm", "components", "slurm", "26.05.5\n", r"'26.05.5\n'"),
        ("matrix.name", "matrix", "name", "p5-h100\n", r"'p5-h100\n'"),
        ("matrix.version", "matrix", "version", " 1", "' 1'"),
        ("matrix.digest", "matrix", "digest", DIGEST + "\n", r"\n'"),
        ("targets[0]", None, "targets", ["p5.48xlarge\n"], r"'p5.48xlarge\n'"),
        ("components.dcgm", "components", "dcgm", "4.1.1\u202e", r"'4.1.1\u202e'"),
    ],
)
def test_control_characters_and_trailing_newlines_are_refused(
    tmp_path: Path, fixtures: Path, field: str, section: str | None, key: str, value: Any, shown: str
) -> None:
    data = _valid(fixtures)
    (data[section] if section else data)[key] = value
    path = _write(tmp_path, data)
    with pytest.raises(InputError) as raised:
        load_manifest(path)
    message = str(raised.value)
    assert str(path) in message and f"'{field}'" in message
    assert shown in message, "the value is shown escaped"
    assert "Fix:" in message
    assert message.isprintable(), "no control character reaches the terminal"
