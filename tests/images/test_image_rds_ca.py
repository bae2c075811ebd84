"""The Amazon RDS CA bundle the image carries for slurmdbd's TLS to Aurora (images/files/rds-ca/).

The bundle is AWS's real global bundle (its README names the published source of its bytes and sha256);
it is parsed here with `cryptography`, installed by the real lib.sh function under bash into a scratch
root, and rendered into a real payload.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from image_helpers import MATRICES, REPO, SHIPPED, load_matrix_data

from gpuforge.compat import compat
from gpuforge.errors import Severity
from gpuforge.images import payload as payload_module
from gpuforge.images import rds_ca
from gpuforge.images.matrix import Matrix, load_valid
from gpuforge.images.render import RenderOptions, render
from gpuforge.images.rules import RULES
from gpuforge.scheduler.render import RDS_CA_BUNDLE

README = REPO / "images" / "files" / "rds-ca" / "README.md"
LIB = REPO / "images" / "scripts" / "lib.sh"
# The day these checks were written against; a later day is checked by passing it.
CHECK_DAY = date(2026, 12, 4)


def _regions_in_use() -> set[str]:
    """Every region a shipped matrix has a base AMI in, and every example stack's aws:region."""
    regions: set[str] = set()
    for path in SHIPPED:
        regions |= set(yaml.safe_load(path.read_text(encoding="utf-8"))["os"]["base_ami"])
    for path in sorted((REPO / "stacks").rglob("Pulumi.*.yaml")):
        config = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("config", {})
        if "aws:region" in config:
            regions.add(config["aws:region"])
    return regions


def test_the_vendored_bundle_is_the_pinned_one_and_its_readme_names_that_pin() -> None:
    data = rds_ca.vendored_bundle()
    assert hashlib.sha256(data).hexdigest() == rds_ca.BUNDLE_SHA256
    assert f"sha256: `{rds_ca.BUNDLE_SHA256}`" in README.read_text(encoding="utf-8")


def test_a_changed_bundle_is_refused_with_the_pin_and_the_fix(tmp_path: Path) -> None:
    changed = tmp_path / "global-bundle.pem"
    changed.write_bytes(rds_ca.BUNDLE_FILE.read_bytes() + b"\n")
    with pytest.raises(rds_ca.RdsBundleInvalid, match=f"pins {rds_ca.BUNDLE_SHA256}. Fix: restore"):
        rds_ca.vendored_bundle(changed)
    with pytest.raises(rds_ca.RdsBundleInvalid, match="cannot read the vendored RDS CA bundle"):
        rds_ca.vendored_bundle(tmp_path / "absent.pem")


def test_every_certificate_parses_as_an_amazon_rds_root() -> None:
    data = rds_ca.vendored_bundle()
    roots = rds_ca.roots(data)
    # 32 regions x (RSA2048, RSA4096, ECC384); the 6 other certificates are the Beta us-east-1 roots.
    assert data.count(b"-----BEGIN CERTIFICATE-----") == 102
    assert len(roots) == 96
    assert {root.key for root in roots if root.region == "us-east-1"} == {"RSA2048", "RSA4096", "ECC384"}
    east = next(root for root in roots if root.region == "us-east-1" and root.key == "RSA2048")
    assert (east.not_before, east.not_after) == (date(2021, 5, 25), date(2061, 5, 25))


