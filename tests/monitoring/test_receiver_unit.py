"""The receiver's systemd unit (images/files) and the controller's user data that enables it.

The unit is checked by systemd's own verdict (systemd-analyze verify in an alternate root, as
tests/node/test_node_metrics_units.py does), and its command is the CLI that serves the receiver.
"""

from __future__ import annotations

import configparser
import dataclasses
import shlex
import shutil
import subprocess
from pathlib import Path

from systemd_units import read_unit, systemd_root, verify

from gpuforge.cli import build_parser
from gpuforge.components.user_data import ALERT_RECEIVER_UNIT, ControllerParams, render_controller

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "images/files" / ALERT_RECEIVER_UNIT
CONTROLLER = ControllerParams(
    cluster="demo",
    host="demo-slurmctld",
    address="10.0.0.10",
    state_volume_id="vol-0123456789abcdef0",
    state_dir="/var/spool/slurmctld",
    key_secret_arn="arn:aws:secretsmanager:us-east-1:123456789012:secret:demo-slurm-key-AbCdEf",
    files={"slurm.conf": "ClusterName=demo\n"},
)


def _unit() -> configparser.ConfigParser:
    return read_unit(UNIT)


def test_the_unit_runs_the_receiver_command_as_root() -> None:
    unit = _unit()
    argv = shlex.split(unit["Service"]["ExecStart"])
    assert argv[0] == "/usr/local/bin/gpuforge"
    args = build_parser("monitoring").parse_args(argv[1:])
    assert (args.command, args.monitoring_command, args.port) == ("monitoring", "receiver", None)
    assert unit["Service"]["User"] == "root"  # scontrol update needs a Slurm administrator
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    etc = systemd_root(tmp_path, ["usr/local/bin/gpuforge"])
    shutil.copy(UNIT, etc / UNIT.name)
    done = verify(tmp_path, UNIT.name)
    assert (done.returncode, done.stderr) == (0, "")


def test_the_controller_enables_the_receiver_only_when_asked() -> None:
    assert "step start_alert_receiver" not in render_controller(CONTROLLER)
    script = render_controller(dataclasses.replace(CONTROLLER, alert_receiver=True))
    assert f"readonly ALERT_RECEIVER_UNIT={ALERT_RECEIVER_UNIT}\n" in script
    # after slurmctld, inside the block that runs only when every step before succeeded
    assert "        step start_slurmctld\n        step start_alert_receiver\n" in script
    assert 'systemctl enable --now "$ALERT_RECEIVER_UNIT"' in script
    assert subprocess.run(["bash", "-n"], input=script, text=True, check=False).returncode == 0
    if shutil.which("shellcheck") is not None:
        done = subprocess.run(
            ["shellcheck", "--shell=bash", "-"], input=script, capture_output=True, text=True, check=False
        )
        assert (done.returncode, done.stdout) == (0, "")
