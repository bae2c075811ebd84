"""The wheel carries every file the image build reads from the package (scripts, unit files, the RDS CA
bundle, the Kubernetes files), so an installed gpuforge builds the same image as a checkout.

Built with pip's own wheel build, as a user's `pip install` does; the folder globs in pyproject.toml's
package-data are what this guards (a new sub-folder of images/files was once left out)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHIPPED_FOLDERS = ("images/files", "images/scripts", "images/matrices", "gpuforge/data", "policies")


@pytest.mark.slow
def test_the_wheel_carries_every_file_the_image_build_and_the_rules_read(tmp_path: Path) -> None:
    # From a copy of the checkout's files: setuptools builds in the source tree and reuses its build/lib,
    # which would hide a file the globs no longer take.
    source = tmp_path / "source"
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    for path in listed:
        if (REPO / path).is_file():
            (source / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / path, source / path)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", str(source), "-w", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = tmp_path.glob("gpuforge-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = subprocess.run(
        ["git", "ls-files", *SHIPPED_FOLDERS],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    # Top-level folders are subpackages of gpuforge (pyproject.toml's package-dir); gpuforge/ is itself.
    expected = {path if path.startswith("gpuforge/") else f"gpuforge/{path}" for path in tracked}
    missing = sorted(path for path in expected if path not in names and not path.endswith("README.md"))
    assert missing == []
