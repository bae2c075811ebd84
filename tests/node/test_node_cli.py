"""`gpuforge node check` end to end: real subprocesses, real files, real exit codes.

The NVIDIA and EFA commands are small executables on PATH that print recorded
outputs, so the agent's real subprocess runner runs them. One test also runs
the installed console script on this (GPU-less) machine as it is.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from node_scenarios import FIXTURES, Scenario, fixture, install_commands, p5_healthy

from gpuforge.cli import build_parser, main
from gpuforge.node import cli as node_cli
from gpuforge.node.context import HostPaths
from gpuforge.node.imds import ENDPOINT_ENV, TOKEN_HEADER, TOKEN_TTL_HEADER
from gpuforge.node.nvidia_smi import GPU_QUERY

GPUFORGE = Path(sys.executable).with_name("gpuforge")
P5_MANIFEST = FIXTURES / "manifest/p5-h100.json"


class FakeImds(BaseHTTPRequestHandler):
    """IMDSv2 on loopback: PUT /latest/api/token with a TTL header, then GETs with the token.

    A hand-written server because moto's metadata endpoint answers one fixed
    identity ("i-fake", "moto.virtual") and cannot name a moto-created instance.
    """

    token = "token-for-tests"
    metadata: ClassVar[dict[str, str]] = {}

    def do_PUT(self) -> None:
        if self.path != "/latest/api/token" or not self.headers.get(TOKEN_TTL_HEADER):
            self._reply(400, "bad token request")
        else:
            self._reply(200, self.token)

    def do_GET(self) -> None:
        if self.headers.get(TOKEN_HEADER) != self.token:
            self._reply(401, "")
            return
        value = self.metadata.get(self.path.removeprefix("/latest/meta-data/"))
        self._reply(200, value) if value is not None else self._reply(404, "")

    def _reply(self, status: int, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        """Keep test output quiet."""


def serve_imds(metadata: dict[str, str]) -> Iterator[str]:
    handler = type("Imds", (FakeImds,), {"metadata": metadata})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def imds_p5() -> Iterator[str]:
    yield from serve_imds(
        {
            "instance-id": "i-0123456789abcdef0",
            "instance-type": "p5.48xlarge",
            "placement/region": "us-east-1",
        }
    )


def run_node(scenario: Scenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    """Parse `gpuforge node check ARGS` with the real parser and run it on the scenario's node."""
    root = scenario.write_root(tmp_path / "root")
    bin_dir = install_commands(scenario, tmp_path / "bin")
    monkeypatch.setenv("PATH", str(bin_dir))
    parsed = build_parser("node").parse_args(["node", "check", *args])
    return node_cli.handle_check(parsed, paths=HostPaths(root))


def test_healthy_node_json_report_and_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = tmp_path / "var/log/gpuforge"
    code = run_node(
        p5_healthy(),
        tmp_path,
        monkeypatch,
        "--json",
        "--expect",
        "p5.48xlarge",
        "--manifest",
        str(P5_MANIFEST),
        "--report-dir",
        str(reports),
        "--require-fsx",
    )
    out = capsys.readouterr().out
    assert code == 0
    report = json.loads(out)
    assert report["instance_type"] == "p5.48xlarge" and report["healthy"] is True
    assert [check["status"] for check in report["checks"]] == ["pass"] * 16
    assert (reports / "latest.json").read_text() == out
    stamped = [p for p in reports.iterdir() if p.name.startswith("node-check-")]
    assert len(stamped) == 1 and stamped[0].read_text() == out


def test_seven_gpus_is_exit_1_with_text_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = p5_healthy().set(GPU_QUERY, fixture("nvidia-smi/query-p5-h100-7of8.csv"))
    code = run_node(
        scenario, tmp_path, monkeypatch, "--expect", "p5.48xlarge", "--manifest", str(P5_MANIFEST)
    )
    out = capsys.readouterr().out
    assert code == 1
    assert "  FAIL  gpu.inventory         7 of 8 GPUs visible" in out
    assert out.rstrip().endswith("NOT HEALTHY: 1 check(s) failed")


def test_instance_type_comes_from_imdsv2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], imds_p5: str
) -> None:
    monkeypatch.setenv(ENDPOINT_ENV, imds_p5)
    code = run_node(p5_healthy(), tmp_path, monkeypatch, "--json", "--manifest", str(P5_MANIFEST))
    assert code == 0
    assert json.loads(capsys.readouterr().out)["instance_type"] == "p5.48xlarge"


