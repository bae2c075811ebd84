"""An AWS API emulator for `image build --local`: moto's server on 127.0.0.1.

moto reads the AMIs it knows from MOTO_AMIS_PATH when its EC2 backend first
loads, so the server runs as a subprocess started with that variable: the
matrix's pinned base AMIs then exist in the emulator with their ids, boot mode
and root device. It listens on 127.0.0.1 only, on a free port, takes dummy
credentials, and is shut down when the build ends, whatever the outcome: by
`close()` on every way out of the `with` block (SIGTERM included, through
signals.sigterm_as_interrupt), and by a parent-death signal when gpuforge is
killed outright (emulator_server.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from gpuforge.errors import GpuforgeError

HOST = "127.0.0.1"
DUMMY_CREDENTIALS = ("testing", "testing")
STARTUP_TIMEOUT_S = 60.0
PORT_ATTEMPTS = 3
# moto's server behind a wrapper that stops it when gpuforge dies, even by SIGKILL.
SERVER_MODULE = "gpuforge.images.emulator_server"


class EmulatorError(GpuforgeError):
    """moto's server is missing or did not start (exit 2)."""


@dataclass(frozen=True)
class SeedImage:
    """An AMI the emulator knows from the start, as a pinned base image."""

    ami_id: str
    name: str
    boot_mode: str
    root_device_name: str
    architecture: str = "x86_64"

    def to_moto(self) -> dict[str, object]:
        return {
            "ami_id": self.ami_id,
            "name": self.name,
            "description": "gpuforge --local seed of a pinned base image",
            "owner_id": "099720109477",  # Canonical's image-publishing account
            "public": True,
            "virtualization_type": "hvm",
            "architecture": self.architecture,
            "state": "available",
            "platform": None,
            "image_type": "machine",
            "hypervisor": "xen",
            "root_device_type": "ebs",
            "root_device_name": self.root_device_name,
            "sriov": "simple",
            "boot_mode": self.boot_mode,
        }


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def require_moto() -> None:
    if importlib.util.find_spec("moto") is None or importlib.util.find_spec("flask") is None:
        raise EmulatorError(
            "--local needs moto's server, which is not installed. Fix: pip install 'gpuforge[local]' "
            "(scripts/bootstrap.sh local)."
        )


class LocalAws:
    """Context manager: a running moto server seeded with `images`; `endpoint` while inside."""

    def __init__(self, images: Sequence[SeedImage], *, startup_timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        self.images = tuple(images)
        self.startup_timeout_s = startup_timeout_s
        self.endpoint = ""
        self._process: subprocess.Popen[bytes] | None = None
        self._workdir: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> LocalAws:
        require_moto()
        self._workdir = tempfile.TemporaryDirectory(prefix="gpuforge-moto-")
        seed = Path(self._workdir.name) / "amis.json"
        seed.write_text(json.dumps([image.to_moto() for image in self.images]), encoding="utf-8")
        try:
            for attempt in range(1, PORT_ATTEMPTS + 1):
                if self._start(seed, attempt):
                    return self
            raise EmulatorError(
                f"moto's server could not bind a free port on {HOST} in {PORT_ATTEMPTS} tries."
            )
        except BaseException:
            self.close()
            raise

    def _log(self) -> Path:
        assert self._workdir is not None
        return Path(self._workdir.name) / "moto.log"

    def _start(self, seed: Path, attempt: int) -> bool:
        """Start the server on a free port; False when another process took the port first."""
        port = _free_port()
        env = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
        env.update(
            {"MOTO_AMIS_PATH": str(seed), "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
        )
        with self._log().open("ab") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", SERVER_MODULE, str(os.getpid()), "-H", HOST, "-p", str(port)],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # `-m` puts the working folder first on sys.path; a checkout's gpuforge/ there would
                # shadow the installed package (whose images live in images/, not gpuforge/images).
                cwd=self._workdir.name if self._workdir else None,
            )
        endpoint = f"http://{HOST}:{port}"
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                said = self._log().read_text(encoding="utf-8", errors="replace")
                if "in use" in said and attempt < PORT_ATTEMPTS:
                    return False
                last = [line for line in said.splitlines() if line.strip()][-3:]
                raise EmulatorError(
                    f"moto's server exited at start (exit {self._process.returncode}): {' | '.join(last)}"
                )
            try:
                with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2):
                    self.endpoint = endpoint
                    return True
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        raise EmulatorError(
            f"moto's server did not answer on {endpoint} within {self.startup_timeout_s:g} s."
        )

    def close(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
