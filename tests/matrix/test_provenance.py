"""Each shipped matrix records where its base AMI, kernel and Lustre client came from, and when.

The record is a comment (it leaves the digest alone), so this test is what keeps it next to the
values: change a pin without re-checking it and the record no longer names the pinned value.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from matrix_cases import MATRICES

from gpuforge.images.matrix import check_file

CHECKED = re.compile(
    r"^# Provenance of the base AMI, kernel and Lustre client, checked (\d{4}-\d{2}-\d{2})", re.M
)


@pytest.mark.parametrize("path", sorted(MATRICES.glob("*.yaml")), ids=lambda p: p.name)
def test_the_record_names_each_pinned_value_its_source_and_the_date(path: Path) -> None:
    matrix = check_file(path).matrix
    assert matrix is not None
    text = path.read_text(encoding="utf-8")
    assert CHECKED.search(text), f"{path.name}: no dated provenance record"
    record = "\n".join(line for line in text.splitlines() if line.startswith("#   "))
    for region, ami in matrix.os.base_ami.items():
        assert f"os.base_ami {region} {ami}:" in record, path.name
    assert f"kernel {matrix.kernel}:" in record, path.name
    assert f"lustre_client {matrix.lustre_client} on that kernel:" in record, path.name
    entries = re.findall(r"^#   (?:os\.base_ami|kernel|lustre_client) .*?(?=^#   \S|\Z)", text, re.M | re.S)
    assert len(entries) == len(matrix.os.base_ami) + 2, path.name
    for entry in entries:
        # Each says what it was checked against, and plainly when it could not be verified.
        assert re.search(r"\b(?:UN)?VERIFIED\.", entry), entry
