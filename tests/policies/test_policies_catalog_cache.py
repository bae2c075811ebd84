"""The policy pack re-reads the catalog when any record changes, in both catalog layouts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from catalog_records import MATRICES, made_up_entry

from gpuforge.images.catalog import record_entry
from gpuforge.policies.pinned_images import ImageSources

MATRIX = MATRICES / "p5-h100-cuda12.yaml"


@pytest.mark.parametrize("layout", ["catalog", "catalog.json"])
def test_a_record_added_or_replaced_after_a_check_is_seen_by_the_next(tmp_path: Path, layout: str) -> None:
    catalog = tmp_path / layout
    sources = ImageSources(catalog, MATRICES)
    record_entry(catalog, made_up_entry(MATRIX, "ami-0123456789abcdef0", "us-east-1"))
    assert [pin.entry.ami_id for pin in sources.pinned("ami-0123456789abcdef0")] == ["ami-0123456789abcdef0"]
    # The same matrix and region rebuilt: the record is rewritten under its own name.
    time.sleep(0.01)
    record_entry(catalog, made_up_entry(MATRIX, "ami-0fedcba9876543210", "us-east-1"))
    assert sources.pinned("ami-0123456789abcdef0") == []
    assert len(sources.pinned("ami-0fedcba9876543210")) == 1
