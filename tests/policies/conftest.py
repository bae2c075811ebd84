"""Fixtures of the policy tests: an image catalog with real matrices, and one that fails its check."""

from __future__ import annotations

import pytest
from policy_helpers import SHIPPED_MATRICES, Images, build_images

from gpuforge.images.matrix import check_file


def broken_matrix() -> str:
    """The shipped p5 matrix on driver 520.61.05, below CUDA 12.x's minimum: `matrix check` fails it."""
    text = (SHIPPED_MATRICES / "p5-h100-cuda12.yaml").read_text(encoding="utf-8")
    return text.replace("name: p5-h100-cuda12", "name: p5-h100-broken").replace('"580.95.05"', '"520.61.05"')


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Images:
    built = build_images(tmp_path_factory.mktemp("images"), {"p5-h100-broken": broken_matrix()})
    assert not check_file(built.matrices / "p5-h100-broken.yaml").ok
    assert check_file(built.matrices / "p5-h100-cuda12.yaml").ok, "the shipped p5 matrix must pass its check"
    return built
