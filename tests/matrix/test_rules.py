"""Every matrix rule, with a case that passes and a case that fails it."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import pytest
from matrix_cases import MATRICES, findings, load, rules, warnings

from gpuforge.compat import compat, driver_cuda_major
from gpuforge.images.matrix import Matrix, check_file
from gpuforge.images.rules import rule_driver_eol, rule_exact_pins


@pytest.mark.parametrize("path", sorted(MATRICES.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_matrices_pass_every_rule(path: Path) -> None:
    report = check_file(path)
    assert report.ok, [f.render() for f in report.findings]
    # data.secondary warnings name floors not yet read at a vendor's document (test_secondary_floors).
    assert [f.render() for f in report.findings if f.rule != "data.secondary"] == []


def test_at_least_the_four_required_matrices_ship() -> None:
    targets = {}
    for path in MATRICES.glob("*.yaml"):
        matrix = check_file(path).matrix
        assert matrix is not None
        targets[path.name] = (set(matrix.targets), matrix.cuda, matrix.nvidia.kernel_modules)
    assert any({"p5.48xlarge", "p5en.48xlarge"} <= t and c.startswith("12.") for t, c, _ in targets.values())
    assert any({"p5.48xlarge", "p5en.48xlarge"} <= t and c.startswith("13.") for t, c, _ in targets.values())
    assert any("p6-b200.48xlarge" in t and m == "open" for t, _, m in targets.values())
    assert any("p4d.24xlarge" in t for t, _, _ in targets.values())


# --- exact pins -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("kernel", "latest"),
        ("cuda", "12.*"),
        ("cudnn", ">=9.10"),
        ("lustre_client", ""),
        ("container_toolkit", "1.17.x"),
        ("dcgm", "^4.4.2"),
        ("dcgm_exporter", "4.4.2 - 4.7"),
        ("version", "1"),
    ],
)
def test_inexact_pins_fail(h100: dict[str, Any], field: str, value: str) -> None:
    h100[field] = value
    assert "pin.exact" in rules(h100)
    hit = next(f for f in findings(h100) if f.rule == "pin.exact")
    assert hit.field == field and repr(value) in hit.message


def test_inexact_nested_pin_names_dotted_field(h100: dict[str, Any]) -> None:
    h100["nvidia"]["driver"] = "580"
    hits = [f for f in findings(h100) if f.rule == "pin.exact"]
    assert [f.field for f in hits] == ["nvidia.driver"]


def test_missing_pin_is_an_error(h100: dict[str, Any]) -> None:
    del h100["nccl"]
    assert rules(h100) == {"schema.missing-key"}
    assert findings(h100)[0].field == "nccl"


def test_unquoted_number_version_is_explained(h100: dict[str, Any]) -> None:
    h100["os"]["release"] = 22.04
    hit = findings(h100)[0]
    assert (hit.rule, hit.field) == ("schema.type", "os.release")
    assert "quote versions" in hit.message


def test_unknown_key_is_an_error(h100: dict[str, Any]) -> None:
    h100["nvidia"]["fabricmanger"] = "580.95.05"
    hit = findings(h100)[0]
    assert (hit.rule, hit.field) == ("schema.unknown-key", "nvidia.fabricmanger")


# --- base AMI and checksums -------------------------------------------------------------


@pytest.mark.parametrize(
    "ami", ["ubuntu-22.04", "ami-123", "ami-0C7217CDDE317CFEC", "resolve:ssm:/aws/service/x"]
)
def test_base_ami_must_be_an_id(h100: dict[str, Any], ami: str) -> None:
    h100["os"]["base_ami"]["us-east-1"] = ami
    assert rules(h100) == {"pin.base-ami"}


def test_short_and_long_ami_ids_pass(h100: dict[str, Any]) -> None:
    h100["os"]["base_ami"] = {"us-east-1": "ami-0c7217cd", "eu-west-1": "ami-0c7217cdde317cfec"}
    assert rules(h100) == set()


def test_base_ami_region_must_be_a_region(h100: dict[str, Any]) -> None:
    h100["os"]["base_ami"] = {"virginia": "ami-0c7217cdde317cfec"}
    assert rules(h100) == {"pin.base-ami"}


@pytest.mark.parametrize("name", sorted(p.name for p in MATRICES.glob("*.yaml")))
def test_the_old_unverified_efa_checksum_is_refused(name: str) -> None:
    """The shipped matrices used to carry an EFA sha256 nobody took from the tarball, marked only in a
    comment. Marked in the data, as it must be now, the check refuses it."""
    data = load(name)
    data["efa"]["sha256"] = "4c0d5a1e2b7f3e9d8a6c5b4a39281706f5e4d3c2b1a0978685746352413b2c1d"
    data["efa"]["sha256_source"] = "UNVERIFIED: not taken from the real tarball"
    hit = [f for f in findings(data) if f.rule == "pin.sha256-source"]
    assert rules(data) == {"pin.sha256-source"} and hit[0].field == "efa.sha256_source"
    assert "unverified" in hit[0].message


@pytest.mark.parametrize("block", ["efa", "slurm", "pmix"])
def test_a_checksum_without_a_source_is_refused(h100: dict[str, Any], block: str) -> None:
    del h100[block]["sha256_source"]
    hit = [f for f in findings(h100) if f.rule == "pin.sha256-source"]
    assert rules(h100) == {"pin.sha256-source"} and hit[0].field == f"{block}.sha256_source"


def test_a_separate_plugin_checksum_needs_a_source_too(h100: dict[str, Any]) -> None:
    h100["aws_ofi_nccl"] = {
        "version": "1.17.2",
        "install": "separate",
        "prefix": "/opt/o",
        "sha256": "e" * 64,
    }
    assert rules(h100) == {"pin.sha256-source"}


@pytest.mark.parametrize("source", ["latest", "sha256sum", "from the internet", "published:"])
def test_a_source_must_say_hashed_or_published_and_where(h100: dict[str, Any], source: str) -> None:
    h100["efa"]["sha256_source"] = source
    assert rules(h100) == {"pin.sha256-source"}


@pytest.mark.parametrize("name", sorted(p.name for p in MATRICES.glob("*.yaml")))
def test_every_shipped_checksum_is_sourced(name: str) -> None:
    matrix = Matrix.model_validate(load(name))
    sources = [matrix.efa.sha256_source] + [s.sha256_source for s in (matrix.slurm, matrix.pmix) if s]
    assert all(source and source.startswith(("hashed: ", "published: ")) for source in sources)


def test_efa_sha256_must_be_a_digest(h100: dict[str, Any]) -> None:
    h100["efa"]["sha256"] = "md5:abc"
    assert rules(h100) == {"pin.sha256"}


# --- targets ----------------------------------------------------------------------------


def test_unknown_target_fails(h100: dict[str, Any]) -> None:
    h100["targets"].append("p9.96xlarge")
    assert rules(h100) == {"targets.known"}


def test_no_targets_fails(h100: dict[str, Any]) -> None:
    h100["targets"] = []
    assert rules(h100) == {"schema.type"}


# --- CUDA and driver --------------------------------------------------------------------


def test_driver_below_cuda_major_floor_fails(h100: dict[str, Any]) -> None:
    h100["cuda"] = "13.0.2"
    h100["nccl"] = "2.28.3-1+cuda13.0"
    h100["cudnn"] = "9.17.1.4"
    for key in ("driver", "fabricmanager", "nscq"):
        h100["nvidia"][key] = "575.57.08"
    assert "cuda.driver-minimum" in rules(h100)


def test_driver_below_toolkit_driver_is_a_warning_only(h100: dict[str, Any]) -> None:
    for key in ("driver", "fabricmanager", "nscq"):
        h100["nvidia"][key] = "570.172.08"
    assert "cuda.driver-full-features" in warnings(h100)
    assert "cuda.driver-minimum" not in rules(h100)


def test_unknown_cuda_release_fails(h100: dict[str, Any]) -> None:
    h100["cuda"] = "12.7.0"
    assert "cuda.known-toolkit" in rules(h100)


def test_unsupported_cuda_major_fails(h100: dict[str, Any]) -> None:
    h100["cuda"] = "10.2.89"
    assert "cuda.known-toolkit" in rules(h100)


def test_driver_eol_warns_past_and_near_end_and_not_before() -> None:
    matrix = Matrix.model_validate(load("p5-h100-cuda12.yaml"))
    data = compat()
    assert list(rule_driver_eol(matrix, data, today=date(2026, 12, 2))) == []
    near = list(rule_driver_eol(matrix, data, today=date(2028, 3, 1)))
    past = list(rule_driver_eol(matrix, data, today=date(2028, 7, 1)))
    assert [f.rule for f in near] == ["driver.branch-eol"] and "reaches end of life" in near[0].message
    assert [f.rule for f in past] == ["driver.branch-eol"] and "reached end of life" in past[0].message
    assert all(f.severity == "warning" for f in near + past)


def test_unlisted_driver_branch_warns(h100: dict[str, Any]) -> None:
    for key in ("driver", "fabricmanager", "nscq"):
        h100["nvidia"][key] = "590.48.01"
    assert "driver.branch-eol" in warnings(h100)


def test_an_old_branch_s_fix_names_only_branches_still_supported_lts_first() -> None:
    data = compat()
    matrix = Matrix.model_validate(load("p5-h100-cuda12.yaml"))
    old = matrix.model_copy(update={"nvidia": matrix.nvidia.model_copy(update={"driver": "525.147.05"})})
    [finding] = list(rule_driver_eol(old, data, today=date(2026, 12, 3)))
    # R535 (EOL 2026-06-30), R570 (2026-02-28) and R610 (2026-08-31) are past their end on that day.
    assert finding.message.endswith("Fix: move to a supported branch (R580, R620, R595).")


def test_a_driver_nvidia_never_numbered_so_is_an_error_not_a_warning(h100: dict[str, Any]) -> None:
    for key in ("driver", "fabricmanager", "nscq"):
        h100["nvidia"][key] = "99999999.0.0"
    assert "driver.release" in rules(h100) and "driver.branch-eol" not in rules(h100)
    for key in ("driver", "fabricmanager", "nscq"):
        h100["nvidia"][key] = "999.95.05"  # numbered right, on a branch newer than any published
    found = [f for f in findings(h100) if f.rule == "driver.release"]
    assert (
        len(found) == 1
        and "R999, newer than any branch NVIDIA has published (the newest listed is R620)" in found[0].message
    )


def test_pin_exact_suggests_an_example_of_the_field_s_own_kind() -> None:
    matrix = Matrix.model_validate(load("p5-h100-cuda12.yaml"))
    loose = matrix.model_copy(update={"nccl": "latest", "kernel": "6.8.*"})
    messages = {f.field: f.message for f in rule_exact_pins(loose, compat())}
    assert messages["nccl"].endswith(
        "e.g. 2.27.3-1+cuda12.9 (NVIDIA's apt version, built for the matrix's CUDA)."
    )
    assert messages["kernel"].endswith("e.g. 6.8.0-1015-aws.")


# --- architecture -----------------------------------------------------------------------


def test_blackwell_needs_open_modules(b200: dict[str, Any]) -> None:
    b200["nvidia"]["kernel_modules"] = "proprietary"
    assert rules(b200) == {"arch.open-modules"}


def test_hopper_allows_proprietary_modules(h100: dict[str, Any]) -> None:
    h100["nvidia"]["kernel_modules"] = "proprietary"
    assert rules(h100) == set()


def test_blackwell_needs_cuda_12_8(b200: dict[str, Any]) -> None:
    b200["cuda"] = "12.6.3"
    b200["nccl"] = "2.23.4-1+cuda12.6"
    assert "arch.min-cuda" in rules(b200)


def test_hgx_b200_needs_its_board_driver_floor(b200: dict[str, Any]) -> None:
    b200["cuda"] = "12.8.0"
    b200["nccl"] = "2.25.1-1+cuda12.8"
    for key in ("driver", "fabricmanager", "nscq"):
        b200["nvidia"][key] = "570.124.06"
    hits = [f for f in findings(b200) if f.rule == "arch.min-driver"]
    assert len(hits) == 1 and "570.133.20" in hits[0].message


def test_open_modules_need_r515(a100: dict[str, Any]) -> None:
    a100["cuda"] = "11.8.0"
    a100["nccl"] = "2.15.5-1+cuda11.8"
    a100["cudnn"] = "8.9.6.50"
    a100["nvidia"]["kernel_modules"] = "open"
    for key in ("driver", "fabricmanager", "nscq"):
        a100["nvidia"][key] = "470.256.02"
    assert "modules.open-available" in rules(a100)


# --- NVSwitch companions ----------------------------------------------------------------


def test_fabricmanager_must_equal_driver(h100: dict[str, Any]) -> None:
    h100["nvidia"]["fabricmanager"] = "580.82.07"
    assert rules(h100) == {"fabricmanager.equals-driver"}


def test_fabricmanager_required_on_nvswitch(h100: dict[str, Any]) -> None:
    del h100["nvidia"]["fabricmanager"]
    assert rules(h100) == {"fabricmanager.required"}


def test_no_nvswitch_target_needs_no_fabricmanager(h100: dict[str, Any]) -> None:
    h100["targets"] = ["g6e.48xlarge"]
    for key in ("fabricmanager", "nscq"):
        del h100["nvidia"][key]
    assert rules(h100) == set()


def test_nscq_must_equal_driver(h100: dict[str, Any]) -> None:
    h100["nvidia"]["nscq"] = "570.172.08"
    assert rules(h100) == {"nscq.equals-driver"}


def test_b200_needs_nvlsm(b200: dict[str, Any]) -> None:
    del b200["nvidia"]["nvlsm"]
    assert rules(b200) == {"nvlsm.required"}


# --- cuDNN and NCCL ---------------------------------------------------------------------


def test_cudnn_without_a_build_for_the_cuda_fails(h100: dict[str, Any]) -> None:
    h100["cudnn"] = "9.5.1.17"  # builds for CUDA 12.0..12.6; the matrix is on 12.9
    assert rules(h100) == {"cudnn.cuda-build"}


def test_cudnn_for_cuda_13_needs_a_cuda_13_build(h100: dict[str, Any]) -> None:
    h100["cuda"] = "13.0.2"
    h100["nccl"] = "2.28.3-1+cuda13.0"
    assert rules(h100) == {"cudnn.cuda-build"}  # 9.10.2 has no CUDA 13 build


def test_blackwell_needs_cudnn_9_10_2(b200: dict[str, Any]) -> None:
    b200["cudnn"] = "9.5.1.17"
    assert "cudnn.blackwell" in rules(b200)


def test_nccl_must_be_a_package_version_with_cuda_build(h100: dict[str, Any]) -> None:
    h100["nccl"] = "2.27.3-1"
    assert "nccl.package-version" in rules(h100)


def test_nccl_built_for_newer_cuda_fails(a100: dict[str, Any]) -> None:
    a100["nccl"] = "2.27.3-1+cuda12.9"  # matrix CUDA is 12.4
    assert rules(a100) == {"nccl.cuda-build"}


def test_nccl_built_for_older_minor_of_same_major_passes(h100: dict[str, Any]) -> None:
    h100["nccl"] = "2.27.3-1+cuda12.8"
    assert rules(h100) == set()


def test_cuda_13_needs_nccl_with_cuda_13_builds(h100: dict[str, Any]) -> None:
    h100["cuda"] = "13.0.2"
    h100["cudnn"] = "9.17.1.4"
    h100["nccl"] = "2.26.2-1+cuda13.0"
    assert "nccl.cuda-major" in rules(h100)


def test_blackwell_needs_nccl_2_25_1(b200: dict[str, Any]) -> None:
    b200["nccl"] = "2.24.3-1+cuda12.6"
    assert "nccl.architecture" in rules(b200)


# --- EFA installer and aws-ofi-nccl -----------------------------------------------------


def test_unknown_efa_installer_fails(h100: dict[str, Any]) -> None:
    h100["efa"]["installer"] = "1.48.0"
    assert "efa.known-installer" in rules(h100)


def test_efa_installer_must_support_the_os(h100: dict[str, Any]) -> None:
    h100["os"]["release"] = "24.04"
    h100["efa"]["installer"] = "1.32.0"
    h100["aws_ofi_nccl"] = {
        "version": "1.9.1",
        "install": "separate",
        "prefix": "/opt/aws-ofi-nccl",
        "sha256": "0" * 64,
        "sha256_source": "published: a test value, not a real checksum",
    }
    assert "efa.os-support" in rules(h100)


def test_unknown_os_fails(h100: dict[str, Any]) -> None:
    h100["os"]["release"] = "18.04"
    assert "efa.os-support" in rules(h100)


def test_r580_needs_efa_p2p_support(h100: dict[str, Any]) -> None:
    h100["efa"]["installer"] = "1.43.2"
    h100["aws_ofi_nccl"] = "1.16.3"
    assert rules(h100) == {"efa.p2p-driver"}


def test_bundled_plugin_must_match_installer(h100: dict[str, Any]) -> None:
    h100["aws_ofi_nccl"] = "1.17.2"
    assert rules(h100) == {"ofi.bundled"}


def test_separate_plugin_may_differ_from_bundled(h100: dict[str, Any]) -> None:
    h100["aws_ofi_nccl"] = {
        "version": "1.17.2",
        "install": "separate",
        "prefix": "/opt/aws-ofi-nccl",
        "sha256": "a" * 64,
        "sha256_source": "published: a test value, not a real checksum",
    }
    assert rules(h100) == set()


def test_separate_plugin_needs_prefix_and_checksum(h100: dict[str, Any]) -> None:
    h100["aws_ofi_nccl"] = {"version": "1.17.2", "install": "separate"}
    assert rules(h100) == {"ofi.separate-install"}


def test_installer_before_1_38_bundles_nothing(a100: dict[str, Any]) -> None:
    for key in ("driver", "fabricmanager", "nscq"):
        a100["nvidia"][key] = "570.172.08"
    a100["efa"]["installer"] = "1.37.0"
    a100["aws_ofi_nccl"] = "1.13.2"
    assert rules(a100) == {"ofi.bundled"}


def test_plugin_1_13_needs_libfabric_from_installer_1_37(a100: dict[str, Any]) -> None:
    for key in ("driver", "fabricmanager", "nscq"):
        a100["nvidia"][key] = "570.172.08"
    a100["efa"]["installer"] = "1.36.0"
    a100["aws_ofi_nccl"] = {
        "version": "1.13.2",
        "install": "separate",
        "prefix": "/opt/aws-ofi-nccl",
        "sha256": "b" * 64,
        "sha256_source": "published: a test value, not a real checksum",
    }
    assert rules(a100) == {"ofi.libfabric"}


def test_plugin_nccl_floor(a100: dict[str, Any]) -> None:
    a100["cuda"] = "11.8.0"
    a100["cudnn"] = "8.9.6.50"
    a100["nccl"] = "2.15.5-1+cuda11.8"
    assert "ofi.nccl-min" in rules(a100)


def test_plugin_broken_with_new_installer(a100: dict[str, Any]) -> None:
    for key in ("driver", "fabricmanager", "nscq"):
        a100["nvidia"][key] = "570.172.08"
    a100["efa"]["installer"] = "1.36.0"
    a100["aws_ofi_nccl"] = {
        "version": "1.12.0",
        "install": "separate",
        "prefix": "/opt/aws-ofi-nccl",
        "sha256": "c" * 64,
        "sha256_source": "published: a test value, not a real checksum",
    }
    assert rules(a100) == {"ofi.broken-with-installer"}


def test_target_minimum_plugin(b200: dict[str, Any]) -> None:
    b200["aws_ofi_nccl"] = {
        "version": "1.14.2",
        "install": "separate",
        "prefix": "/opt/aws-ofi-nccl",
        "sha256": "d" * 64,
        "sha256_source": "published: a test value, not a real checksum",
    }
    assert rules(b200) == {"ofi.instance-type"}


# --- boot mode --------------------------------------------------------------------------


def test_uefi_only_ami_cannot_boot_p4d(a100: dict[str, Any]) -> None:
    a100["os"]["boot_mode"] = "uefi"
    assert rules(a100) == {"boot.mode"}


def test_legacy_bios_ami_boots_p4d(a100: dict[str, Any]) -> None:
    a100["os"]["boot_mode"] = "legacy-bios"
    assert rules(a100) == set()


# --- DCGM -------------------------------------------------------------------------------


def test_dcgm_exporter_must_be_built_on_the_pinned_dcgm(h100: dict[str, Any]) -> None:
    h100["dcgm_exporter"] = "4.4.1-4.6.0"
    hit = [f for f in findings(h100) if f.rule == "dcgm.exporter-matches"]
    assert rules(h100) == {"dcgm.exporter-matches"} and "4.4.2" in hit[0].message


def test_dcgm_exporter_on_the_same_dcgm_passes(h100: dict[str, Any]) -> None:
    h100["dcgm_exporter"] = "4.4.2-4.7.0"
    assert rules(h100) == set()


@pytest.mark.parametrize("name", ["p5-h100-cuda13.yaml", "p5-h100-cuda12.yaml"])
def test_dcgm_without_a_build_for_the_drivers_cuda_major_is_refused(name: str) -> None:
    """The old pin: DCGM 4.2.3 has no CUDA 13 build, and driver R580 reports CUDA 13, so even the CUDA
    12.9 image would install datacenter-gpu-manager-4-cuda13, a package DCGM 4.2.3 never shipped."""
    data = load(name)
    data["dcgm"], data["dcgm_exporter"] = "4.2.3", "4.2.3-4.1.3"
    hit = [f for f in findings(data) if f.rule == "dcgm.cuda-build"]
    assert rules(data) == {"dcgm.cuda-build"}
    assert "reports CUDA 13" in hit[0].message and "DCGM 4.4.0 or newer" in hit[0].message
    assert "getting-started" in hit[0].source


def test_dcgm_on_a_cuda_12_driver_needs_no_cuda_13_build(h100: dict[str, Any]) -> None:
    """A CUDA 12 driver (R570 reports 12.8) installs the cuda12 package, which DCGM 4.2.3 has."""
    h100["nvidia"].update(driver="570.133.20", fabricmanager="570.133.20", nscq="570.133.20")
    h100["cuda"], h100["nccl"], h100["cudnn"] = "12.8.1", "2.25.1-1+cuda12.8", "9.10.2.21"
    h100["dcgm"], h100["dcgm_exporter"] = "4.2.3", "4.2.3-4.1.3"
    assert "dcgm.cuda-build" not in rules(h100)


def test_dcgm_package_major_is_the_drivers() -> None:
    assert driver_cuda_major("580.95.05", compat()) == 13
    assert driver_cuda_major("575.57.08", compat()) == 12
    assert driver_cuda_major("400.1", compat()) is None
