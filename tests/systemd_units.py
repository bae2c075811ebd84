"""systemd unit files for tests: read one as systemd does, and have the real systemd-analyze verify
units inside an alternate root the test builds (systemd's own units, stand-in executables).
"""

from __future__ import annotations

import configparser
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest

SYSTEM_UNITS = Path("/usr/lib/systemd/system")
# dcgm-exporter's own unit as its package ships it (NVIDIA/dcgm-exporter tag 4.4.2-4.7.1, commit
# b921c57e, packaging/config-files/systemd/nvidia-dcgm-exporter.service): gpuforge's drop-ins change it.
DCGM_EXPORTER_UNIT = (
    "[Unit]\nDescription=NVIDIA DCGM-exporter service\nWants=nvidia-dcgm.service\nAfter=nvidia-dcgm.service\n"
    "[Service]\nUser=root\nPrivateTmp=false\n"
    "ExecStart=/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv\nRestart=on-abort\n"
    "[Install]\nWantedBy=multi-user.target\n"
)


def read_unit(path: Path) -> configparser.ConfigParser:
    """A unit file's sections and keys, case kept and repeated keys allowed (the last one wins)."""
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text(encoding="utf-8"))
    return parser


def systemd_root(root: Path, executables: Iterable[str]) -> Path:
    """`root` made an alternate root for `systemd-analyze verify`: systemd's own units, a stand-in
    script at each of `executables` (paths relative to the root), and an empty /etc/systemd/system,
    which it returns. Skips the test where systemd-analyze or systemd's units are missing."""
    if shutil.which("systemd-analyze") is None or not (SYSTEM_UNITS / "sysinit.target").exists():
        pytest.skip("systemd-analyze and systemd's own units are needed to verify units")
    shutil.copytree(SYSTEM_UNITS, root / SYSTEM_UNITS.relative_to("/"), symlinks=True)
    for executable in executables:
        path = root / executable
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    etc = root / "etc/systemd/system"
    etc.mkdir(parents=True, exist_ok=True)
    return etc


def verify(root: Path, name: str) -> subprocess.CompletedProcess[str]:
    """The real `systemd-analyze verify` of /etc/systemd/system/`name` inside `root`."""
    analyze = shutil.which("systemd-analyze")
    assert analyze is not None
    return subprocess.run(
        [analyze, "verify", "--man=no", f"--root={root}", f"/etc/systemd/system/{name}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
