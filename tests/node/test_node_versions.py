"""Driver versions, image identity and kernel modules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from node_scenarios import FIXTURES, context, fixture, g5_xlarge_healthy, p4d_healthy, p5_healthy

from gpuforge.node.nvidia_smi import GPU_QUERY
from gpuforge.node.report import Status
from gpuforge.node.versions import (
    LSMOD,
    UNAME,
    check_driver_versions,
    check_image,
    check_modules,
    parse_driver_version,
    parse_lsmod,
)


def test_proc_driver_version_both_flavours() -> None:
    open_modules = parse_driver_version(fixture("proc/driver-version-570.133.20-open.txt"))
    proprietary = parse_driver_version(fixture("proc/driver-version-535.183.06-proprietary.txt"))
    assert open_modules is not None and (open_modules.version, open_modules.flavor) == ("570.133.20", "open")
    assert proprietary is not None and (proprietary.version, proprietary.flavor) == (
        "535.183.06",
        "proprietary",
    )
    assert parse_driver_version("") is None


@pytest.mark.parametrize(
    ("name", "version", "flavor"),
    [
        ("captured-565.57.01-open-x86_64.txt", "565.57.01", "open"),
        ("captured-384.98-proprietary-x86_64.txt", "384.98", "proprietary"),
        # a Jetson's open module: another architecture word, and a two-part release number
        ("captured-35.3.1-open-aarch64.txt", "35.3.1", "open"),
    ],
)
def test_proc_driver_version_as_captured(name: str, version: str, flavor: str) -> None:
    loaded = parse_driver_version(fixture(f"proc/{name}"))
    assert loaded is not None and (loaded.version, loaded.flavor) == (version, flavor)


def test_lsmod() -> None:
    modules = parse_lsmod(fixture("lsmod/p5-h100.txt"))
    assert {"nvidia", "nvidia_uvm", "efa", "ib_uverbs"} <= set(modules)
    assert modules["nvidia"] == "15 nvidia_uvm,nvidia_modeset"
    assert "Module" not in modules


def test_versions_agree(root: Path) -> None:
    for scenario, instance_type in ((p5_healthy(), "p5.48xlarge"), (p4d_healthy(), "p4d.24xlarge")):
        ctx, _ = context(scenario, instance_type, root / instance_type)
        assert check_driver_versions(ctx).status is Status.PASS


def test_driver_library_mismatch_fails_with_both_versions(root: Path) -> None:
    scenario = p5_healthy().set(GPU_QUERY, fixture("nvidia-smi/version-mismatch.txt"), 18)
    scenario.files["proc/driver/nvidia/version"] = fixture("proc/driver-version-570.124.06-open.txt")
    ctx, _ = context(scenario, "p5.48xlarge", root)
    result = check_driver_versions(ctx)
    assert result.status is Status.FAIL
    assert result.evidence.startswith("kernel module 570.124.06, user-space NVML 570.124:")
    assert "without reloading the kernel module" in result.cause


def test_loaded_driver_differs_from_manifest_pin(root: Path, tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "manifest/p5-h100.json").read_text())
    data["components"]["nvidia_driver"] = "570.124.06"
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(data))
    ctx, _ = context(p5_healthy(), "p5.48xlarge", root, manifest=manifest)
    result = check_driver_versions(ctx)
    assert result.status is Status.FAIL
    assert result.evidence == "loaded driver 570.133.20 differs from the manifest's pin 570.124.06"


def test_wrong_module_flavour_fails(root: Path, tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "manifest/p5-h100.json").read_text())
    data["components"]["nvidia_kernel_modules"] = "proprietary"
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(data))
    ctx, _ = context(p5_healthy(), "p5.48xlarge", root, manifest=manifest)
    result = check_driver_versions(ctx)
    assert result.status is Status.FAIL
    assert result.evidence == "open kernel modules loaded, manifest pins proprietary"


def test_no_kernel_module(root: Path) -> None:
    scenario = p5_healthy()
    del scenario.files["proc/driver/nvidia/version"]
    ctx, _ = context(scenario, "p5.48xlarge", root)
    result = check_driver_versions(ctx)
    assert result.status is Status.FAIL
    assert "proc/driver/nvidia/version is absent or unreadable" in result.evidence


def test_image_targets_and_kernel(root: Path) -> None:
    ctx, _ = context(p5_healthy(), "p5.48xlarge", root / "a")
    assert check_image(ctx).status is Status.PASS
    # a p4d image launched on a p5
    ctx, _ = context(p5_healthy(), "p5.48xlarge", root / "b", manifest=FIXTURES / "manifest/p4d-a100.json")
    result = check_image(ctx)
    assert result.status is Status.FAIL
    assert "p5.48xlarge is not among the image's targets (p4d.24xlarge, p4de.24xlarge)" in result.evidence
    ctx, _ = context(p5_healthy().set(UNAME, "6.8.0-1024-aws\n"), "p5.48xlarge", root / "c")
    assert "running kernel 6.8.0-1024-aws, manifest pins 6.8.0-1021-aws" in check_image(ctx).evidence


def test_modules(root: Path) -> None:
    ctx, _ = context(p5_healthy(), "p5.48xlarge", root / "a")
    assert check_modules(ctx).evidence == "loaded: nvidia, nvidia_uvm, efa"
    ctx, _ = context(p5_healthy().set(LSMOD, fixture("lsmod/no-efa-module.txt")), "p5.48xlarge", root / "b")
    result = check_modules(ctx)
    assert result.status is Status.FAIL
    assert result.evidence.startswith("missing: efa;")
    assert "EFA driver is not loaded" in result.cause
    # a dev type without EFA does not need the efa module
    ctx, _ = context(g5_xlarge_healthy(), "g5.xlarge", root / "c")
    assert check_modules(ctx).status is Status.PASS


def test_nvidia_peermem_is_noted_not_required(root: Path) -> None:
    text = fixture("lsmod/p5-h100.txt") + "nvidia_peermem          16384  0\n"
    ctx, _ = context(p5_healthy().set(LSMOD, text), "p5.48xlarge", root)
    result = check_modules(ctx)
    assert result.status is Status.PASS and "unused by EFA" in result.evidence
