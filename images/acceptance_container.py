"""The acceptance container of a matrix: the image `gpuforge validate --image` runs on a Kubernetes stack.

On Kubernetes the acceptance's runs are pods (gpuforge.validate.kubernetes_jobs), so nccl-tests, Open MPI's
mpirun, sshd, the EFA installer's libfabric, aws-ofi-nccl, NCCL and dcgmi must come in a container image, at the
versions of the node's matrix: NCCL's plugin and libfabric in the pod are what the run measures. This module
writes that image's build context from a checked matrix:

- `Dockerfile`: FROM NVIDIA's CUDA development image for the matrix's CUDA and OS, pinned by the digest in the
  matrix's `acceptance_image.base_digest` (refused without it: no public source pinning those tags by digest
  could be named, README "Acceptance on Kubernetes" says how to take one), labels naming the matrix, its digest
  and each part's version, and one RUN per build step;
- `matrix.env`: the values the AMI's scripts read (gpuforge.images.payload.matrix_values), so no version, URL or
  sha256 is written a second time;
- `scripts/`: the AMI's lib.sh and 55-nccl-tests.sh (nccl-tests built with MPI=1) and the container's own steps
  (images/files/acceptance/acceptance-container.sh), with sshd's and ssh's configuration beside them.

No Docker engine runs where gpuforge is tested, so the image is built by CI (ci/github-actions/gpuforge-images.yml).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from gpuforge.errors import InputError
from gpuforge.images.matrix import Matrix
from gpuforge.images.payload import FILES_DIR, MATRIX_ENV, SCRIPTS_DIR, matrix_env, matrix_values
from gpuforge.images.render import distro_defaults, staged_out_dir
from gpuforge.images.tags import MATRIX_DIGEST_TAG, MATRIX_NAME_TAG, MATRIX_VERSION_TAG, component_versions

DOCKERFILE = "Dockerfile"
# Where the build context's matrix.env and scripts/ go in the image (lib.sh finds matrix.env one folder up).
CONTAINER_DIR = "/opt/gpuforge/acceptance"
ACCEPTANCE_FILES = FILES_DIR / "acceptance"
STEPS_SCRIPT = "acceptance-container.sh"
SSHD_CONFIG = "sshd-gpuforge-acceptance.conf"
SSH_CONFIG = "ssh-gpuforge-acceptance.conf"
# The AMI's own scripts the container runs: the shared library and the nccl-tests step.
AMI_SCRIPTS = ("lib.sh", "55-nccl-tests.sh")
NCCL_TESTS_STEP = "55-nccl-tests.sh"
# NVIDIA's CUDA images on Docker Hub: <cuda>-devel-<distro><release> (https://hub.docker.com/r/nvidia/cuda,
# "Supported tags"); devel, because nccl-tests are compiled with nvcc.
BASE_REPOSITORY = "nvidia/cuda"
# The parts the container carries, by their AMI tag names (gpuforge.images.tags.component_versions): labelled
# on the image with the matrix's versions. Kernel, driver and the node's daemons are the node's, not the image's.
CONTAINER_PARTS = ("cuda", "nccl", "efa-installer", "aws-ofi-nccl", "nccl-tests", "dcgm")
# Build steps of acceptance-container.sh, in order; nccl-tests (the AMI's step) runs after `efa`, which
# installs the Open MPI it is built against.
STEPS_BEFORE_NCCL_TESTS = ("packages", "nccl", "efa")
STEPS_AFTER_NCCL_TESTS = ("dcgm", "ssh", "verify")
LABEL_PREFIX = "gpuforge."


def base_tag(matrix: Matrix) -> str:
    """NVIDIA's CUDA development image tag for the matrix's CUDA and OS, e.g. 12.9.1-devel-ubuntu22.04."""
    distro_defaults(matrix)  # refuses an OS gpuforge's scripts do not support
    return f"{matrix.cuda}-devel-{matrix.os.distro}{matrix.os.release}"


def base_reference(matrix: Matrix) -> str:
    """The base image by tag and digest; InputError naming the matrix key when no digest is pinned."""
    tag = f"{BASE_REPOSITORY}:{base_tag(matrix)}"
    if matrix.acceptance_image is None:
        raise InputError(
            f"matrix {matrix.name}: acceptance_image.base_digest is missing, so the acceptance container's base "
            f"{tag} cannot be pinned by digest (a tag can point at another image tomorrow; gpuforge found no "
            "public source that pins it). Fix: run `crane digest "
            f"{tag}` (or `docker buildx imagetools inspect {tag}`), review it, and add to the matrix "
            "`acceptance_image: {base_digest: sha256:<64 hex>, base_digest_source: <where and when you took it>}`."
        )
    return f"{tag}@{matrix.acceptance_image.base_digest}"


def _require_nccl_tests(matrix: Matrix) -> None:
    if matrix.nccl_tests is None:
        raise InputError(
            f"matrix {matrix.name}: nccl_tests is missing, and the acceptance container is built around "
            "all_reduce_perf. Fix: add `nccl_tests: {version, sha256, sha256_source, url}` (as "
            "images/matrices/p5-h100-cuda12.yaml pins it)."
        )


def image_labels(matrix: Matrix, digest: str, base_digest: str) -> dict[str, str]:
    """The image's labels: OCI's title and base (annotations spec), the matrix's identity and each part's version."""
    versions = component_versions(matrix)
    labels = {
        "org.opencontainers.image.title": f"gpuforge acceptance {matrix.name}",
        "org.opencontainers.image.base.name": f"docker.io/{BASE_REPOSITORY}:{base_tag(matrix)}",
        "org.opencontainers.image.base.digest": base_digest,
    }
    identity = (
        (MATRIX_NAME_TAG, matrix.name),
        (MATRIX_VERSION_TAG, matrix.version),
        (MATRIX_DIGEST_TAG, digest),
    )
    labels.update({_label(tag): value for tag, value in identity})
    labels.update({LABEL_PREFIX + part: versions[part] for part in CONTAINER_PARTS})
    return labels


def _quoted(value: str) -> str:
    """A LABEL value in double quotes: Dockerfile words substitute `$` and end at `"`, so both are escaped."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


