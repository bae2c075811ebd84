"""The dead-man's switch and the inhibit rules in the real tools: promtool 3.13, amtool and Alertmanager
0.33.1, Prometheus 3.13 (scripts/monitoring-root.sh).

- The rendered files with a heartbeat (URL and SNS) pass `promtool check config`/`check rules` and
  `amtool check-config`, and amtool routes the heartbeat to its receiver alone.
- `promtool test rules`: the heartbeat fires from the first evaluation on, with no series at all.
- Inhibition: a real Alertmanager with the rendered alertmanager.yml, fed through its API a node-down
  alert and that node's GPU and EFA alerts, another node's GPU alert and the first node's drain alert,
  delivers the node-down, the drain alert (never inhibited) and the other node's alert to a webhook on
  127.0.0.1, and none of the inhibited ones. Adapted, and why: the notify receiver's SNS config is
  replaced by a webhook on 127.0.0.1 (SNS cannot be reached here); the routes and inhibit_rules are
  the rendered ones.
- A stopped Prometheus is noticed: the real Prometheus and Alertmanager deliver the heartbeat, over
  HTTPS, to this test's receiver at the stack's `heartbeat.url` again and again; the test kills
  Prometheus by its pid, and the receiver's dead-man check (the last arrival against the rendered
  intervals) calls it missing within the bound the rendered intervals give. Adapted, and why:
  prometheus.yml's Alertmanager target is the test's port and its EC2 scrape jobs are dropped (the
  heartbeat needs no target, and EC2 discovery cannot run here); the receiver's name,
  heartbeat.gpuforge.test (RFC 2606's reserved .test), is 127.0.0.1 in Alertmanager's private
  /etc/hosts, and Alertmanager trusts the test's CA through SSL_CERT_FILE. The short interval is the
  stack's own `intervalSeconds`; no rendered interval is edited.

Every daemon and server is started by this test and stopped by it by its own pid or handle; every
wait polls the state it needs (tests/waiting.py's one bound, plus the product's own intervals).
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import json
import os
import ssl
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from monitoring_support import StackMaker, alertmanager_command, tool
from monitoring_tools import free_port, log_tail, running, wait_ready
from waiting import WAIT_S, wait_until

from gpuforge.cli import main
from gpuforge.monitoring.alertmanager import HEARTBEAT_RECEIVER, NOTIFY_RECEIVER
from gpuforge.monitoring.heartbeat import timing
from gpuforge.monitoring.rules import HEARTBEAT_FILE, load_rules

pytestmark = pytest.mark.slow
TIMEOUT = 60
ALERTS_TOPIC = "arn:aws:sns:us-east-1:123456789012:gpuforge-alerts"
HEARTBEAT_TOPIC = "arn:aws:sns:us-east-1:123456789012:gpuforge-heartbeat"
RECEIVER_HOST = "heartbeat.gpuforge.test"
INTERVAL_S = 8  # the stack's intervalSeconds in the stopped-Prometheus test
# What the machine adds to a delivery (an HTTPS POST on 127.0.0.1 under load) beyond the product's bound.
DELIVERY_S = 3.0


def _run(*command: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(part) for part in command], capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


def _render(folder: Path, out: Path) -> Path:
    assert main(["monitoring", "render", str(folder), "--stack", "test", "--out", str(out)]) == 0
    return out


def _seconds(text: str) -> float:
    """A rendered duration (gpuforge.monitoring.heartbeat.duration: `Ns` or `Nms`) in seconds."""
    return int(text[:-2]) / 1000 if text.endswith("ms") else float(int(text[:-1]))


@pytest.mark.parametrize(
    "heartbeat",
    [{"url": "https://hc.example.com/ping/0f3c9a52"}, {"sns": HEARTBEAT_TOPIC, "intervalSeconds": 300}],
    ids=["url", "sns"],
)
def test_the_rendered_heartbeat_passes_the_real_tools_and_routes_alone(
    make_stack: StackMaker, tmp_path: Path, heartbeat: dict[str, Any]
) -> None:
    block = {"alerts": {"sns": ALERTS_TOPIC}, "heartbeat": heartbeat}
    out = _render(make_stack(**{"gpuforge:monitoring": block}), tmp_path / "out")
    checked = _run(tool("promtool"), "check", "config", out / "prometheus.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 3 rule files found" in checked.stdout
    rules = _run(tool("promtool"), "check", "rules", out / "rules" / HEARTBEAT_FILE)
    assert rules.returncode == 0 and "SUCCESS: 1 rules found" in rules.stdout, rules.stdout + rules.stderr
    config = out / "alertmanager.yml"
    manager = _run(tool("amtool"), "check-config", config)
    assert manager.returncode == 0, manager.stdout + manager.stderr
    assert " - 1 inhibit rules\n" in manager.stdout  # amtool counts what it loaded

    def routed(*labels: str) -> str:
        done = _run(tool("amtool"), "config", "routes", "test", f"--config.file={config}", *labels)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.strip()

    beat = load_rules().heartbeat
    assert routed(f"alertname={beat.name}", f"severity={beat.severity}", "drain=false") == HEARTBEAT_RECEIVER
    assert routed("alertname=GpuforgeNodeDown", "node=i-1", "drain=false") == NOTIFY_RECEIVER
    assert (
        routed("alertname=GpuforgeXidNodeBad", "node=i-1", "drain=true")
        == f"gpuforge-drain,{NOTIFY_RECEIVER}"
    )
    flags = (out / "prometheus.flags").read_text(encoding="utf-8")
    known = _run(tool("prometheus"), "--help")
    assert (
        "--rules.alert.resend-delay=" in flags
        and "--rules.alert.resend-delay=" in known.stdout + known.stderr
    )


def test_the_heartbeat_always_fires_in_the_real_promtool(make_stack: StackMaker, tmp_path: Path) -> None:
    block = {"heartbeat": {"url": "https://hc.example.com/ping/0f3c9a52"}}
    out = _render(make_stack(**{"gpuforge:monitoring": block}), tmp_path / "out")
    beat = load_rules().heartbeat
    rendered = yaml.safe_load((out / "rules" / HEARTBEAT_FILE).read_text(encoding="utf-8"))
    (rule,) = rendered["groups"][0]["rules"]
    firing = [
        {"exp_labels": {"severity": beat.severity, "drain": "false"}, "exp_annotations": rule["annotations"]}
    ]
    suite = {
        "rule_files": [f"rules/{HEARTBEAT_FILE}"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [],  # nothing scraped at all: the heartbeat needs no target
                "alert_rule_test": [
                    {"eval_time": when, "alertname": beat.name, "exp_alerts": firing}
                    for when in ("0m", "1m", "1h", "7d")
                ],
            }
        ],
    }
    path = out / "heartbeat-test.yml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False), encoding="utf-8")
    result = _run(tool("promtool"), "test", "rules", path)
    assert result.returncode == 0, result.stdout + result.stderr


@dataclass
class Arrivals:
    """What a test receiver got: each POST's path, JSON body and arrival (time.monotonic())."""

    posts: list[tuple[str, dict[str, Any], float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, path: str, body: dict[str, Any]) -> None:
        with self.lock:
            self.posts.append((path, body, time.monotonic()))

    def snapshot(self) -> list[tuple[str, dict[str, Any], float]]:
        with self.lock:
            return list(self.posts)


def _handler(arrivals: Arrivals) -> type[BaseHTTPRequestHandler]:
    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            arrivals.add(self.path, json.loads(body))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: object) -> None:
            """Quiet: the test reports what it received."""

    return Receiver


