"""The systemd unit the image pipeline installs: the contract's lines, and systemd's own verdict."""

from __future__ import annotations

import configparser
import shutil
import subprocess
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[2] / "images/files/gpuforge-node-check.service"


def _unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(UNIT.read_text())
    return parser


def test_unit_keeps_the_contract() -> None:
    unit = _unit()
    assert unit["Service"]["Type"] == "oneshot"
    assert unit["Service"]["EnvironmentFile"] == "/etc/gpuforge/node-check.env"
    conditions = [
        line.split("=", 1)[1]
        for line in UNIT.read_text().splitlines()
        if line.startswith("ConditionPathExists=")
    ]
    assert conditions == ["/etc/gpuforge/node-check.env", "!/run/gpuforge/node-check.done"]
    assert unit["Service"]["ExecStart"] == (
        "/usr/local/bin/gpuforge node check --json --report-dir /var/log/gpuforge $GPUFORGE_NODE_CHECK_ARGS"
    )
    after = unit["Unit"]["After"].split()
    assert {
        "network-online.target",
        "nvidia-persistenced.service",
        "nvidia-fabricmanager.service",
        "cloud-final.service",
    } <= set(after)
    assert unit["Unit"]["Wants"] == "network-online.target"
    assert unit["Install"]["WantedBy"] == "cloud-init.target"


def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    units = Path("/usr/lib/systemd/system")
    if analyze is None or not (units / "sysinit.target").exists():
        pytest.skip("systemd-analyze and systemd's own units are needed to verify the unit")
    # An alternate root with systemd's units, a stand-in gpuforge executable and the unit under test.
    shutil.copytree(units, tmp_path / "usr/lib/systemd/system", symlinks=True)
    executable = tmp_path / "usr/local/bin/gpuforge"
    executable.parent.mkdir(parents=True)
    executable.write_text("#!/bin/sh\n")
    executable.chmod(0o755)
    installed = tmp_path / "etc/systemd/system" / UNIT.name
    installed.parent.mkdir(parents=True)
    shutil.copy(UNIT, installed)

    def verify(name: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [analyze, "verify", "--man=no", f"--root={tmp_path}", f"/etc/systemd/system/{name}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    good = verify(UNIT.name)
    assert (good.returncode, good.stderr) == (0, "")
    # the same check notices a broken unit, so the clean verdict above means something
    broken = installed.with_name("broken.service")
    broken.write_text(UNIT.read_text().replace("Type=oneshot", "Type=oneshoot"))
    assert "Failed to parse service type" in verify(broken.name).stderr
