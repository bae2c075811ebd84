"""`image prune` against moto's server on 127.0.0.1: superseded AMIs go with their snapshots, pinned ones never."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from image_helpers import REGION, REPO, load_matrix_data, write_matrix

from gpuforge.cli import main
from gpuforge.images.build import BuildRequest, build_image
from gpuforge.images.catalog import CatalogEntry, load_catalog, record_entry, remove_entry
from gpuforge.images.ec2 import Aws
from gpuforge.images.emulator import DUMMY_CREDENTIALS, LocalAws
from gpuforge.images.packer import Packer
from gpuforge.images.progress import Progress
from gpuforge.images.prune import ForeignAmi, PrunePinned, prune, superseded

BASE = "g6-dev-cuda12"  # the matrix the shipped dev stack uses, so a stack file can pin it


@pytest.fixture
def aws(moto_server: LocalAws) -> Aws:
    return Aws(REGION, moto_server.endpoint, DUMMY_CREDENTIALS)


def _line(tmp_path: Path, name: str, versions: list[str], aws: Aws, tool: Packer) -> tuple[Path, list[Path]]:
    """Build `versions` of one matrix, oldest first, into a catalog folder; the folder and the matrices."""
    catalog = tmp_path / "catalog"
    matrices = []
    for number, version in enumerate(versions):
        data = load_matrix_data(BASE)
        data["name"], data["version"] = name, version
        path = write_matrix(tmp_path, data, f"{name}-{version}.yaml")
        result = build_image(
            BuildRequest(path, REGION, catalog, timeout_s=300),
            aws,
            tool,
            progress=Progress(tty=False),
            report=lambda _: None,
        )
        # Builds a second apart could tie on built_at; date them days apart (same record, same SBOM).
        record_entry(catalog, replace(result.entry, built_at=f"2026-01-0{number + 1}T00:00:00+00:00"))
        matrices.append(path)
    return catalog, matrices


def _stacks(tmp_path: Path, matrix: Path | None) -> Path:
    """A stacks/ folder with the shipped project and dev stack, pinned to `matrix` (none: no stack)."""
    stacks = tmp_path / "stacks"
    project = stacks / "training"
    project.mkdir(parents=True)
    if matrix is not None:
        shutil.copy(REPO / "stacks" / "training" / "Pulumi.yaml", project / "Pulumi.yaml")
        config = yaml.safe_load((REPO / "stacks" / "training" / "Pulumi.dev.yaml").read_text())
        config["config"]["gpuforge:matrix"] = str(matrix)
        (project / "Pulumi.dev.yaml").write_text(yaml.safe_dump(config))
    return stacks


def _alive(aws: Aws, ami_id: str) -> bool:
    return bool(aws.client().describe_images(Owners=["self"], ImageIds=[ami_id])["Images"])


def _snapshots(aws: Aws) -> set[str]:
    return {s["SnapshotId"] for s in aws.client().describe_snapshots(OwnerIds=["self"])["Snapshots"]}


def _bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.rglob("*.json")}


def test_prune_is_a_dry_run_until_applied_then_removes_amis_snapshots_and_entries(
    tmp_path: Path, aws: Aws, packer_tool: Packer
) -> None:
    catalog, _ = _line(tmp_path, "prune-line", ["1.0.0", "1.1.0", "1.2.0"], aws, packer_tool)
    entries = sorted(load_catalog(catalog).entries, key=lambda e: e.built_at)
    old, middle, newest = entries
    devices = aws.client().describe_images(ImageIds=[old.ami_id])["Images"][0]["BlockDeviceMappings"]
    old_snapshots = {device["Ebs"]["SnapshotId"] for device in devices}
    assert old_snapshots and old.sbom is not None
    stacks = _stacks(tmp_path, None)
    said: list[str] = []

    before = _bytes(catalog)
    going = prune(catalog, aws, keep=2, apply=False, stacks_dir=stacks, report=said.append)
    assert going == [old]
    assert "would prune (dry run; --apply to prune)" in said[0] and old.ami_id in said[0]
    assert _bytes(catalog) == before and _alive(aws, old.ami_id)

    prune(catalog, aws, keep=2, apply=True, stacks_dir=stacks, report=said.append)
    assert not _alive(aws, old.ami_id)
    assert not old_snapshots & _snapshots(aws)
    assert _alive(aws, middle.ami_id) and _alive(aws, newest.ami_id)
    assert {e.ami_id for e in load_catalog(catalog).entries} == {middle.ami_id, newest.ami_id}
    assert not (catalog / old.sbom).exists()  # type: ignore[operator]

    said.clear()
    assert prune(catalog, aws, keep=2, apply=True, stacks_dir=stacks, report=said.append) == []
    assert "nothing to prune" in said[0]


def test_a_prune_that_would_remove_a_pinned_ami_stops_before_any_change(
    tmp_path: Path, aws: Aws, packer_tool: Packer, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog, matrices = _line(tmp_path, "prune-pinned", ["1.0.0", "1.1.0"], aws, packer_tool)
    old = min(load_catalog(catalog).entries, key=lambda e: e.built_at)
    stacks = _stacks(tmp_path, matrices[0])  # the dev stack still uses the old matrix
    before = _bytes(catalog)
    with pytest.raises(PrunePinned) as caught:
        prune(catalog, aws, keep=1, apply=True, stacks_dir=stacks)
    message = caught.value.message
    assert f"{old.ami_id} (prune-pinned 1.0.0, {REGION};" in message
    assert f"pinned by {stacks / 'training' / 'Pulumi.dev.yaml'}" in message
    assert "Fix: move those stacks to a newer matrix" in message and "Nothing was pruned" in message
    assert _bytes(catalog) == before and _alive(aws, old.ami_id)

    args = ["image", "prune", "--catalog", str(catalog), "--keep", "1", "--apply", "--stacks", str(stacks)]
    assert main(args) == 1
    assert "pinned by" in capsys.readouterr().err


def test_an_ami_of_another_account_is_refused_naming_the_file_and_key(
    tmp_path: Path, aws: Aws, packer_tool: Packer
) -> None:
    catalog, _ = _line(tmp_path, "prune-foreign", ["1.0.0", "1.1.0"], aws, packer_tool)
    old = min(load_catalog(catalog).entries, key=lambda e: e.built_at)
    foreign: CatalogEntry = replace(old, account_id="111111111111")
    remove_entry(catalog, old)
    record_entry(catalog, foreign)
    before = _bytes(catalog)
    with pytest.raises(ForeignAmi) as caught:
        prune(catalog, aws, keep=1, apply=True, stacks_dir=_stacks(tmp_path, None))
    message = caught.value.message
    assert f"images.{old.matrix_digest}.{REGION}: {old.ami_id} belongs to account 111111111111" in message
    assert "these credentials are account 123456789012" in message and str(catalog) in message
    assert _bytes(catalog) == before and _alive(aws, old.ami_id)


def test_image_list_names_the_shadowed_entries_prune_will_remove(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "catalog"
    folder.mkdir()
    base = CatalogEntry("ami-0000000a", REGION, "m", "1.0.0", "d" * 64, "2026-01-01T00:00:00+00:00", "1.6.6")
    newer = replace(base, ami_id="ami-0000000b", built_at="2026-02-01T00:00:00+00:00")
    for name, entry in (("one.json", base), ("two.json", newer)):
        (folder / name).write_text(
            json.dumps({"schema": 2, "images": {entry.matrix_digest: {REGION: entry.to_json()}}})
        )
    assert main(["image", "list", "--catalog", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "ami-0000000b" in out.splitlines()[1]
    assert out.splitlines()[-1].endswith("(image prune removes them): ami-0000000a (us-east-1)")
    assert superseded(load_catalog(folder), keep=5) == [base]