def _label(tag: str) -> str:
    """An AMI tag key (gpuforge:matrix-name) as a label key (gpuforge.matrix-name)."""
    return tag.replace(":", ".", 1)


def _run(step: str) -> str:
    return f"RUN {CONTAINER_DIR}/scripts/{step}"


def dockerfile_text(matrix: Matrix, digest: str) -> str:
    """The Dockerfile of the matrix's acceptance container; InputError for a matrix missing a needed key."""
    _require_nccl_tests(matrix)
    base = base_reference(matrix)
    assert matrix.acceptance_image is not None  # base_reference refused otherwise
    labels = image_labels(matrix, digest, matrix.acceptance_image.base_digest)
    label_lines = " \\\n      ".join(f"{key}={_quoted(value)}" for key, value in labels.items())
    steps = f"{CONTAINER_DIR}/scripts/{STEPS_SCRIPT}"
    lines = [
        f"# The acceptance container of image matrix {matrix.name} {matrix.version} (digest {digest}),",
        "# rendered by `gpuforge image acceptance-container`; re-render it, never edit it. It carries the matrix's",
        "# CUDA, NCCL, EFA installer (libfabric, Open MPI), aws-ofi-nccl, nccl-tests (MPI=1) and dcgmi, for",
        "# `gpuforge validate --image` on Kubernetes stacks. Every version, URL and sha256 is in matrix.env, the",
        "# values the AMI's scripts read. The base's digest is the matrix's acceptance_image.base_digest, taken",
        f"# from: {' '.join(matrix.acceptance_image.base_digest_source.split())}",
        f"FROM {base}",
        'SHELL ["/bin/bash", "-o", "pipefail", "-c"]',
        f"LABEL {label_lines}",
        f"COPY {MATRIX_ENV} {CONTAINER_DIR}/{MATRIX_ENV}",
        f"COPY scripts/ {CONTAINER_DIR}/scripts/",
        *(f"RUN {steps} {step}" for step in STEPS_BEFORE_NCCL_TESTS),
        _run(NCCL_TESTS_STEP),
        f"COPY {SSHD_CONFIG} /etc/ssh/sshd_config.d/gpuforge-acceptance.conf",
        f"COPY {SSH_CONFIG} /etc/ssh/ssh_config.d/gpuforge-acceptance.conf",
        *(f"RUN {steps} {step}" for step in STEPS_AFTER_NCCL_TESTS),
    ]
    return "\n".join(lines) + "\n"


def _fill(context: Path, matrix: Matrix, digest: str, dockerfile: str) -> None:
    context.chmod(0o755)
    (context / DOCKERFILE).write_text(dockerfile, encoding="utf-8")
    (context / MATRIX_ENV).write_text(matrix_env(matrix_values(matrix, digest)), encoding="utf-8")
    scripts = context / "scripts"
    scripts.mkdir()
    for name in AMI_SCRIPTS:
        shutil.copyfile(SCRIPTS_DIR / name, scripts / name)
    shutil.copyfile(ACCEPTANCE_FILES / STEPS_SCRIPT, scripts / STEPS_SCRIPT)
    for script in scripts.iterdir():
        script.chmod(0o755)
    for name in (SSHD_CONFIG, SSH_CONFIG):
        shutil.copyfile(ACCEPTANCE_FILES / name, context / name)
        (context / name).chmod(0o644)


def render_acceptance(matrix: Matrix, digest: str, out: Path) -> Path:
    """Write the build context into `out` (new or empty): every file at once, or nothing."""
    dockerfile = dockerfile_text(matrix, digest)  # refusals first: nothing is created for a refused matrix
    with staged_out_dir(out, "the acceptance container's build context") as staging:
        _fill(staging, matrix, digest, dockerfile)
    return out
