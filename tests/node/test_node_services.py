"""nvidia-persistenced, Fabric Manager (version and fabric state), NVLSM."""

from __future__ import annotations

from pathlib import Path

from node_scenarios import P5_DETAILS, context, fixture, g5_xlarge_healthy, p4d_healthy, p5_healthy

from gpuforge.node.nvidia_smi import GPU_DETAILS
from gpuforge.node.report import Status
from gpuforge.node.services import (
    FABRICMANAGER_VERSION,
    NVLSM_PROCESS,
    check_fabricmanager,
    check_nvlsm,
    check_persistenced,
    is_active_argv,
    parse_fabricmanager_version,
)


def test_fabricmanager_version_line() -> None:
    assert parse_fabricmanager_version(fixture("fabricmanager/version-570.133.20.txt")) == "570.133.20"
    assert parse_fabricmanager_version("nv-fabricmanager: command failed") is None


def test_persistenced(root: Path) -> None:
    ctx, _ = context(p5_healthy(), "p5.48xlarge", root / "a")
    assert check_persistenced(ctx).status is Status.PASS
    scenario = p5_healthy().set(
        is_active_argv("nvidia-persistenced"), fixture("systemctl/is-active-inactive.txt"), 3
    )
    ctx, _ = context(scenario, "p5.48xlarge", root / "b")
    result = check_persistenced(ctx)
    assert (result.status, result.evidence) == (Status.FAIL, "nvidia-persistenced is inactive")


def test_fabric_manager_healthy_on_hopper_and_na_on_a100(root: Path) -> None:
    ctx, _ = context(p5_healthy(), "p5.48xlarge", root / "p5")
    result = check_fabricmanager(ctx)
    assert result.status is Status.PASS and "fabric Completed/Success on 8 GPU(s)" in result.evidence
    ctx, _ = context(p4d_healthy(), "p4d.24xlarge", root / "p4d")
    result = check_fabricmanager(ctx)
    assert (
        result.status is Status.PASS and "fabric state N/A on 8 Ampere GPU(s), as expected" in result.evidence
    )


def _fabric_in_progress() -> str:
    """Derived from the captured H100 report: each GPU's Fabric block as a published capture of an
    H100 whose fabric never registered prints it (State In Progress, Status N/A; README.md)."""
    text = fixture(P5_DETAILS)
    completed = "        State                             : Completed\n        Status                            : Success\n"
    assert text.count(completed) == 8
    return text.replace(
        completed,
        "        State                             : In Progress\n        Status                            : N/A\n",
    )


def test_fabric_manager_inactive(root: Path) -> None:
    scenario = (
        p5_healthy()
        .set(is_active_argv("nvidia-fabricmanager"), fixture("systemctl/is-active-failed.txt"), 3)
        .set(GPU_DETAILS, _fabric_in_progress())
    )
    ctx, _ = context(scenario, "p5.48xlarge", root)
    result = check_fabricmanager(ctx)
    assert result.status is Status.FAIL
    assert result.evidence.startswith("nvidia-fabricmanager is failed; fabric registration incomplete: ")
    assert "00000000:18:00.0 In Progress/N/A" in result.evidence
    assert "journalctl -u nvidia-fabricmanager" in result.cause


def test_fabric_state_na_is_not_accepted_on_hopper(root: Path) -> None:
    text = fixture(P5_DETAILS).replace(": Completed", ": N/A")
    ctx, _ = context(p5_healthy().set(GPU_DETAILS, text), "p5.48xlarge", root)
    result = check_fabricmanager(ctx)
    assert result.status is Status.FAIL and "00000000:DB:00.0 N/A/Success" in result.evidence


def test_fabric_manager_version_must_equal_driver(root: Path) -> None:
    scenario = p5_healthy().set(FABRICMANAGER_VERSION, "Fabric Manager version is : 570.124.06\n")
    ctx, _ = context(scenario, "p5.48xlarge", root)
    result = check_fabricmanager(ctx)
    assert result.status is Status.FAIL
    assert "Fabric Manager 570.124.06 differs from the loaded driver 570.133.20" in result.evidence


def test_no_fabric_manager_needed_without_nvswitch(root: Path) -> None:
    ctx, _ = context(g5_xlarge_healthy(), "g5.xlarge", root)
    result = check_fabricmanager(ctx)
    assert (result.status, result.evidence) == (
        Status.PASS,
        "g5.xlarge has no NVSwitch; Fabric Manager is not needed",
    )


def test_nvlsm_on_b200(root: Path) -> None:
    ctx, _ = context(p5_healthy().set(NVLSM_PROCESS, "4711\n"), "p6-b200.48xlarge", root / "a")
    result = check_nvlsm(ctx)
    assert (result.status, result.evidence) == (
        Status.PASS,
        "nvlsm running (pid 4711), manifest pins 2025.03.0",
    )
    ctx, _ = context(p5_healthy().set(NVLSM_PROCESS, "", 1), "p6-b200.48xlarge", root / "b")
    result = check_nvlsm(ctx)
    assert (result.status, result.evidence) == (Status.FAIL, "no nvlsm process running")
    # p5 does not need it, whatever runs
    ctx, _ = context(p5_healthy(), "p5.48xlarge", root / "c")
    assert check_nvlsm(ctx).status is Status.PASS


def test_nvlsm_missing_from_the_manifest(root: Path, fixtures: Path) -> None:
    ctx, _ = context(
        p5_healthy().set(NVLSM_PROCESS, "4711\n"),
        "p6-b200.48xlarge",
        root,
        manifest=fixtures / "manifest/p5-h100.json",
    )
    result = check_nvlsm(ctx)
    assert (result.status, result.evidence) == (Status.FAIL, "the manifest pins no nvlsm component")
