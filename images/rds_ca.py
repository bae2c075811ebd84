"""The Amazon RDS certificate bundle the image carries, for slurmdbd's TLS to Aurora.

With `accounting.database: aurora` the controller's slurmdbd verifies the Aurora writer's certificate
against RDS_CA_BUNDLE (gpuforge.scheduler.render: slurmdbd.conf StorageParameters=SSL_CA=...), and the
boot refuses to write slurmdbd.conf where that file is missing. The image installs it from the copy
vendored in images/files/rds-ca/ (a public certificate bundle: data, not code), whose README names the
published source of its bytes and of BUNDLE_SHA256. It is vendored, not downloaded at build, because AWS
rewrites https://truststore.pki.rds.amazonaws.com/global/global-bundle.pem in place (a pinned sha256
of it would stop every build after each such edit) and because its content can then be checked here.

AWS names each root "Amazon RDS <region> Root CA <key type> G1" (RSA2048, RSA4096, ECC384; AWS's
"Certificate authorities" table, https://docs.aws.amazon.com/AmazonRDS/latest/AuroraUserGuide/
UsingWithRDS.SSL.html); the global bundle holds those roots for every commercial region, so one file
serves every region an image is used in. `bundle_problems` says what a bundle lacks for given regions on
a given day.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date
from functools import cache
from pathlib import Path

from cryptography import x509

from gpuforge.compat import Compat
from gpuforge.errors import Finding, GpuforgeError, Severity
from gpuforge.images.matrix import Matrix
from gpuforge.scheduler.render import RDS_CA_BUNDLE

# Where the bundle is vendored (images/files/rds-ca/) and where the payload carries it (payload/rds-ca/).
PAYLOAD_DIR = "rds-ca"
BUNDLE_NAME = "global-bundle.pem"
BUNDLE_FILE = Path(__file__).resolve().parent / "files" / PAYLOAD_DIR / BUNDLE_NAME
# sha256 of BUNDLE_FILE, as published for AWS's global bundle (images/files/rds-ca/README.md names where).
BUNDLE_SHA256 = "05c6b4a9bf4daa95c888711481e19cc8e2e11aed4de8db759f51f4a6fce64917"
# The path the image installs it at: the one slurmdbd.conf and the controller's boot name.
INSTALLED_PATH = RDS_CA_BUNDLE

_ROOT_NAME = re.compile(
    r"Amazon RDS (?P<region>[a-z]+(?:-[a-z]+)+-\d+) Root CA (?P<key>RSA2048|RSA4096|ECC384) G1"
)
_PEM_BEGIN = b"-----BEGIN CERTIFICATE-----"


@dataclass(frozen=True)
class RdsRoot:
    """One regional root CA of the bundle, read from its certificate."""

    region: str
    key: str
    not_before: date
    not_after: date

    def valid_on(self, day: date) -> bool:
        return self.not_before <= day <= self.not_after


class RdsBundleInvalid(GpuforgeError):
    """The vendored bundle differs from its pin or does not parse (exit 2, as the payload's other source errors)."""


def roots(data: bytes) -> list[RdsRoot]:
    """Every regional root in a PEM bundle. Raises RdsBundleInvalid unless every certificate in it parses,
    and parses as a self-signed CA (a root, which is what AWS's bundle holds)."""
    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError as error:
        raise RdsBundleInvalid(f"the RDS CA bundle does not parse as PEM certificates ({error})") from None
    if len(certificates) != data.count(_PEM_BEGIN):
        raise RdsBundleInvalid(
            f"the RDS CA bundle has {data.count(_PEM_BEGIN)} certificate blocks but only {len(certificates)} parse"
        )
    found = []
    for certificate in certificates:
        subject = certificate.subject.rfc4514_string()
        try:
            is_ca = certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except x509.ExtensionNotFound:
            is_ca = False
        if certificate.issuer != certificate.subject or not is_ca:
            raise RdsBundleInvalid(
                f"the RDS CA bundle holds {subject}, which is not a self-signed CA certificate"
            )
        names = certificate.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
        match = _ROOT_NAME.fullmatch(str(names[0].value)) if names else None
        if match:  # AWS's "Beta" and "Preview" roots are for those endpoints only: not a region's root
            found.append(
                RdsRoot(
                    region=match["region"],
                    key=match["key"],
                    not_before=certificate.not_valid_before_utc.date(),
                    not_after=certificate.not_valid_after_utc.date(),
                )
            )
    return found


def bundle_problems(data: bytes, regions: Iterable[str], today: date) -> list[str]:
    """One line per region that has no root valid on `today` in the bundle (none: it serves them all)."""
    by_region: dict[str, list[RdsRoot]] = {}
    for root in roots(data):
        by_region.setdefault(root.region, []).append(root)
    problems = []
    for region in sorted(set(regions)):
        held = by_region.get(region, [])
        if not held:
            problems.append(f"{region}: the RDS CA bundle has no root for this region")
        elif not any(root.valid_on(today) for root in held):
            spans = ", ".join(f"{root.key} {root.not_before} to {root.not_after}" for root in held)
            problems.append(f"{region}: no root of the RDS CA bundle is valid on {today} ({spans})")
    return problems


def vendored_bundle(path: Path = BUNDLE_FILE) -> bytes:
    """The vendored bundle's bytes, refused unless their sha256 is BUNDLE_SHA256."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise RdsBundleInvalid(
            f"{path}: cannot read the vendored RDS CA bundle ({error.strerror}). Fix: restore it from git "
            "(images/files/rds-ca/README.md says where its bytes come from)."
        ) from None
    found = hashlib.sha256(data).hexdigest()
    if found != BUNDLE_SHA256:
        raise RdsBundleInvalid(
            f"{path}: sha256 is {found}, gpuforge.images.rds_ca.BUNDLE_SHA256 pins {BUNDLE_SHA256}. Fix: restore "
            "the file from git, or refresh the bundle as images/files/rds-ca/README.md says (file, pin and README "
            "together)."
        )
    return data


@cache
def _vendored_text() -> bytes:
    return vendored_bundle()


def rule_rds_ca_regions(matrix: Matrix, data: Compat, today: date | None = None) -> Iterator[Finding]:
    """An image with Slurm can serve `accounting.database: aurora` in each region it is built in (os.base_ami)
    only where the vendored bundle holds a root of that region valid today (`today` lets tests fix the date);
    elsewhere the controller's slurmdbd cannot verify Aurora and the boot stops. A warning: the default local
    database needs no bundle."""
    if matrix.slurm is None:
        return
    today = today or date.today()
    try:
        problems = bundle_problems(_vendored_text(), matrix.os.base_ami, today)
    except RdsBundleInvalid as error:
        yield Finding("slurm.rds-ca-regions", Severity.ERROR, "os.base_ami", str(error), str(BUNDLE_FILE))
        return
    for problem in problems:
        yield Finding(
            "slurm.rds-ca-regions",
            Severity.WARNING,
            "os.base_ami",
            f"{problem}, so a controller of this image there cannot verify Aurora (accounting.database: aurora) "
            "and stops at boot. Fix: refresh images/files/rds-ca/global-bundle.pem from AWS as its README says, "
            "or use accounting.database: local in that region.",
            "https://docs.aws.amazon.com/AmazonRDS/latest/AuroraUserGuide/UsingWithRDS.SSL.html",
        )
