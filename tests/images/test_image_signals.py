"""`image build --local` stopped by SIGTERM or SIGKILL: nothing outlives it, the catalog is byte-identical.

gpuforge runs as a real process (`python -m gpuforge.cli`), as CI runs it. Its packer
is a stand-in script on PATH that sleeps before handing over to the real packer, so
the signal lands while the build is under way; the stand-in only adds time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from image_helpers import MATRICES, REGION, pids_with
from waiting import WAIT_S, wait_until

from gpuforge.images.catalog import CatalogEntry, record_entry
from gpuforge.images.emulator import SERVER_MODULE

SLOW_PACKER = """#!/usr/bin/env bash
if [[ "$1" == build ]]; then
    echo "1,,ui,say,slow-packer-started"
    sleep 120
fi
exec {real} "$@"
"""
EXISTING = CatalogEntry(
    "ami-0123456789abcdef0", REGION, "older", "1.0.0", "c" * 64, "2026-01-31T12:00:00+00:00", "1.6.6"
)


def _emulators_of(pid: int) -> list[int]:
    """moto servers started by gpuforge process `pid` (the wrapper carries its parent's pid)."""
    return [
        p
        for p in pids_with(SERVER_MODULE)
        if (Path("/proc") / str(p) / "cmdline").read_bytes().split(b"\0")[3:4] == [str(pid).encode()]
    ]


@pytest.fixture
def slow_packer(tmp_path: Path) -> Iterator[Path]:
    real = subprocess.run(["which", "packer"], capture_output=True, text=True, check=True).stdout.strip()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "packer"
    script.write_text(SLOW_PACKER.format(real=real))
    script.chmod(0o755)
    yield bin_dir
    for pid in pids_with(str(script)):  # a SIGKILLed gpuforge cannot stop its packer: end the stand-in here
        os.kill(pid, signal.SIGKILL)


def _start_build(tmp_path: Path, bin_dir: Path, catalog: Path) -> tuple[subprocess.Popen[bytes], int, Path]:
    """The build, once its packer has started (its output in the returned log), and its emulator's pid."""
    """Start a --local build; return it once packer's build is running, with the emulator's pid."""
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONUNBUFFERED": "1"}
    matrix = MATRICES / "p5-h100-cuda12.yaml"
    command = [sys.executable, "-m", "gpuforge.cli", "image", "build", str(matrix), "--region", REGION]
    log = tmp_path / "build.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*command, "--local", "--catalog", str(catalog)], cwd=tmp_path, env=env, stdout=out, stderr=out
        )
    wait_until(
        "packer to start",
        lambda: log.read_text(errors="replace"),
        lambda seen: "slow-packer-started" in seen,
        stopped=lambda: None if process.poll() is None else "the build ended before packer started",
    )
    emulators = _emulators_of(process.pid)
    assert len(emulators) == 1, log.read_text(errors="replace")
    return process, emulators[0], log


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_gone(pid: int, what: str) -> None:
    """Until process `pid` has exited (it may take a loaded machine a while to stop a server)."""
    wait_until(what, lambda: _alive(pid), lambda alive: not alive)


@pytest.mark.parametrize(
    ("sent", "code", "said"),
    [(signal.SIGTERM, 143, "terminated (SIGTERM)"), (signal.SIGINT, 130, "interrupted")],
)
@pytest.mark.parametrize("layout", ["catalog.json", "catalog"])
def test_sigterm_stops_the_build_like_ctrl_c_and_leaves_nothing_behind(
    tmp_path: Path, slow_packer: Path, layout: str, sent: signal.Signals, code: int, said: str
) -> None:
    catalog = tmp_path / layout
    record_entry(catalog, EXISTING)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*.json")}
    process, emulator, log = _start_build(tmp_path, slow_packer, catalog)
    process.send_signal(sent)
    process.wait(timeout=WAIT_S)
    rest = log.read_text(errors="replace")
    assert process.returncode == code, rest
    assert said in rest and "no AMI was recorded" in rest
    assert "Traceback" not in rest
    _wait_gone(emulator, "the emulator to stop with the build")
    assert not pids_with(str(slow_packer / "packer")), "packer outlived the build"
    assert {p: p.read_bytes() for p in tmp_path.rglob("*.json")} == before


def test_sigkill_of_the_build_takes_the_emulator_with_it(tmp_path: Path, slow_packer: Path) -> None:
    catalog = tmp_path / "catalog"
    record_entry(catalog, EXISTING)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*.json")}
    process, emulator, _ = _start_build(tmp_path, slow_packer, catalog)
    process.kill()
    process.wait(timeout=WAIT_S)
    _wait_gone(emulator, "the emulator to stop with a SIGKILLed build (its parent-death signal)")
    assert {p: p.read_bytes() for p in tmp_path.rglob("*.json")} == before