def _leaf() -> bytes:
    """A self-signed certificate that is no CA (no basicConstraints CA:TRUE), made here for the test."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Amazon RDS us-east-1 Root CA RSA2048 G1")])
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return certificate.public_bytes(serialization.Encoding.PEM)


def test_a_broken_certificate_or_a_non_root_is_refused() -> None:
    data = rds_ca.BUNDLE_FILE.read_bytes()
    # A block whose body is cut short: the bundle is refused, not read without it.
    with pytest.raises(rds_ca.RdsBundleInvalid, match="does not parse"):
        rds_ca.roots(data + b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    with pytest.raises(rds_ca.RdsBundleInvalid, match="which is not a self-signed CA certificate"):
        rds_ca.roots(data + _leaf())


def test_the_bundle_has_a_root_valid_on_the_check_day_for_every_region_in_use() -> None:
    regions = _regions_in_use()
    assert "us-east-1" in regions
    assert rds_ca.bundle_problems(rds_ca.vendored_bundle(), regions, CHECK_DAY) == []


def test_a_region_without_a_root_or_a_day_past_every_root_is_reported() -> None:
    data = rds_ca.vendored_bundle()
    # ap-east-2 opened after this copy of the bundle (its README says so).
    assert rds_ca.bundle_problems(data, ["us-east-1", "ap-east-2"], CHECK_DAY) == [
        "ap-east-2: the RDS CA bundle has no root for this region"
    ]
    [late] = rds_ca.bundle_problems(data, ["us-east-1"], date(2122, 1, 1))
    assert late.startswith("us-east-1: no root of the RDS CA bundle is valid on 2122-01-01 (")
    assert "RSA2048 2021-05-25 to 2061-05-25" in late


def test_the_installed_path_is_the_one_slurmdbd_conf_names() -> None:
    assert rds_ca.INSTALLED_PATH == RDS_CA_BUNDLE


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    matrix, digest = load_valid(MATRICES / "p5-h100-cuda12.yaml")
    out = tmp_path_factory.mktemp("render") / "out"
    return render(matrix, digest, RenderOptions(region="us-east-1", imds=False), out).payload


def test_the_payload_carries_the_bundle_and_its_pins(rendered: Path) -> None:
    env = (rendered / payload_module.MATRIX_ENV).read_text(encoding="utf-8")
    assert f"GPUFORGE_RDS_CA_BUNDLE={RDS_CA_BUNDLE}\n" in env
    assert f"GPUFORGE_RDS_CA_SHA256={rds_ca.BUNDLE_SHA256}\n" in env
    assert f"GPUFORGE_RDS_CA_SOURCE={rds_ca.PAYLOAD_DIR}/{rds_ca.BUNDLE_NAME}\n" in env
    carried = rendered / rds_ca.PAYLOAD_DIR / rds_ca.BUNDLE_NAME
    assert carried.read_bytes() == rds_ca.BUNDLE_FILE.read_bytes()


def test_a_payload_is_not_written_from_a_changed_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    changed = tmp_path / "global-bundle.pem"
    changed.write_bytes(b"not the bundle\n")
    monkeypatch.setattr(payload_module, "RDS_CA_FILE", changed)
    matrix, digest = load_valid(MATRICES / "p5-h100-cuda12.yaml")
    with pytest.raises(rds_ca.RdsBundleInvalid, match="sha256 is"):
        render(matrix, digest, RenderOptions(region="us-east-1", imds=False), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _install(payload: Path, root: Path) -> subprocess.CompletedProcess[str]:
    script = f'source "{payload}/scripts/lib.sh"\nload_matrix\ninstall_rds_ca_bundle\n'
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        env={"PATH": "/usr/bin:/bin", "GPUFORGE_ROOT": str(root), "LC_ALL": "C"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_the_slurm_step_installs_the_bundle_at_rds_ca_bundle(rendered: Path, tmp_path: Path) -> None:
    assert "\ninstall_rds_ca_bundle\n" in (REPO / "images" / "scripts" / "45-slurm.sh").read_text(
        encoding="utf-8"
    )
    done = _install(rendered, tmp_path / "root")
    assert done.returncode == 0, done.stderr
    installed = tmp_path / "root" / RDS_CA_BUNDLE.lstrip("/")
    assert installed.read_bytes() == rds_ca.BUNDLE_FILE.read_bytes()
    assert installed.stat().st_mode & 0o777 == 0o644


def test_the_slurm_step_refuses_a_bundle_that_is_not_the_pinned_one(rendered: Path, tmp_path: Path) -> None:
    payload = tmp_path / "payload"
    shutil.copytree(rendered, payload)
    (payload / rds_ca.PAYLOAD_DIR / rds_ca.BUNDLE_NAME).write_bytes(b"tampered\n")
    done = _install(payload, tmp_path / "root")
    assert done.returncode == 1
    assert f"gpuforge pins {rds_ca.BUNDLE_SHA256}; refusing to install it" in done.stderr
    assert not (tmp_path / "root" / RDS_CA_BUNDLE.lstrip("/")).exists()


def _matrix(**os_changes: object) -> Matrix:
    data = load_matrix_data()
    data["os"] = {**data["os"], **os_changes}
    return Matrix.model_validate(data)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda path: path.stem)
def test_every_shipped_matrix_passes_the_rds_ca_rule(path: Path) -> None:
    matrix, _ = load_valid(path)
    assert list(rds_ca.rule_rds_ca_regions(matrix, compat(), CHECK_DAY)) == []


def test_a_matrix_built_in_a_region_the_bundle_lacks_gets_a_warning_with_the_fix() -> None:
    ami = load_matrix_data()["os"]["base_ami"]["us-east-1"]
    matrix = _matrix(base_ami={"us-east-1": ami, "ap-east-2": ami})
    [finding] = rds_ca.rule_rds_ca_regions(matrix, compat(), CHECK_DAY)
    assert (finding.rule, finding.severity, finding.field) == (
        "slurm.rds-ca-regions",
        Severity.WARNING,
        "os.base_ami",
    )
    assert finding.message.startswith(
        "ap-east-2: the RDS CA bundle has no root for this region, so a controller"
    )
    assert "Fix: refresh images/files/rds-ca/global-bundle.pem" in finding.message
    # On a day past every root of us-east-1, that region is reported too (the day is injectable).
    late = list(rds_ca.rule_rds_ca_regions(_matrix(), compat(), date(2122, 1, 1)))
    assert [f.message.split(":")[0] for f in late] == ["us-east-1"]


def test_a_matrix_without_slurm_needs_no_bundle() -> None:
    data = load_matrix_data()
    del data["slurm"], data["pmix"], data["mariadb"]
    data["os"]["base_ami"]["ap-east-2"] = data["os"]["base_ami"]["us-east-1"]
    assert list(rds_ca.rule_rds_ca_regions(Matrix.model_validate(data), compat(), CHECK_DAY)) == []


def test_matrix_check_runs_the_rule() -> None:
    assert rds_ca.rule_rds_ca_regions in RULES
