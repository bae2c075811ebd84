"""A build's software bill of materials: every package in the image, with its version.

It comes from the same source as the in-image verification: after
scripts/90-verify.sh has compared the installed versions with the matrix (read
with dpkg-query), it writes the whole installed-package list the same way to
/etc/gpuforge/packages.tsv (name, version, architecture; tab-separated), and
the rendered build's last provisioner downloads that file into the render
folder. `image build` turns it into JSON stored beside the catalog record.

A build against an endpoint (`--local`, moto) runs no provisioners: nothing is
installed, so there is no package list to read. Its SBOM says so
(`"source": "matrix"`), lists no packages, and keeps the matrix's pinned
components, the versions the image would carry. A reused AMI built elsewhere
gets the same kind of SBOM, since its package list is not on this machine.
Both kinds carry `components`, the pins the AMI's tags record.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpuforge.errors import InputError
from gpuforge.images.matrix import Matrix
from gpuforge.images.tags import component_versions
from gpuforge.loading import MAX_DATA_BYTES, read_text

SCHEMA = 1
IMAGE_PACKAGES = "/etc/gpuforge/packages.tsv"
PACKAGES_FILE = "packages.tsv"  # where the build downloads it, in the render folder
FROM_IMAGE = "image"
FROM_MATRIX = "matrix"


def _document(matrix: Matrix, digest: str, source: str, note: str, packages: list[dict[str, str]]) -> str:
    data: dict[str, Any] = {
        "schema": SCHEMA,
        "matrix": {"name": matrix.name, "version": matrix.version, "digest": digest},
        "source": source,
        "note": note,
        "components": component_versions(matrix),
        "packages": packages,
    }
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def from_package_list(matrix: Matrix, digest: str, path: Path) -> str:
    """The SBOM of a real build, from the package list the image's verification wrote."""
    text = read_text(
        path,
        what="image package list",
        max_bytes=MAX_DATA_BYTES,
        fix=f"rebuild; images/scripts/90-verify.sh writes {IMAGE_PACKAGES} and packer downloads it",
    )
    packages = []
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split("\t")
        if len(fields) != 3 or not all(fields):
            raise InputError(
                f"{path}: line {number}: expected name, version and architecture separated by tabs, found "
                f"{line[:80]!r}. Fix: rebuild with this checkout's images/scripts/90-verify.sh."
            )
        packages.append({"name": fields[0], "version": fields[1], "architecture": fields[2]})
    note = f"every installed package, as dpkg-query lists it in the image ({IMAGE_PACKAGES})"
    return _document(matrix, digest, FROM_IMAGE, note, sorted(packages, key=lambda p: p["name"]))


def from_matrix(matrix: Matrix, digest: str, reason: str) -> str:
    """The SBOM where no image was read: the matrix's pins, no packages, and why."""
    return _document(
        matrix, digest, FROM_MATRIX, f"no package list: {reason}; components are the matrix's pins", []
    )
