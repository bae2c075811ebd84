"""The node user data: a real bash script (bash -n, shellcheck), and what each variant contains."""

from __future__ import annotations

import dataclasses
import shlex
import subprocess
from pathlib import Path

import pytest

from gpuforge import hardware
from gpuforge.components import user_data
from gpuforge.components.user_data import (
    ControllerParams,
    FsxMount,
    SlurmJoin,
    UserDataParams,
    render,
    render_controller,
)

FSX = FsxMount(dns_name="fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com", mount_name="abcdefgh")
NODE_CHECK = (
    "/usr/local/bin/gpuforge node check --json --report-dir /var/log/gpuforge $GPUFORGE_NODE_CHECK_ARGS"
)


def lint(scripts: list[str], tmp_path: Path) -> None:
    """bash -n on each script, then one shellcheck run over all of them."""
    paths = []
    for index, script in enumerate(scripts):
        path = tmp_path / f"user-data-{index}.sh"
        path.write_text(script)
        subprocess.run(["bash", "-n", str(path)], check=True)
        paths.append(str(path))
    subprocess.run(["shellcheck", "--shell=bash", *paths], check=True)


VARIANTS = [(FSX, True), (None, True), (FSX, False), (None, False)]


def test_every_variant_is_valid_bash(tmp_path: Path) -> None:
    scripts = []
    for instance_type in sorted(hardware.catalog()):
        disks = hardware.get(instance_type).instance_store_disks
        for fsx, asg in VARIANTS:
            script = render(UserDataParams("demo", instance_type, disks, fsx, asg))
            assert script.startswith("#!/bin/bash\n")
            flags = " ".join(
                flag for flag, on in (("--report-asg", asg), ("--require-fsx", fsx is not None)) if on
            )
            quoted = f"'{flags}'" if " " in flags or not flags else flags
            assert f"readonly NODE_CHECK_ARGS={quoted}\n" in script
            assert NODE_CHECK in script
            assert "/run/gpuforge/node-check.done" in script
            assert script.index(NODE_CHECK) < script.index('install -D -m 0644 /dev/null "$NODE_CHECK_DONE"')
            assert "GPUFORGE_NODE_CHECK_ARGS=" in script and "/etc/gpuforge/node-check.env" in script
            assert f"readonly SCRATCH_DISKS={disks}\n" in script
            assert ("step mount_fsx" in script) == (fsx is not None)
            scripts.append(script)
    assert len(scripts) == 4 * len(hardware.catalog())
    lint(scripts, tmp_path)


def test_scratch_is_idempotent_across_reboots() -> None:
    script = render(UserDataParams("demo", "p5.48xlarge", 8, FSX, True))
    body = script[script.index("setup_scratch() {") :]
    # Mounted already: nothing to do. Labelled file system present: reuse it, never mkfs again.
    assert body.index('mountpoint -q "$SCRATCH_MOUNT"') < body.index("mkfs.xfs")
    assert body.index('blkid -L "$SCRATCH_LABEL"') < body.index("mdadm --create")
    assert body.index("mdadm --assemble --scan") < body.index("mdadm --create")
    # The fstab line is added once, and with nofail so a blank disk after stop/start cannot block boot.
    assert 'grep -q "^LABEL=$SCRATCH_LABEL " /etc/fstab' in body
    assert "nofail" in body
    # Every boot runs the script again through cloud-init's per-boot directory.
    assert f"readonly PER_BOOT_COPY={user_data.PER_BOOT_COPY}\n" in script
    assert "    step install_per_boot\n" in script


def test_one_disk_is_formatted_without_an_array() -> None:
    script = render(UserDataParams("demo", "g6.xlarge", 1, None, True))
    assert 'if ((SCRATCH_DISKS == 1)); then\n            device="${disks[0]}"' in script


def test_no_instance_store_means_no_scratch_step(tmp_path: Path) -> None:
    row = dataclasses.replace(hardware.get("g6.xlarge"), instance_store_disks=0, instance_store_disk_gb=0)
    script = render(UserDataParams("demo", row.name, row.instance_store_disks, FSX, True))
    assert "mdadm" not in script and "setup_scratch" not in script
    assert "# g6.xlarge has no instance store: no /scratch" in script
    lint([script], tmp_path)


def test_fsx_mount_uses_the_documented_fstab_options() -> None:
    script = render(UserDataParams("demo", "p5.48xlarge", 8, FSX, True))
    assert f"readonly FSX_DNS_NAME={FSX.dns_name}\n" in script
    assert f"readonly FSX_MOUNT_NAME={FSX.mount_name}\n" in script
    assert 'local source="$FSX_DNS_NAME@tcp:/$FSX_MOUNT_NAME"' in script
    assert "defaults,relatime,flock,_netdev,x-systemd.automount,x-systemd.requires=network.service" in script


def test_a_failed_step_does_not_stop_the_health_check(tmp_path: Path) -> None:
    """Run the script's own `step` helper: errexit works inside a step, and later steps still run."""
    probe = (
        "#!/bin/bash\nset -euo pipefail\nreadonly LOG_TAG=probe\n"
        + user_data._COMMON
        + 'broken() { false; echo "after a failure"; }\n'
        + 'fine() { echo "health check ran"; }\n'
        + "step broken\nstep fine\n"
        + 'echo "failed: ${FAILED_STEPS[*]}"\n'
    )
    path = tmp_path / "probe.sh"
    path.write_text(probe)
    result = subprocess.run(["bash", str(path)], capture_output=True, text=True, check=True, timeout=30)
    assert result.stdout.splitlines() == ["health check ran", "failed: broken"]
    assert "step broken failed with exit status 1" in result.stderr


