"""`image build --copy-to/--share-with` against moto's server on 127.0.0.1: copies, tags, sharing, the catalog."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from image_helpers import REGION, variant

from gpuforge.errors import InputError
from gpuforge.images.build import BuildRequest, BuildResult, build_image
from gpuforge.images.catalog import CatalogEntry, load_catalog, record_entry
from gpuforge.images.ec2 import Aws
from gpuforge.images.emulator import DUMMY_CREDENTIALS, LocalAws
from gpuforge.images.matrix import load_valid
from gpuforge.images.packer import Packer
from gpuforge.images.progress import Progress
from gpuforge.images.tags import ami_tags

WEST, EU = "us-west-2", "eu-west-1"
PARTNER = "210987654321"


@pytest.fixture
def aws(moto_server: LocalAws) -> Aws:
    return Aws(REGION, moto_server.endpoint, DUMMY_CREDENTIALS)


def _build(request: BuildRequest, aws: Aws, tool: Packer) -> tuple[BuildResult, str]:
    shown = io.StringIO()
    result = build_image(request, aws, tool, progress=Progress(shown, tty=False), report=lambda _: None)
    return result, shown.getvalue()


def _image(aws: Aws, region: str, ami_id: str) -> dict[str, object]:
    image: dict[str, object] = aws.in_region(region).client().describe_images(ImageIds=[ami_id])["Images"][0]
    return image


def _tags(raw: object) -> dict[str, str]:
    assert isinstance(raw, list)
    return {tag["Key"]: tag["Value"] for tag in raw}


def test_copies_are_tagged_shared_waited_for_and_every_region_is_recorded(
    tmp_path: Path, aws: Aws, packer_tool: Packer
) -> None:
    matrix_path = variant(tmp_path, "copy-share")
    matrix, digest = load_valid(matrix_path)
    catalog = tmp_path / "catalog"
    request = BuildRequest(
        matrix_path,
        REGION,
        catalog,
        timeout_s=300,
        copy_to=(WEST, EU),
        share_with=(PARTNER,),
        copy_timeout_s=60,
    )
    result, shown = _build(request, aws, packer_tool)
    home = result.entry
    assert [c.region for c in result.copies] == [WEST, EU]
    assert f"waiting for {result.copies[0].ami_id} in {WEST}: available" in shown

    source_tags = _tags(_image(aws, REGION, home.ami_id)["Tags"])
    for copy in result.copies:
        assert copy.copied_from == home.ami_id and copy.ami_id != home.ami_id
        raw = _image(aws, copy.region, copy.ami_id)
        assert raw["State"] == "available"
        assert _tags(raw["Tags"]) == source_tags  # the same tags as the source, gpuforge's and all
        client = aws.in_region(copy.region).client()
        permissions = client.describe_image_attribute(ImageId=copy.ami_id, Attribute="launchPermission")
        assert [p["UserId"] for p in permissions["LaunchPermissions"]] == [PARTNER]
        devices = raw["BlockDeviceMappings"]
        assert isinstance(devices, list)
        snapshot = devices[0]["Ebs"]["SnapshotId"]
        volume = client.describe_snapshot_attribute(SnapshotId=snapshot, Attribute="createVolumePermission")
        assert [p["UserId"] for p in volume["CreateVolumePermissions"]] == [PARTNER]
        described = client.describe_snapshots(SnapshotIds=[snapshot])["Snapshots"][0]
        assert _tags(described["Tags"])["gpuforge:matrix-digest"] == digest

    recorded = load_catalog(catalog)
    assert {(e.region, e.ami_id) for e in recorded.entries} == {
        (REGION, home.ami_id),
        *((c.region, c.ami_id) for c in result.copies),
    }
    assert all(e.shared_with == (PARTNER,) and e.account_id == "123456789012" for e in recorded.entries)
    assert len(list(catalog.glob("*.json"))) == 1  # one build, one record, all regions in it
    sbom = json.loads((catalog / recorded.entries[0].sbom).read_text())  # type: ignore[operator]
    assert sbom["source"] == "matrix" and sbom["packages"] == []
    assert sbom["components"]["cuda"] == ami_tags(matrix, digest)["gpuforge:cuda"]

    again, _ = _build(request, aws, packer_tool)
    assert not again.built
    assert [c.ami_id for c in again.copies] == [
        c.ami_id for c in result.copies
    ]  # copies reused, not made again
    west_images = (
        aws.in_region(WEST)
        .client()
        .describe_images(
            Owners=["self"], Filters=[{"Name": "tag:gpuforge:matrix-digest", "Values": [digest]}]
        )["Images"]
    )
    assert len(west_images) == 1


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"copy_to": (REGION,)}, r"--copy-to us-east-1: the AMI is built in us-east-1"),
        ({"copy_to": ("mars-1",)}, r"--copy-to: 'mars-1' is not a region AWS has \(botocore .*Fix:"),
        ({"copy_to": ("us-east-9",)}, r"--copy-to: 'us-east-9' is not a region AWS has"),  # the right shape
        ({"copy_to": ("",)}, r"--copy-to: an empty region name. Fix:"),
        ({"copy_to": (WEST, WEST)}, r"a region is named twice"),
        ({"share_with": ("12345",)}, r"--share-with '12345': not a 12-digit AWS account id"),
    ],
)
def test_bad_copy_and_share_targets_stop_the_build_before_any_aws_call(
    tmp_path: Path, packer_tool: Packer, changes: dict[str, tuple[str, ...]], expected: str
) -> None:
    catalog = tmp_path / "catalog"
    request = BuildRequest(variant(tmp_path, "copy-bad"), REGION, catalog, **changes)  # type: ignore[arg-type]
    unreachable = Aws(REGION, "http://127.0.0.1:9", DUMMY_CREDENTIALS)  # any AWS call would fail differently
    with pytest.raises(InputError, match=expected):
        _build(request, unreachable, packer_tool)
    assert not catalog.exists()


def test_a_catalog_entry_of_another_account_stops_the_build_before_packer_runs(
    tmp_path: Path, aws: Aws, packer_tool: Packer
) -> None:
    matrix_path = variant(tmp_path, "copy-foreign")
    matrix, digest = load_valid(matrix_path)
    catalog = tmp_path / "catalog"
    theirs = CatalogEntry(
        "ami-0aaaaaaaaaaaaaaaa", WEST, matrix.name, matrix.version, digest, "2026-01-31T12:00:00+00:00", "1.11.2",
        account_id="111111111111",
    )  # fmt: skip
    record_entry(catalog, theirs)
    before = {p.name: p.read_bytes() for p in catalog.rglob("*.json")}
    request = BuildRequest(matrix_path, REGION, catalog, timeout_s=300, copy_to=(WEST,))
    with pytest.raises(InputError) as caught:
        _build(request, aws, packer_tool)
    message = caught.value.message
    assert (
        f"{catalog}: images.{digest}.{WEST} records ami-0aaaaaaaaaaaaaaaa of account 111111111111" in message
    )
    assert "these credentials are account 123456789012" in message and "Fix: build with account" in message
    assert {p.name: p.read_bytes() for p in catalog.rglob("*.json")} == before
    built = aws.client().describe_images(
        Owners=["self"], Filters=[{"Name": "tag:gpuforge:matrix-digest", "Values": [digest]}]
    )["Images"]
    assert built == []  # refused before packer ran
