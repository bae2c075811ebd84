"""The matrix rules: exact pins, and every compatibility fact in gpuforge/data/compat.yaml.

Each rule has a stable id, a severity, the dotted field it concerns and the
source of the fact it enforces. Rules that compare versions skip a field whose
pin is not exact: `pin.exact` already reports it, and a comparison with a
malformed version would only add noise.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import date

from packaging.version import InvalidVersion, Version

from gpuforge import hardware
from gpuforge.compat import (
    Compat,
    compat,
    driver_branch,
    driver_cuda_major,
    libfabric_key,
    release_version,
)
from gpuforge.errors import Finding, InputError, Severity
from gpuforge.images.kubernetes_rules import KUBERNETES_RULES
from gpuforge.images.matrix import MONITORING_KEYS, SCHEMA_SOURCE, Matrix
from gpuforge.images.rds_ca import rule_rds_ca_regions
from gpuforge.monitoring.fields import DATA_FILE, load_fields
from gpuforge.monitoring.releases import monitoring_versions
from gpuforge.regions import region_problem
from gpuforge.scheduler.versions import (
    RENDERED_FEATURES,
    SLURM_VERSION,
    TOPOLOGY_FEATURES,
    facts,
    missing_features,
    series_of,
)

ERROR = Severity.ERROR
WARNING = Severity.WARNING

# Every pattern below is matched whole (fullmatch) and spelled in ASCII classes: `$` under re.match
# lets a trailing newline through, and \d takes any Unicode digit.
# One exact version: digits and dots, optionally followed by a Debian/vendor revision
# (2.26.2-1+cuda12.8, 6.8.0-1031-aws, 2025.10.11-1, 4.2.3-4.1.3). No ranges, wildcards or words.
_EXACT = re.compile(r"[0-9]+(\.[0-9]+)+([-+~][0-9A-Za-z]+([.+~-][0-9A-Za-z]+)*)?")
_AMI = re.compile(r"ami-([0-9a-f]{8}|[0-9a-f]{17})")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_NCCL = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+-[0-9]+\+cuda([0-9]+)\.([0-9]+)")

Rule = Callable[[Matrix, Compat], Iterator[Finding]]
FIELDS_DATA = f"gpuforge/{DATA_FILE}"


def _version(text: str | None) -> Version | None:
    """A comparable release version, or None when the pin is not exact."""
    if text is None or not _EXACT.fullmatch(text):
        return None
    try:
        return release_version(text)
    except InvalidVersion:
        return None


def _major_minor(version: Version) -> tuple[int, int]:
    return version.major, version.minor


def _pins(matrix: Matrix) -> Iterator[tuple[str, str | None]]:
    nvidia = matrix.nvidia
    yield from (
        ("version", matrix.version),
        ("os.release", matrix.os.release),
        ("kernel", matrix.kernel),
        ("nvidia.driver", nvidia.driver),
        ("nvidia.fabricmanager", nvidia.fabricmanager),
        ("nvidia.nscq", nvidia.nscq),
        ("nvidia.nvlsm", nvidia.nvlsm),
        ("cuda", matrix.cuda),
        ("cudnn", matrix.cudnn),
        ("nccl", matrix.nccl),
        ("efa.installer", matrix.efa.installer),
        ("aws_ofi_nccl.version", matrix.aws_ofi_nccl.version),
        ("lustre_client", matrix.lustre_client),
        ("container_toolkit", matrix.container_toolkit),
        ("dcgm", matrix.dcgm),
        ("dcgm_exporter", matrix.dcgm_exporter),
        *((f"{key}.version", pin.version) for key, pin in matrix.downloads),
    )


# The form each pin takes, as the shipped matrices write it, for the hint of `pin.exact`: an example
# of the field's own kind of version (an apt version for NCCL, an ABI name for the kernel), not a fact.
_PIN_EXAMPLES = {
    "version": "1.0.0",
    "os.release": "22.04",
    "kernel": "6.8.0-1015-aws",
    "nvidia.driver": "580.95.05",
    "nvidia.fabricmanager": "580.95.05 (the driver's own version)",
    "nvidia.nscq": "580.95.05 (the driver's own version)",
    "nvidia.nvlsm": "2025.10.11-1 (NVIDIA's date-based apt version)",
    "cuda": "12.9.1",
    "cudnn": "9.10.2.21",
    "nccl": "2.27.3-1+cuda12.9 (NVIDIA's apt version, built for the matrix's CUDA)",
    "efa.installer": "1.47.0",
    "aws_ofi_nccl.version": "1.18.0",
    "lustre_client": "2.15.6",
    "container_toolkit": "1.17.8",
    "dcgm": "4.4.2",
    "dcgm_exporter": "4.4.2-4.7.1",
    "slurm.version": "26.05.5",
    "pmix.version": "5.0.3",
    "nccl_tests.version": "2.17.6",
    "node_exporter.version": "1.9.1",
    "prometheus.version": "3.5.0",
    "alertmanager.version": "0.28.1",
    "kubernetes.kubelet.version": "1.35.8",
    "kubernetes.containerd.version": "2.3.4",
    "kubernetes.runc.version": "1.4.3",
    "kubernetes.cni_plugins.version": "1.9.1",
    "kubernetes.aws_iam_authenticator.version": "0.7.12",
    "kubernetes.ecr_credential_provider.version": "1.37.0",
}


def rule_exact_pins(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    for field, value in _pins(matrix):
        if value is not None and not _EXACT.fullmatch(value):
            example = _PIN_EXAMPLES.get(field)
            yield Finding(
                "pin.exact",
                ERROR,
                field,
                f"{value!r} is not one exact version (no ranges, wildcards, 'latest' or empty values). "
                f"Fix: pin the exact released version{f', e.g. {example}' if example else ''}.",
                SCHEMA_SOURCE,
            )


def rule_base_ami(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    for region, ami in matrix.os.base_ami.items():
        field = f"os.base_ami.{region}"
        problem = region_problem(region)  # botocore's endpoint data: the shape alone lets us-east-9 through
        if problem is not None:
            yield Finding("pin.base-ami", ERROR, field, f"{problem}.", SCHEMA_SOURCE)
        if not _AMI.fullmatch(ami):
            yield Finding(
                "pin.base-ami",
                ERROR,
                field,
                f"{ami!r} is not an AMI id ('ami-' and 8 or 17 lowercase hex digits); names, filters and "
                "SSM parameters float. Fix: pin the id of the exact base image for this region.",
                "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_Image.html (ImageId)",
            )


def _tarballs(matrix: Matrix) -> Iterator[tuple[str, str, str]]:
    """(key, sha256, url) of every tarball the matrix pins: source tarballs and release builds alike."""
    for key, spec in matrix.downloads:
        yield key, spec.sha256, spec.url


def rule_sha256(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    pairs = [("efa.sha256", matrix.efa.sha256), ("aws_ofi_nccl.sha256", matrix.aws_ofi_nccl.sha256)]
    pairs += [(f"{key}.sha256", sha256) for key, sha256, _ in _tarballs(matrix)]
    for field, value in pairs:
        if value is not None and not _SHA256.fullmatch(value):
            yield Finding(
                "pin.sha256",
                ERROR,
                field,
                f"{value!r} is not a sha256 (64 lowercase hex digits). "
                "Fix: record `sha256sum` of the exact tarball the build downloads.",
                SCHEMA_SOURCE,
            )


_UNVERIFIED = re.compile(r"\bunverified\b", re.IGNORECASE)
# "hashed: <who took sha256sum of which download, when>" or "published: <where it is listed>".
_SHA256_SOURCE = re.compile(r"(hashed|published): [!-~].{9,}", re.DOTALL)


def _checksums(matrix: Matrix) -> Iterator[tuple[str, str, str | None]]:
    """(key, sha256, sha256_source) of every checksum the matrix pins."""
    yield "efa", matrix.efa.sha256, matrix.efa.sha256_source
    ofi = matrix.aws_ofi_nccl
    if ofi.sha256 is not None:
        yield "aws_ofi_nccl", ofi.sha256, ofi.sha256_source
    for key, spec in matrix.downloads:
        yield key, spec.sha256, spec.sha256_source


def rule_sha256_source(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    """Every checksum names where it came from, and none is marked unverified: a made-up sha256 passes
    every shape check, then stops the first real build, or worse, is copied into another pin."""
    for key, sha256, source in _checksums(matrix):
        field = f"{key}.sha256_source"
        if source is None:
            yield Finding(
                "pin.sha256-source",
                ERROR,
                field,
                f"{key}.sha256 {sha256[:12]}... names no source. Fix: add {field}: `sha256sum` of the "
                "downloaded tarball (say when and from where), or the published source that lists this "
                "checksum for this exact version (a vendor page, or a public project pinning the same file).",
                SCHEMA_SOURCE,
            )
        elif _UNVERIFIED.search(source):
            yield Finding(
                "pin.sha256-source",
                ERROR,
                field,
                f"{key}.sha256 is marked unverified ({source!r}); an unverified checksum cannot ship. Fix: "
                "replace it with the tarball's own sha256 or one published for this exact version, and name "
                "that source.",
                SCHEMA_SOURCE,
            )
        elif not _SHA256_SOURCE.fullmatch(source):
            yield Finding(
                "pin.sha256-source",
                ERROR,
                field,
                f"{source!r} does not say where {key}.sha256 came from. Fix: write 'hashed: <sha256sum of which "
                "download, when>' or 'published: <the page or repository, at which commit, that lists this "
                "checksum for this exact version>'.",
                SCHEMA_SOURCE,
            )


# A distribution's package pool keeps a source file only while a release of the distribution
# ships that version (Debian's pool answered 404 for slurm-wlm_26.05.5.orig.tar.gz from this
# project's build machines, which the matrices named until 2026-12).
# Printable ASCII only: no whitespace, control or Unicode line separator can ride along in a URL.
_HTTPS_FILE = re.compile(r"https://[!-.0-~]+/[!-~]+")
_DISTRIBUTION_POOL = re.compile(r"https://[^/]+/(?:debian|debian-security|ubuntu)/pool/.*")


def rule_url(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    """A pinned download comes over https: plain http would let anyone on the path swap the tarball
    before the sha256 check, and a failed check stops the build instead of protecting it. A URL in a
    distribution's package pool passes, with a warning: the file leaves the pool when the distribution
    moves past that version, and the image can no longer be rebuilt from its matrix."""
    for key, _, url in _tarballs(matrix):
        if not _HTTPS_FILE.fullmatch(url):
            yield Finding(
                "pin.url",
                ERROR,
                f"{key}.url",
                f"{url!r} is not an https URL of a file. Fix: give the https address of the exact tarball "
                f"whose sha256 is {key}.sha256.",
                SCHEMA_SOURCE,
            )
        elif _DISTRIBUTION_POOL.fullmatch(url):
            yield Finding(
                "pin.url-durable",
                WARNING,
                f"{key}.url",
                f"{url!r} is a file in a distribution's package pool, which drops it once the distribution "
                "moves past that version; the matrix could then no longer be built. Fix: point at the "
                "publisher's own release (for Slurm, SchedMD's tag archive "
                "https://github.com/SchedMD/slurm/archive/slurm-<YY-MM-MICRO>-<N>.tar.gz, which is the "
                "same file as Debian's orig tarball) with the same sha256.",
                SCHEMA_SOURCE,
            )


def rule_targets(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    known = hardware.catalog()
    for index, name in enumerate(matrix.targets):
        field = f"targets.{index}"
        if name not in known:
            yield Finding(
                "targets.known",
                ERROR,
                field,
                f"{name!r} is not in gpuforge's hardware catalog. Fix: use one of {', '.join(sorted(known))}.",
                hardware.CATALOG_FILE,
            )
        elif known[name].gpu_manufacturer != "NVIDIA" or known[name].gpu_count < 1:
            yield Finding(
                "targets.gpu",
                ERROR,
                field,
                f"{name} has no NVIDIA GPU. Fix: target only NVIDIA GPU instance types.",
                known[name].source,
            )


def _target_rows(matrix: Matrix) -> list[hardware.InstanceType]:
    known = hardware.catalog()
    return [known[name] for name in matrix.targets if name in known]


def rule_cuda_driver(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    cuda, driver = _version(matrix.cuda), _version(matrix.nvidia.driver)
    if cuda is None or driver is None:
        return
    table = data.cuda_toolkits
    floor = table.minor_compat_min.get(str(cuda.major))
    if floor is None:
        yield Finding(
            "cuda.known-toolkit",
            ERROR,
            "cuda",
            f"CUDA {matrix.cuda}: gpuforge has no documented driver floor for CUDA {cuda.major}.x. "
            "Fix: use CUDA 11.8 to 13.2, or add the documented floor to gpuforge/data/compat.yaml.",
            table.source,
        )
        return
    if driver < Version(floor.driver):
        yield Finding(
            "cuda.driver-minimum",
            ERROR,
            "nvidia.driver",
            f"driver {matrix.nvidia.driver} is below {floor.driver}, the minimum for any CUDA {cuda.major}.x "
            f"toolkit; CUDA {matrix.cuda} will not run. Fix: pin a driver >= {floor.driver}.",
            floor.source,
        )
        return
    full = table.toolkit_min.get(str(cuda))
    if full is None:
        yield Finding(
            "cuda.known-toolkit",
            ERROR,
            "cuda",
            f"CUDA {matrix.cuda} is not a release in NVIDIA's toolkit/driver table. "
            f"Fix: pin a released toolkit version ({', '.join(table.toolkit_min)}).",
            table.source,
        )
    elif driver < Version(full):
        yield Finding(
            "cuda.driver-full-features",
            WARNING,
            "nvidia.driver",
            f"driver {matrix.nvidia.driver} is below {full}, the driver CUDA {matrix.cuda} ships with; it runs "
            "under minor-version compatibility (no PTX JIT of newer code). Fix: pin a driver >= "
            f"{full} for the full feature set.",
            table.source,
        )


def rule_driver_eol(matrix: Matrix, data: Compat, today: date | None = None) -> Iterator[Finding]:
    if _version(matrix.nvidia.driver) is None:
        return
    today = today or date.today()
    branches = data.driver_branches
    branch = driver_branch(matrix.nvidia.driver)
    info = branches.branches.get(branch)
    if info is None and not _known_branch_number(branch, data):
        return  # driver.release reports a branch NVIDIA has not published
    if info is None:
        message = f"driver branch R{branch} is not a supported data-center branch (unlisted branches are end of life)."
    elif info.eol < today:
        message = f"driver branch R{branch} ({info.designation}) reached end of life on {info.eol}."
    elif (info.eol - today).days <= branches.warn_days_before_eol:
        message = f"driver branch R{branch} ({info.designation}) reaches end of life on {info.eol}."
    else:
        return
    # The fix names only branches still supported today, Long Term Support first, never the one reported.
    alive = sorted(
        (name for name, row in branches.branches.items() if row.eol >= today and name != branch),
        key=lambda name: (branches.branches[name].designation != "Long Term Support", int(name)),
    )
    fix = (
        f"move to a supported branch ({', '.join('R' + name for name in alive)})"
        if alive
        else "move to a branch NVIDIA still supports, and add it to gpuforge/data/compat.yaml with its source"
    )
    yield Finding("driver.branch-eol", WARNING, "nvidia.driver", f"{message} Fix: {fix}.", branches.source)


# NVIDIA's data-center drivers are numbered <branch>.<minor>[.<patch>]: a three-digit branch (R535,
# R580), a minor of two or three digits and an optional two-digit patch (535.183.06, 570.26,
# 580.95.05), as every release on the supported-drivers page is.
_DRIVER_RELEASE = re.compile(r"(?P<branch>[0-9]{3})\.[0-9]{2,3}(\.[0-9]{2})?")


def _known_branch_number(branch: str, data: Compat) -> bool:
    """Whether `branch` is one NVIDIA has published: listed, or older than the newest listed one."""
    newest = max(int(name) for name in data.driver_branches.branches)
    return branch.isdigit() and int(branch) <= newest


def rule_driver_release(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    """What the offline check can know of a driver release: its numbering and its branch.

    Whether that exact release exists (580.95.05 yes, 580.95.99 no) only the build can tell, when
    the driver step asks NVIDIA's repository for it (images/scripts/20-nvidia-driver.sh)."""
    driver = matrix.nvidia.driver
    if _version(driver) is None:
        return  # pin.exact reports it
    branches = data.driver_branches
    listed = ", ".join("R" + name for name in branches.branches)
    if not _DRIVER_RELEASE.fullmatch(driver):
        yield Finding(
            "driver.release",
            ERROR,
            "nvidia.driver",
            f"{driver!r} is not numbered as NVIDIA's data-center drivers are (<three-digit branch>.<minor>"
            "[.<patch>], e.g. 580.95.05). Fix: pin a release listed on NVIDIA's supported-drivers page "
            f"(branches {listed}).",
            branches.source,
        )
    elif not _known_branch_number(driver_branch(driver), data):
        yield Finding(
            "driver.release",
            ERROR,
            "nvidia.driver",
            f"driver {driver} is on branch R{driver_branch(driver)}, newer than any branch NVIDIA has published "
            f"(the newest listed is R{max(branches.branches, key=int)}). Fix: pin a release of a listed branch "
            f"({listed}), or add the new branch to gpuforge/data/compat.yaml with its source.",
            branches.source,
        )


