"""The matrix digest: stable under formatting, sensitive to every pin."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from matrix_cases import MATRICES, key_paths

from gpuforge.images.matrix import Matrix, check_file, digest

SHIPPED = MATRICES / "p5-h100-cuda12.yaml"


def _digest_of(text: str, tmp_path: Path) -> str | None:
    path = tmp_path / "m.yaml"
    path.write_text(text, encoding="utf-8")
    return check_file(path).digest


def test_digest_ignores_key_order_quoting_and_comments(tmp_path: Path) -> None:
    original = check_file(SHIPPED).digest
    data = yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))
    reordered = dict(reversed(list(data.items())))
    reordered["nvidia"] = dict(reversed(list(data["nvidia"].items())))
    text = "# a comment that changes nothing\n" + yaml.safe_dump(
        reordered, default_style='"', sort_keys=False
    )
    assert _digest_of(text, tmp_path) == original
    flow = yaml.safe_dump(data, default_flow_style=True)
    assert _digest_of(flow, tmp_path) == original


def test_digest_shorthand_and_long_form_plugin_are_the_same_pin() -> None:
    data = yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))
    long_form = copy.deepcopy(data)
    long_form["aws_ofi_nccl"] = {"version": data["aws_ofi_nccl"], "install": "bundled"}
    assert digest(Matrix.model_validate(data)) == digest(Matrix.model_validate(long_form))


LEAVES = key_paths(yaml.safe_load(SHIPPED.read_text(encoding="utf-8")), with_mappings=False)


@pytest.mark.parametrize("path", LEAVES, ids=".".join)
def test_digest_changes_when_any_value_changes(path: tuple[str, ...]) -> None:
    data = yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))
    before = digest(Matrix.model_validate(data))
    node = data
    for key in path[:-1]:
        node = node[key]
    value = node[path[-1]]
    if isinstance(value, list):
        node[path[-1]] = value[:-1] if len(value) > 1 else [*value, "p5e.48xlarge"]
    elif path[-1] in {"boot_mode"}:
        node[path[-1]] = "uefi"
    elif path[-1] == "kernel_modules":
        node[path[-1]] = "proprietary"
    elif path[-1] == "distro":
        node[path[-1]] = "debian"
    elif path[-1] == "us-east-1":
        node[path[-1]] = "ami-0123456789abcdef0"
    else:
        node[path[-1]] = value + "1"
    assert digest(Matrix.model_validate(data)) != before


def test_digest_is_a_sha256_hex() -> None:
    value = check_file(SHIPPED).digest
    assert value is not None and len(value) == 64 and int(value, 16) >= 0


def test_every_shipped_matrix_has_a_distinct_digest() -> None:
    digests = {check_file(path).digest for path in MATRICES.glob("*.yaml")}
    assert len(digests) == len(list(MATRICES.glob("*.yaml")))
