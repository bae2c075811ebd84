"""The image's side of Slurm accounting: MariaDB pinned and installed, slurmdbd built with MySQL, its drop-in.

The drop-in is checked by the real `systemd-analyze verify` against the slurmdbd.service Debian ships for Slurm
26.05.5 (the Slurm test root, scripts/slurm-root.sh, which also holds MariaDB's units).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from systemd_units import read_unit, systemd_root, verify

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "images" / "scripts" / "45-slurm.sh"
DROP_IN = REPO / "images" / "files" / "slurmdbd-gpuforge.conf"
SLURM_ROOT = REPO / ".cache" / "slurm-root"


def test_the_slurm_step_installs_every_mariadb_package_at_the_pinned_version_before_building() -> None:
    text = SCRIPT.read_text(encoding="utf-8")
    install = text.index('"${mariadb_packages[@]/%/=$GPUFORGE_MARIADB}"')
    assert install < text.index("./configure --prefix=/usr")
    for package in ("mariadb-server", "mariadb-client", "libmariadb-dev", "libmariadb3", "mariadb-common"):
        assert f" {package}" in text[text.index("mariadb_packages=(") : install]
    # The build stops where configure silently left the MySQL plugin out, and where the matrix pins no MariaDB.
    assert "[[ -f /usr/lib/slurm/accounting_storage_mysql.so ]] ||" in text
    assert '[[ -n "$GPUFORGE_MARIADB" ]] ||' in text
    # Installed, never enabled in the image: the controller's user data starts them.
    assert "etc/slurmdbd.service" in text
    assert "systemctl disable slurmctld.service slurmdbd.service slurmd.service mariadb.service" in text


def test_the_package_list_expands_to_exact_apt_pins() -> None:
    """bash's ${array[@]/%/=V} appends =V to each name: what apt-get install takes as an exact version."""
    text = SCRIPT.read_text(encoding="utf-8")
    start = text.index("mariadb_packages=(")
    declaration = text[start : text.index(")", start) + 1]
    script = f'{declaration}\nGPUFORGE_MARIADB=1:10.6.23-0ubuntu0.22.04.1\nprintf "%s\\n" "${{mariadb_packages[@]/%/=$GPUFORGE_MARIADB}}"'
    lines = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert lines and all(line.endswith("=1:10.6.23-0ubuntu0.22.04.1") for line in lines)
    assert "libmariadb-dev=1:10.6.23-0ubuntu0.22.04.1" in lines


def test_slurmdbd_restarts_until_its_database_answers() -> None:
    unit = read_unit(DROP_IN)
    assert unit["Service"]["Restart"] == "on-failure" and unit["Service"]["RestartSec"] == "15"
    assert unit["Unit"]["StartLimitIntervalSec"] == "0"


def test_the_drop_in_verifies_on_slurm_s_own_slurmdbd_unit(tmp_path: Path) -> None:
    packaged = SLURM_ROOT / "usr/lib/systemd/system/slurmdbd.service"
    if not packaged.exists():
        pytest.skip(f"{packaged} is missing: run scripts/slurm-root.sh (the Slurm tests build it)")
    etc = systemd_root(tmp_path, ["usr/sbin/slurmdbd", "bin/kill"])
    shutil.copy(packaged, etc / "slurmdbd.service")
    (etc / "slurmdbd.service.d").mkdir()
    shutil.copy(DROP_IN, etc / "slurmdbd.service.d" / "gpuforge.conf")
    done = verify(tmp_path, "slurmdbd.service")
    assert done.returncode == 0, done.stderr
    # Slurm's own unit orders slurmdbd after MariaDB and runs it as slurm, who owns slurmdbd.conf (0600).
    own = read_unit(packaged)
    assert "mariadb.service" in own["Unit"]["After"].split() and own["Service"]["User"] == "slurm"
    assert own["Unit"]["ConditionPathExists"] == "/etc/slurm/slurmdbd.conf"