def test_values_are_shell_quoted() -> None:
    script = render(UserDataParams("demo", "p5.48xlarge", 8, FsxMount("fs.example", "a b$(x)"), True))
    assert "readonly FSX_MOUNT_NAME='a b$(x)'\n" in script


JOIN = SlurmJoin(
    conf_server="10.0.0.10:6817",
    registration="CPUs=192 Boards=1 SocketsPerBoard=2 CoresPerSocket=48 ThreadsPerCore=2 RealMemory=1968128 "
    "Gres=gpu:h100:8 Feature=p5.48xlarge,capacity-block,h100",
    key_secret_arn="arn:aws:secretsmanager:us-east-1:123456789012:secret:demo-slurm-key-secret-AbCdEf",
)
CONTROLLER = ControllerParams(
    cluster="demo",
    host="demo-slurmctld",
    address="10.0.0.10",
    state_volume_id="vol-0123456789abcdef0",
    state_dir="/var/spool/slurmctld",
    key_secret_arn=JOIN.key_secret_arn,
    files={
        "slurm.conf": "ClusterName=demo\nSlurmctldHost=demo-slurmctld(10.0.0.10)\n",
        "gres.conf": "AutoDetect=off\n",
    },
)


def test_slurm_variants_and_the_controller_are_valid_bash(tmp_path: Path) -> None:
    scripts = [render(UserDataParams("demo", "p5.48xlarge", 8, fsx, asg, JOIN)) for fsx, asg in VARIANTS]
    scripts.append(render_controller(CONTROLLER))
    lint(scripts, tmp_path)
    for script in scripts[:-1]:
        assert "    step join_slurm\n" in script
        assert script.index("    step run_node_check\n") < script.index("    step join_slurm\n")
    assert "join_slurm" not in render(UserDataParams("demo", "p5.48xlarge", 8, FSX, True))


def test_the_slurmd_options_survive_systemd_s_quoting(tmp_path: Path) -> None:
    """Run the script's own join_slurm with stand-ins for IMDS, the key fetch and systemctl.

    systemd reads /etc/default/slurmd and splits $SLURMD_OPTIONS on unquoted spaces, removing the quotes;
    Python's shlex splits the same way, so --conf must come back as one argument.
    """
    script = render(UserDataParams("demo", "p5.48xlarge", 8, None, True, JOIN))
    body = script[script.index("write_file() {") : script.index("\nmain() {")]
    defaults, passed = tmp_path / "slurmd", tmp_path / "passed"
    passed.touch()
    probe = (
        "#!/bin/bash\nset -euo pipefail\nreadonly LOG_TAG=probe\n"
        + f"readonly NODE_CHECK_PASSED={passed}\nreadonly SLURMD_DEFAULTS={defaults}\n"
        + f"readonly SLURM_LEAVE_UNIT={tmp_path}/leave.service\n"
        + "readonly SCONTROL=/usr/bin/scontrol\n"
        + f"readonly SLURM_CONF_SERVER={JOIN.conf_server}\nreadonly SLURM_NODE_CONF='{JOIN.registration}'\n"
        + user_data._COMMON
        + body
        + "fetch_slurm_key() { :; }\nimds() { echo i-0123456789abcdef0; }\nsystemctl() { :; }\njoin_slurm\n"
    )
    path = tmp_path / "probe.sh"
    path.write_text(probe)
    subprocess.run(["bash", str(path)], check=True, timeout=30)
    line = defaults.read_text()
    assert line.startswith('SLURMD_OPTIONS="') and line.endswith('"\n')
    assert shlex.split(line[len('SLURMD_OPTIONS="') : -2]) == [
        "-Z",
        "-N",
        "i-0123456789abcdef0",
        "--conf-server",
        "10.0.0.10:6817",
        "--conf",
        JOIN.registration,
    ]
    leave = (tmp_path / "leave.service").read_text()
    assert "ExecStop=-/usr/bin/scontrol delete nodename=i-0123456789abcdef0\n" in leave
    assert "After=slurmd.service network-online.target\n" in leave


def test_options_slurmd_cannot_carry_are_refused() -> None:
    bad = dataclasses.replace(JOIN, registration="Feature='x'")
    with pytest.raises(ValueError, match="registration"):
        render(UserDataParams("demo", "p5.48xlarge", 8, None, True, bad))


def test_the_controller_starts_slurmctld_only_when_every_step_before_succeeded() -> None:
    script = render_controller(CONTROLLER)
    assert "if ((${#FAILED_STEPS[@]} == 0)); then\n        step start_slurmctld\n" in script
    assert (
        "readonly SLURM_CONF_TEXT='ClusterName=demo\nSlurmctldHost=demo-slurmctld(10.0.0.10)\n'\n" in script
    )
    assert "preserve_hostname: true" in script
    with pytest.raises(ValueError, match="files is empty"):
        render_controller(dataclasses.replace(CONTROLLER, files={}))
