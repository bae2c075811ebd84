"""The real Prometheus tools every test folder runs: the binaries of the monitoring test root
(scripts/monitoring-root.sh), found in one place so that GPUFORGE_MONITORING_ROOT moves them all."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DEFAULT_ROOT = REPO / ".cache" / "monitoring-root"


def tools_root() -> Path:
    """The root the tests read: GPUFORGE_MONITORING_ROOT, as scripts/monitoring-root.sh builds it,
    or its default. Read at each call, so a test or a run that sets it is always honoured."""
    return Path(os.environ.get("GPUFORGE_MONITORING_ROOT") or DEFAULT_ROOT)


def tool(name: str) -> Path:
    """A binary of the monitoring test root. Absent: skip where the session cannot build it (not
    root), fail where it can (root: scripts/test.sh builds it first, so CI never skips silently)."""
    path = tools_root() / "usr" / "bin" / name
    if path.is_file() and os.access(path, os.X_OK):
        return path
    if os.geteuid() != 0:
        pytest.skip(f"no {name} at {path}; scripts/monitoring-root.sh builds it (needs root)")
    pytest.fail(f"no {name} at {path}: run scripts/monitoring-root.sh (scripts/test.sh does) and run again")


def free_port() -> int:
    """A TCP port on 127.0.0.1 free now (the daemon that takes it binds it a moment later)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def running(command: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`command` as a daemon writing to `log`, stopped by its own pid on leaving (killed after 10 s)."""
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@contextlib.contextmanager
def prometheus(
    config: Path, data: Path, log: Path, *, extra_flags: Sequence[str] = (), ready_s: float = 60
) -> Iterator[int]:
    """The real Prometheus on 127.0.0.1 with `config` and its TSDB in `data`; yields its port once
    /-/ready answers (fails with the log's tail if it exits or is not ready in `ready_s`)."""
    port = free_port()
    command = [
        str(tool("prometheus")),
        f"--config.file={config}",
        f"--storage.tsdb.path={data}",
        *extra_flags,
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with running(command, log) as process:
        deadline = time.monotonic() + ready_s
        while True:
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2) as answer,
            ):
                if answer.status == 200:
                    break
            assert process.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, f"Prometheus not ready in {ready_s} s"
            time.sleep(0.2)
        yield port
