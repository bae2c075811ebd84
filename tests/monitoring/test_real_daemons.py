"""The rendered files run in the real daemons: the pinned Prometheus (3.13) starts with prometheus.yml and
prometheus.flags and loads every rule; Alertmanager 0.33.1 starts with alertmanager.yml and sends
a drain alert to the drain receiver's address on 127.0.0.1, where a stand-in receiver (this test's
HTTP server, so that only the routing is judged here; test_end_to_end.py runs gpuforge's own
receiver) reads Alertmanager's webhook JSON.

Each daemon is started by this test on 127.0.0.1 and stopped by its own pid; every wait polls the state
it needs (tests/waiting.py's one bound).
Debian's Alertmanager reads its default notification template from a fixed path,
/usr/share/prometheus/alertmanager/default.tmpl (the package installs it there; the test root only
unpacks it), so the test starts it in a private mount namespace whose /usr/share is an overlay that
adds the test root's template: the host's /usr/share is left as it is.
"""

from __future__ import annotations

import json
import os
import threading
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import pytest
from monitoring_support import SHIPPED_STACKS, alertmanager_command, tool
from monitoring_tools import free_port, log_tail, running, wait_ready
from waiting import WAIT_S, wait_until

from gpuforge.cli import main
from gpuforge.monitoring.alertmanager import DRAIN_URL
from gpuforge.monitoring.rules import load_rules

pytestmark = pytest.mark.slow
# The rendered route waits group_wait (30 s) before its first notification of a group.
GROUP_WAIT_S = 30


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=WAIT_S) as answer:
        return json.loads(answer.read())


def _wait(what: str, check: Callable[[], Any], log: Path, *, beyond_s: float = 0.0) -> Any:
    """Until `check()` gives a truthy answer (a daemon's API that does not answer yet, or answers
    what is not JSON yet, is not there yet); fails with the last answer and the daemon's log."""
    return wait_until(
        what, check, bool, beyond_s=beyond_s, not_yet=(OSError, ValueError), context=lambda: log_tail(log)
    )


@pytest.fixture
def rendered(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    assert main(["monitoring", "render", str(SHIPPED_STACKS), "--stack", "p5-prod", "--out", str(out)]) == 0
    return out


def test_prometheus_starts_with_the_rendered_config_and_flags_and_loads_every_rule(
    rendered: Path, tmp_path: Path
) -> None:
    port = free_port()
    flags = [
        line
        for line in (rendered / "prometheus.flags").read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#") and not line.startswith("--web.listen-address=")
    ]
    command = [
        str(tool("prometheus")),
        f"--config.file={rendered / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp_path / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        *flags,
    ]
    log = tmp_path / "prometheus.log"
    with running(command, log):
        base = f"http://127.0.0.1:{port}"
        groups = _wait(
            "Prometheus loaded its rules", lambda: _get(f"{base}/api/v1/rules")["data"]["groups"], log
        )
        runtime = _get(f"{base}/api/v1/status/runtimeinfo")["data"]
    kinds = [rule["type"] for group in groups for rule in group["rules"]]
    data = load_rules()
    assert kinds.count("alerting") == len(data.alerts)
    assert kinds.count("recording") == len(data.recording)
    assert runtime["storageRetention"] == "15d"  # prometheus.yml's (test_prometheus_retention.py)


class _Receiver(BaseHTTPRequestHandler):
    received: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        type(self).received.append({"path": self.path, "body": json.loads(body)})
        self.send_response(200)
        self.end_headers()

    def log_message(self, *_: object) -> None:
        """Quiet: the test reports what it received."""


def test_alertmanager_sends_a_drain_alert_to_the_receiver_on_loopback(rendered: Path, tmp_path: Path) -> None:
    drain = urlsplit(DRAIN_URL)
    assert drain.hostname == "127.0.0.1"
    try:
        server = HTTPServer((drain.hostname, drain.port or 80), _Receiver)
    except OSError as error:
        pytest.fail(f"the drain receiver's address {drain.netloc} is taken on this machine: {error}")
    _Receiver.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    if os.geteuid() != 0:
        pytest.skip("the overlay for Debian's template path needs root (unshare, mount)")
    port = free_port()
    command = alertmanager_command(rendered / "alertmanager.yml", tmp_path / "am", port, tmp_path / "overlay")
    log = tmp_path / "alertmanager.log"
    try:
        with running(command, log) as process:
            base = f"http://127.0.0.1:{port}"
            wait_ready(f"{base}/-/ready", process, log)
            alerts = [
                {
                    "labels": {
                        "alertname": "GpuforgeXidNodeBad",
                        "drain": "true",
                        "node": "i-0abc",
                        "severity": "critical",
                    }
                },
                {
                    "labels": {
                        "alertname": "GpuforgeNodeDown",
                        "drain": "false",
                        "node": "i-0def",
                        "severity": "warning",
                    }
                },
            ]
            request = urllib.request.Request(
                f"{base}/api/v2/alerts",
                data=json.dumps(alerts).encode(),
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=WAIT_S) as answer:
                assert answer.status == 200
            _wait("the drain receiver got the alert", lambda: _Receiver.received, log, beyond_s=GROUP_WAIT_S)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    [delivery] = _Receiver.received
    assert delivery["path"] == drain.path
    labels = [alert["labels"] for alert in delivery["body"]["alerts"]]
    assert labels == [
        {"alertname": "GpuforgeXidNodeBad", "drain": "true", "node": "i-0abc", "severity": "critical"}
    ]
