"""The payload a build uploads to the builder: scripts, the matrix as shell values, unit files, gpuforge.

The provisioning scripts are plain bash and read every version from
`matrix.env`, which is written here from the checked matrix and the
compatibility table, so no version is typed twice. gpuforge itself travels as a
copy of its source tree (the folders pyproject.toml maps to packages), which the
builder installs with pip; building a wheel here would need the package index on
the machine that runs `image build`, which `--local` must not.
"""

from __future__ import annotations

import shlex
import shutil
import tomllib
from pathlib import Path
from typing import Any

from packaging.version import Version

from gpuforge import hardware
from gpuforge.compat import compat, driver_cuda_major
from gpuforge.errors import GpuforgeError
from gpuforge.images.matrix import KUBERNETES_KEYS, MONITORING_KEYS, Matrix
from gpuforge.images.rds_ca import BUNDLE_FILE as RDS_CA_FILE
from gpuforge.images.rds_ca import BUNDLE_NAME as RDS_CA_NAME
from gpuforge.images.rds_ca import BUNDLE_SHA256 as RDS_CA_SHA256
from gpuforge.images.rds_ca import INSTALLED_PATH as RDS_CA_INSTALLED
from gpuforge.images.rds_ca import PAYLOAD_DIR as RDS_CA_DIR
from gpuforge.images.rds_ca import vendored_bundle
from gpuforge.monitoring.fields import FIELDS_FILE, field_list_csv

HERE = Path(__file__).resolve().parent
SCRIPTS_DIR = HERE / "scripts"
FILES_DIR = HERE / "files"
PROJECT_ROOT = HERE.parent

MATRIX_ENV = "matrix.env"
SOURCE_DIR = "gpuforge-src"
# dcgm-exporter's field list for the matrix's targets, rendered here (gpuforge.monitoring.fields) and
# installed by 77-monitoring.sh where images/files/nvidia-dcgm-exporter-gpuforge-fields.conf points
# dcgm-exporter (-f). One list per image: the rule monitoring.one-field-list refuses targets that differ.
MONITORING_DIR = "monitoring"
# The Kubernetes node's files (containerd's configuration, the kubelet's and containerd's units and the
# kubelet's boot gate), installed by 72-kubernetes.sh where the matrix has a `kubernetes` block.
KUBERNETES_DIR = "kubernetes"

# The EFA installer puts its bundled aws-ofi-nccl (installer 1.38.0 and later) under this
# prefix. Source: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-changelog.html
# (1.38.0: "aws-ofi-nccl" added to the installer) and AWS's EFA + NCCL guide
# (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start-nccl.html, /opt/amazon/ofi-nccl).
BUNDLED_OFI_PREFIX = "/opt/amazon/ofi-nccl"
# aws-ofi-nccl v1.15.0 renamed its library libnccl-net-ofi.so (selected with
# NCCL_NET_PLUGIN=ofi); earlier releases install libnccl-net.so, which NCCL loads by default.
# Source: aws/aws-ofi-nccl RELEASENOTES.md, v1.15.0.
OFI_RENAMED_LIBRARY = Version("1.15.0")
# Releases up to v1.13.2-aws carry an "-aws" suffix on their tag and tarball; v1.14.0 dropped it.
# Source: aws/aws-ofi-nccl RELEASENOTES.md, v1.14.0; https://github.com/aws/aws-ofi-nccl/releases.
OFI_PLAIN_TAGS = Version("1.14.0")
# cuda-toolkit-X-Y installs the toolkit under /usr/local/cuda-X.Y; Slurm's --with-nvml takes that
# folder (its include/nvml.h and lib64/stubs/libnvidia-ml.so). Sources:
# https://docs.nvidia.com/cuda/cuda-installation-guide-linux/ (post-installation: /usr/local/cuda-X.Y);
# SchedMD/slurm auxdir/x_ac_nvml.m4 (--with-nvml=PATH, "path to CUDA installation", lib64/stubs).
CUDA_HOME = "/usr/local/cuda-{major_minor}"
# PMIx goes under its own prefix, as AWS ParallelCluster installs it (./configure --prefix=/opt/pmix,
# aws/aws-parallelcluster-cookbook recipes/install/install_pmix.rb): PMIx also builds libpmi and
# libpmi2, which would collide with Slurm's own in /usr (https://openpmix.github.io/support/how-to/slurm-support.html).
PMIX_PREFIX = "/opt/pmix"