def test_unreachable_imds_fails_fast_with_a_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # a loopback port with nothing listening
    with ThreadingHTTPServer(("127.0.0.1", 0), FakeImds) as closed:
        port = closed.server_address[1]
    monkeypatch.setenv(ENDPOINT_ENV, f"http://127.0.0.1:{port}")
    started = time.monotonic()
    assert main(["node", "check", "--manifest", str(P5_MANIFEST)]) == 1
    assert time.monotonic() - started < 10
    error = capsys.readouterr().err
    assert f"IMDSv2 at http://127.0.0.1:{port} did not answer PUT" in error
    assert "pass --expect INSTANCE_TYPE" in error


def test_bad_usage_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["node", "check", "--expect", "p5.48xlarge", "--manifest", str(tmp_path / "none.json")]) == 2
    assert f"{tmp_path / 'none.json'}: cannot read the image manifest" in capsys.readouterr().err
    assert main(["node", "check", "--expect", "p9.huge", "--manifest", str(P5_MANIFEST)]) == 2
    assert "instance type 'p9.huge' is not in gpuforge's hardware catalog" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        main(["node", "check", "--no-such-flag"])
    assert usage.value.code == 2


def test_console_script_on_this_gpu_less_host(tmp_path: Path) -> None:
    """The installed `gpuforge` run here as it is: no NVIDIA stack, so a clean exit 1 and a full report."""
    completed = subprocess.run(
        [str(GPUFORGE), "node", "check", "--json", "--expect", "p5.48xlarge", "--manifest", str(P5_MANIFEST)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 1, completed.stderr
    assert "Traceback" not in completed.stderr
    report = json.loads(completed.stdout)
    assert report["healthy"] is False and len(report["checks"]) == 16
    by_id = {check["id"]: check for check in report["checks"]}
    assert by_id["gpu.inventory"]["status"] == "fail"
    assert by_id["driver.versions"]["status"] == "fail"


def test_unwritable_report_dir_warns_and_keeps_the_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    code = run_node(
        p5_healthy(),
        tmp_path,
        monkeypatch,
        "--expect",
        "p5.48xlarge",
        "--manifest",
        str(P5_MANIFEST),
        "--report-dir",
        str(blocker / "reports"),
    )
    captured = capsys.readouterr()
    assert code == 0 and captured.out.rstrip().endswith("healthy")
    assert f"could not write the report to {blocker / 'reports'}" in captured.err


def test_checks_import_nothing_beyond_the_standard_library() -> None:
    """The agent runs on bare GPU nodes: only --report-asg may pull in boto3, and only when used."""
    probe = (
        "import sys, gpuforge.node.cli, gpuforge.node.checks\n"
        "third = {'boto3', 'botocore', 'pydantic', 'yaml', 'pulumi', 'packaging', 'filelock'}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & third))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert completed.stdout.strip() == "[]"


class CountingImds(FakeImds):
    """The loopback IMDSv2 above, recording every request it is sent."""

    requests: ClassVar[list[str]] = []

    def do_PUT(self) -> None:
        self.requests.append(f"PUT {self.path}")
        super().do_PUT()

    def do_GET(self) -> None:
        self.requests.append(f"GET {self.path}")
        super().do_GET()


@pytest.mark.parametrize("expect", ["", "  "])
def test_an_empty_expect_is_bad_usage_and_never_asks_imds(
    expect: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # An empty --expect is a script whose variable was unset: refused, not read as "ask IMDS".
    metadata = {"instance-id": "i-0123456789abcdef0", "instance-type": "p5.48xlarge"}
    handler = type("Imds", (CountingImds,), {"metadata": metadata, "requests": []})
    with ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        try:
            monkeypatch.setenv(ENDPOINT_ENV, f"http://127.0.0.1:{server.server_address[1]}")
            code = main(["node", "check", "--expect", expect, "--manifest", str(P5_MANIFEST)])
        finally:
            server.shutdown()
            thread.join(timeout=5)
    assert code == 2
    assert handler.requests == []
    error = capsys.readouterr().err
    assert "--expect" in error and "names no instance type" in error and "leave --expect out" in error


def test_the_text_report_shows_what_the_node_said_escaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A disk's model (sysfs, the firmware's text) reaches the evidence; printed raw, its escape sequence would
    clear the terminal and its carriage return draw a forged "PASS" over the line in the journal."""
    hostile = "Evil Disk\x1b[2J\rPASS  storage.scratch  fine"
    scenario = p5_healthy().instance_store(["nvme8n1"], model=hostile)
    code = run_node(
        scenario, tmp_path, monkeypatch, "--expect", "p5.48xlarge", "--manifest", str(P5_MANIFEST)
    )
    out = capsys.readouterr().out
    assert code == 1
    assert all(line.isprintable() for line in out.splitlines()), out
    assert "nvme8n1 (Evil Disk\\x1b[2J\\rPASS  storage.scratch  fine)" in out
