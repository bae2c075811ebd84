"""The real Prometheus tools every test folder runs: the binaries of the monitoring test root
(scripts/monitoring-root.sh), found in one place so that GPUFORGE_MONITORING_ROOT moves them all."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from waiting import WAIT_S, wait_until

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


def log_tail(log: Path) -> str:
    """The end of a daemon's log, for a failure message."""
    return log.read_text(encoding="utf-8", errors="replace")[-3000:] if log.exists() else f"(no {log})"


def http_status(url: str) -> int:
    """The status of a GET of `url` (a daemon's readiness endpoint)."""
    with urllib.request.urlopen(url, timeout=WAIT_S) as answer:
        return int(answer.status)


def wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    """Until `url` (a /-/ready or /readyz endpoint: the daemon serves, not only listens) answers 200;
    fails at once if the daemon exits, and with its log's tail."""
    wait_until(
        f"{url} to answer 200",
        lambda: http_status(url),
        lambda status: status == 200,
        not_yet=(OSError,),
        stopped=lambda: None if process.poll() is None else f"the daemon exited {process.returncode}",
        context=lambda: log_tail(log),
    )


@contextlib.contextmanager
def prometheus(config: Path, data: Path, log: Path, *, extra_flags: Sequence[str] = ()) -> Iterator[int]:
    """The real Prometheus on 127.0.0.1 with `config` and its TSDB in `data`; yields its port once
    /-/ready answers (fails with the log's tail if it exits first or is not ready in time)."""
    port = free_port()
    command = [
        str(tool("prometheus")),
        f"--config.file={config}",
        f"--storage.tsdb.path={data}",
        *extra_flags,
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with running(command, log) as process:
        wait_ready(f"http://127.0.0.1:{port}/-/ready", process, log)
        yield port
