"""The SBOM a build stores beside its catalog record: from the image's package list, or from the matrix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from image_helpers import MATRICES

from gpuforge.errors import InputError
from gpuforge.images.matrix import load_valid
from gpuforge.images.sbom import from_matrix, from_package_list
from gpuforge.images.tags import component_versions

MATRIX = MATRICES / "p5-h100-cuda12.yaml"


def test_a_real_build_lists_every_package_the_verification_read(tmp_path: Path) -> None:
    matrix, digest = load_valid(MATRIX)
    listed = tmp_path / "packages.tsv"
    listed.write_text("zlib1g\t1:1.2.13.dfsg-1\tamd64\nlibnccl2\t2.27.3-1+cuda12.9\tamd64\n")
    sbom = json.loads(from_package_list(matrix, digest, listed))
    assert sbom["source"] == "image"
    assert sbom["matrix"] == {"name": matrix.name, "version": matrix.version, "digest": digest}
    assert sbom["packages"] == [
        {"name": "libnccl2", "version": "2.27.3-1+cuda12.9", "architecture": "amd64"},
        {"name": "zlib1g", "version": "1:1.2.13.dfsg-1", "architecture": "amd64"},
    ]
    assert sbom["components"] == component_versions(matrix)


def test_a_package_list_with_a_broken_line_names_the_file_and_line(tmp_path: Path) -> None:
    matrix, digest = load_valid(MATRIX)
    listed = tmp_path / "packages.tsv"
    listed.write_text("libnccl2\t2.27.3-1+cuda12.9\tamd64\nnot a package line\n")
    with pytest.raises(InputError, match=r"packages\.tsv: line 2: expected name, version and architecture"):
        from_package_list(matrix, digest, listed)


def test_without_an_image_the_sbom_says_so_and_keeps_the_pins() -> None:
    matrix, digest = load_valid(MATRIX)
    sbom = json.loads(
        from_matrix(matrix, digest, "built against http://127.0.0.1:1, where no provisioner runs")
    )
    assert sbom["source"] == "matrix" and sbom["packages"] == []
    assert "no package list: built against" in sbom["note"]
    assert sbom["components"]["nccl"] == matrix.nccl
