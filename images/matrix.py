"""The versioned image matrix: one YAML file that pins every layer of a GPU node.

`check_file` parses a matrix, validates its shape with pydantic (unknown keys
are errors, so a typo cannot pass silently), runs the compatibility rules and
returns every finding at once. The digest is a hash of the normalized matrix:
the same for any key order, quoting or comments, different when any pin moves.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails

from gpuforge.errors import Finding, GpuforgeError, Severity
from gpuforge.loading import load_yaml

SCHEMA_SOURCE = "gpuforge matrix format (README.md, 'The image matrix')"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False)


class OsSpec(_Strict):
    distro: Literal["ubuntu", "amzn", "rhel", "debian"]
    release: str
    boot_mode: Literal["legacy-bios", "uefi", "uefi-preferred"]
    base_ami: dict[str, str] = Field(min_length=1)


class NvidiaSpec(_Strict):
    driver: str
    kernel_modules: Literal["open", "proprietary"]
    fabricmanager: str | None = None
    nscq: str | None = None
    nvlsm: str | None = None


# Where a sha256 came from: the artifact hashed (`sha256sum` of the tarball) or a published source
# named beside it (a vendor page, or a public project that pins the same file with its checksum).
# A checksum nobody took from the artifact looks real and is not, so `pin.sha256-source` refuses a
# checksum with no source, or one whose source says it is unverified.
Sha256Source = Annotated[str, Field(min_length=1)]


class EfaSpec(_Strict):
    installer: str
    sha256: str
    sha256_source: Sha256Source | None = None


class AwsOfiNcclSpec(_Strict):
    version: str
    install: Literal["bundled", "separate"]
    prefix: str | None = None
    sha256: str | None = None
    sha256_source: Sha256Source | None = None


class SourceTarball(_Strict):
    """A tarball the image downloads: its exact version, its sha256, and where it is downloaded.

    Slurm and PMIx have no package in the CUDA or Ubuntu repositories at the versions gpuforge pins,
    so the image builds them from source; the monitoring daemons come as their publishers' release
    builds. The sha256 is what makes each download a pin.
    """

    version: str
    sha256: str
    sha256_source: Sha256Source | None = None
    url: str


class DistroPackages(_Strict):
    """Packages from the image OS's own archive, all of one source package at one exact version.

    `version` is the Debian version as apt takes it (`apt-get install <package>=<version>`), epoch
    included; `source` says which archive index it was read from, and when: it names the index's
    address (an http(s) URL with the suite's `/dists/` path).
    """

    version: str = Field(pattern=r"^(?:[0-9]+:)?[0-9][A-Za-z0-9.+~-]*$")
    source: str = Field(pattern=r"https?://[^\s/]+/\S*dists/\S+")


class KubernetesSpec(_Strict):
    """The Kubernetes node parts (issue 23's matrix keys): what a GPU node built from this matrix needs to
    join an EKS cluster, each a publisher's release build pinned by version and sha256.

    `version` is the EKS control plane's minor version these nodes join. It lives in the matrix, not only in
    the stack, because the image is built for one control plane, as Amazon builds an EKS AMI per Kubernetes
    minor: the kubelet's skew and the version's EKS support are facts about the image, checked by
    `matrix check` before any stack exists (a stack's `kubernetesVersion` must then equal it).
    kubelet is dl.k8s.io's binary; containerd, runc, the CNI plugins and aws-iam-authenticator (the kubelet's
    credential plugin: the join configuration's kubeconfig runs it to authenticate with the node's instance
    role) their GitHub release builds. ecr_credential_provider is cloud-provider-aws's kubelet image credential
    provider (artifacts.k8s.io's binary): without it the kubelet pulls private ECR images anonymously and is
    refused, and every EKS system add-on on the node (the VPC CNI, kube-proxy, the EFA device plugin) comes from
    EKS's private ECR registries, so the node would never become Ready.
    """

    version: str = Field(pattern=r"^1\.[0-9]+$")
    kubelet: SourceTarball
    containerd: SourceTarball
    runc: SourceTarball
    cni_plugins: SourceTarball
    aws_iam_authenticator: SourceTarball
    ecr_credential_provider: SourceTarball


class AcceptanceImageSpec(_Strict):
    """The acceptance container's base image digest (`gpuforge image acceptance-container`).

    The base is NVIDIA's CUDA development image for the matrix's CUDA and OS (its tag is derived from
    `cuda` and `os`, never written here); only its digest is pinned, as a person copies it from
    `crane digest nvidia/cuda:<tag>`, with where it came from in `base_digest_source`.
    """

    base_digest: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    base_digest_source: Sha256Source


# The Kubernetes node parts' matrix keys under `kubernetes`, in install order.
KUBERNETES_KEYS = (
    "kubelet",
    "containerd",
    "runc",
    "cni_plugins",
    "aws_iam_authenticator",
    "ecr_credential_provider",
)


# The monitoring daemons' matrix keys (issue 21's contract names), in install order.
MONITORING_KEYS = ("node_exporter", "prometheus", "alertmanager")


def _ofi_shorthand(value: Any) -> Any:
    """`aws_ofi_nccl: "1.17.1"` is shorthand for the EFA installer's bundled plugin."""
    if isinstance(value, str):
        return {"version": value, "install": "bundled"}
    return value


def _unique_targets(targets: list[str]) -> list[str]:
    """The same type twice would pass silently and change the digest without changing the image."""
    repeated = sorted({t for t in targets if targets.count(t) > 1})
    if repeated:
        raise ValueError(f"each instance type is listed once; {', '.join(repeated)} appears more than once")
    return targets


class Matrix(_Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")
    version: str
    description: str | None = None
    os: OsSpec
    kernel: str
    nvidia: NvidiaSpec
    cuda: str
    cudnn: str
    nccl: str
    efa: EfaSpec
    aws_ofi_nccl: Annotated[AwsOfiNcclSpec, BeforeValidator(_ofi_shorthand)]
    lustre_client: str
    container_toolkit: str
    dcgm: str
    dcgm_exporter: str
    # Optional: a matrix without Slurm builds an image without a scheduler. PMIx is pinned beside
    # Slurm because Slurm's mpi/pmix plugin is built against it (the rule slurm.pmix-required).
    slurm: SourceTarball | None = None
    pmix: SourceTarball | None = None
    # Optional: NVIDIA's nccl-tests (the acceptance run's all_reduce_perf), built against the
    # matrix's CUDA, NCCL and the EFA installer's Open MPI. A release tarball from
    # https://github.com/NVIDIA/nccl-tests/archive/refs/tags/v<version>.tar.gz; no published sha256
    # was found for a current release, so the shipped matrices leave it out (README, "Acceptance").
    nccl_tests: SourceTarball | None = None
    # Optional: the monitoring daemons, release tarballs of Prometheus's own builds
    # (https://github.com/prometheus/<name>/releases/download/v<version>/<name>-<version>.linux-amd64.tar.gz),
    # installed by images/scripts/77-monitoring.sh. node_exporter runs on every GPU node; Prometheus and
    # Alertmanager only where the controller's user data writes their configuration. Optional because a
    # matrix without a scheduler has no controller to run them; the rule monitoring.pinned warns where a
    # matrix pins Slurm (whose clusters monitor by default) and leaves one out.
    # Optional beside Slurm (the rule slurm.mariadb-required): MariaDB's server, client and client library
    # from the OS's archive (source package mariadb-10.6 on Ubuntu 22.04). slurmdbd's accounting_storage/mysql
    # plugin is built against libmariadb-dev, and the controller runs the server for `accounting.database: local`.
    mariadb: DistroPackages | None = None
    node_exporter: SourceTarball | None = None
    prometheus: SourceTarball | None = None
    alertmanager: SourceTarball | None = None
    # Optional: the Kubernetes node parts (images/scripts/72-kubernetes.sh). A Slurm-only matrix leaves it out.
    kubernetes: KubernetesSpec | None = None
    # Optional: the acceptance container's base image digest (images/acceptance_container.py). Without it the
    # container is not rendered: no public source pinning the CUDA base tags by digest could be named.
    acceptance_image: AcceptanceImageSpec | None = None
    targets: Annotated[list[str], AfterValidator(_unique_targets)] = Field(min_length=1)

    @property
    def source_tarballs(self) -> tuple[tuple[str, SourceTarball], ...]:
        """(key, pin) of every source tarball the image builds from: Slurm, PMIx, nccl-tests."""
        pins = (("slurm", self.slurm), ("pmix", self.pmix), ("nccl_tests", self.nccl_tests))
        return tuple((key, pin) for key, pin in pins if pin is not None)

    @property
    def monitoring_tarballs(self) -> tuple[tuple[str, SourceTarball], ...]:
        """(key, pin) of every monitoring daemon's release tarball the matrix pins."""
        pins = (
            ("node_exporter", self.node_exporter),
            ("prometheus", self.prometheus),
            ("alertmanager", self.alertmanager),
        )
        return tuple((key, pin) for key, pin in pins if pin is not None)

    @property
    def kubernetes_downloads(self) -> tuple[tuple[str, SourceTarball], ...]:
        """(dotted key, pin) of every Kubernetes node part: `kubernetes.kubelet`, ... (none without the block)."""
        if self.kubernetes is None:
            return ()
        return tuple((f"kubernetes.{key}", getattr(self.kubernetes, key)) for key in KUBERNETES_KEYS)

    @property
    def downloads(self) -> tuple[tuple[str, SourceTarball], ...]:
        """(key, pin) of every file the build downloads by URL and checks by sha256."""
        return self.source_tarballs + self.monitoring_tarballs + self.kubernetes_downloads

    def normalized(self) -> dict[str, Any]:
        """The matrix as plain data, optional empties dropped: what the digest hashes."""
        return self.model_dump(mode="json", exclude_none=True)


def digest(matrix: Matrix) -> str:
    """sha256 of the normalized matrix as canonical JSON (sorted keys, no whitespace)."""
    canonical = json.dumps(matrix.normalized(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class MatrixReport:
    """The outcome of checking one matrix file."""

    path: Path
    matrix: Matrix | None
    digest: str | None
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return not any(finding.severity is Severity.ERROR for finding in self.findings)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "digest": self.digest,
            "findings": [finding.to_json() for finding in self.findings],
        }


class MatrixInvalid(GpuforgeError):
    """A matrix that fails its check, where a command needs a valid one (exit 1)."""

    exit_code = 1

    def __init__(self, report: MatrixReport) -> None:
        errors = [f.render() for f in report.findings if f.severity is Severity.ERROR]
        super().__init__(
            f"{report.path} fails `gpuforge matrix check` with {len(errors)} error(s):\n  "
            + "\n  ".join(errors)
        )
        self.report = report


def read_yaml(path: Path) -> Any:
    """Parse a matrix file through gpuforge.loading (size, UTF-8, depth, no aliases or duplicate keys).

    Raises InputError (exit 2) saying why it is unreadable.
    """
    return load_yaml(
        path,
        what="matrix",
        fix="pass a matrix YAML file (start from one under images/matrices/); for a YAML error, correct the file where it points",
    )


def _dotted(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


def _schema_finding(error: ErrorDetails) -> Finding:
    field = _dotted(error["loc"]) or "(document)"
    kind = error["type"]
    if kind == "extra_forbidden":
        return Finding(
            "schema.unknown-key",
            Severity.ERROR,
            field,
            f"unknown key {field!r}. Fix: remove it or correct its spelling (the README lists every key).",
            SCHEMA_SOURCE,
        )
    if kind == "missing":
        return Finding(
            "schema.missing-key",
            Severity.ERROR,
            field,
            f"required key {field!r} is missing. Fix: add it with one exact, released version or value.",
            SCHEMA_SOURCE,
        )
    found = error.get("input")
    hint = ""
    if isinstance(found, int | float) and not isinstance(found, bool) and "string" in kind:
        hint = f' YAML read {found!r} as a number (12.10 becomes 12.1): quote versions, e.g. "{found}".'
    return Finding(
        "schema.type",
        Severity.ERROR,
        field,
        f"{error['msg']}; found {found!r}.{hint} Fix: give the value the README's documented form.",
        SCHEMA_SOURCE,
    )


def check_data(path: Path, data: Any) -> MatrixReport:
    """Validate parsed YAML as a matrix and run every rule on it."""
    from gpuforge.images.rules import run_rules  # rules import Matrix from here

    if not isinstance(data, dict):
        finding = Finding(
            "schema.type",
            Severity.ERROR,
            "(document)",
            f"a matrix is a YAML mapping of keys to values; this file holds {type(data).__name__}. "
            "Fix: start from a shipped matrix under images/matrices/.",
            SCHEMA_SOURCE,
        )
        return MatrixReport(path, None, None, (finding,))
    try:
        matrix = Matrix.model_validate(data)
    except ValidationError as error:
        findings = tuple(_schema_finding(detail) for detail in error.errors())
        return MatrixReport(path, None, None, findings)
    return MatrixReport(path, matrix, digest(matrix), tuple(run_rules(matrix)))


def check_file(path: Path) -> MatrixReport:
    """Check one matrix file. Raises InputError (exit 2) when it is unreadable or not YAML."""
    return check_data(path, read_yaml(path))


def load_valid(path: Path) -> tuple[Matrix, str]:
    """The matrix and its digest, or MatrixInvalid (exit 1) listing every error."""
    report = check_file(path)
    if not report.ok or report.matrix is None or report.digest is None:
        raise MatrixInvalid(report)
    return report.matrix, report.digest
