"""The AMI tags a matrix's image carries: the one mapping from a matrix to tag keys.

`image build` writes these tags (through the rendered Packer template), `image
verify` and the build's own verification compare an AMI against them, and
preflight reads the digest tag. Keeping the mapping here means a component
renamed or added changes every reader at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpuforge.images.matrix import Matrix

PREFIX = "gpuforge:"
MATRIX_NAME_TAG = "gpuforge:matrix-name"
MATRIX_VERSION_TAG = "gpuforge:matrix-version"
MATRIX_DIGEST_TAG = "gpuforge:matrix-digest"


def component_versions(matrix: Matrix) -> dict[str, str]:
    """Every pinned component by its tag suffix, in install order; unpinned optional ones are left out."""
    nvidia = matrix.nvidia
    pins: dict[str, str | None] = {
        "kernel": matrix.kernel,
        "nvidia-driver": nvidia.driver,
        "nvidia-kernel-modules": nvidia.kernel_modules,
        "fabricmanager": nvidia.fabricmanager,
        "nscq": nvidia.nscq,
        "nvlsm": nvidia.nvlsm,
        "cuda": matrix.cuda,
        "cudnn": matrix.cudnn,
        "nccl": matrix.nccl,
        "efa-installer": matrix.efa.installer,
        "aws-ofi-nccl": matrix.aws_ofi_nccl.version,
        "lustre-client": matrix.lustre_client,
        "container-toolkit": matrix.container_toolkit,
        "dcgm": matrix.dcgm,
        "dcgm-exporter": matrix.dcgm_exporter,
        "mariadb": matrix.mariadb.version if matrix.mariadb else None,
        # The EKS control plane minor the image's nodes join: a stack's kubernetesVersion is checked against it.
        "kubernetes": matrix.kubernetes.version if matrix.kubernetes else None,
        **{key.replace("_", "-"): pin.version for key, pin in matrix.downloads},
    }
    return {name: version for name, version in pins.items() if version is not None}


def ami_tags(matrix: Matrix, digest: str) -> dict[str, str]:
    """The tags an AMI built from `matrix` must carry: identity first, then one per component."""
    tags = {
        MATRIX_NAME_TAG: matrix.name,
        MATRIX_VERSION_TAG: matrix.version,
        MATRIX_DIGEST_TAG: digest,
    }
    tags.update({PREFIX + name: version for name, version in component_versions(matrix).items()})
    return tags


@dataclass(frozen=True)
class TagMismatch:
    """One gpuforge tag that is missing, different, or present without being expected."""

    key: str
    expected: str | None
    found: str | None

    def render(self) -> str:
        if self.found is None:
            return f"{self.key}: missing (expected {self.expected!r})"
        if self.expected is None:
            return f"{self.key}: {self.found!r} is not a tag of this matrix"
        return f"{self.key}: expected {self.expected!r}, found {self.found!r}"


def compare_tags(expected: Mapping[str, str], found: Mapping[str, str]) -> list[TagMismatch]:
    """Differences between expected gpuforge tags and an image's tags; other tags are ignored."""
    keys = sorted(set(expected) | {key for key in found if key.startswith(PREFIX)})
    return [
        TagMismatch(key, expected.get(key), found.get(key))
        for key in keys
        if expected.get(key) != found.get(key)
    ]
