"""The AMI catalog: schema-checked reads, atomic writes, and concurrent writers that both land."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from image_helpers import REPO
from waiting import wait_until

from gpuforge.errors import InputError
from gpuforge.images.catalog import (
    DEFAULT_CATALOG,
    LOCAL_CATALOG,
    CatalogEntry,
    load_catalog,
    now_utc,
    record_build,
    record_entry,
    remove_entry,
    stores_sbom,
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


@pytest.mark.parametrize("layout", ["catalog.json", "catalog"])
def test_concurrent_builds_finishing_at_once_all_land(tmp_path: Path, layout: str) -> None:
    """Three writer processes, 15 builds each, into one single file or one folder: none is lost."""
    path = tmp_path / layout
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(worker), "15"], cwd=tmp_path)
        for worker in range(3)
    ]
    seen = [0]

    def read() -> list[int | None]:
        # A reader during the writes sees whole files only, and never loses an entry it saw.
        count = len(load_catalog(path).entries)
        assert count >= seen[-1]
        seen.append(count)
        return [writer.poll() for writer in writers]

    codes = wait_until("the writers to finish", read, lambda codes: None not in codes, poll_s=0)
    assert codes == [0, 0, 0]
    assert len(seen) > 2  # the reader did read while the writers wrote
    catalog = load_catalog(path)
    assert len(catalog.entries) == 45
    assert {e.ami_id for e in catalog.entries} == {f"ami-{w:04x}{i:04x}" for w in range(3) for i in range(15)}
    assert not [p for p in tmp_path.rglob("*.tmp")]
    if layout == "catalog":
        assert len(list(path.glob("*.json"))) == 45  # one record per build: separate CI jobs never collide


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


def test_a_catalog_folder_holds_one_record_per_build_and_reads_as_one_catalog(tmp_path: Path) -> None:
    folder = tmp_path / "catalog"
    copy = replace(ENTRY, region="us-west-2", ami_id="ami-33333333", copied_from=ENTRY.ami_id)
    record_build(folder, [ENTRY, copy], sbom='{"packages": []}\n')
    other = replace(ENTRY, matrix_digest="b" * 64, matrix_name="g6-dev-cuda12", ami_id="ami-44444444")
    record_build(folder, [other])
    names = sorted(p.name for p in folder.iterdir())
    assert names == [
        ".lock",
        f"g6-dev-cuda12-{'b' * 64}-us-east-1.json",
        f"p5-h100-cuda12-{DIGEST}-us-east-1.json",
        "sbom",
    ]
    catalog = load_catalog(folder)
    assert {(e.matrix_digest[:1], e.region, e.ami_id) for e in catalog.entries} == {
        ("a", "us-east-1", ENTRY.ami_id),
        ("a", "us-west-2", "ami-33333333"),
        ("b", "us-east-1", "ami-44444444"),
    }
    sbom = f"sbom/p5-h100-cuda12-{DIGEST}-us-east-1.json"
    assert catalog.lookup(DIGEST, "us-west-2").sbom == sbom  # type: ignore[union-attr]
    assert (folder / sbom).read_text() == '{"packages": []}\n'
    assert catalog.lookup("b" * 64, "us-east-1").sbom is None  # type: ignore[union-attr]
    assert not stores_sbom(tmp_path / "single.json")


def test_two_records_of_one_matrix_and_region_after_a_merge_resolve_to_the_newest(tmp_path: Path) -> None:
    """Two branches each built the matrix in us-east-1: git merges both files; the newer wins."""
    folder = tmp_path / "catalog"
    folder.mkdir()
    older = replace(ENTRY, ami_id="ami-0000000a", built_at="2026-01-01T00:00:00+00:00")
    newer = replace(ENTRY, ami_id="ami-0000000b", built_at="2026-02-01T00:00:00+00:00")
    for name, entry in (("z-older.json", older), ("a-newer.json", newer)):
        body = {"schema": 2, "images": {DIGEST: {"us-east-1": entry.to_json()}}}
        (folder / name).write_text(json.dumps(body))
    catalog = load_catalog(folder)
    assert catalog.entries == (newer,)
    assert catalog.shadowed == (older,)
    assert catalog.file_of(older) == folder / "z-older.json"


def test_a_single_file_beside_the_folder_is_refused_with_the_move_that_fixes_it(tmp_path: Path) -> None:
    legacy = tmp_path / "catalog.json"
    record_entry(legacy, ENTRY)
    (tmp_path / "catalog").mkdir()
    with pytest.raises(InputError, match=r"catalog\.json: a single-file AMI catalog lies beside") as caught:
        load_catalog(tmp_path / "catalog")
    assert f"git mv {legacy} {tmp_path / 'catalog'}/catalog.json" in caught.value.message
    assert load_catalog(legacy).entries == (ENTRY,)  # --catalog FILE keeps working


@pytest.mark.parametrize("layout", ["catalog.json", "catalog"])
def test_an_entry_of_another_account_is_not_replaced_and_nothing_is_written(
    tmp_path: Path, layout: str
) -> None:
    path = tmp_path / layout
    record_entry(path, replace(ENTRY, account_id="111111111111"))
    before = {p: p.read_bytes() for p in tmp_path.rglob("*.json")}
    with pytest.raises(InputError) as caught:
        record_entry(path, replace(ENTRY, ami_id="ami-55555555", account_id="222222222222"))
    message = caught.value.message
    assert f"images.{DIGEST}.us-east-1 records {ENTRY.ami_id} of account 111111111111" in message
    assert "Fix: build with account 111111111111's credentials" in message
    assert {p: p.read_bytes() for p in tmp_path.rglob("*.json")} == before


def test_removing_the_last_entry_of_a_record_deletes_it_and_its_sbom(tmp_path: Path) -> None:
    folder = tmp_path / "catalog"
    copy = replace(ENTRY, region="us-west-2", ami_id="ami-33333333")
    catalog = record_build(folder, [ENTRY, copy], sbom="{}\n")
    home, west = catalog.lookup(DIGEST, "us-east-1"), catalog.lookup(DIGEST, "us-west-2")
    assert home is not None and west is not None
    remove_entry(folder, west)
    assert [e.region for e in load_catalog(folder).entries] == ["us-east-1"]
    assert (folder / home.sbom).exists()  # type: ignore[operator]
    remove_entry(folder, home)
    assert load_catalog(folder).entries == ()
    assert sorted(p.name for p in folder.rglob("*") if p.is_file()) == [".lock"]


def test_a_malformed_record_in_a_folder_is_named_by_its_file(tmp_path: Path) -> None:
    folder = tmp_path / "catalog"
    record_entry(folder, ENTRY)
    bad = folder / "broken-record.json"
    bad.write_text(json.dumps({"schema": 2, "images": {DIGEST: {"eu-west-1": ENTRY.to_json()}}}))
    with pytest.raises(InputError, match="filed under another key") as caught:
        load_catalog(folder)
    assert caught.value.message.startswith(f"{bad}: ")
