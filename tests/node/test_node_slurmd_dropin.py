"""slurmd's boot-gate drop-in: slurmd starts only after this boot's node check passed.

The drop-in's contract lines, that the marker it tests is the one the check
writes, and systemd's own verdict on the real slurmd.service (Debian's, from
slurmd 26.05.5) with the drop-in, in a boot transaction shaped like Ubuntu's
(cloud-final.service after multi-user.target).
"""

from __future__ import annotations

import configparser
import shutil
import subprocess
from pathlib import Path

import pytest
from node_scenarios import FIXTURES, fixture, p5_healthy
from test_node_cli import P5_MANIFEST, run_node

from gpuforge.node.context import HostPaths
from gpuforge.node.xid import DMESG

REPO = Path(__file__).resolve().parents[2]
DROPIN = REPO / "images/files/slurmd-gpuforge.conf"
INSTALLED = "/etc/systemd/system/slurmd.service.d/gpuforge.conf"
CHECK_UNIT = REPO / "images/files/gpuforge-node-check.service"


def _dropin() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(DROPIN.read_text())
    return parser


def _values(key: str) -> list[str]:
    """Every value of a repeatable key (configparser keeps only the last)."""
    return [line.split("=", 1)[1] for line in DROPIN.read_text().splitlines() if line.startswith(f"{key}=")]


def _marker() -> str:
    (command,) = _values("ExecStartPre")
    test, flag, path = command.split()
    assert (test, flag) == ("/usr/bin/test", "-f")
    return path


def test_dropin_orders_slurmd_after_a_passed_check() -> None:
    unit = _dropin()
    assert _values("Requires") == ["gpuforge-node-check.service", "sysinit.target"]
    assert "gpuforge-node-check.service" in _values("After")
    assert unit["Unit"]["DefaultDependencies"] == "no"
    assert _marker() == "/run/gpuforge/node-check.passed"


def test_the_marker_tested_is_the_one_the_boot_check_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = HostPaths(tmp_path / "root").boot_pass_marker
    assert "/" + str(marker.relative_to(tmp_path / "root")) == _marker()
    args = ("--expect", "p5.48xlarge", "--manifest", str(P5_MANIFEST))
    assert run_node(p5_healthy(), tmp_path, monkeypatch, *args) == 0
    assert marker.is_file()
    # a later failing check in the same boot takes the pass back
    assert run_node(p5_healthy().set(DMESG, fixture("dmesg/xid79.txt")), tmp_path, monkeypatch, *args) == 1
    assert not marker.exists()


def test_the_image_step_installs_the_dropin_for_slurmd() -> None:
    script = (REPO / "images/scripts/85-gpuforge.sh").read_text()
    assert "*/slurmd-*.conf)" in script
    assert '"/etc/systemd/system/slurmd.service.d/${name#slurmd-}"' in script
    assert "/etc/systemd/system/slurmd.service.d/" + DROPIN.name.removeprefix("slurmd-") == INSTALLED


def _boot_root(root: Path, dropin_text: str) -> Path:
    """systemd's units, Debian's slurmd.service, the check's unit, the drop-in, and Ubuntu-shaped cloud-init."""
    shutil.copytree(Path("/usr/lib/systemd/system"), root / "usr/lib/systemd/system", symlinks=True)
    etc = root / "etc/systemd/system"
    (etc / "slurmd.service.d").mkdir(parents=True)
    shutil.copy(FIXTURES / "slurm/slurmd.service", etc / "slurmd.service")
    shutil.copy(CHECK_UNIT, etc / CHECK_UNIT.name)
    (root / INSTALLED.lstrip("/")).write_text(dropin_text)
    # Stand-ins shaped as on Ubuntu: cloud-init.target (wanted by multi-user.target) wants
    # cloud-final.service, which runs after multi-user.target.
    (etc / "cloud-init.target").write_text("[Unit]\nDescription=stand-in\nAfter=multi-user.target\n")
    (etc / "cloud-final.service").write_text(
        "[Unit]\nDescription=stand-in\nAfter=multi-user.target\n[Service]\nType=oneshot\nExecStart=/bin/kill\n"
    )
    for target, unit in [
        ("multi-user.target", "slurmd.service"),
        ("multi-user.target", "cloud-init.target"),
        ("cloud-init.target", "cloud-final.service"),
        ("cloud-init.target", CHECK_UNIT.name),
    ]:
        wants = etc / f"{target}.wants"
        wants.mkdir(exist_ok=True)
        (wants / unit).symlink_to(f"/etc/systemd/system/{unit}")
    for executable in ("usr/sbin/slurmd", "usr/local/bin/gpuforge", "usr/bin/test", "bin/kill"):
        path = root / executable
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    return root


def _verify(root: Path) -> subprocess.CompletedProcess[str]:
    analyze = shutil.which("systemd-analyze")
    assert analyze is not None
    return subprocess.run(
        [
            analyze,
            "verify",
            "--man=no",
            f"--root={root}",
            "multi-user.target",
            "/etc/systemd/system/slurmd.service",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_systemd_accepts_the_dropin_without_an_ordering_cycle(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None or not Path("/usr/lib/systemd/system/sysinit.target").exists():
        pytest.skip("systemd-analyze and systemd's own units are needed to verify the drop-in")
    good = _verify(_boot_root(tmp_path / "good", DROPIN.read_text()))
    assert (good.returncode, good.stderr) == (0, "")
    # Without DefaultDependencies=no, systemd finds the cycle and drops a start job of it (slurmd's,
    # or one it waits for): the same check notices, so the clean verdict above means something.
    cyclic = DROPIN.read_text().replace("DefaultDependencies=no\n", "")
    bad = _verify(_boot_root(tmp_path / "bad", cyclic))
    assert "Found ordering cycle" in bad.stderr and "deleted to break ordering cycle" in bad.stderr
