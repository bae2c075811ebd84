"""Prometheus on the controller, scraping 64 and 256 stand-in GPU nodes (issue 21's performance item).

The real Prometheus the image matrices pin (scripts/monitoring-root.sh builds it into the monitoring
test root: GPUFORGE_MONITORING_ROOT, else .cache/monitoring-root) scrapes, on 127.0.0.1, two stand-in exporters per node, as prometheus.yml's two jobs do on a cluster:

- dcgm-exporter (job gpuforge-dcgm): one series per GPU and field of the field list gpuforge
  renders for p5.48xlarge (gpuforge.monitoring.fields), 8 GPUs, with dcgm-exporter's label set
  (gpu, UUID, pci_bus_id, device, modelName, Hostname, DCGM_FI_DRIVER_VERSION: the shape of NVIDIA's
  published `curl localhost:9400/metrics` samples, GPU Operator documentation) and hpc_job;
- node_exporter (job gpuforge-node): the real node_exporter 1.11.1's own output on this machine
  (captured once at start), plus gpuforge's EFA textfile for 32 devices rendered by
  gpuforge.node.efa_metrics.render (p5: 32 EFA devices, 22 counters each).

Every stand-in answers `Content-Type: text/plain; version=0.0.4` (Prometheus 3 refuses
application/octet-stream). One process serves every port. For each size it prints the series in
the head block, the scrape duration per job, Prometheus's resident memory (VmRSS of
/proc/<pid>/status) after --rounds scrapes of every target, and the bytes per series; then the
marginal bytes per series between the two sizes (the figure gpuforge/data/monitoring_sizing.yaml
keeps), and the largest p5.48xlarge cluster the default controller holds by gpuforge.monitoring.sizing.

node_exporter: Debian forky's prometheus-node-exporter 1.11.1, which scripts/monitoring-root.sh
unpacks into the same root beside Prometheus (--prometheus and --node-exporter to give others).
Its output depends on the machine: every network interface adds about 35 series, so namespaces
and bridges that other test runs hold at the time are counted too.

Run: .venv/bin/python -P benchmarks/prometheus_bench.py [--nodes 64 256] [--rounds 4]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import replace
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import yaml

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests/fixtures/node"
TOOLS = Path(os.environ.get("GPUFORGE_MONITORING_ROOT") or REPO / ".cache/monitoring-root") / "usr/bin"
PROMETHEUS = TOOLS / "prometheus"
NODE_EXPORTER = TOOLS / "prometheus-node-exporter"
INSTANCE = "p5.48xlarge"
SCRAPE_INTERVAL_S = 10
WAIT_S = 900.0  # the most one size may take to reach --rounds scrapes of every target

from gpuforge import exposition, hardware  # noqa: E402
from gpuforge.monitoring.fields import load_fields  # noqa: E402
from gpuforge.monitoring.prometheus import DCGM_JOB, NODE_JOB  # noqa: E402
from gpuforge.monitoring.sizing import load_sizing, max_nodes  # noqa: E402
from gpuforge.node.efa_metrics import KERNEL_PORT_COUNTERS, PortCounters, render  # noqa: E402


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return bytes(response.read())


def _wait(what: str, check: Any, deadline: float) -> Any:
    """Poll `check()` (None or an exception: not yet) until it answers or the deadline passes."""
    while time.monotonic() < deadline:
        try:
            answer = check()
        except OSError:
            answer = None
        if answer is not None:
            return answer
        time.sleep(0.5)
    raise SystemExit(f"prometheus_bench: {what} did not happen in time")


def capture_node_exporter(binary: Path, textfile_dir: Path) -> str:
    """node_exporter's /metrics on this machine, with gpuforge's EFA textfile in its textfile folder."""
    port = _free_port()
    process = subprocess.Popen(
        [
            str(binary),
            f"--web.listen-address=127.0.0.1:{port}",
            f"--collector.textfile.directory={textfile_dir}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        return str(_wait("node_exporter answering", lambda: _get(url), time.monotonic() + 30).decode())
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def efa_textfile() -> str:
    devices = (FIXTURES / "efa-devices-p5.txt").read_text().split()
    ports = [
        PortCounters(device, "1", tuple((name, 1000 * number) for name in KERNEL_PORT_COUNTERS))
        for number, device in enumerate(devices)
    ]
    layout = {device: (str(number // 4),) for number, device in enumerate(devices)}
    with tempfile.TemporaryDirectory() as mapping:
        return render(ports, layout, Path(mapping))


def dcgm_body(node: int) -> str:
    """dcgm-exporter's families for one node, written by gpuforge.exposition (the project's one writer)."""
    instance = hardware.get(INSTANCE)

    def labels(gpu: int) -> exposition.Labels:
        return (
            ("gpu", str(gpu)),
            ("UUID", f"GPU-{node:08x}-0000-0000-0000-{gpu:012x}"),
            ("pci_bus_id", f"00000000:{gpu:02X}:00.0"),
            ("device", f"nvidia{gpu}"),
            ("modelName", "NVIDIA H100 80GB HBM3"),
            ("Hostname", f"bench-{node}"),
            ("DCGM_FI_DRIVER_VERSION", "570.172.08"),
            ("hpc_job", str(1000 + node)),
        )

    return "".join(
        exposition.family(
            field.name,
            field.prom_type,
            field.help,
            ((labels(gpu), gpu + node % 7) for gpu in range(instance.gpu_count)),
        )
        for field in load_fields().for_type(instance)
    )


def count_series(text: str) -> int:
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


class _Handler(BaseHTTPRequestHandler):
    bodies: ClassVar[dict[int, bytes]] = {}

    def do_GET(self) -> None:
        body = self.bodies[self.server.server_address[1]]
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


def serve(bodies: dict[int, bytes]) -> list[ThreadingHTTPServer]:
    _Handler.bodies = bodies
    servers = []
    for port in bodies:
        server = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    return servers


def stop(servers: list[ThreadingHTTPServer]) -> None:
    """Stop every stand-in at once: each shutdown waits up to serve_forever's 0.5 s poll."""
    stoppers = [threading.Thread(target=server.shutdown) for server in servers]
    for stopper in stoppers:
        stopper.start()
    for stopper, server in zip(stoppers, servers, strict=True):
        stopper.join()
        server.server_close()


