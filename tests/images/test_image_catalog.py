"""The AMI catalog: schema-checked reads, atomic writes, and concurrent writers that both land."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from image_helpers import REPO

from gpuforge.errors import InputError
from gpuforge.images.catalog import (
    DEFAULT_CATALOG,
    LOCAL_CATALOG,
    CatalogEntry,
    load_catalog,
    now_utc,
    record_entry,
    utc_timestamp,
)

DIGEST = "a" * 64
ENTRY = CatalogEntry(
    ami_id="ami-0123456789abcdef0",
    region="us-east-1",
    matrix_name="p5-h100-cuda12",
    matrix_version="1.0.0",
    matrix_digest=DIGEST,
    built_at="2026-01-31T12:00:00+00:00",
    packer_version="1.6.6",
)


def test_default_paths_are_in_the_repository_images_folder() -> None:
    assert DEFAULT_CATALOG == REPO / "images" / "catalog"
    assert LOCAL_CATALOG == REPO / "images" / "catalog.local"
    assert DEFAULT_CATALOG.is_dir() and LOCAL_CATALOG.is_dir()  # checked in, so a fresh clone reads them


def test_a_missing_catalog_is_empty(tmp_path: Path) -> None:
    catalog = load_catalog(tmp_path / "none.json")
    assert catalog.entries == ()
    assert catalog.lookup(DIGEST, "us-east-1") is None


def test_record_then_lookup_and_replace(tmp_path: Path) -> None:
    path = tmp_path / "catalog.json"
    record_entry(path, ENTRY)
    west = replace(ENTRY, region="us-west-2", ami_id="ami-11111111")
    record_entry(path, west)
    catalog = load_catalog(path)
    assert catalog.lookup(DIGEST, "us-east-1") == ENTRY
    assert catalog.lookup(DIGEST, "us-west-2") == west
    rebuilt = replace(ENTRY, ami_id="ami-22222222", built_at=now_utc())
    record_entry(path, rebuilt)
    assert load_catalog(path).lookup(DIGEST, "us-east-1") == rebuilt
    assert len(load_catalog(path).entries) == 2
    raw = json.loads(path.read_text())
    assert raw["schema"] == 2
    assert raw["images"][DIGEST]["us-west-2"]["ami_id"] == "ami-11111111"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["catalog.json", "catalog.json.lock"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{not json", r"not valid JSON \(line 1"),
        ("[]", "expected a JSON object, found list"),
        ('{"schema": 3, "images": {}}', "schema: this gpuforge reads schemas 1, 2, the file says 3"),
        ('{"images": {}}', "schema: .*says None"),
        ('{"schema": 1, "images": {}, "extra": 1}', "extra"),
        (
            json.dumps(
                {"schema": 1, "images": {DIGEST: {"us-east-1": {**ENTRY.__dict__, "ami_id": "image-1"}}}}
            ),
            rf"images\.{DIGEST}\.us-east-1\.ami_id.*'image-1'",
        ),
        (
            json.dumps(
                {"schema": 1, "images": {DIGEST: {"us-east-1": {**ENTRY.__dict__, "built_at": "yesterday"}}}}
            ),
            "built_at.*ISO 8601",
        ),
        (
            json.dumps(
                {
                    "schema": 1,
                    "images": {
                        DIGEST: {"us-east-1": {**ENTRY.__dict__, "built_at": "2026-01-31T12:00:00+02:00"}}
                    },
                }
            ),
            "built_at.*UTC",
        ),
        (
            json.dumps({"schema": 1, "images": {DIGEST: {"eu-west-1": ENTRY.__dict__}}}),
            "filed under another key",
        ),
    ],
)
def test_a_malformed_catalog_is_a_clear_error_naming_file_and_field(
    tmp_path: Path, content: str, expected: str
) -> None:
    path = tmp_path / "catalog.json"
    path.write_text(content)
    with pytest.raises(InputError, match=expected) as caught:
        load_catalog(path)
    assert str(path) in caught.value.message
    assert "Fix:" in caught.value.message


def test_recording_into_a_malformed_catalog_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "catalog.json"
    path.write_text('{"schema": 9}')
    with pytest.raises(InputError):
        record_entry(path, ENTRY)
    assert path.read_text() == '{"schema": 9}'


WRITER = """
import sys
from dataclasses import replace
from pathlib import Path
from gpuforge.images.catalog import CatalogEntry, record_entry
path, worker, count = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
base = CatalogEntry("ami-00000000", "us-east-1", "m", "1.0.0", "0" * 64, "2026-01-31T12:00:00+00:00", "1.6.6")
for i in range(count):
    digest = f"{worker:02x}{i:062x}"
    record_entry(path, replace(base, matrix_digest=digest, ami_id=f"ami-{worker:04x}{i:04x}"))
"""


def test_concurrent_builds_finishing_at_once_both_land(tmp_path: Path) -> None:
    path = tmp_path / "catalog.json"
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(worker), "15"], cwd=tmp_path)
        for worker in range(3)
    ]
    for writer in writers:
        assert writer.wait(timeout=120) == 0
    catalog = load_catalog(path)
    assert len(catalog.entries) == 45
    assert {e.ami_id for e in catalog.entries} == {f"ami-{w:04x}{i:04x}" for w in range(3) for i in range(15)}
    assert not list(tmp_path.glob(".catalog.json.*.tmp"))


def test_ec2_timestamps_become_catalog_timestamps() -> None:
    assert utc_timestamp("2026-01-31T12:00:00.000Z") == "2026-01-31T12:00:00+00:00"
    assert utc_timestamp("2026-01-31T14:00:00+02:00") == "2026-01-31T12:00:00+00:00"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"schema": 1, "images": {}, "images": {}}', "duplicate key 'images'"),
        ('{"schema": true, "images": {}}', "schema"),
        ('{"schema": 1, "images": ' + "[" * 5000 + "]" * 5000 + "}", "nested more than 64 levels"),
    ],
)
def test_a_hostile_catalog_is_refused_through_the_one_loader(
    tmp_path: Path, content: str, expected: str
) -> None:
    """Duplicate keys (the last `images` would drop every real entry), a boolean schema, deep nesting."""
    path = tmp_path / "catalog.json"
    path.write_text(content)
    with pytest.raises(InputError, match=expected):
        load_catalog(path)


def test_a_catalog_that_is_not_a_regular_file_is_refused() -> None:
    with pytest.raises(InputError, match="/dev/urandom"):
        load_catalog(Path("/dev/urandom"))
