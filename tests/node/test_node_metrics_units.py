"""What the image installs for the job mapping and the EFA collector: the Slurm wrappers, the
collector's service and timer, and dcgm-exporter's drop-in, against the code's own defaults and
systemd's own verdict (systemd-analyze verify in an alternate root)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from systemd_units import DCGM_EXPORTER_UNIT, read_unit, systemd_root, verify

from gpuforge.node.efa_metrics import DEFAULT_OUT
from gpuforge.node.job_mapping import DEFAULT_MAPPING_DIR
from gpuforge.scheduler.render import SlurmSite

REPO = Path(__file__).resolve().parents[2]
FILES = REPO / "images/files"
STEP = REPO / "images/scripts/85-gpuforge.sh"
SERVICE = FILES / "gpuforge-efa-metrics.service"
TIMER = FILES / "gpuforge-efa-metrics.timer"
DCGM_DROPIN = FILES / "nvidia-dcgm-exporter-gpuforge-jobs.conf"
SITE = SlurmSite(controller_host="h", controller_addr="10.0.0.10")


def _wrapper(step: str) -> str:
    """The wrapper 85-gpuforge.sh installs for `step`, expanded by bash as the step expands it."""
    body = re.search(r"for step in prolog epilog; do\n(.*?)\ndone\n", STEP.read_text(), re.S)
    assert body is not None, "85-gpuforge.sh no longer installs the prolog and epilog wrappers in one loop"
    script = body.group(1).replace(
        'install -D -m 0755 /dev/stdin "/usr/local/sbin/gpuforge-slurm-$step"', "cat"
    )
    done = subprocess.run(
        ["bash", "-c", f"step={step}\n{script}"], capture_output=True, text=True, timeout=30, check=True
    )
    return done.stdout


@pytest.mark.parametrize("step", ["prolog", "epilog"])
def test_the_wrappers_are_where_slurm_conf_points_and_always_exit_0(tmp_path: Path, step: str) -> None:
    assert '"/usr/local/sbin/gpuforge-slurm-$step"' in STEP.read_text()
    assert getattr(SITE, step) == f"/usr/local/sbin/gpuforge-slurm-{step}"
    text = _wrapper(step)
    assert f"/usr/local/bin/gpuforge node {step} 2>&1" in text
    # gpuforge itself failing (or absent) still leaves the job running and the node in service
    failing = tmp_path / "gpuforge"
    failing.write_text("#!/bin/sh\necho broken >&2\nexit 1\n")
    failing.chmod(0o755)
    for command in (str(failing), str(tmp_path / "absent")):
        wrapper = tmp_path / f"gpuforge-slurm-{step}"
        wrapper.write_text(text.replace("/usr/local/bin/gpuforge", command))
        wrapper.chmod(0o755)
        assert subprocess.run([str(wrapper)], capture_output=True, timeout=30, check=False).returncode == 0


def test_the_dcgm_dropin_names_the_prologs_folder() -> None:
    service = read_unit(DCGM_DROPIN)["Service"]
    assert service["Environment"] == f"DCGM_HPC_JOB_MAPPING_DIR={DEFAULT_MAPPING_DIR}"
    assert service["ExecStartPre"] == f"/bin/mkdir -p {DEFAULT_MAPPING_DIR}"
    script = STEP.read_text()
    assert "*/nvidia-dcgm-exporter-*.conf)" in script
    assert '"/etc/systemd/system/nvidia-dcgm-exporter.service.d/${name#nvidia-dcgm-exporter-}"' in script


def test_the_collector_unit_writes_where_the_code_says() -> None:
    exec_start = read_unit(SERVICE)["Service"]["ExecStart"]
    assert exec_start == f"/usr/local/bin/gpuforge node efa-metrics --out {DEFAULT_OUT}"
    timer = read_unit(TIMER)
    assert timer["Timer"]["OnUnitActiveSec"] == "15"
    assert timer["Install"]["WantedBy"] == "timers.target"


def test_systemd_accepts_the_units(tmp_path: Path) -> None:
    etc = systemd_root(tmp_path, ["usr/local/bin/gpuforge", "usr/bin/dcgm-exporter", "bin/mkdir"])
    (etc / "nvidia-dcgm-exporter.service.d").mkdir()
    for unit in (SERVICE, TIMER):
        shutil.copy(unit, etc / unit.name)
    (etc / "nvidia-dcgm-exporter.service").write_text(DCGM_EXPORTER_UNIT)
    shutil.copy(DCGM_DROPIN, etc / "nvidia-dcgm-exporter.service.d/gpuforge-jobs.conf")

    for name in (SERVICE.name, TIMER.name, "nvidia-dcgm-exporter.service"):
        done = verify(tmp_path, name)
        assert (name, done.returncode, done.stderr) == (name, 0, "")
    # the same check reads the drop-in and notices a broken one, so the clean verdict above means something
    dropin = etc / "nvidia-dcgm-exporter.service.d/gpuforge-jobs.conf"
    dropin.write_text(DCGM_DROPIN.read_text().replace("/bin/mkdir", "/bin/no-such-mkdir"))
    broken = verify(tmp_path, "nvidia-dcgm-exporter.service")
    assert broken.returncode != 0 and "no-such-mkdir" in broken.stderr
