"""NVLink 5 (HGX B200/B300): the image loads what NVLSM needs before Fabric Manager starts, and verifies it.

The steps run in real bash from a real render of the shipped p6-b200 matrix. `modinfo` is a stand-in
(this machine has neither the AWS kernel nor its modules), answering only for the modules it is told
exist; everything else is the scripts' own code.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from image_helpers import MATRICES, REPO, base_path

from gpuforge.images.matrix import load_valid
from gpuforge.images.render import RenderOptions, render

SCRIPTS = REPO / "images" / "scripts"
MODULES_FILE = "etc/modules-load.d/gpuforge-nvlink5.conf"
DROPIN = "etc/systemd/system/nvidia-fabricmanager.service.d/gpuforge-nvlink5.conf"


@pytest.fixture(scope="module")
def b200(tmp_path_factory: pytest.TempPathFactory) -> Path:
    matrix, digest = load_valid(MATRICES / "p6-b200-cuda12.yaml")
    out = tmp_path_factory.mktemp("p6-b200") / "out"
    return render(matrix, digest, RenderOptions(region="us-east-1", imds=False), out).payload


def _bash(
    payload: Path, root: Path, script: str, modules: tuple[str, ...]
) -> subprocess.CompletedProcess[str]:
    bin_dir = root.parent / f"bin-{root.name}"
    path = base_path(bin_dir)
    known = " ".join(modules)
    stand_in = bin_dir / "modinfo"
    stand_in.write_text(
        f'#!/usr/bin/env bash\nfor m in {known}; do [[ "${{!#}}" == "$m" ]] && exit 0; done\nexit 1\n'
    )
    stand_in.chmod(0o755)
    program = f'source "{payload}/scripts/lib.sh"; load_matrix; {script}'
    return subprocess.run(
        ["bash", "-c", program],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": path, "GPUFORGE_ROOT": str(root)},
        check=False,
    )


def test_the_step_loads_ib_umad_and_mlx5_core_at_boot_before_fabric_manager(
    b200: Path, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    done = _bash(b200, root, "write_nvlink5_prerequisites", ())
    assert done.returncode == 0, done.stderr
    listed = [line for line in (root / MODULES_FILE).read_text().splitlines() if not line.startswith("#")]
    assert listed == ["mlx5_core", "ib_umad"]
    unit = (root / DROPIN).read_text().splitlines()
    assert "[Unit]" in unit and "After=systemd-modules-load.service" in unit
    assert "Wants=systemd-modules-load.service" in unit


def test_verify_passes_when_every_prerequisite_is_met(b200: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    done = _bash(b200, root, "write_nvlink5_prerequisites; nvlink5_problems", ("mlx5_core", "ib_umad"))
    assert (done.returncode, done.stdout) == (0, ""), done.stderr


def test_verify_names_each_missing_prerequisite(b200: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    done = _bash(b200, root, "nvlink5_problems", ("mlx5_core",))
    problems = done.stdout.splitlines()
    kernel = "6.8.0-1015-aws"
    assert (
        f"kernel module ib_umad is not available for {kernel} (install the kernel's modules-extra package)"
        in problems
    )
    assert f"ib_umad is not loaded at boot: it is missing from {root}/{MODULES_FILE}" in problems
    assert f"mlx5_core is not loaded at boot: it is missing from {root}/{MODULES_FILE}" in problems
    assert any("not ordered after systemd-modules-load.service" in line for line in problems)
    assert not any("kernel module mlx5_core" in line for line in problems)


def test_the_steps_call_them_only_where_nvlsm_is_pinned() -> None:
    step = (SCRIPTS / "30-fabricmanager.sh").read_text()
    branch = step[step.index('if [[ -n "$GPUFORGE_NVLSM" ]]') :]
    assert (
        branch.index("install_pinned") < branch.index("write_nvlink5_prerequisites") < branch.index("\nfi\n")
    )
    verify = (SCRIPTS / "90-verify.sh").read_text()
    nvlsm = verify[verify.index('if [[ -n "$GPUFORGE_NVLSM" ]]') :]
    assert "fail nvlsm" in nvlsm and "nvlink5_problems" in nvlsm