@contextlib.contextmanager
def serving(arrivals: Arrivals, tls: ssl.SSLContext | None = None) -> Iterator[int]:
    """An HTTP (or, with `tls`, HTTPS) receiver on 127.0.0.1; yields its port, shut down on leaving."""
    server = HTTPServer(("127.0.0.1", 0), _handler(arrivals))
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=WAIT_S)


def _post_alerts(port: int, alerts: list[dict[str, Any]]) -> None:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v2/alerts",
        data=json.dumps(alerts).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=WAIT_S) as answer:
        assert answer.status == 200


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=WAIT_S) as answer:
        return json.loads(answer.read())


def _metric(port: int, name: str, labels: str) -> float:
    """One sample of Alertmanager's own /metrics (0 before the series exists)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=WAIT_S) as answer:
        text = answer.read().decode()
    for line in text.splitlines():
        if line.startswith(f"{name}{{") and labels in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _alert(name: str, node: str, **labels: str) -> dict[str, Any]:
    """An alert as Prometheus posts it for this pack: its labels, with the rendered severity and drain."""
    rule = next(alert for alert in load_rules().alerts if alert.name == name)
    return {
        "labels": {
            "alertname": name,
            "node": node,
            "cluster": "test",
            "severity": rule.severity,
            "drain": "true" if rule.drain else "false",
            **labels,
        }
    }


def _needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("Alertmanager's private mount namespace (template overlay, /etc/hosts) needs root")


def test_a_node_down_silences_that_node_s_gpu_alerts_and_no_other(
    make_stack: StackMaker, tmp_path: Path
) -> None:
    _needs_root()
    block = {"alerts": {"sns": ALERTS_TOPIC}, "drainOnAlert": False}
    out = _render(make_stack(**{"gpuforge:monitoring": block}), tmp_path / "out")
    manager = yaml.safe_load((out / "alertmanager.yml").read_text(encoding="utf-8"))
    rendered_group_wait = _seconds(manager["route"]["group_wait"])
    arrivals = Arrivals()
    with serving(arrivals) as webhook:
        (notify,) = [receiver for receiver in manager["receivers"] if receiver["name"] == NOTIFY_RECEIVER]
        del notify["sns_configs"]  # SNS cannot be reached here: the same receiver posts to the test instead
        notify["webhook_configs"] = [{"url": f"http://127.0.0.1:{webhook}/notify"}]
        config = tmp_path / "alertmanager.yml"
        config.write_text(yaml.safe_dump(manager, sort_keys=False), encoding="utf-8")
        port = free_port()
        log = tmp_path / "alertmanager.log"
        down = "i-0aaa"
        inhibited = [
            _alert("GpuforgeExporterDown", down, job="gpuforge-dcgm"),
            _alert("GpuforgeNvlinkErrors", down, gpu="3"),
            _alert("GpuforgeEfaRetransmits", down, device="rdmap16s27", port="1", job="gpuforge-node"),
            _alert("GpuforgeThermalThrottling", down, gpu="5", job="gpuforge-dcgm"),
        ]
        delivered = [
            _alert("GpuforgeNodeDown", down, job="gpuforge-node"),
            _alert(
                "GpuforgeXidNodeBad", down, gpu="1", job="gpuforge-dcgm"
            ),  # drain alerts are never inhibited
            _alert("GpuforgeNvlinkErrors", "i-0bbb", gpu="3"),  # another node's GPU
        ]
        command = alertmanager_command(config, tmp_path / "am", port, tmp_path / "overlay")
        with running(command, log) as process:
            wait_ready(f"http://127.0.0.1:{port}/-/ready", process, log)
            _post_alerts(port, delivered + inhibited)

            def sent_and_muted() -> tuple[int, float]:
                muted = _metric(port, "alertmanager_notifications_suppressed_total", 'reason="inhibition"')
                return len(arrivals.snapshot()), muted

            # Every group flushes once after group_wait: the delivered ones arrive, the inhibited are
            # counted as suppressed by inhibition (notify/mute.go), so no later arrival is pending. One
            # arrival too many ends the wait at once (the assertion below names it).
            wait_until(
                "the three deliveries, and the four inhibited alerts counted as suppressed",
                sent_and_muted,
                lambda state: (
                    state[0] > len(delivered) or (state[0] == len(delivered) and state[1] >= len(inhibited))
                ),
                beyond_s=rendered_group_wait,
                not_yet=(OSError, ValueError),
                context=lambda: log_tail(log),
            )
            shown = _get(f"http://127.0.0.1:{port}/api/v2/alerts")
    got = sorted(
        (alert["labels"]["alertname"], alert["labels"]["node"])
        for _, body, _ in arrivals.snapshot()
        for alert in body["alerts"]
    )
    assert got == sorted((a["labels"]["alertname"], a["labels"]["node"]) for a in delivered)
    by_name = {(a["labels"]["alertname"], a["labels"]["node"]): a for a in shown}
    source = by_name[("GpuforgeNodeDown", down)]["fingerprint"]
    for alert in inhibited:
        status = by_name[(alert["labels"]["alertname"], down)]["status"]
        assert status["state"] == "suppressed" and status["inhibitedBy"] == [source], status
    for alert in delivered:
        assert by_name[(alert["labels"]["alertname"], alert["labels"]["node"])]["status"]["state"] == "active"


def _tls(folder: Path) -> tuple[Path, ssl.SSLContext]:
    """A CA (its PEM file, for Alertmanager) and a server context for RECEIVER_HOST signed by it."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpuforge heartbeat test CA")])

    def certificate(subject: x509.Name, public: Any, *, ca: bool) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName(RECEIVER_HOST)]), critical=False
            )
        return builder.sign(ca_key, hashes.SHA256())

    ca = certificate(ca_name, ca_key.public_key(), ca=True)
    server = certificate(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, RECEIVER_HOST)]), key.public_key(), ca=False
    )
    ca_file, chain, key_file = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    chain.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(chain, key_file)
    return ca_file, context


