"""Rendering: the real packer accepts every shipped matrix's render, and the render says what the matrix says."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from image_helpers import BASE_AMI, MATRICES, REGION, SHIPPED, load_matrix_data, write_matrix

from gpuforge.errors import InputError
from gpuforge.images.matrix import MatrixInvalid, check_file, load_valid
from gpuforge.images.packer import Packer
from gpuforge.images.payload import MATRIX_ENV, SOURCE_DIR, matrix_values
from gpuforge.images.render import (
    AMAZON_PLUGIN_VERSION,
    BUILD_FILE,
    PLUGINS_FILE,
    STEPS,
    RenderOptions,
    ami_name,
    build_file_text,
    render,
    staged_out_dir,
)
from gpuforge.images.tags import ami_tags

LEGACY = RenderOptions(region=REGION, imds=False)
MODERN = RenderOptions(region=REGION, imds=True)


def _packer(tool: Packer, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool.binary, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "CHECKPOINT_DISABLE": "1", "HOME": str(cwd)},
        check=False,
    )


@pytest.mark.parametrize("matrix_path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_matrix_renders_to_a_build_packer_validates(
    matrix_path: Path, tmp_path: Path, packer_tool: Packer
) -> None:
    matrix, digest = load_valid(matrix_path)
    out = tmp_path / "legacy"
    render(matrix, digest, LEGACY, out)
    validated = _packer(packer_tool, "validate", BUILD_FILE, cwd=out)
    assert validated.returncode == 0, validated.stdout + validated.stderr
    formatted = _packer(packer_tool, "fmt", "-check", ".", cwd=out)
    assert formatted.returncode == 0, f"packer fmt would change: {formatted.stdout}"

    # The 1.11+ render carries fields 1.6.6 refuses; 1.6.6 can still check its syntax and format.
    modern = tmp_path / "modern"
    render(matrix, digest, MODERN, modern)
    syntax = _packer(packer_tool, "validate", "-syntax-only", BUILD_FILE, cwd=modern)
    assert syntax.returncode == 0, syntax.stdout + syntax.stderr
    assert _packer(packer_tool, "fmt", "-check", ".", cwd=modern).returncode == 0


def test_legacy_packer_rejects_the_modern_fields_so_the_legacy_render_leaves_them_out(
    tmp_path: Path, packer_tool: Packer
) -> None:
    matrix, digest = load_valid(SHIPPED[0])
    render(matrix, digest, MODERN, tmp_path / "modern")
    if packer_tool.supports_imds:
        pytest.skip("this check is about packer 1.6.6, which rejects imds_support")
    refused = _packer(packer_tool, "validate", BUILD_FILE, cwd=tmp_path / "modern")
    assert refused.returncode != 0
    assert "imds_support" in refused.stdout + refused.stderr
    legacy_text = build_file_text(matrix, digest, LEGACY)
    modern_text = build_file_text(matrix, digest, MODERN)
    assert "imds_support" not in legacy_text and "metadata_options" not in legacy_text
    assert re.search(r'imds_support\s+= "v2.0"', modern_text)
    assert re.search(r'http_tokens\s+= "required"', modern_text)


def test_the_plugin_block_is_in_its_own_file_because_1_6_6_cannot_parse_it(
    tmp_path: Path, packer_tool: Packer
) -> None:
    matrix, digest = load_valid(SHIPPED[0])
    rendered = render(matrix, digest, LEGACY, tmp_path / "out")
    plugins = rendered.plugins_file.read_text()
    assert "required_plugins" in plugins and f'"{AMAZON_PLUGIN_VERSION}"' in plugins
    assert "packer {" not in rendered.build_file.read_text()
    if not packer_tool.has_init:
        whole_dir = _packer(packer_tool, "validate", ".", cwd=rendered.directory)
        assert whole_dir.returncode != 0 and "required_plugins" in whole_dir.stdout + whole_dir.stderr


def test_builder_pins_the_base_ami_and_carries_every_tag(tmp_path: Path) -> None:
    matrix, digest = load_valid(SHIPPED[0])
    text = build_file_text(matrix, digest, LEGACY)
    assert f'source_ami      = "{BASE_AMI}"' in text
    for forbidden in ("source_ami_filter", "most_recent"):
        assert forbidden not in text
    for setting in ("ena_support", "sriov_support", "encrypted"):
        assert re.search(rf"\b{setting}\s+= true", text), setting
    assert re.search(r'volume_type\s+= "gp3"', text)
    assert re.search(r"throughput\s+= 125", text) and re.search(r"iops\s+= 3000", text)
    assert f'ami_name        = "{ami_name(matrix, digest)}"' in text
    assert ami_name(matrix, digest) == f"gpuforge-{matrix.name}-{matrix.version}-{digest[:12]}"
    for key, value in ami_tags(matrix, digest).items():
        assert re.search(rf'"{re.escape(key)}"\s+= "{re.escape(value)}"', text), key


def test_provisioning_runs_every_step_in_order_and_reboots_after_the_kernel(tmp_path: Path) -> None:
    matrix, digest = load_valid(SHIPPED[0])
    text = build_file_text(matrix, digest, LEGACY)
    positions = [text.index(f"scripts/{step}") for step in STEPS]
    assert positions == sorted(positions)
    assert STEPS[-1] == "90-verify.sh"
    reboot = text.index("sudo systemctl reboot")
    assert positions[0] < reboot < positions[1]
    assert text.index('provisioner "file"') < positions[0]
    # After verification, the image's package list comes back for the SBOM (images/sbom.py).
    download = text.index('direction   = "download"')
    assert download > positions[-1]
    assert (
        '"/etc/gpuforge/packages.tsv"' in text[download:] and "${path.root}/packages.tsv" in text[download:]
    )


def test_local_render_differs_only_in_endpoint_credentials_check_communicator_and_provisioners() -> None:
    matrix, digest = load_valid(SHIPPED[0])
    normal = build_file_text(matrix, digest, LEGACY)
    local = build_file_text(
        matrix, digest, RenderOptions(region=REGION, imds=False, endpoint="http://127.0.0.1:5000")
    )

    def source_block(text: str) -> list[str]:
        block = text[text.index('source "amazon-ebs"') : text.index("\nbuild {")]
        return [re.sub(r"\s+=", " =", line.strip()) for line in block.splitlines() if line.strip()]

    only_normal = set(source_block(normal)) - set(source_block(local))
    only_local = set(source_block(local)) - set(source_block(normal))
    assert only_normal == {'communicator = "ssh"'}
    assert only_local == {
        'communicator = "none"',
        'custom_endpoint_ec2 = "http://127.0.0.1:5000"',
        "skip_credential_validation = true",
    }
    assert "provisioner" in normal and "provisioner" not in local
    assert 'post-processor "manifest"' in local


def test_force_renders_deregistration_of_the_old_ami_and_snapshots() -> None:
    matrix, digest = load_valid(SHIPPED[0])
    forced = build_file_text(matrix, digest, RenderOptions(region=REGION, imds=False, force=True))
    assert re.search(r"force_deregister\s+= true", forced)
    assert re.search(r"force_delete_snapshot\s+= true", forced)
    assert "force_deregister" not in build_file_text(matrix, digest, LEGACY)


def test_render_refuses_an_invalid_matrix_with_the_findings_of_matrix_check(tmp_path: Path) -> None:
    data = load_matrix_data()
    data["nvidia"]["fabricmanager"] = "580.82.07"
    data["cuda"] = "latest"
    path = write_matrix(tmp_path, data)
    report = check_file(path)
    with pytest.raises(MatrixInvalid) as caught:
        load_valid(path)
    for finding in report.findings:
        if finding.severity == "error":
            assert finding.render() in caught.value.message
    assert caught.value.exit_code == 1


def test_render_writes_nothing_into_a_non_empty_folder(tmp_path: Path) -> None:
    matrix, digest = load_valid(SHIPPED[0])
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(InputError, match="not empty"):
        render(matrix, digest, LEGACY, out)
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_render_refuses_a_distribution_the_scripts_do_not_support(tmp_path: Path) -> None:
    # No non-Ubuntu matrix passes the matrix rules today, so the model is changed directly.
    matrix, digest = load_valid(SHIPPED[0])
    matrix = matrix.model_copy(update={"os": matrix.os.model_copy(update={"distro": "debian"})})
    with pytest.raises(InputError, match=r"os\.distro.*'debian'"):
        render(matrix, digest, LEGACY, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_render_refuses_a_region_without_a_pinned_base_ami(tmp_path: Path) -> None:
    matrix, digest = load_valid(SHIPPED[0])
    with pytest.raises(InputError, match=r"os\.base_ami.*'eu-west-1'.*us-east-1"):
        render(matrix, digest, RenderOptions(region="eu-west-1", imds=False), tmp_path / "out")


def test_payload_carries_scripts_matrix_values_unit_files_and_gpuforge_source(tmp_path: Path) -> None:
    matrix, digest = load_valid(SHIPPED[0])
    rendered = render(matrix, digest, LEGACY, tmp_path / "out")
    payload = rendered.payload
    for step in STEPS:
        script = payload / "scripts" / step
        assert script.stat().st_mode & 0o111, step
    env = (payload / MATRIX_ENV).read_text()
    assert f"GPUFORGE_MATRIX_DIGEST={digest}\n" in env
    assert f"GPUFORGE_DRIVER={matrix.nvidia.driver}\n" in env
    assert "GPUFORGE_LIBFABRIC=2.4.0amzn1.0\n" in env  # the compat table's row for installer 1.47.0
    assert (payload / "files" / "gpuforge-node-check.service").is_file()
    source = payload / SOURCE_DIR
    assert (source / "pyproject.toml").is_file()
    assert (source / "images" / "render.py").is_file()
    assert not list(source.rglob("__pycache__"))


def test_cli_render_prints_how_to_build_and_writes_the_files(tmp_path: Path, packer_tool: Packer) -> None:
    from gpuforge.cli import main

    out = tmp_path / "out"
    assert main(["image", "render", str(SHIPPED[0]), "--out", str(out), "--packer-version", "1.6.6"]) == 0
    assert (out / BUILD_FILE).is_file() and (out / PLUGINS_FILE).is_file()
    assert "imds_support" not in (out / BUILD_FILE).read_text()
    modern = tmp_path / "modern"
    assert main(["image", "render", str(SHIPPED[0]), "--out", str(modern), "--packer-version", "1.11.2"]) == 0
    assert "imds_support" in (modern / BUILD_FILE).read_text()


def test_the_payload_carries_the_slurm_and_pmix_pins_and_the_cuda_folder_for_nvml(tmp_path: Path) -> None:
    matrix, digest = load_valid(MATRICES / "p5-h100-cuda12.yaml")
    assert matrix.slurm is not None and matrix.pmix is not None
    env = (render(matrix, digest, LEGACY, tmp_path / "out").payload / MATRIX_ENV).read_text()
    for line in (
        f"GPUFORGE_SLURM={matrix.slurm.version}",
        f"GPUFORGE_SLURM_SHA256={matrix.slurm.sha256}",
        f"GPUFORGE_SLURM_URL={matrix.slurm.url}",
        f"GPUFORGE_PMIX={matrix.pmix.version}",
        f"GPUFORGE_PMIX_SHA256={matrix.pmix.sha256}",
        f"GPUFORGE_PMIX_URL={matrix.pmix.url}",
        "GPUFORGE_PMIX_PREFIX=/opt/pmix",
        "GPUFORGE_CUDA_HOME=/usr/local/cuda-12.9",
    ):
        assert f"\n{line}\n" in env, line
    assert matrix_values(matrix, digest)["GPUFORGE_CUDA_HOME"] == "/usr/local/cuda-12.9"
    cuda13, digest13 = load_valid(MATRICES / "p5-h100-cuda13.yaml")
    assert matrix_values(cuda13, digest13)["GPUFORGE_CUDA_HOME"] == "/usr/local/cuda-13.0"


def test_dcgm_package_follows_the_drivers_cuda_major_not_the_toolkits() -> None:
    """The CUDA 12.9 image runs driver R580, which reports CUDA 13: DCGM's install guide picks the
    package by that major, so 75-dcgm.sh must install datacenter-gpu-manager-4-cuda13 there."""
    matrix, digest = load_valid(MATRICES / "p5-h100-cuda12.yaml")
    assert matrix.cuda.startswith("12.")
    assert matrix_values(matrix, digest)["GPUFORGE_DCGM_CUDA_MAJOR"] == "13"
    script = (MATRICES.parent / "scripts" / "75-dcgm.sh").read_text(encoding="utf-8")
    assert "-cuda${GPUFORGE_DCGM_CUDA_MAJOR}" in script and "cuda$(cuda_major)" not in script


def test_a_matrix_without_slurm_renders_empty_slurm_values_the_step_skips_on(tmp_path: Path) -> None:
    data = load_matrix_data()
    del data["slurm"], data["pmix"], data["mariadb"]
    matrix, digest = load_valid(write_matrix(tmp_path, data))
    values = matrix_values(matrix, digest)
    assert {key: values[key] for key in values if key.startswith(("GPUFORGE_SLURM", "GPUFORGE_PMIX"))} == {
        "GPUFORGE_SLURM": "",
        "GPUFORGE_SLURM_SHA256": "",
        "GPUFORGE_SLURM_URL": "",
        "GPUFORGE_PMIX": "",
        "GPUFORGE_PMIX_SHA256": "",
        "GPUFORGE_PMIX_URL": "",
        "GPUFORGE_PMIX_PREFIX": "/opt/pmix",
    }


def test_the_slurm_step_runs_after_cuda_and_before_efa() -> None:
    assert STEPS.index("40-cuda.sh") < STEPS.index("45-slurm.sh") < STEPS.index("50-efa.sh")


def test_nccl_tests_build_after_the_efa_installer_and_skip_when_unpinned(tmp_path: Path) -> None:
    from gpuforge.images.render import STEPS

    assert STEPS.index("50-efa.sh") < STEPS.index("55-nccl-tests.sh") < STEPS.index("90-verify.sh")
    matrix, digest = load_valid(MATRICES / "p5-h100-cuda12.yaml")
    assert matrix.nccl_tests is not None
    values = matrix_values(matrix, digest)
    assert {key: values[key] for key in values if key.startswith("GPUFORGE_NCCL_TESTS")} == {
        "GPUFORGE_NCCL_TESTS": "2.17.6",
        "GPUFORGE_NCCL_TESTS_SHA256": matrix.nccl_tests.sha256,
        "GPUFORGE_NCCL_TESTS_URL": "https://github.com/NVIDIA/nccl-tests/archive/v2.17.6.tar.gz",
    }
    unpinned = matrix.model_copy(update={"nccl_tests": None})
    values = matrix_values(unpinned, digest)
    assert {key: values[key] for key in values if key.startswith("GPUFORGE_NCCL_TESTS")} == {
        "GPUFORGE_NCCL_TESTS": "",
        "GPUFORGE_NCCL_TESTS_SHA256": "",
        "GPUFORGE_NCCL_TESTS_URL": "",
    }
    script = (MATRICES.parent / "scripts" / "55-nccl-tests.sh").read_text(encoding="utf-8")
    assert 'download_checked "$GPUFORGE_NCCL_TESTS_URL" "$GPUFORGE_NCCL_TESTS_SHA256"' in script


def test_a_folder_that_fails_midway_leaves_nothing_behind(tmp_path: Path) -> None:
    """staged_out_dir (the rendered build's and the acceptance context's one writer): a write that fails after
    some files were made (a full disk: ENOSPC) leaves neither `out` nor a staging folder, and says what was written."""
    import errno

    out = tmp_path / "build"
    with pytest.raises(InputError) as caught, staged_out_dir(out, "the test's files") as staging:
        (staging / "first").write_text("made", encoding="utf-8")
        raise OSError(errno.ENOSPC, "No space left on device")
    assert str(caught.value).startswith(f"{out}: cannot write the test's files (No space left on device)")
    assert "Fix:" in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_a_folder_written_whole_replaces_an_empty_out(tmp_path: Path) -> None:
    out = tmp_path / "build"
    out.mkdir()
    with staged_out_dir(out, "the test's files") as staging:
        (staging / "first").write_text("made", encoding="utf-8")
        assert not (out / "first").exists()  # nothing shows in `out` until the whole folder is written
    assert (out / "first").read_text(encoding="utf-8") == "made"
    assert [path.name for path in tmp_path.iterdir()] == ["build"]