def test_the_ami_records_the_mariadb_it_carries() -> None:
    from gpuforge.images.matrix import load_valid
    from gpuforge.images.tags import PREFIX, ami_tags

    matrix, digest = load_valid(REPO / "images" / "matrices" / "p5-h100-cuda12.yaml")
    assert ami_tags(matrix, digest)[PREFIX + "mariadb"] == "1:10.6.23-0ubuntu0.22.04.1"


SYNC_UNIT = REPO / "images" / "files" / "gpuforge-sync-accounts.service"


def _seconds(value: str) -> int:
    """A systemd time span of the forms the unit uses: `30`, `30s`, `20min`."""
    number, unit = re.fullmatch(r"(\d+)\s*(s|min)?", value).groups()  # type: ignore[union-attr]
    return int(number) * (60 if unit == "min" else 1)


def test_sync_accounts_runs_after_slurmdbd_and_slurmctld_and_retries_only_exit_1_boundedly() -> None:
    unit = read_unit(SYNC_UNIT)
    service, order = unit["Service"], unit["Unit"]
    assert {"slurmdbd.service", "slurmctld.service"} <= set(order["After"].split())
    assert {"slurmdbd.service", "slurmctld.service"} <= set(order["Wants"].split())
    assert order["ConditionPathExists"] == "/etc/slurm/gpuforge-accounts.json"
    assert service["ExecStart"].split() == [
        "/usr/local/bin/gpuforge",
        "scheduler",
        "sync-accounts",
        "--accounts",
        "/etc/slurm/gpuforge-accounts.json",
    ]
    # exit 1 (sacctmgr failed) restarts; exit 2 (bad input) never does.
    assert service["Restart"] == "on-failure" and service["RestartPreventExitStatus"] == "2"
    # Bounded: the burst of starts, RestartSec apart, fits inside the interval, so systemd's start limit stops it.
    burst, interval = int(order["StartLimitBurst"]), _seconds(order["StartLimitIntervalSec"])
    assert 0 < (burst - 1) * _seconds(service["RestartSec"]) < interval


def test_systemd_accepts_the_sync_accounts_unit(tmp_path: Path) -> None:
    etc = systemd_root(tmp_path, ["usr/local/bin/gpuforge", "usr/sbin/slurmdbd", "usr/sbin/slurmctld"])
    for daemon in ("slurmdbd", "slurmctld"):
        (etc / f"{daemon}.service").write_text(
            f"[Unit]\nDescription=stand-in\n[Service]\nExecStart=/usr/sbin/{daemon} -D\n"
        )
    shutil.copy(SYNC_UNIT, etc / SYNC_UNIT.name)
    done = verify(tmp_path, SYNC_UNIT.name)
    assert (done.returncode, done.stderr) == (0, "")
    # the same check notices a broken unit, so the clean verdict above means something
    broken = SYNC_UNIT.read_text().replace("RestartPreventExitStatus=2", "RestartPreventExitStatus=two")
    (etc / SYNC_UNIT.name).write_text(broken)
    done = verify(tmp_path, SYNC_UNIT.name)
    assert "Failed to parse value, ignoring: two" in done.stderr


def test_the_image_installs_sync_accounts_without_enabling_it() -> None:
    """85-gpuforge.sh's loop, run over images/files with install and systemctl replaced by a log."""
    script = (REPO / "images" / "scripts" / "85-gpuforge.sh").read_text()
    loop = re.search(r'\nfor unit in "\$GPUFORGE_PAYLOAD"/files/\*; do\n.*?\ndone\n', script, re.S)
    assert loop is not None
    program = (
        'install() { echo "install ${*: -1}"; }\nsystemctl() { echo "systemctl $*"; }\ndie() { echo "die $*"; exit 1; }\n'
        f"GPUFORGE_PAYLOAD={REPO / 'images'}\n{loop.group(0)}"
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30, check=True)
    lines = done.stdout.splitlines()
    assert f"install /etc/systemd/system/{SYNC_UNIT.name}" in lines
    assert not [line for line in lines if line.startswith("systemctl") and SYNC_UNIT.name in line]