def _heartbeats(arrivals: Arrivals) -> list[float]:
    """Arrival times of the posts that carried the heartbeat (firing) and nothing else."""
    name = load_rules().heartbeat.name
    times = []
    for path, body, at in arrivals.snapshot():
        assert path == "/beat", path
        assert [alert["labels"]["alertname"] for alert in body["alerts"]] == [name], body
        assert body["status"] == "firing", body
        times.append(at)
    return times


def test_a_stopped_prometheus_is_noticed_by_the_heartbeat_s_receiver(
    make_stack: StackMaker, tmp_path: Path
) -> None:
    _needs_root()
    ca_file, tls = _tls(tmp_path)
    arrivals = Arrivals()
    with serving(arrivals, tls) as receiver_port:
        url = f"https://{RECEIVER_HOST}:{receiver_port}/beat"
        block = {"heartbeat": {"url": url, "intervalSeconds": INTERVAL_S}}
        out = _render(make_stack(**{"gpuforge:monitoring": block}), tmp_path / "out")

        # The bound, from the rendered files alone (gpuforge.monitoring.heartbeat says why each term).
        manager = yaml.safe_load((out / "alertmanager.yml").read_text(encoding="utf-8"))
        (route,) = [r for r in manager["route"]["routes"] if r["receiver"] == HEARTBEAT_RECEIVER]
        group, repeat = _seconds(route["group_interval"]), _seconds(route["repeat_interval"])
        flags = [
            line
            for line in (out / "prometheus.flags").read_text(encoding="utf-8").splitlines()
            if line and not line.startswith("#") and not line.startswith("--web.listen-address=")
        ]
        (resend,) = [
            _seconds(f.split("=", 1)[1]) for f in flags if f.startswith("--rules.alert.resend-delay=")
        ]
        rules = yaml.safe_load((out / "rules" / HEARTBEAT_FILE).read_text(encoding="utf-8"))
        evaluation = _seconds(rules["groups"][0]["interval"])
        longest_gap = repeat + 2 * group  # the flush after repeat_interval, or the one after it
        missing_after = longest_gap + group
        kept_after_stop = 4 * max(resend, evaluation)  # Prometheus's ValidUntil on each send
        bound = kept_after_stop + missing_after
        rendered = timing(INTERVAL_S)  # gpuforge's own figures (README, CloudWatch alarm) agree
        assert (missing_after, bound) == (rendered.missing_after_ms / 1000, rendered.noticed_within_ms / 1000)

        prometheus_config = yaml.safe_load((out / "prometheus.yml").read_text(encoding="utf-8"))
        am_port, prom_port = free_port(), free_port()
        prometheus_config["alerting"]["alertmanagers"] = [
            {"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}
        ]
        prometheus_config["scrape_configs"] = []
        (out / "prometheus.yml").write_text(
            yaml.safe_dump(prometheus_config, sort_keys=False), encoding="utf-8"
        )
        hosts = tmp_path / "hosts"
        hosts.write_text(f"127.0.0.1 localhost\n127.0.0.1 {RECEIVER_HOST}\n", encoding="utf-8")
        am_log, prom_log = tmp_path / "alertmanager.log", tmp_path / "prometheus.log"
        am_command = alertmanager_command(
            out / "alertmanager.yml",
            tmp_path / "am",
            am_port,
            tmp_path / "overlay",
            hosts=hosts,
            ca_file=ca_file,
        )
        prom_command = [
            str(tool("prometheus")),
            f"--config.file={out / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
            *flags,
        ]
        with running(am_command, am_log) as manager_process:
            wait_ready(f"http://127.0.0.1:{am_port}/-/ready", manager_process, am_log)
            with running(prom_command, prom_log) as prometheus:
                wait_ready(f"http://127.0.0.1:{prom_port}/-/ready", prometheus, prom_log)
                beats = 4
                wait_until(
                    f"{beats} heartbeats at {url}",
                    lambda: _heartbeats(arrivals),
                    lambda times: len(times) >= beats,
                    beyond_s=beats * longest_gap,
                    context=lambda: log_tail(am_log) + log_tail(prom_log),
                )
                healthy = _heartbeats(arrivals)
                gaps = [later - earlier for earlier, later in itertools.pairwise(healthy)]
                # While Prometheus runs, the dead-man check never calls the heartbeat missing.
                assert max(gaps) < missing_after, (gaps, missing_after)
                prometheus.kill()  # by its pid: a dead Prometheus says nothing more
                prometheus.wait(timeout=WAIT_S)
                stopped = time.monotonic()

            def missing_for() -> float:
                """The dead-man check: seconds since the last heartbeat, past missing_after or not."""
                return time.monotonic() - _heartbeats(arrivals)[-1]

            wait_until(
                f"the receiver's dead-man check to call the heartbeat missing (no arrival for {missing_after} s)",
                missing_for,
                lambda silent: silent > missing_after,
                beyond_s=bound,
                context=lambda: log_tail(am_log),
            )
            noticed = time.monotonic() - stopped
            assert manager_process.poll() is None, "Alertmanager ran throughout: only Prometheus stopped"
    assert noticed <= bound + DELIVERY_S, (noticed, bound, _heartbeats(arrivals)[-1] - stopped)
