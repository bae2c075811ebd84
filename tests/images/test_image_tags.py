"""AMI tags from a matrix, tag comparison, and the HCL writer's quoting."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from image_helpers import SHIPPED, load_matrix_data, write_matrix

from gpuforge.images import hcl
from gpuforge.images.matrix import load_valid
from gpuforge.images.packer import Packer
from gpuforge.images.tags import (
    MATRIX_DIGEST_TAG,
    MATRIX_NAME_TAG,
    MATRIX_VERSION_TAG,
    TagMismatch,
    ami_tags,
    compare_tags,
    component_versions,
)

COMPONENTS = (
    "kernel",
    "nvidia-driver",
    "nvidia-kernel-modules",
    "cuda",
    "cudnn",
    "nccl",
    "efa-installer",
    "aws-ofi-nccl",
    "lustre-client",
    "container-toolkit",
    "dcgm",
    "dcgm-exporter",
    "slurm",
    "pmix",
)


@pytest.mark.parametrize("matrix_path", SHIPPED, ids=lambda p: p.stem)
def test_tags_carry_identity_and_every_pinned_component(matrix_path: Path) -> None:
    matrix, digest = load_valid(matrix_path)
    tags = ami_tags(matrix, digest)
    assert tags[MATRIX_NAME_TAG] == matrix.name
    assert tags[MATRIX_VERSION_TAG] == matrix.version
    assert tags[MATRIX_DIGEST_TAG] == digest and len(digest) == 64
    for component in COMPONENTS:
        assert f"gpuforge:{component}" in tags, component
    assert tags["gpuforge:nvidia-driver"] == matrix.nvidia.driver
    assert tags["gpuforge:aws-ofi-nccl"] == matrix.aws_ofi_nccl.version
    assert tags["gpuforge:efa-installer"] == matrix.efa.installer
    assert matrix.slurm is not None and matrix.pmix is not None
    assert (tags["gpuforge:slurm"], tags["gpuforge:pmix"]) == (matrix.slurm.version, matrix.pmix.version)
    for optional in ("nvlsm", "fabricmanager", "nscq"):  # NVSwitch companions: tagged when pinned
        assert (f"gpuforge:{optional}" in tags) == (getattr(matrix.nvidia, optional) is not None)
    # AWS limits: 128-character keys, 256-character values.
    assert all(len(key) <= 128 and len(value) <= 256 for key, value in tags.items())
    assert len(tags) == 3 + len(component_versions(matrix))


def test_a_matrix_without_slurm_carries_no_slurm_or_pmix_tag(tmp_path: Path) -> None:
    data = load_matrix_data()
    del data["slurm"], data["pmix"], data["mariadb"], data["nccl_tests"]
    matrix, digest = load_valid(write_matrix(tmp_path, data))
    tags = ami_tags(matrix, digest)
    assert "gpuforge:slurm" not in tags and "gpuforge:pmix" not in tags and "gpuforge:nccl-tests" not in tags
    # the monitoring daemons follow dcgm-exporter whether or not Slurm is pinned, then the Kubernetes node parts
    assert list(component_versions(matrix))[-12:] == [
        "dcgm",
        "dcgm-exporter",
        "kubernetes",
        "node-exporter",
        "prometheus",
        "alertmanager",
        "kubernetes.kubelet",
        "kubernetes.containerd",
        "kubernetes.runc",
        "kubernetes.cni-plugins",
        "kubernetes.aws-iam-authenticator",
        "kubernetes.ecr-credential-provider",
    ]


def test_compare_tags_reports_missing_wrong_and_unexpected_gpuforge_tags_only() -> None:
    expected = {"gpuforge:cuda": "12.9.1", "gpuforge:nccl": "2.27.3-1+cuda12.9", "gpuforge:dcgm": "4.2.3"}
    found = {"gpuforge:cuda": "12.9.0", "gpuforge:dcgm": "4.2.3", "gpuforge:nvlsm": "x", "Name": "anything"}
    assert compare_tags(expected, found) == [
        TagMismatch("gpuforge:cuda", "12.9.1", "12.9.0"),
        TagMismatch("gpuforge:nccl", "2.27.3-1+cuda12.9", None),
        TagMismatch("gpuforge:nvlsm", None, "x"),
    ]
    assert compare_tags(expected, {**expected, "Owner": "me"}) == []


def test_hcl_strings_are_escaped_so_values_never_become_templates() -> None:
    assert hcl.quote('a "b" \\ ${var.x} %{if}\n') == '"a \\"b\\" \\\\ $${var.x} %%{if}\\n"'


def test_hcl_aligns_runs_of_attributes_and_breaks_them_at_blocks_and_multi_line_values(
    tmp_path: Path, packer_tool: Packer
) -> None:
    text = hcl.render(
        [
            hcl.Block(
                "source",
                ("amazon-ebs", "x"),
                (
                    hcl.Attr("a", 1),
                    hcl.Attr("longer_name", True),
                    hcl.Attr("tags", {"k": "v", "longer": "w"}),
                    hcl.Attr("z", "after"),
                    hcl.Attr("list", ["one", "two"]),
                ),
            )
        ]
    )
    assert text == (
        'source "amazon-ebs" "x" {\n'
        "  a           = 1\n"
        "  longer_name = true\n"
        "  tags = {\n"
        '    "k"      = "v"\n'
        '    "longer" = "w"\n'
        "  }\n"
        '  z = "after"\n'
        "  list = [\n"
        '    "one",\n'
        '    "two",\n'
        "  ]\n"
        "}\n"
    )
    (tmp_path / "x.pkr.hcl").write_text(text)
    formatted = subprocess.run(
        [packer_tool.binary, "fmt", "-check", "x.pkr.hcl"],
        cwd=tmp_path,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert formatted.returncode == 0, "packer fmt lays this out differently"
