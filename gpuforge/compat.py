"""Compatibility knowledge: the data the matrix rules judge against.

Loaded from `gpuforge/data/compat.yaml`, where every fact has its source. The
rules in `gpuforge.images.rules` read only this module, so a fact is written
once, in the data file.
"""

from __future__ import annotations

import re
from datetime import date
from functools import cache
from importlib import resources
from typing import Literal

import yaml
from packaging.version import Version
from pydantic import BaseModel, ConfigDict

COMPAT_FILE = "data/compat.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Sourced(_Strict):
    source: str


class DriverFloor(Sourced):
    driver: str


# How a floor was established (see compat.yaml's header): a vendor's own document, a
# third-party copy of one, or two primary facts combined. `matrix check` warns on a floor
# that is not primary (rule data.secondary), so a user knows which limits to re-check.
Confidence = Literal["primary", "secondary", "derived"]


class GradedDriverFloor(DriverFloor):
    confidence: Confidence


class CudaToolkits(Sourced):
    minor_compat_min: dict[str, DriverFloor]
    toolkit_min: dict[str, str]


class Branch(_Strict):
    designation: str
    eol: date


class DriverBranches(Sourced):
    warn_days_before_eol: int
    branches: dict[str, Branch]


class Architecture(Sourced):
    min_cuda: str
    min_driver: str
    open_modules_required: bool


class Architectures(Sourced):
    entries: dict[str, Architecture]
    gpu_min_driver: dict[str, GradedDriverFloor]


class OpenModules(Sourced):
    first_branch: str


class SourcedRule(Sourced):
    rule: str


class CudnnRelease(Sourced):
    cudnn: str
    builds: dict[str, tuple[str, str]]


class CudnnBlackwell(Sourced):
    cudnn: str
    cuda: str


class Cudnn(_Strict):
    releases: list[CudnnRelease]
    blackwell_min: CudnnBlackwell


class NcclFloor(Sourced):
    nccl: str
    confidence: Confidence


class Nccl(_Strict):
    package_source: str
    min_for_architecture: dict[str, NcclFloor]
    min_for_cuda_major: dict[str, NcclFloor]


class EfaRelease(_Strict):
    libfabric: str
    aws_ofi_nccl: str | None = None
    efa_driver: str | None = None


class InstallerFloor(Sourced):
    installer: str


class OsSupport(_Strict):
    first: str
    deprecated: str | None = None
    last: str | None = None


class EfaInstaller(Sourced):
    first_bundling_plugin: str
    releases: dict[str, EfaRelease]
    p2p_min_for_driver_branch: dict[str, InstallerFloor]
    os_support: dict[str, OsSupport]


class PluginLibfabric(_Strict):
    plugin: str
    libfabric: str


class PluginNccl(_Strict):
    plugin: str
    nccl: str


class PluginBroken(_Strict):
    plugin: str
    installer_from: str
    fix: str


class PluginFloor(Sourced):
    plugin: str
    confidence: Confidence


class AwsOfiNccl(Sourced):
    libfabric_min: list[PluginLibfabric]
    nccl_min: list[PluginNccl]
    broken_with_installer: list[PluginBroken]
    min_for_instance_type: dict[str, PluginFloor]


class DcgmBuild(Sourced):
    """The CUDA majors one DCGM release (and those after it, up to the next row) builds packages for."""

    dcgm: str
    cuda_majors: list[str]


class Dcgm(_Strict):
    """DCGM 4's per-CUDA-major packages, and whose CUDA major picks the package (the driver's)."""

    package_major_source: str
    cuda_builds: list[DcgmBuild]


class Compat(_Strict):
    schema_: int = 1
    cuda_toolkits: CudaToolkits
    driver_branches: DriverBranches
    architectures: Architectures
    open_kernel_modules: OpenModules
    fabric_manager: SourcedRule
    nscq: SourcedRule
    nvlsm: SourcedRule
    cudnn: Cudnn
    nccl: Nccl
    efa_installer: EfaInstaller
    aws_ofi_nccl: AwsOfiNccl
    dcgm: Dcgm
    dcgm_exporter: SourcedRule


@cache
def compat() -> Compat:
    """The compatibility data, parsed and validated once per process."""
    text = resources.files("gpuforge").joinpath(COMPAT_FILE).read_text(encoding="utf-8")
    raw = yaml.safe_load(text)
    raw["schema_"] = raw.pop("schema")
    return Compat.model_validate(raw)


_LIBFABRIC = re.compile(r"([0-9]+(?:\.[0-9]+)*)(?:amzn([0-9]+(?:\.[0-9]+)*))?")


def libfabric_key(version: str) -> tuple[Version, Version]:
    """Order libfabric versions such as `1.22.0amzn4.0`: upstream version, then the amzn build.

    A plain upstream release (`1.22.0`) sorts before its amzn builds.
    """
    match = _LIBFABRIC.fullmatch(version)
    if match is None:
        raise ValueError(f"not a libfabric version: {version!r}")
    return Version(match.group(1)), Version(match.group(2) or "0")


def release_version(version: str) -> Version:
    """The upstream release part of a package version: `2.26.2-1+cuda12.8` -> 2.26.2."""
    return Version(re.split(r"[-+~]", version, maxsplit=1)[0])


def driver_branch(driver: str) -> str:
    """The branch of a driver version: `580.95.05` -> `580`."""
    return driver.split(".", 1)[0]


def driver_cuda_major(driver: str, data: Compat) -> int | None:
    """The CUDA major of the user-mode driver that ships with `driver` (what `nvidia-smi` reports).

    It is the major of the newest toolkit in NVIDIA's toolkit-to-driver table whose driver is at or
    below this one: 580.95.05 is CUDA 13.0's driver, so it reports CUDA 13 even on a CUDA 12 image.
    None when the driver is older than every toolkit in the table.
    """
    version = Version(driver)
    known = [
        Version(cuda) for cuda, floor in data.cuda_toolkits.toolkit_min.items() if Version(floor) <= version
    ]
    return max(known).major if known else None
