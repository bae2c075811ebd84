"""Every check on a node without the GPU stack: a clear failure, never an exception."""

from __future__ import annotations

from pathlib import Path

import pytest
from node_scenarios import Scenario, context

from gpuforge.node.checks import CHECKS
from gpuforge.node.report import Status

# What each check must say when its commands and kernel files are absent.
EXPECTED = {
    "check_inventory": "`nvidia-smi` is not installed or not on PATH",
    "check_ecc": "`nvidia-smi` is not installed or not on PATH",
    "check_row_remapping": "`nvidia-smi` is not installed or not on PATH",
    "check_clocks": "`nvidia-smi` is not installed or not on PATH",
    "check_driver_versions": "proc/driver/nvidia/version is absent or unreadable",
    "check_image": "`uname` is not installed or not on PATH",
    "check_modules": "`lsmod` is not installed or not on PATH",
    "check_persistenced": "`systemctl` is not installed or not on PATH",
    "check_fabricmanager": "`systemctl` is not installed or not on PATH",
    "check_nvlsm": "`pgrep` is not installed or not on PATH",
    "check_devices": "`fi_info` is not installed or not on PATH",
    "check_gpudirect": "no EFA devices in sysfs",
    "check_xid": "`dmesg` is not installed or not on PATH",
    "check_topology": "`nvidia-smi` is not installed or not on PATH",
    "check_scratch": "proc/mounts is unreadable",
    "check_fsx": "proc/mounts is unreadable",
}


def test_every_check_is_covered() -> None:
    assert {check.__name__ for check in CHECKS} == set(EXPECTED)


@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__)
def test_absent_commands_fail_clearly(check: object, root: Path) -> None:
    # p6-b200 needs every check (NVSwitch, NVLSM, EFA); /fsx is required so its check has work to do.
    ctx, _ = context(Scenario(), "p6-b200.48xlarge", root, require_fsx=True, attempts=2)
    result = check(ctx)  # type: ignore[operator]
    assert result.status is Status.FAIL, result
    assert EXPECTED[check.__name__] in result.evidence  # type: ignore[attr-defined]
    assert result.cause, "a failing check names the likely cause"