def _tarball_values(matrix: Matrix) -> dict[str, str]:
    """The downloaded tarballs' pins for 45-slurm.sh, 55-nccl-tests.sh, 77-monitoring.sh and 90-verify.sh:
    GPUFORGE_<KEY>, _SHA256 and _URL per key (slurm, pmix, nccl_tests, node_exporter, prometheus,
    alertmanager); empty strings for a key the matrix leaves out."""
    pinned = dict(matrix.downloads)
    values = {"GPUFORGE_PMIX_PREFIX": PMIX_PREFIX}
    for key in ("slurm", "pmix", "nccl_tests", *MONITORING_KEYS):
        pin, name = pinned.get(key), f"GPUFORGE_{key.upper()}"
        values |= {
            name: pin.version if pin else "",
            f"{name}_SHA256": pin.sha256 if pin else "",
            f"{name}_URL": pin.url if pin else "",
        }
    return values


def _kubernetes_values(matrix: Matrix) -> dict[str, str]:
    """The Kubernetes node parts' pins for 72-kubernetes.sh and 90-verify.sh: GPUFORGE_KUBERNETES_VERSION (the
    control plane minor), and GPUFORGE_<PART>, _SHA256 and _URL for kubelet, containerd, runc and cni_plugins;
    empty strings when the matrix has no `kubernetes` block (the script then installs nothing)."""
    spec = matrix.kubernetes
    values = {"GPUFORGE_KUBERNETES_VERSION": spec.version if spec else ""}
    for key in KUBERNETES_KEYS:
        pin, name = (getattr(spec, key) if spec else None), f"GPUFORGE_{key.upper()}"
        values |= {
            name: pin.version if pin else "",
            f"{name}_SHA256": pin.sha256 if pin else "",
            f"{name}_URL": pin.url if pin else "",
        }
    return values


def _ofi_values(matrix: Matrix) -> dict[str, str]:
    ofi = matrix.aws_ofi_nccl
    version = Version(ofi.version)
    suffix = "" if version >= OFI_PLAIN_TAGS else "-aws"
    return {
        "GPUFORGE_OFI_VERSION": ofi.version,
        "GPUFORGE_OFI_INSTALL": ofi.install,
        "GPUFORGE_OFI_PREFIX": ofi.prefix if ofi.install == "separate" and ofi.prefix else BUNDLED_OFI_PREFIX,
        "GPUFORGE_OFI_SHA256": ofi.sha256 or "",
        "GPUFORGE_OFI_LIBRARY": "libnccl-net-ofi.so" if version >= OFI_RENAMED_LIBRARY else "libnccl-net.so",
        "GPUFORGE_OFI_NET_PLUGIN": "ofi" if version >= OFI_RENAMED_LIBRARY else "",
        "GPUFORGE_OFI_TARBALL_URL": (
            f"https://github.com/aws/aws-ofi-nccl/releases/download/v{ofi.version}{suffix}/"
            f"aws-ofi-nccl-{ofi.version}{suffix}.tar.gz"
        ),
    }


def matrix_values(matrix: Matrix, digest: str) -> dict[str, str]:
    """Every value the provisioning and verification scripts read, by variable name."""
    release = compat().efa_installer.releases[matrix.efa.installer]
    known = hardware.catalog()
    nvswitch = any(known[name].nvswitch for name in matrix.targets if name in known)
    nvidia = matrix.nvidia
    values = {
        "GPUFORGE_MATRIX_NAME": matrix.name,
        "GPUFORGE_MATRIX_VERSION": matrix.version,
        "GPUFORGE_MATRIX_DIGEST": digest,
        "GPUFORGE_TARGETS": " ".join(matrix.targets),
        "GPUFORGE_NVSWITCH": "1" if nvswitch else "0",
        "GPUFORGE_DISTRO": matrix.os.distro,
        "GPUFORGE_RELEASE": matrix.os.release,
        "GPUFORGE_KERNEL": matrix.kernel,
        "GPUFORGE_DRIVER": nvidia.driver,
        "GPUFORGE_KERNEL_MODULES": nvidia.kernel_modules,
        "GPUFORGE_FABRICMANAGER": nvidia.fabricmanager or "",
        "GPUFORGE_NSCQ": nvidia.nscq or "",
        "GPUFORGE_NVLSM": nvidia.nvlsm or "",
        "GPUFORGE_CUDA": matrix.cuda,
        "GPUFORGE_CUDA_HOME": CUDA_HOME.format(major_minor=".".join(matrix.cuda.split(".")[:2])),
        "GPUFORGE_CUDNN": matrix.cudnn,
        "GPUFORGE_NCCL": matrix.nccl,
        "GPUFORGE_EFA_INSTALLER": matrix.efa.installer,
        "GPUFORGE_EFA_SHA256": matrix.efa.sha256,
        "GPUFORGE_LIBFABRIC": release.libfabric,
        "GPUFORGE_EFA_DRIVER": release.efa_driver or "",
        "GPUFORGE_LUSTRE": matrix.lustre_client,
        "GPUFORGE_CONTAINER_TOOLKIT": matrix.container_toolkit,
        "GPUFORGE_DCGM": matrix.dcgm,
        "GPUFORGE_DCGM_EXPORTER": matrix.dcgm_exporter,
        "GPUFORGE_MARIADB": matrix.mariadb.version if matrix.mariadb else "",
        # DCGM's package follows the CUDA major the driver reports, not the toolkit's (rule dcgm.cuda-build).
        "GPUFORGE_DCGM_CUDA_MAJOR": str(driver_cuda_major(nvidia.driver, compat()) or ""),
    }
    values.update(_ofi_values(matrix))
    values.update(_tarball_values(matrix))
    values.update(_kubernetes_values(matrix))
    # The Amazon RDS CA bundle (gpuforge.images.rds_ca), installed by lib.sh's install_rds_ca_bundle.
    values |= {
        "GPUFORGE_RDS_CA_SOURCE": f"{RDS_CA_DIR}/{RDS_CA_NAME}",
        "GPUFORGE_RDS_CA_BUNDLE": RDS_CA_INSTALLED,
        "GPUFORGE_RDS_CA_SHA256": RDS_CA_SHA256,
    }
    return values


