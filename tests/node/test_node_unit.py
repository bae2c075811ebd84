"""The systemd unit the image pipeline installs: the contract's lines, and systemd's own verdict."""

from __future__ import annotations

import configparser
import shutil
from pathlib import Path

from systemd_units import read_unit, systemd_root, verify

UNIT = Path(__file__).resolve().parents[2] / "images/files/gpuforge-node-check.service"


def _unit() -> configparser.ConfigParser:
    return read_unit(UNIT)


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
    # An alternate root with systemd's units, a stand-in gpuforge executable and the unit under test.
    etc = systemd_root(tmp_path, ["usr/local/bin/gpuforge"])
    installed = etc / UNIT.name
    shutil.copy(UNIT, installed)
    good = verify(tmp_path, UNIT.name)
    assert (good.returncode, good.stderr) == (0, "")
    # the same check notices a broken unit, so the clean verdict above means something
    broken = installed.with_name("broken.service")
    broken.write_text(UNIT.read_text().replace("Type=oneshot", "Type=oneshoot"))
    assert "Failed to parse service type" in verify(tmp_path, broken.name).stderr
