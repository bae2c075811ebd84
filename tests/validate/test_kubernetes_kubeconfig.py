"""`gpuforge validate` on a Kubernetes stack reads the kubeconfig as `scheduler apply` does
(gpuforge.kubernetes.kubeconfig): a kubeconfig it cannot use is exit 2 naming the file and the rule, never a
traceback, and a pipe in $KUBECONFIG is refused rather than waited on. A server that answers a web page or does
not answer stops the run with exit 1 (run again), not a traceback: the stand-in server here is Python's HTTP
server on 127.0.0.1, since no real API server answers HTML."""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.cli import main

REPO = Path(__file__).resolve().parents[2]
RUN = [
    "validate",
    str(REPO / "stacks" / "training"),
    "--stack",
    "p5-eks",
    "--image",
    "r.invalid/x@sha256:" + "ab" * 32,
]


def test_a_kubeconfig_that_is_not_yaml_is_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "config").write_text("clusters: [unclosed\n", encoding="utf-8")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "config"))
    assert main(RUN) == 2
    err = capsys.readouterr().err
    assert "not valid YAML" in err and "Fix:" in err and "Traceback" not in err


def test_a_kubeconfig_pipe_is_refused_not_waited_on(tmp_path: Path) -> None:
    """In a process of its own, bounded by the subprocess timeout: the client's loader blocked on the pipe."""
    os.mkfifo(tmp_path / "config")
    done = subprocess.run(
        [sys.executable, "-m", "gpuforge.cli", *RUN],
        cwd=tmp_path,  # not the checkout: `-m` would import its gpuforge folder, not the installed package
        env={**os.environ, "KUBECONFIG": str(tmp_path / "config")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "not a regular file" in done.stderr and "Traceback" not in done.stderr


def _kubeconfig(folder: Path, server: str) -> Path:
    body = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }
    (folder / "config").write_text(yaml.safe_dump(body), encoding="utf-8")
    return folder / "config"


@pytest.fixture
def web_page() -> Iterator[int]:
    """A server on 127.0.0.1 that answers every GET with an HTML page (a proxy's sign-in page)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<html><body>Sign in</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_server_answering_a_web_page_stops_the_run_with_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], web_page: int
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path, f"http://127.0.0.1:{web_page}")))
    assert main(RUN) == 1
    err = capsys.readouterr().err
    assert "answered what no Kubernetes API server sends" in err and "an HTML page" in err
    assert "Traceback" not in err


def test_a_server_that_refuses_the_connection_stops_the_run_with_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path, f"http://127.0.0.1:{_closed_port()}")))
    assert main(RUN) == 1
    err = capsys.readouterr().err
    assert "did not answer" in err and "Connection refused" in err and "Traceback" not in err
