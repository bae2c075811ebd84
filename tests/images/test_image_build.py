"""`image build` end to end: the real packer against moto's server on 127.0.0.1, boto3 verification, the catalog."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest
from image_helpers import BASE_AMI, MATRICES, REGION, load_matrix_data, variant, write_matrix

from gpuforge.cli import build_parser, main
from gpuforge.errors import GpuforgeError
from gpuforge.images import image_cli
from gpuforge.images.build import BootModeMismatch, BuildRequest, build_image
from gpuforge.images.catalog import load_catalog, utc_timestamp
from gpuforge.images.ec2 import Aws, BaseImageMissing, VerificationFailed
from gpuforge.images.emulator import DUMMY_CREDENTIALS, LocalAws
from gpuforge.images.matrix import load_valid
from gpuforge.images.packer import Packer, PackerFailed
from gpuforge.images.progress import Progress
from gpuforge.images.render import ami_name
from gpuforge.images.tags import PREFIX, ami_tags


@pytest.fixture
def aws(moto_server: LocalAws) -> Aws:
    return Aws(REGION, moto_server.endpoint, DUMMY_CREDENTIALS)


def _build(
    matrix: Path, catalog: Path, aws: Aws, tool: Packer, *, force: bool = False
) -> tuple[bool, str, str]:
    """Run a build; (built, AMI id, what the progress display showed)."""
    shown = io.StringIO()
    result = build_image(
        BuildRequest(matrix, REGION, catalog, force=force, timeout_s=300),
        aws,
        tool,
        progress=Progress(shown, tty=False),
        report=lambda _: None,
    )
    return result.built, result.entry.ami_id, shown.getvalue()


def _gpuforge_tags(aws: Aws, ami_id: str) -> dict[str, str]:
    image = aws.client().describe_images(ImageIds=[ami_id])["Images"][0]
    assert image["State"] == "available"
    return {t["Key"]: t["Value"] for t in image.get("Tags", []) if t["Key"].startswith(PREFIX)}


def test_a_build_registers_an_ami_tagged_with_the_matrix_and_records_it(
    tmp_path: Path, aws: Aws, packer_tool: Packer
) -> None:
    matrix_path = variant(tmp_path, "build-basic")
    catalog = tmp_path / "catalog.json"
    built, ami_id, shown = _build(matrix_path, catalog, aws, packer_tool)
    assert built
    assert "Creating AMI" in shown and "Deleting temporary keypair" in shown
    # packer lists the artifact again for the manifest post-processor; it is shown once.
    assert shown.count("AMIs were created") == 1

    matrix, digest = load_valid(matrix_path)
    assert _gpuforge_tags(aws, ami_id) == ami_tags(matrix, digest)
    image = aws.client().describe_images(ImageIds=[ami_id])["Images"][0]
    assert image["Name"] == ami_name(matrix, digest)

    entry = load_catalog(catalog).lookup(digest, REGION)
    assert entry is not None
    assert (entry.ami_id, entry.region, entry.matrix_name, entry.matrix_version, entry.matrix_digest) == (
        ami_id,
        REGION,
        matrix.name,
        matrix.version,
        digest,
    )
    assert entry.packer_version == str(packer_tool.version)
    assert entry.built_at.endswith("+00:00")


def test_an_existing_ami_is_recorded_and_not_rebuilt_unless_forced(
    tmp_path: Path, aws: Aws, packer_tool: Packer
) -> None:
    matrix_path = variant(tmp_path, "build-idempotent")
    first_catalog, second_catalog = tmp_path / "first.json", tmp_path / "second.json"
    _, first_ami, _ = _build(matrix_path, first_catalog, aws, packer_tool)

    first_record = first_catalog.read_bytes()
    assert _build(matrix_path, first_catalog, aws, packer_tool) == (False, first_ami, "")
    assert first_catalog.read_bytes() == first_record  # already recorded: left as it was

    built, again, shown = _build(matrix_path, second_catalog, aws, packer_tool)
    assert (built, again, shown) == (False, first_ami, "")
    _, digest = load_valid(matrix_path)
    reused = load_catalog(second_catalog).lookup(digest, REGION)
    created = aws.client().describe_images(ImageIds=[first_ami])["Images"][0]["CreationDate"]
    assert reused is not None and reused.ami_id == first_ami
    assert reused.packer_version == "unknown"  # the AMI does not say which packer built it
    assert reused.built_at == utc_timestamp(created)

    old = aws.client().describe_images(ImageIds=[first_ami])["Images"][0]
    old_snapshot = old["BlockDeviceMappings"][0]["Ebs"]["SnapshotId"]
    built, forced, shown = _build(matrix_path, second_catalog, aws, packer_tool, force=True)
    assert built and forced != first_ami
    assert "Deregistered AMI" in shown
    client = aws.client()
    remaining = client.describe_images(Owners=["self"], Filters=[{"Name": "name", "Values": [old["Name"]]}])
    assert [image["ImageId"] for image in remaining["Images"]] == [forced]
    snapshots = {s["SnapshotId"] for s in client.describe_snapshots(OwnerIds=["self"])["Snapshots"]}
    assert old_snapshot not in snapshots
    assert load_catalog(second_catalog).lookup(digest, REGION).ami_id == forced  # type: ignore[union-attr]


def test_a_missing_base_ami_stops_the_build_and_leaves_the_catalog_alone(
    tmp_path: Path, aws: Aws, packer_tool: Packer
) -> None:
    data = load_matrix_data()
    data["name"] = "build-no-base"
    data["os"]["base_ami"] = {REGION: "ami-0123456789abcdef0"}
    catalog = tmp_path / "catalog.json"
    with pytest.raises(
        BaseImageMissing, match=r"os\.base_ami\.us-east-1: base AMI ami-0123456789abcdef0 does not"
    ):
        _build(write_matrix(tmp_path, data), catalog, aws, packer_tool)
    assert not catalog.exists()


def test_a_base_ami_with_another_boot_mode_stops_the_build(
    tmp_path: Path, aws: Aws, packer_tool: Packer
) -> None:
    data = load_matrix_data()
    data["name"] = "build-boot-mode"
    data["os"]["boot_mode"] = "uefi"
    catalog = tmp_path / "catalog.json"
    with pytest.raises(BootModeMismatch, match=f"declares 'uefi', but base AMI {BASE_AMI}.*'uefi-preferred'"):
        _build(write_matrix(tmp_path, data), catalog, aws, packer_tool)
    assert not catalog.exists()


def test_packer_failing_is_reported_with_its_own_error_and_nothing_is_recorded(
    tmp_path: Path, aws: Aws, packer_tool: Packer
) -> None:
    """An untagged AMI already holds the name: the digest lookup misses it and packer refuses the name."""
    matrix_path = variant(tmp_path, "build-name-taken")
    matrix, digest = load_valid(matrix_path)
    client = aws.client()
    instance = client.run_instances(ImageId=BASE_AMI, MinCount=1, MaxCount=1, InstanceType="c6i.large")
    squatter = client.create_image(
        InstanceId=instance["Instances"][0]["InstanceId"], Name=ami_name(matrix, digest)
    )
    catalog = tmp_path / "catalog.json"
    catalog.write_text('{"schema": 1, "images": {}}\n')
    with pytest.raises(PackerFailed) as caught:
        _build(matrix_path, catalog, aws, packer_tool)
    assert caught.value.exit_code == 1
    assert "packer build failed" in caught.value.message
    assert squatter["ImageId"] in caught.value.message  # packer's own words name the AMI holding the name
    assert catalog.read_text() == '{"schema": 1, "images": {}}\n'


def test_verification_finding_a_wrong_tag_fails_and_changes_no_catalog(
    tmp_path: Path, aws: Aws, packer_tool: Packer
) -> None:
    matrix_path = variant(tmp_path, "build-wrong-tag")
    catalog = tmp_path / "catalog.json"
    _, ami_id, _ = _build(matrix_path, catalog, aws, packer_tool)
    before = catalog.read_bytes()
    aws.client().create_tags(
        Resources=[ami_id],
        Tags=[{"Key": "gpuforge:cuda", "Value": "12.9.0"}, {"Key": "gpuforge:stray", "Value": "x"}],
    )
    with pytest.raises(VerificationFailed) as caught:
        _build(matrix_path, catalog, aws, packer_tool)
    assert "gpuforge:cuda: expected '12.9.1', found '12.9.0'" in caught.value.message
    assert "gpuforge:stray: 'x' is not a tag of this matrix" in caught.value.message
    assert catalog.read_bytes() == before


def test_cli_verify_compares_an_amis_tags_through_the_standard_aws_configuration(
    tmp_path: Path, aws: Aws, aws_env: LocalAws, packer_tool: Packer, capsys: pytest.CaptureFixture[str]
) -> None:
    matrix_path = variant(tmp_path, "build-cli-verify")
    _, ami_id, _ = _build(matrix_path, tmp_path / "catalog.json", aws, packer_tool)
    assert main(["image", "verify", ami_id, "--matrix", str(matrix_path), "--region", REGION]) == 0
    assert f"ok: {ami_id}" in capsys.readouterr().out

    other = MATRICES / "p5-h100-cuda13.yaml"
    assert main(["image", "verify", ami_id, "--matrix", str(other), "--region", REGION]) == 1
    err = capsys.readouterr().err
    assert "gpuforge:cuda: expected '13.0.2', found '12.9.1'" in err
    assert "gpuforge:matrix-name: expected 'p5-h100-cuda13'" in err

    assert (
        main(["image", "verify", "ami-0fffffffffffffff0", "--matrix", str(matrix_path), "--region", REGION])
        == 1
    )
    assert "does not exist" in capsys.readouterr().err


def test_cli_local_build_starts_its_own_emulator_and_records_in_the_local_catalog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], packer_tool: Packer
) -> None:
    local_catalog = tmp_path / "catalog.local.json"
    monkeypatch.setattr(image_cli, "LOCAL_CATALOG", local_catalog)
    monkeypatch.setenv("AWS_PROFILE", "a-real-account-that-must-not-be-used")
    matrix = MATRICES / "p5-h100-cuda12.yaml"
    assert main(["image", "build", str(matrix), "--region", REGION, "--local"]) == 0
    out = capsys.readouterr().out
    assert "local AWS emulator (moto) at http://127.0.0.1:" in out
    _, digest = load_valid(matrix)
    entry = load_catalog(local_catalog).lookup(digest, REGION)
    assert entry is not None and entry.ami_id in out

    assert main(["image", "list", "--catalog", str(local_catalog)]) == 0
    listed = capsys.readouterr().out
    assert entry.ami_id in listed and "p5-h100-cuda12" in listed and digest[:12] in listed
    assert main(["image", "list", "--catalog", str(local_catalog), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["images"][digest][REGION]["ami_id"] == entry.ami_id


def test_cli_build_without_packer_fails_clearly_before_touching_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    catalog = tmp_path / "catalog.json"
    matrix = MATRICES / "p5-h100-cuda12.yaml"
    code = main(["image", "build", str(matrix), "--region", REGION, "--local", "--catalog", str(catalog)])
    assert code == 2
    assert "gpuforge: error: packer not found" in capsys.readouterr().err
    assert not catalog.exists()


def test_cli_build_refuses_an_invalid_matrix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = load_matrix_data()
    data["nccl"] = "2.27.3"
    matrix = write_matrix(tmp_path, data)
    catalog = tmp_path / "catalog.json"
    assert (
        main(["image", "build", str(matrix), "--region", REGION, "--local", "--catalog", str(catalog)]) == 1
    )
    assert "nccl.package-version" in capsys.readouterr().err
    assert not catalog.exists()


def test_a_broken_aws_configuration_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile-anywhere")
    with pytest.raises(GpuforgeError, match=r"no-such-profile-anywhere.*Fix: set AWS_PROFILE") as caught:
        Aws(REGION).client()
    assert caught.value.exit_code == 2  # as preflight has it: the environment to fix, not a failed build


def test_a_build_without_credentials_exits_2_as_preflight_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    catalog = tmp_path / "catalog"
    code = main(
        [
            "image",
            "build",
            str(MATRICES / "p5-h100-cuda12.yaml"),
            "--region",
            REGION,
            "--catalog",
            str(catalog),
        ]
    )
    error = capsys.readouterr().err
    assert code == 2
    assert error.startswith("gpuforge: error: no AWS credentials found. gpuforge image calls AWS")
    assert "Fix: sign in" in error and not catalog.exists()


def test_the_emulator_environment_for_packer_drops_real_credentials() -> None:
    real = {
        "AWS_PROFILE": "prod",
        "AWS_SESSION_TOKEN": "t",
        "AWS_ENDPOINT_URL": "https://x",
        "PATH": "/usr/bin",
    }
    env = Aws(REGION, "http://127.0.0.1:1", DUMMY_CREDENTIALS).packer_env(real)
    assert "AWS_PROFILE" not in env and "AWS_SESSION_TOKEN" not in env and "AWS_ENDPOINT_URL" not in env
    assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == DUMMY_CREDENTIALS
    assert env["AWS_DEFAULT_REGION"] == REGION and env["PATH"] == "/usr/bin"
    assert Aws(REGION).packer_env(real)["AWS_PROFILE"] == "prod"  # real builds use the standard chain


@pytest.mark.parametrize("command", ["render", "build", "list", "verify", "prune"])
def test_every_image_flag_has_help_and_every_default_is_shown(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = build_parser("image")
    with pytest.raises(SystemExit):
        parser.parse_args(["image", command, "--help"])
    shown = capsys.readouterr().out
    image = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["image"]
    sub = next(a for a in image._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    for action in sub._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help, f"image {command} {action.option_strings or action.dest} has no help"
        if action.default not in (None, False, []) or action.option_strings == ["--catalog"]:
            assert "default" in action.help, f"image {command} {action.option_strings}: default not shown"
    if command == "build":
        assert "(default: 10800)" in shown and "--copy-to REGION[,REGION...]" in shown