def _query(port: int, expr: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    answer = json.loads(_get(url, timeout=30))
    if answer["status"] != "success":
        raise SystemExit(f"prometheus_bench: query {expr} failed: {answer}")
    return list(answer["data"]["result"])


def _scalar(port: int, expr: str) -> float | None:
    result = _query(port, expr)
    return float(result[0]["value"][1]) if result else None


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise SystemExit(f"prometheus_bench: no VmRSS for pid {pid}")


def run_size(nodes: int, node_text: str, rounds: int, prometheus: Path) -> dict[str, Any]:
    dcgm_ports = [_free_port() for _ in range(nodes)]
    node_ports = [_free_port() for _ in range(nodes)]
    node_bytes = node_text.encode()
    bodies = {port: dcgm_body(index).encode() for index, port in enumerate(dcgm_ports)}
    bodies |= {port: node_bytes for port in node_ports}
    servers = serve(bodies)
    web = _free_port()

    def job(name: str, ports: list[int]) -> dict[str, Any]:
        return {
            "job_name": name,
            "static_configs": [
                {"targets": [f"127.0.0.1:{port}"], "labels": {"node": f"i-bench{index:05d}"}}
                for index, port in enumerate(ports)
            ],
        }

    config = {
        "global": {"scrape_interval": f"{SCRAPE_INTERVAL_S}s", "scrape_timeout": f"{SCRAPE_INTERVAL_S}s"},
        "scrape_configs": [job(DCGM_JOB, dcgm_ports), job(NODE_JOB, node_ports)],
    }
    with tempfile.TemporaryDirectory(prefix="gpuforge-prom-bench-") as folder:
        (Path(folder) / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
        log = Path(folder) / "prometheus.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [
                    str(prometheus),
                    f"--config.file={folder}/prometheus.yml",
                    f"--storage.tsdb.path={folder}/data",
                    f"--web.listen-address=127.0.0.1:{web}",
                ],
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        try:
            deadline = time.monotonic() + WAIT_S

            def ready() -> bool | None:
                if process.poll() is not None:
                    raise SystemExit(
                        f"prometheus_bench: Prometheus exited: {log.read_text(errors='replace')[-2000:]}"
                    )
                return True if _get(f"http://127.0.0.1:{web}/-/ready") else None

            _wait("Prometheus ready", ready, deadline)
            targets = 2 * nodes
            _wait(
                f"{targets} targets up",
                lambda: True if _scalar(web, "count(up == 1)") == targets else None,
                deadline,
            )
            started = time.monotonic()
            _wait(
                f"{rounds} scrapes of every target",
                lambda: True if (_scalar(web, "min(count_over_time(up[1h]))") or 0) >= rounds else None,
                deadline,
            )
            waited = time.monotonic() - started
            head = json.loads(_get(f"http://127.0.0.1:{web}/api/v1/status/tsdb", timeout=30))
            series = float(head["data"]["headStats"]["numSeries"])
            durations = {
                row["metric"]["job"]: float(row["value"][1])
                for row in _query(web, "avg by (job) (scrape_duration_seconds)")
            }
            slowest = _scalar(web, "max(scrape_duration_seconds)") or 0.0
            rss = _rss_bytes(process.pid)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
            stop(servers)
    return {
        "nodes": nodes,
        "series": int(series),
        "scrape_s": durations,
        "slowest_scrape_s": slowest,
        "rss_bytes": rss,
        "bytes_per_series": rss / series,
        "rounds_waited_s": waited,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, nargs=2, default=[64, 256], metavar=("SMALL", "LARGE"))
    parser.add_argument("--rounds", type=int, default=4, help="scrapes of every target before measuring")
    parser.add_argument("--prometheus", type=Path, default=PROMETHEUS)
    parser.add_argument("--node-exporter", type=Path, default=NODE_EXPORTER)
    args = parser.parse_args(argv)
    for binary in (args.prometheus, args.node_exporter):
        if not os.access(binary, os.X_OK):
            print(
                f"prometheus_bench: no {binary} (see this file's docstring for how to get it)",
                file=sys.stderr,
            )
            return 2
    version = subprocess.run([str(args.prometheus), "--version"], capture_output=True, text=True, check=False)
    with tempfile.TemporaryDirectory() as textfiles:
        (Path(textfiles) / "gpuforge-efa.prom").write_text(efa_textfile(), encoding="utf-8")
        node_text = capture_node_exporter(args.node_exporter, Path(textfiles))
    cpus = os.cpu_count() or 1
    per_cpu = sum(1 for line in node_text.splitlines() if 'cpu="' in line and not line.startswith("#"))
    efa = sum(1 for line in node_text.splitlines() if line.startswith("gpuforge_efa_"))
    print(
        f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; machine: {platform.node()}, {cpus} CPUs, {platform.machine()}"
    )
    print(f"prometheus: {(version.stdout or version.stderr).splitlines()[0]}")
    print(
        f"node_exporter output: {count_series(node_text)} series, of which {efa} gpuforge_efa_* (32 devices) "
        f"and {per_cpu} with a cpu label ({cpus} CPUs here)"
    )
    print(f"dcgm-exporter stand-in: {count_series(dcgm_body(0))} series per node ({INSTANCE})")
    results = [run_size(nodes, node_text, args.rounds, args.prometheus) for nodes in args.nodes]
    for row in results:
        scrape = ", ".join(
            f"{job} avg {seconds * 1000:.0f} ms" for job, seconds in sorted(row["scrape_s"].items())
        )
        print(
            f"{row['nodes']} nodes: {row['series']} series; scrape {scrape}, slowest {row['slowest_scrape_s'] * 1000:.0f} ms; "
            f"VmRSS {row['rss_bytes'] / 2**20:.0f} MiB after {args.rounds} scrapes ({row['rounds_waited_s']:.0f} s); "
            f"{row['bytes_per_series']:.0f} bytes per series"
        )
    small, large = results
    marginal = (large["rss_bytes"] - small["rss_bytes"]) / (large["series"] - small["series"])
    baseline = small["rss_bytes"] - marginal * small["series"]
    print(f"marginal: {marginal:.0f} bytes per series; fixed part {baseline / 2**20:.0f} MiB")
    node_fixed = count_series(node_text) - per_cpu - efa
    print(
        f"node_exporter_series: {node_fixed}; node_exporter_series_per_cpu: {per_cpu / cpus:.1f}; "
        f"bytes_per_series: {marginal:.0f}; fixed_bytes: {baseline:.0f}"
    )
    measured = replace(
        load_sizing(),
        bytes_per_series=marginal,
        fixed_bytes=round(baseline),
        node_exporter_series=node_fixed,
        node_exporter_series_per_cpu=per_cpu / cpus,
    )
    controller = measured.default_controller
    print(
        f"largest {INSTANCE} cluster the default controller ({controller}) holds with these figures: "
        f"{max_nodes(hardware.get(INSTANCE), controller, data=measured)} nodes"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