def rule_architecture(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    cuda, driver = _version(matrix.cuda), _version(matrix.nvidia.driver)
    arch_data = data.architectures
    for row in _target_rows(matrix):
        arch = arch_data.entries.get(row.gpu_architecture)
        if arch is None:
            yield Finding(
                "arch.known",
                ERROR,
                "targets",
                f"{row.name}: no compatibility data for the {row.gpu_architecture} architecture. "
                "Fix: add it to gpuforge/data/compat.yaml with its source.",
                arch_data.source,
            )
            continue
        if cuda is not None and _major_minor(cuda) < _major_minor(Version(arch.min_cuda)):
            yield Finding(
                "arch.min-cuda",
                ERROR,
                "cuda",
                f"{row.name} ({row.gpu_model}, {row.gpu_architecture}) needs CUDA >= {arch.min_cuda}; "
                f"the matrix pins {matrix.cuda}. Fix: pin CUDA {arch.min_cuda} or newer.",
                arch.source,
            )
        floor, source = arch.min_driver, arch.source
        board = arch_data.gpu_min_driver.get(row.gpu_model)
        if board is not None and Version(board.driver) > Version(floor):
            floor, source = board.driver, board.source
        if driver is not None and driver < Version(floor):
            yield Finding(
                "arch.min-driver",
                ERROR,
                "nvidia.driver",
                f"{row.name} ({row.gpu_model}) needs driver >= {floor}; the matrix pins "
                f"{matrix.nvidia.driver}. Fix: pin a driver >= {floor}.",
                source,
            )
        if arch.open_modules_required and matrix.nvidia.kernel_modules != "open":
            yield Finding(
                "arch.open-modules",
                ERROR,
                "nvidia.kernel_modules",
                f"{row.name} ({row.gpu_architecture}) is supported only by NVIDIA's open kernel modules; "
                "the matrix asks for proprietary. Fix: set nvidia.kernel_modules: open.",
                arch.source,
            )


def rule_open_modules_available(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    driver = _version(matrix.nvidia.driver)
    first = data.open_kernel_modules.first_branch
    if matrix.nvidia.kernel_modules == "open" and driver is not None and driver.major < int(first):
        yield Finding(
            "modules.open-available",
            ERROR,
            "nvidia.kernel_modules",
            f"open kernel modules first shipped in R{first}; driver {matrix.nvidia.driver} has none. "
            f"Fix: pin a driver from R{first} on, or use proprietary modules on pre-Blackwell GPUs.",
            data.open_kernel_modules.source,
        )


def _companion(
    rule: str, field: str, value: str | None, driver: str, required_by: list[str], source: str, what: str
) -> Iterator[Finding]:
    if value is None:
        if required_by:
            yield Finding(
                f"{rule}.required",
                ERROR,
                field,
                f"{', '.join(required_by)} need {what}, and the matrix pins none. Fix: set {field}: '{driver}'.",
                source,
            )
    elif value != driver:
        yield Finding(
            f"{rule}.equals-driver",
            ERROR,
            field,
            f"{what} {value} differs from driver {driver}; it must be the identical version. "
            f"Fix: set {field}: '{driver}'.",
            source,
        )


def rule_nvswitch_companions(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    nvswitch = [row.name for row in _target_rows(matrix) if row.nvswitch]
    driver = matrix.nvidia.driver
    yield from _companion(
        "fabricmanager",
        "nvidia.fabricmanager",
        matrix.nvidia.fabricmanager,
        driver,
        nvswitch,
        data.fabric_manager.source,
        "NVSwitch boards' nvidia-fabricmanager",
    )
    yield from _companion(
        "nscq", "nvidia.nscq", matrix.nvidia.nscq, driver, nvswitch, data.nscq.source, "DCGM's libnvidia-nscq"
    )
    nvlsm_targets = [row.name for row in _target_rows(matrix) if row.needs_nvlsm]
    if nvlsm_targets and matrix.nvidia.nvlsm is None:
        yield Finding(
            "nvlsm.required",
            ERROR,
            "nvidia.nvlsm",
            f"{', '.join(nvlsm_targets)} need the NVLink Subnet Manager beside Fabric Manager. "
            "Fix: pin nvidia.nvlsm to an exact package version, e.g. '2025.10.11-1'.",
            data.nvlsm.source,
        )


def rule_cudnn(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    cudnn, cuda = _version(matrix.cudnn), _version(matrix.cuda)
    if cudnn is None or cuda is None:
        return
    rows = [
        r for r in data.cudnn.releases if Version(r.cudnn).major == cudnn.major and Version(r.cudnn) <= cudnn
    ]
    if not rows:
        yield Finding(
            "cudnn.cuda-build",
            ERROR,
            "cudnn",
            f"cuDNN {matrix.cudnn} is older than every documented support matrix gpuforge holds. "
            "Fix: pin cuDNN 8.9.5 or newer.",
            data.cudnn.releases[0].source,
        )
        return
    row = max(rows, key=lambda r: Version(r.cudnn))
    build = row.builds.get(str(cuda.major))
    in_range = build is not None and (
        _major_minor(Version(build[0])) <= _major_minor(cuda) <= _major_minor(Version(build[1]))
    )
    if not in_range:
        supported = "; ".join(f"CUDA {lo}..{hi}" for lo, hi in row.builds.values())
        yield Finding(
            "cudnn.cuda-build",
            ERROR,
            "cudnn",
            f"cuDNN {row.cudnn} (the documented row for {matrix.cudnn}) has no build for CUDA {matrix.cuda}; "
            f"its builds support {supported}. Fix: pick a cuDNN release built for CUDA {cuda.major}.{cuda.minor}.",
            row.source,
        )
    blackwell = data.cudnn.blackwell_min
    if any(r.gpu_architecture == "Blackwell" for r in _target_rows(matrix)) and (
        cudnn < Version(blackwell.cudnn) or (cuda.major == 12 and _major_minor(cuda) < (12, 8))
    ):
        yield Finding(
            "cudnn.blackwell",
            ERROR,
            "cudnn",
            f"Blackwell targets need cuDNN >= {blackwell.cudnn} built for CUDA >= {blackwell.cuda}; the matrix "
            f"pins cuDNN {matrix.cudnn} on CUDA {matrix.cuda}. Fix: raise cuDNN (and CUDA).",
            blackwell.source,
        )


def rule_nccl(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    cuda = _version(matrix.cuda)
    match = _NCCL.fullmatch(matrix.nccl)
    if match is None:
        yield Finding(
            "nccl.package-version",
            ERROR,
            "nccl",
            f"{matrix.nccl!r} is not an NCCL package version '<nccl>-<rev>+cuda<X.Y>'. "
            "Fix: pin the package version, e.g. '2.27.3-1+cuda12.9'.",
            data.nccl.package_source,
        )
        return
    nccl = release_version(matrix.nccl)
    built = (int(match.group(1)), int(match.group(2)))
    if cuda is not None and (built[0] != cuda.major or built > _major_minor(cuda)):
        yield Finding(
            "nccl.cuda-build",
            ERROR,
            "nccl",
            f"NCCL package {matrix.nccl} was built with CUDA {built[0]}.{built[1]}, which does not run on CUDA "
            f"{matrix.cuda} (same major, not newer). Fix: pin the +cuda{cuda.major}.{cuda.minor} build or an "
            "older minor of the same major.",
            data.nccl.package_source,
        )
    if cuda is not None:
        floor = data.nccl.min_for_cuda_major.get(str(cuda.major))
        if floor is not None and nccl < Version(floor.nccl):
            yield Finding(
                "nccl.cuda-major",
                ERROR,
                "nccl",
                f"CUDA {cuda.major}.x needs NCCL >= {floor.nccl}; the matrix pins {matrix.nccl}. "
                f"Fix: pin NCCL {floor.nccl} or newer.",
                floor.source,
            )
    for row in _target_rows(matrix):
        arch_floor = data.nccl.min_for_architecture.get(row.gpu_architecture)
        if arch_floor is not None and nccl < Version(arch_floor.nccl):
            yield Finding(
                "nccl.architecture",
                ERROR,
                "nccl",
                f"{row.name} ({row.gpu_architecture}) needs NCCL >= {arch_floor.nccl}; the matrix pins "
                f"{matrix.nccl}. Fix: pin NCCL {arch_floor.nccl} or newer.",
                arch_floor.source,
            )
            break


def rule_efa_installer(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    efa = data.efa_installer
    installer = _version(matrix.efa.installer)
    if installer is None:
        return
    if matrix.efa.installer not in efa.releases:
        yield Finding(
            "efa.known-installer",
            ERROR,
            "efa.installer",
            f"EFA installer {matrix.efa.installer} is not in gpuforge's changelog table, so its libfabric and "
            f"bundled plugin are unknown. Fix: use one of {', '.join(efa.releases)}.",
            efa.source,
        )
    os_key = f"{matrix.os.distro}-{matrix.os.release}"
    support = efa.os_support.get(os_key)
    if support is None:
        yield Finding(
            "efa.os-support",
            ERROR,
            "os.release",
            f"gpuforge has no record of EFA installer support for {os_key}. "
            f"Fix: use one of {', '.join(efa.os_support)}.",
            efa.source,
        )
    elif installer < Version(support.first) or (
        support.last is not None and installer > Version(support.last)
    ):
        window = f">= {support.first}" + (f" and <= {support.last}" if support.last else "")
        yield Finding(
            "efa.os-support",
            ERROR,
            "efa.installer",
            f"EFA installer {matrix.efa.installer} does not support {os_key} (needs {window}). "
            "Fix: pick an installer in that window.",
            efa.source,
        )
    elif support.deprecated is not None and installer >= Version(support.deprecated):
        yield Finding(
            "efa.os-support",
            WARNING,
            "os.release",
            f"{os_key} is deprecated from EFA installer {support.deprecated}. Fix: move to a newer release.",
            efa.source,
        )
    if _version(matrix.nvidia.driver) is not None:
        p2p = efa.p2p_min_for_driver_branch.get(driver_branch(matrix.nvidia.driver))
        if p2p is not None and installer < Version(p2p.installer):
            yield Finding(
                "efa.p2p-driver",
                ERROR,
                "efa.installer",
                f"GPUDirect (P2P) over EFA with driver R{driver_branch(matrix.nvidia.driver)} needs EFA installer "
                f">= {p2p.installer}; the matrix pins {matrix.efa.installer}. Fix: pin installer {p2p.installer} "
                "or newer.",
                p2p.source,
            )


def rule_aws_ofi_nccl(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    ofi = matrix.aws_ofi_nccl
    plugin = _version(ofi.version)
    installer = _version(matrix.efa.installer)
    if plugin is None or installer is None:
        return
    efa = data.efa_installer
    release = efa.releases.get(matrix.efa.installer)
    if ofi.install == "bundled":
        if installer < Version(efa.first_bundling_plugin):
            yield Finding(
                "ofi.bundled",
                ERROR,
                "aws_ofi_nccl.install",
                f"EFA installer {matrix.efa.installer} bundles no aws-ofi-nccl (bundling began in "
                f"{efa.first_bundling_plugin}). Fix: declare install: separate with prefix and sha256, or raise "
                "the installer.",
                efa.source,
            )
        elif release is not None and release.aws_ofi_nccl is not None and release.aws_ofi_nccl != ofi.version:
            yield Finding(
                "ofi.bundled",
                ERROR,
                "aws_ofi_nccl.version",
                f"EFA installer {matrix.efa.installer} bundles aws-ofi-nccl {release.aws_ofi_nccl}, not "
                f"{ofi.version}. Fix: set aws_ofi_nccl: '{release.aws_ofi_nccl}', or declare install: separate.",
                efa.source,
            )
    elif ofi.prefix is None or ofi.sha256 is None:
        yield Finding(
            "ofi.separate-install",
            ERROR,
            "aws_ofi_nccl",
            "a separate aws-ofi-nccl install needs `prefix` (where NCCL will load it from) and `sha256` "
            "(of the release tarball). Fix: add both.",
            SCHEMA_SOURCE,
        )
    rules = data.aws_ofi_nccl
    if release is not None:
        need = next((r for r in rules.libfabric_min if plugin >= Version(r.plugin)), None)
        if need is not None and libfabric_key(release.libfabric) < libfabric_key(need.libfabric):
            yield Finding(
                "ofi.libfabric",
                ERROR,
                "efa.installer",
                f"aws-ofi-nccl {ofi.version} needs libfabric >= {need.libfabric}; EFA installer "
                f"{matrix.efa.installer} ships {release.libfabric}. Fix: raise the EFA installer.",
                rules.source,
            )
    nccl_floor = next((r for r in rules.nccl_min if plugin >= Version(r.plugin)), None)
    if (
        nccl_floor is not None
        and _NCCL.fullmatch(matrix.nccl)
        and release_version(matrix.nccl) < Version(nccl_floor.nccl)
    ):
        yield Finding(
            "ofi.nccl-min",
            ERROR,
            "nccl",
            f"aws-ofi-nccl {ofi.version} needs NCCL >= {nccl_floor.nccl}; the matrix pins {matrix.nccl}. "
            "Fix: raise NCCL.",
            rules.source,
        )
    for broken in rules.broken_with_installer:
        if plugin == Version(broken.plugin) and installer >= Version(broken.installer_from):
            yield Finding(
                "ofi.broken-with-installer",
                ERROR,
                "aws_ofi_nccl.version",
                f"aws-ofi-nccl {broken.plugin} does not work with EFA installer >= {broken.installer_from}. "
                f"Fix: use {broken.fix}.",
                rules.source,
            )
    for name in matrix.targets:
        floor = rules.min_for_instance_type.get(name)
        if floor is not None and plugin < Version(floor.plugin):
            yield Finding(
                "ofi.instance-type",
                ERROR,
                "aws_ofi_nccl.version",
                f"{name} needs aws-ofi-nccl >= {floor.plugin}; the matrix pins {ofi.version}. "
                f"Fix: raise aws-ofi-nccl (and the EFA installer that bundles it).",
                floor.source,
            )


def rule_secondary_floors(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    """Warn on each floor that judged this matrix but was not read at its vendor's own document.

    The floor still applies (an error rule enforces it); the warning says which limit a user
    should re-check at its primary source before trusting a pass, and where it came from.
    """
    rows = _target_rows(matrix)
    cuda = _version(matrix.cuda)
    graded: list[tuple[str, str, str, str, str]] = []  # field, fact, floor, confidence, source
    for model in sorted({row.gpu_model for row in rows}):
        board = data.architectures.gpu_min_driver.get(model)
        if board is not None:
            graded.append(
                ("nvidia.driver", f"{model} driver floor", board.driver, board.confidence, board.source)
            )
    if cuda is not None and (nccl := data.nccl.min_for_cuda_major.get(str(cuda.major))) is not None:
        graded.append(("nccl", f"NCCL floor for CUDA {cuda.major}", nccl.nccl, nccl.confidence, nccl.source))
    for arch in sorted({row.gpu_architecture for row in rows}):
        if (arch_floor := data.nccl.min_for_architecture.get(arch)) is not None:
            fact = f"NCCL floor for {arch}"
            graded.append(("nccl", fact, arch_floor.nccl, arch_floor.confidence, arch_floor.source))
    for name in matrix.targets:
        if (plugin := data.aws_ofi_nccl.min_for_instance_type.get(name)) is not None:
            fact = f"aws-ofi-nccl floor for {name}"
            graded.append(("aws_ofi_nccl.version", fact, plugin.plugin, plugin.confidence, plugin.source))
    for field, fact, floor, confidence, source in graded:
        if confidence != "primary":
            yield Finding(
                "data.secondary",
                WARNING,
                field,
                f"the {fact} (>= {floor}) is {confidence}, not read at NVIDIA's or AWS's own release notes. "
                "Fix: confirm it at the vendor's document, then mark it primary with that source in "
                "gpuforge/data/compat.yaml.",
                source,
            )


def rule_boot_mode(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    mode = matrix.os.boot_mode
    for row in _target_rows(matrix):
        ok = bool(set(row.boot_modes)) if mode == "uefi-preferred" else mode in row.boot_modes
        if not ok:
            yield Finding(
                "boot.mode",
                ERROR,
                "os.boot_mode",
                f"{row.name} boots only {', '.join(row.boot_modes)}; the base AMI is {mode}. "
                "Fix: use a base AMI whose boot mode the target supports (uefi-preferred boots both).",
                row.source,
            )


def rule_dcgm_exporter(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    """dcgm-exporter releases are versioned `<DCGM>-<exporter>`: the first part is the DCGM it is built on."""
    built_on = matrix.dcgm_exporter.split("-", 1)[0]
    if (
        _version(matrix.dcgm) is not None
        and _version(matrix.dcgm_exporter) is not None
        and built_on != matrix.dcgm
    ):
        yield Finding(
            "dcgm.exporter-matches",
            ERROR,
            "dcgm_exporter",
            f"dcgm-exporter {matrix.dcgm_exporter} is built on DCGM {built_on}, but the matrix pins DCGM "
            f"{matrix.dcgm}. Fix: pin the dcgm-exporter release built on DCGM {matrix.dcgm} "
            f"('{matrix.dcgm}-<exporter version>').",
            data.dcgm_exporter.source,
        )


def rule_dcgm_cuda_build(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    """DCGM 4 installs the package built for the CUDA major the driver reports, so the pinned DCGM
    release must have a build for that major, or `apt-get install` finds no such package."""
    dcgm, driver = _version(matrix.dcgm), _version(matrix.nvidia.driver)
    if dcgm is None or driver is None or dcgm.major < 4:
        return  # pin.exact reports a malformed pin; DCGM 3 was one package for every CUDA
    major = driver_cuda_major(str(driver), data)
    rows = [row for row in data.dcgm.cuda_builds if Version(row.dcgm) <= dcgm]
    if major is None or not rows:
        return  # cuda.known-toolkit reports a driver older than the table
    row = max(rows, key=lambda r: Version(r.dcgm))
    if str(major) not in row.cuda_majors:
        first = next((r.dcgm for r in data.dcgm.cuda_builds if str(major) in r.cuda_majors), None)
        fix = f"pin DCGM {first} or newer (and its dcgm-exporter)" if first else "pin an older driver"
        yield Finding(
            "dcgm.cuda-build",
            ERROR,
            "dcgm",
            f"driver {matrix.nvidia.driver} reports CUDA {major}, and DCGM installs the package built for the "
            f"driver's CUDA major (datacenter-gpu-manager-4-cuda{major}); DCGM {matrix.dcgm} has builds only for "
            f"CUDA {', '.join(row.cuda_majors)} ({row.source}). Fix: {fix}.",
            data.dcgm.package_major_source,
        )


def _slurm_version(matrix: Matrix) -> Version | None:
    """The pinned Slurm release when it has Slurm's own form (YY.MM.MICRO), else None."""
    if matrix.slurm is None or _version(matrix.slurm.version) is None:
        return None
    if not SLURM_VERSION.match(matrix.slurm.version):
        return None
    return Version(matrix.slurm.version)


def rule_slurm_pmix_pair(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    """Slurm and PMIx come as a pair: Slurm's mpi/pmix plugin is compiled against the PMIx the image
    installs, and the image builds PMIx only for Slurm, so one without the other is a pin that lies."""
    if matrix.slurm is not None and matrix.pmix is None:
        yield Finding(
            "slurm.pmix-required",
            ERROR,
            "pmix",
            f"the matrix pins Slurm {matrix.slurm.version} and no PMIx; the image builds Slurm --with-pmix "
            "against the pinned PMIx. Fix: add pmix: {version, sha256, url} (e.g. PMIx 5.0.3).",
            facts().pmix.source,
        )
    if matrix.pmix is not None and matrix.slurm is None:
        yield Finding(
            "slurm.pmix-required",
            ERROR,
            "pmix",
            f"the matrix pins PMIx {matrix.pmix.version} and no Slurm; the image installs PMIx only as "
            "Slurm's PMIx, so this pin would name something the image does not contain. "
            "Fix: add slurm: {version, sha256, url}, or remove pmix.",
            SCHEMA_SOURCE,
        )


# Slurm builds accounting_storage/mysql only where configure finds a MySQL or MariaDB client library
# (SchedMD's accounting page: "To enable this database support one only needs to have the development
# package for the database they wish to use on the system", https://slurm.schedmd.com/accounting.html).
ACCOUNTING_SOURCE = "https://slurm.schedmd.com/accounting.html"


def rule_slurm_mariadb_pair(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    """Slurm and MariaDB come as a pair: slurmdbd stores accounting through a plugin built against the pinned
    client library, and the controller's local database is the pinned server; one without the other lies."""
    if matrix.slurm is not None and matrix.mariadb is None:
        yield Finding(
            "slurm.mariadb-required",
            ERROR,
            "mariadb",
            f"the matrix pins Slurm {matrix.slurm.version} and no MariaDB; slurmdbd's accounting_storage/mysql "
            "plugin is built against the pinned libmariadb-dev, and the controller runs the pinned server. "
            "Fix: add mariadb: {version, source} with the exact version of the OS archive's mariadb packages.",
            ACCOUNTING_SOURCE,
        )
    if matrix.mariadb is not None and matrix.slurm is None:
        yield Finding(
            "slurm.mariadb-required",
            ERROR,
            "mariadb",
            f"the matrix pins MariaDB {matrix.mariadb.version} and no Slurm; the image installs MariaDB only for "
            "slurmdbd. Fix: add slurm: {version, sha256, url}, or remove mariadb.",
            SCHEMA_SOURCE,
        )


def rule_slurm_url_version(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    """The Slurm tarball's address names the pinned release: a version bumped without its URL (or the
    reverse) builds one Slurm and records another, and the sha256 alone cannot say which is meant."""
    version = _slurm_version(matrix)
    if version is None or matrix.slurm is None or not _HTTPS_FILE.fullmatch(matrix.slurm.url):
        return  # slurm.series-supported or pin.url reports it
    name = matrix.slurm.url.rsplit("/", 1)[-1]
    dotted = re.escape(matrix.slurm.version)
    tag = matrix.slurm.version.replace(".", "-")
    if re.search(rf"(?<![0-9.]){dotted}(?![0-9])", name) or re.fullmatch(
        rf"slurm-{re.escape(tag)}-[0-9]+\.tar\.gz", name
    ):
        return
    yield Finding(
        "slurm.url-version",
        ERROR,
        "slurm.url",
        f"the file {name!r} does not name Slurm {matrix.slurm.version}, the pinned release. Fix: point "
        f"slurm.url at that release's tarball, e.g. SchedMD's tag archive "
        f"https://github.com/SchedMD/slurm/archive/slurm-{tag}-1.tar.gz, and pin its sha256.",
        SCHEMA_SOURCE,
    )


def rule_slurm_series(matrix: Matrix, data: Compat, today: date | None = None) -> Iterator[Finding]:
    """The Slurm series is one SchedMD still supports, today (`today` lets tests fix the date)."""
    if matrix.slurm is None or _version(matrix.slurm.version) is None:
        return  # no Slurm, or pin.exact reports the version
    table = facts().series
    version = _slurm_version(matrix)
    if version is None:
        yield Finding(
            "slurm.series-supported",
            ERROR,
            "slurm.version",
            f"{matrix.slurm.version!r} is not a Slurm release number (YY.MM.MICRO, e.g. '26.05.5'), so its "
            "release series is unknown. Fix: pin the release number exactly as SchedMD publishes it.",
            table.source,
        )
        return
    series = series_of(version)
    info = table.entries.get(series)
    if info is None:
        yield Finding(
            "slurm.series-supported",
            ERROR,
            "slurm.version",
            f"Slurm {matrix.slurm.version} is of series {series}, which is not one SchedMD supports "
            f"(gpuforge knows {', '.join(table.entries)}). Fix: pin a release of a supported series, e.g. "
            f"the newest, {max(table.entries)}.",
            table.source,
        )
        return
    today = today or date.today()
    days_left = (info.end_of_support - today).days
    if days_left <= 0:
        newer = [name for name, entry in table.entries.items() if entry.end_of_support > today]
        yield Finding(
            "slurm.series-supported",
            ERROR,
            "slurm.version",
            f"Slurm {matrix.slurm.version}: series {series} reached end of support on {info.end_of_support}; "
            "SchedMD no longer fixes bugs or security issues in it. Fix: pin a release of a newer series "
            f"({', '.join(newer) or 'none is recorded; add it to gpuforge/data/slurm.yaml with its source'}).",
            table.source,
        )
    elif days_left <= table.warn_days_before_eol:
        yield Finding(
            "slurm.series-supported",
            WARNING,
            "slurm.version",
            f"Slurm {matrix.slurm.version}: series {series} reaches end of support on {info.end_of_support} "
            f"({days_left} days). Fix: plan the move to a newer series.",
            table.source,
        )


def rule_slurm_pmix(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    """Slurm's configure finds the PMIx installation only for the majors its mpi/pmix plugin knows."""
    version = _slurm_version(matrix)
    if version is None or matrix.pmix is None:
        return
    pmix = _version(matrix.pmix.version)
    table = facts().pmix
    majors = table.supported_majors.get(series_of(version))
    if pmix is None or majors is None:
        return  # pin.exact, or slurm.series-supported, reports it
    if pmix.major not in majors:
        yield Finding(
            "slurm.pmix-compatible",
            ERROR,
            "pmix.version",
            f"PMIx {matrix.pmix.version} (major {pmix.major}) is not a PMIx that Slurm {series_of(version)}'s "
            f"mpi/pmix plugin builds against (majors {', '.join(map(str, majors))}). Fix: pin a PMIx "
            f"{max(majors)}.x release.",
            table.source,
        )


def rule_slurm_features(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    """The pinned Slurm knows every setting gpuforge's rendered configuration uses."""
    version = _slurm_version(matrix)
    if version is None or matrix.slurm is None:
        return
    for name, fact in missing_features(RENDERED_FEATURES + TOPOLOGY_FEATURES, version):
        yield Finding(
            "slurm.features",
            ERROR,
            "slurm.version",
            f"Slurm {matrix.slurm.version} predates {name} ({fact.setting}), new in {fact.min_version}; "
            f"the configuration gpuforge renders uses it. Fix: pin Slurm {fact.min_version} or newer.",
            fact.source,
        )


def rule_monitoring_pinned(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    """A matrix with Slurm builds controllers and GPU nodes whose clusters monitor by default
    (gpuforge:monitoring.enabled), so each daemon left out is a cluster that cannot: a warning, because
    a cluster may set `enabled: false`, and a matrix without Slurm has no controller to run them."""
    if matrix.slurm is None:
        return
    pinned = dict(matrix.monitoring_tarballs)
    for key in MONITORING_KEYS:
        if key not in pinned:
            yield Finding(
                "monitoring.pinned",
                WARNING,
                key,
                f"the matrix pins Slurm {matrix.slurm.version} and no {key}; clusters built from it monitor by "
                "default (gpuforge:monitoring), and its image will lack the daemon. Fix: add "
                f"{key}: {{version, sha256, sha256_source, url}} (the shipped matrices pin one).",
                SCHEMA_SOURCE,
            )


def rule_monitoring_url_version(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    """The release file names the pinned version (Prometheus's builds are <name>-<version>.linux-amd64.tar.gz):
    a version bumped without its URL would install one release and record another."""
    for key, pin in matrix.monitoring_tarballs:
        if _version(pin.version) is None or not _HTTPS_FILE.fullmatch(pin.url):
            continue  # pin.exact or pin.url reports it
        name = pin.url.rsplit("/", 1)[-1]
        if re.search(rf"(?<![0-9.]){re.escape(pin.version)}(?![0-9])", name):
            continue
        yield Finding(
            "monitoring.url-version",
            ERROR,
            f"{key}.url",
            f"the file {name!r} does not name {key} {pin.version}, the pinned release. Fix: point {key}.url at "
            f"that release's build, https://github.com/prometheus/{key}/releases/download/v{pin.version}/"
            f"{key}-{pin.version}.linux-amd64.tar.gz, and pin its sha256.",
            SCHEMA_SOURCE,
        )


def rule_prometheus_supported(matrix: Matrix, data: Compat, today: date | None = None) -> Iterator[Finding]:
    """The pinned Prometheus is of a long-term-support series still supported today (`today` lets tests
    fix the date). A non-LTS minor gets fixes for 6 weeks, shorter than an image lives, so it is refused."""
    pin = matrix.prometheus
    version = None if pin is None else _version(pin.version)
    if pin is None or version is None:
        return  # monitoring.pinned or pin.exact reports it
    table = monitoring_versions().prometheus
    today = today or date.today()
    series = f"{version.major}.{version.minor}"
    current = table.current(today)
    advice = (
        f"pin a release of the current LTS series, {current[0]} (supported until "
        f"{table.lts[current[0]].end_of_support})"
        if current
        else "no LTS series gpuforge knows is still supported; add the current one to "
        "gpuforge/data/monitoring_versions.yaml with its source, and pin a release of it"
    )
    row = table.lts.get(series)
    if row is None:
        yield Finding(
            "monitoring.prometheus-supported",
            ERROR,
            "prometheus.version",
            f"Prometheus {pin.version} is of series {series}, not a long-term-support series: Prometheus fixes a "
            f"non-LTS minor for {table.non_lts_support_weeks} weeks only (LTS series gpuforge knows: "
            f"{', '.join(table.lts)}). Fix: {advice}.",
            table.source,
        )
        return
    days_left = (row.end_of_support - today).days
    if days_left <= 0:
        yield Finding(
            "monitoring.prometheus-supported",
            ERROR,
            "prometheus.version",
            f"Prometheus {pin.version}: LTS series {series} reached end of support on {row.end_of_support}; "
            f"it gets no bug or security fixes. Fix: {advice}.",
            row.source,
        )
    elif days_left <= table.warn_days_before_eol:
        yield Finding(
            "monitoring.prometheus-supported",
            WARNING,
            "prometheus.version",
            f"Prometheus {pin.version}: LTS series {series} reaches end of support on {row.end_of_support} "
            f"({days_left} days). Fix: plan the move to the next LTS series.",
            row.source,
        )


def rule_monitoring_one_field_list(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    """The image carries one dcgm-exporter field list (gpuforge.monitoring.fields, rendered at build time),
    so every target must collect the same fields: a matrix whose targets differ (architecture, NVLink)
    is refused rather than shipping a list some GPUs do not serve."""
    rows = _target_rows(matrix)
    catalog = load_fields()
    lists: dict[tuple[str, ...], list[str]] = {}
    for row in rows:
        try:
            names = tuple(field.name for field in catalog.for_type(row))
        except InputError as error:
            yield Finding("monitoring.one-field-list", ERROR, "targets", f"{error}", FIELDS_DATA)
            return
        lists.setdefault(names, []).append(row.name)
    if len(lists) > 1:
        groups = "; ".join(", ".join(names) for names in lists.values())
        yield Finding(
            "monitoring.one-field-list",
            ERROR,
            "targets",
            f"the targets collect different dcgm-exporter fields ({groups}); the image carries one field list. "
            "Fix: split the matrix so each holds types of one GPU architecture and NVLink layout.",
            FIELDS_DATA,
        )


RULES: tuple[Rule, ...] = (
    rule_exact_pins,
    rule_base_ami,
    rule_sha256,
    rule_sha256_source,
    rule_targets,
    rule_cuda_driver,
    rule_driver_eol,
    rule_driver_release,
    rule_architecture,
    rule_open_modules_available,
    rule_nvswitch_companions,
    rule_cudnn,
    rule_nccl,
    rule_efa_installer,
    rule_aws_ofi_nccl,
    rule_secondary_floors,
    rule_boot_mode,
    rule_dcgm_exporter,
    rule_dcgm_cuda_build,
    rule_url,
    rule_slurm_pmix_pair,
    rule_slurm_mariadb_pair,
    rule_slurm_url_version,
    rule_slurm_series,
    rule_slurm_pmix,
    rule_slurm_features,
    rule_rds_ca_regions,
    rule_monitoring_pinned,
    rule_monitoring_url_version,
    rule_prometheus_supported,
    rule_monitoring_one_field_list,
    *KUBERNETES_RULES,
)


def run_rules(matrix: Matrix) -> list[Finding]:
    """Every finding of every rule, errors first, in a stable order."""
    data = compat()
    findings = [finding for rule in RULES for finding in rule(matrix, data)]
    return sorted(findings, key=lambda f: (f.severity is not ERROR, f.field, f.rule))
