"""Fixtures for the policy-check tests: an image catalog that records the fixture program's pinned AMI.

The catalog is written with the image pipeline's own writer (`record_entry`) for the
current digest of a shipped matrix, so it stays right when the matrix changes; the AMI
id is made up, as no image is built here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from catalog_records import made_up_entry
from policycheck_support import MATRIX, PINNED_AMI, REGION

from gpuforge.images.catalog import record_entry
from gpuforge.images.matrix import load_valid
from gpuforge.images.render import ami_name


@pytest.fixture(scope="session")
def catalog_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A single-file catalog holding PINNED_AMI, built from MATRIX, in REGION."""
    path = tmp_path_factory.mktemp("policycheck-catalog") / "catalog.json"
    record_entry(path, made_up_entry(MATRIX, PINNED_AMI, REGION))
    return path


@pytest.fixture(scope="session")
def pinned_ami_name() -> str:
    """The name the image pipeline gives PINNED_AMI (what an exact name lookup asks for)."""
    matrix, digest = load_valid(MATRIX)
    return ami_name(matrix, digest)
