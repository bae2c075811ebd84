"""Catalog records for tests, written with the image pipeline's own writer (`record_entry`).

The AMI ids are made up, as no image is built in these tests (the --local build has its own);
the digests are the shipped matrices' current ones, so the records follow matrix changes.
"""

from __future__ import annotations

from pathlib import Path

from gpuforge.images.build import catalog_entry
from gpuforge.images.catalog import CatalogEntry, record_entry
from gpuforge.images.matrix import load_valid

MATRICES = Path(__file__).resolve().parents[1] / "images" / "matrices"


def made_up_entry(matrix_file: Path, ami_id: str, region: str) -> CatalogEntry:
    """A record of `ami_id` in `region` as a build of `matrix_file` (by Debian's packer 1.6.6) writes it."""
    matrix, digest = load_valid(matrix_file)
    return catalog_entry(matrix, digest, ami_id, region, "1.6.6")


def record_every_shipped_matrix(catalog: Path) -> Path:
    """One AMI per shipped matrix in each region it pins a base AMI for, recorded in `catalog`."""
    for index, matrix_file in enumerate(sorted(MATRICES.glob("*.yaml"))):
        matrix, digest = load_valid(matrix_file)
        for region in matrix.os.base_ami:
            record_entry(catalog, made_up_entry(matrix_file, f"ami-{index:04x}{digest[:13]}", region))
    return catalog