def matrix_env(values: dict[str, str]) -> str:
    """The values as a file bash can source: one quoted assignment a line."""
    header = "# Written by gpuforge from the checked matrix; the provisioning scripts source it.\n"
    return header + "".join(f"{key}={shlex.quote(value)}\n" for key, value in values.items())


def _pyproject(root: Path) -> dict[str, Any]:
    path = root / "pyproject.toml"
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise GpuforgeError(
            f"{path}: cannot read gpuforge's pyproject.toml ({error}); the image installs gpuforge from its "
            "source tree. Fix: run gpuforge from a checkout of its repository (scripts/bootstrap.sh)."
        ) from None


def copy_source(dest: Path, root: Path = PROJECT_ROOT) -> None:
    """Copy what building gpuforge needs: pyproject.toml, its readme and every mapped package folder."""
    project = _pyproject(root)
    try:
        folders = sorted(set(project["tool"]["setuptools"]["package-dir"].values()))
    except (KeyError, AttributeError):
        raise GpuforgeError(
            f"{root / 'pyproject.toml'}: [tool.setuptools] package-dir is missing, so gpuforge's source folders "
            "are unknown. Fix: restore the package-dir table."
        ) from None
    dest.mkdir(parents=True)
    shutil.copy2(root / "pyproject.toml", dest / "pyproject.toml")
    readme = project.get("project", {}).get("readme")
    if isinstance(readme, str) and (root / readme).is_file():
        shutil.copy2(root / readme, dest / readme)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "catalog*.json", "*.lock")
    for folder in folders:
        shutil.copytree(root / folder, dest / folder, ignore=skip)


def dcgm_field_list(matrix: Matrix) -> str:
    """dcgm-exporter's CSV for the matrix's targets; the first target's stands for all (monitoring.one-field-list)."""
    rendered = field_list_csv(hardware.get(matrix.targets[0]), cluster=matrix.name)
    rows = rendered.split("\n", 1)[1]  # the renderer's first line names a cluster; an image serves many
    header = (
        f"# {FIELDS_FILE} of image matrix {matrix.name} {matrix.version}, rendered by gpuforge for its targets "
        f"({', '.join(matrix.targets)})\n"
    )
    return header + rows


def write_payload(payload: Path, matrix: Matrix, digest: str) -> None:
    """Fill `payload` (a new folder) with the scripts, matrix.env, unit files, dcgm-exporter's field list,
    the RDS CA bundle and gpuforge's source."""
    payload.mkdir(parents=True)
    (payload / MATRIX_ENV).write_text(matrix_env(matrix_values(matrix, digest)), encoding="utf-8")
    (payload / MONITORING_DIR).mkdir()
    (payload / MONITORING_DIR / FIELDS_FILE).write_text(dcgm_field_list(matrix), encoding="utf-8")
    shutil.copytree(SCRIPTS_DIR, payload / "scripts", ignore=shutil.ignore_patterns("__pycache__"))
    for script in (payload / "scripts").glob("*.sh"):
        script.chmod(0o755)
    files = payload / "files"
    files.mkdir()
    if FILES_DIR.is_dir():
        for item in sorted(FILES_DIR.iterdir()):
            if item.is_file():
                shutil.copy2(item, files / item.name)
    shutil.copytree(FILES_DIR / KUBERNETES_DIR, payload / KUBERNETES_DIR)
    # The vendored RDS CA bundle, refused here already when it is not the pinned one.
    (payload / RDS_CA_DIR).mkdir()
    (payload / RDS_CA_DIR / RDS_CA_NAME).write_bytes(vendored_bundle(RDS_CA_FILE))
    copy_source(payload / SOURCE_DIR)
