"""Floors not read at NVIDIA's or AWS's own documents are marked in the data and warned on."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from matrix_cases import MATRICES, findings, load, rules, warnings

from gpuforge.compat import compat
from gpuforge.images.matrix import check_file


def _secondary(data: dict[str, Any]) -> list[str]:
    return [f.message for f in findings(data) if f.rule == "data.secondary"]


def test_every_graded_floor_states_how_it_was_established() -> None:
    data = compat()
    graded = [
        *data.architectures.gpu_min_driver.values(),
        *data.nccl.min_for_cuda_major.values(),
        *data.nccl.min_for_architecture.values(),
        *data.aws_ofi_nccl.min_for_instance_type.values(),
    ]
    assert graded and all(floor.confidence in {"primary", "secondary", "derived"} for floor in graded)


def test_the_cuda13_nccl_floor_is_secondary_and_matrix_check_says_so() -> None:
    report = check_file(MATRICES / "p5-h100-cuda13.yaml")
    (hit,) = [f for f in report.findings if f.rule == "data.secondary"]
    assert (hit.severity, hit.field) == ("warning", "nccl")
    assert "NCCL floor for CUDA 13 (>= 2.27.7) is secondary" in hit.message
    assert "27328508114" in hit.source
    assert report.ok  # a warning, not an error: the floor itself still applies


@pytest.mark.parametrize(
    "name", ["p5-h100-cuda12.yaml", "p6-b200-cuda12.yaml", "p4d-a100-cuda12.yaml", "g6-dev-cuda12.yaml"]
)
def test_matrices_judged_only_by_primary_floors_do_not_warn(name: str) -> None:
    assert _secondary(load(name)) == []


def test_aws_ofi_nccl_type_floors_are_aws_release_notes() -> None:
    floors = compat().aws_ofi_nccl.min_for_instance_type
    assert {name: f.plugin for name, f in floors.items()} == {
        "p5e.48xlarge": "1.11.0",
        "p5en.48xlarge": "1.13.0",
        "p6-b200.48xlarge": "1.15.0",
        "p6-b300.48xlarge": "1.18.0",
    }
    assert all(
        f.confidence == "primary" and "aws/aws-ofi-nccl RELEASENOTES.md at tag" in f.source
        for f in floors.values()
    )


def test_p5en_needs_the_plugin_that_first_supports_it(h100: dict[str, Any]) -> None:
    h100["aws_ofi_nccl"] = {
        "version": "1.12.1",
        "install": "separate",
        "prefix": "/opt/aws-ofi-nccl",
        "sha256": "d" * 64,
        "sha256_source": "published: a test value, not a real checksum",
    }
    hits = [f for f in findings(h100) if f.rule == "ofi.instance-type"]
    assert any("p5en.48xlarge needs aws-ofi-nccl >= 1.13.0" in f.message for f in hits)


def test_b300_has_no_published_driver_floor_and_warns(b200: dict[str, Any]) -> None:
    b300 = copy.deepcopy(b200)
    b300["targets"] = ["p6-b300.48xlarge"]
    assert "data.secondary" in warnings(b300)
    (message,) = [m for m in _secondary(b300) if "B300" in m]
    assert "B300 driver floor (>= 570.26) is derived" in message
    assert compat().architectures.gpu_min_driver["B300"].confidence == "derived"


def test_a_floor_marked_primary_does_not_warn(monkeypatch: pytest.MonkeyPatch, h100: dict[str, Any]) -> None:
    h100["cuda"] = "13.0.2"
    floor = compat().nccl.min_for_cuda_major["13"]
    monkeypatch.setitem(
        compat().nccl.min_for_cuda_major, "13", floor.model_copy(update={"confidence": "primary"})
    )
    assert [m for m in _secondary(h100) if "CUDA 13" in m] == []
    assert "data.secondary" not in rules(h100)
