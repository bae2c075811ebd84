"""The drain receiver: Alertmanager's webhook body in, one drain per bad node out, through Slurm.

The body is one the real Alertmanager 0.33.1 sent (tests/fixtures/monitoring/README.md); Slurm's
side is the node agent's captured `scontrol show node` outputs of Slurm 26.05.5
(tests/fixtures/node/slurm/README.md), answered by a recording stand-in for scontrol: the receiver
against real slurmctld is tests/monitoring/test_end_to_end.py. The server runs on 127.0.0.1, on a
free port, in this process, and is shut down by each test.
"""

from __future__ import annotations

import contextlib
import copy
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from waiting import WAIT_S

from gpuforge.cli import main
from gpuforge.monitoring import receiver as receiver_module
from gpuforge.monitoring.alertmanager import DRAIN_URL
from gpuforge.monitoring.receiver import (
    MAX_BODY_BYTES,
    PATH,
    PORT,
    DrainReceiver,
    make_server,
)
from gpuforge.node.runner import CommandResult
from gpuforge.node.slurm import drain_argv, show_node_argv

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CAPTURED = json.loads(
    (FIXTURES / "monitoring/alertmanager-0.33.1-webhook-drain.json").read_text(encoding="utf-8")
)
NODE = "gpu-a"  # the captured scontrol outputs' node
REASON = "gpuforge: alert GpuforgeXidNodeBad xid 79 on GPU 3"


class Scontrol:
    """Answers `scontrol show node` with a captured output and records every call; updates succeed."""

    def __init__(self, show: str, *, fail: bool = False) -> None:
        self.show = (FIXTURES / "node/slurm" / show).read_text(encoding="utf-8")
        self.fail = fail
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        self.calls.append(tuple(argv))
        if self.fail:
            return CommandResult(
                tuple(argv), 1, "", "slurm_load_node error: Unable to contact slurm controller"
            )
        return CommandResult(tuple(argv), 0, self.show if argv[1] == "show" else "")


def message(*, node: str = NODE, status: str = "firing", drain: str = "true") -> dict[str, Any]:
    body = copy.deepcopy(CAPTURED)
    for alert in body["alerts"]:
        alert["status"] = status
        alert["labels"] |= {"node": node, "drain": drain}
    return body


@pytest.fixture
def serve() -> Iterator[Any]:
    """serve(scontrol) -> (base URL, log lines); the server is shut down after the test."""
    servers: list[Any] = []

    def start(scontrol: Scontrol) -> tuple[str, list[str]]:
        log: list[str] = []
        server = make_server(DrainReceiver(scontrol, log.append, threading.Lock()), port=0)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        servers.append((server, thread))
        host, port = server.server_address[:2]
        return f"http://{host}:{port}", log

    yield start
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def post(base: str, body: bytes | dict[str, Any], path: str = PATH) -> tuple[int, str]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(
        base + path, data=data, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_the_receiver_listens_where_alertmanager_yml_sends() -> None:
    assert f"http://127.0.0.1:{PORT}{PATH}" == DRAIN_URL


def test_a_firing_xid_alert_drains_its_node_with_an_alert_reason(serve: Any) -> None:
    scontrol = Scontrol("show-node-idle.txt")
    base, log = serve(scontrol)
    status, text = post(base, message())
    assert status == 200, text
    assert scontrol.calls == [show_node_argv(NODE), drain_argv(NODE, REASON)]
    assert log[0] == f"drained {NODE}: {REASON}"


@pytest.mark.parametrize(
    "show",
    ["show-node-drained-gpuforge.txt", "show-node-draining-gpuforge.txt", "show-node-drained-admin.txt"],
)
def test_a_drained_node_is_left_as_it_is(serve: Any, show: str) -> None:
    scontrol = Scontrol(show)
    base, _ = serve(scontrol)
    assert post(base, message())[0] == 200
    assert scontrol.calls == [show_node_argv(NODE)]  # read; never drained over, never resumed


@pytest.mark.parametrize(("status", "drain"), [("resolved", "true"), ("firing", "false")])
def test_a_resolved_or_non_drain_alert_does_nothing(serve: Any, status: str, drain: str) -> None:
    scontrol = Scontrol("show-node-idle.txt")
    base, _ = serve(scontrol)
    code, text = post(base, message(status=status, drain=drain))
    assert (code, scontrol.calls) == (200, [])
    assert "nothing to do" in text


def test_several_alerts_of_one_node_drain_it_once(serve: Any) -> None:
    body = message()
    second = copy.deepcopy(body["alerts"][0])
    second["labels"]["gpu"] = "5"
    body["alerts"].append(second)
    scontrol = Scontrol("show-node-idle.txt")
    base, _ = serve(scontrol)
    assert post(base, body)[0] == 200
    assert scontrol.calls == [show_node_argv(NODE), drain_argv(NODE, REASON)]


def _bad(body: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    target = body
    *parents, last = path.split(".")
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target[key]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return body


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b"not json", "the body is not JSON"),
        (b"\xff\xfe", "the body is not JSON"),
        (json.dumps([1, 2]).encode(), "not an Alertmanager webhook message"),
        (_bad(message(), "version", "3"), "version"),
        (_bad(message(), "version", 4), "version"),
        (_bad(message(), "alerts", KeyError), "alerts"),
        (_bad(message(), "alerts.0.status", "pending"), "alerts.0.status"),
        (_bad(message(), "alerts.0.labels", {"node": 7}), "alerts.0.labels"),
        (_bad(message(), "alerts.0.labels.node", KeyError), "has no 'node' label"),
        (message(node="ALL"), "alerts.0.labels.node"),
        (message(node="gpu-[1-4]"), "alerts.0.labels.node"),
        (message(node="gpu-a State=RESUME"), "alerts.0.labels.node"),
    ],
)
def test_a_bad_body_is_400_with_the_reason_and_nothing_is_drained(
    serve: Any, body: bytes | dict[str, Any], said: str
) -> None:
    scontrol = Scontrol("show-node-idle.txt")
    base, log = serve(scontrol)
    code, text = post(base, body)
    assert code == 400 and said in text, text
    assert scontrol.calls == []
    assert any(line.startswith("refused a message: ") for line in log)


def test_an_over_long_body_is_refused_before_it_is_read(serve: Any) -> None:
    """Refused on its Content-Length: the headers and the body's start are sent, and the answer comes. (Sending
    the whole body raced the answer: the server closes without reading it, and the client's write then failed
    with a broken pipe on a loaded machine.)"""
    scontrol = Scontrol("show-node-idle.txt")
    base, _ = serve(scontrol)
    headers = f"POST {PATH} HTTP/1.0\r\nContent-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode()
    code, text = raw_request(base, headers + b" " * 1024, end_write=False)
    assert code == 400 and f"the body is {MAX_BODY_BYTES + 1} bytes, over the limit" in text
    assert scontrol.calls == []


def test_another_path_is_404(serve: Any) -> None:
    base, _ = serve(Scontrol("show-node-idle.txt"))
    assert post(base, message(), path="/other")[0] == 404


def test_slurm_failing_is_500_logged_and_the_next_message_is_served(serve: Any) -> None:
    scontrol = Scontrol("show-node-idle.txt", fail=True)
    base, log = serve(scontrol)
    code, text = post(base, message())
    assert code == 500 and "could not ask Slurm about node gpu-a" in text
    assert any(line.startswith("could not drain (Alertmanager retries): ") for line in log)
    scontrol.fail = False
    assert post(base, message())[0] == 200
    assert scontrol.calls[-1] == drain_argv(NODE, REASON)


def test_the_cli_refuses_a_taken_port_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert main(["monitoring", "receiver", "--port", str(port)]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


def test_the_cli_refuses_a_port_out_of_range(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["monitoring", "receiver", "--port", "70000"]) == 2
    assert "--port 70000" in capsys.readouterr().err


# --- Hostile requests: each answered 400 with a short reason and logged, the server serving on ---


def raw_request(base: str, data: bytes, *, end_write: bool = True) -> tuple[int, str]:
    """Send `data` as the whole request, as written (headers no client library would send, a body cut
    short), and read the answer; `end_write`: half-close after sending, as a client that sent all it has."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=WAIT_S) as connection:
        connection.sendall(data)
        if end_write:
            connection.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/"), f"no answer: {answer[:200]!r}"
    return int(head.split()[1]), body.decode()


def nested(depth: int) -> bytes:
    """A webhook message whose first alert's labels hold `depth` nested lists."""
    body = json.dumps(message())
    return body.replace('"labels": {', '"labels": ' + "[" * depth + "]" * depth + ', "x": {', 1).encode()


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b"[" * 100_000, "nested more than 64 levels deep"),
        (nested(50_000), "nested more than 64 levels deep"),
        (json.dumps(message()).encode("utf-16"), "not UTF-8"),
        (json.dumps(message()).replace("gpuforge", "gpuforg\u00e9").encode("latin-1"), "not UTF-8"),
        (b"null", "not an Alertmanager webhook message"),
        (b'"text"', "not an Alertmanager webhook message"),
        (json.dumps(_bad(message(), "alerts", "x")).encode(), "alerts"),
        (json.dumps(_bad(message(), "alerts", {"0": 1})).encode(), "alerts"),
        (json.dumps(_bad(message(), "alerts", [1, "x"])).encode(), "alerts.0"),
        (
            json.dumps(message()).replace('"status"', '"x": NaN, "status"', 1).encode(),
            "NaN is not a JSON number",
        ),
        (
            json.dumps(message()).replace('"node": "gpu-a"', '"node": "gpu-a", "node": "gpu-b"').encode(),
            "duplicate key",
        ),
    ],
    ids=[
        "deep-list",
        "deep-inside-labels",
        "utf-16",
        "latin-1",
        "null",
        "string",
        "alerts-a-string",
        "alerts-an-object",
        "alerts-of-numbers",
        "nan",
        "node-label-twice",
    ],
)
def test_a_hostile_body_is_400_logged_and_the_server_serves_on(serve: Any, body: bytes, said: str) -> None:
    scontrol = Scontrol("show-node-idle.txt")
    base, log = serve(scontrol)
    code, text = post(base, body)
    assert code == 400 and said in text, text
    assert len(text) < 1000
    assert scontrol.calls == []
    assert any(line.startswith("refused a message: ") and said in line for line in log)
    assert post(base, message())[0] == 200


@pytest.mark.parametrize(
    ("length", "said"),
    [
        (b"\xb2", "is not a number of bytes"),  # superscript two: str.isdigit() says yes, int() says no
        (b"9" * 5000, "is not a number of bytes"),  # beyond int()'s 4300 digits
        (b"-1", "is not a number of bytes"),
        (b"12, 34", "is not a number of bytes"),
        (b"5\r\nContent-Length: 500", "2 Content-Length headers that disagree"),
    ],
    ids=["unicode-digit", "5000-digits", "negative", "list", "two-lengths"],
)
def test_a_content_length_that_is_not_one_number_is_400(serve: Any, length: bytes, said: str) -> None:
    scontrol = Scontrol("show-node-idle.txt")
    base, log = serve(scontrol)
    request = b"POST " + PATH.encode() + b" HTTP/1.0\r\nContent-Length: " + length + b"\r\n\r\n{}"
    code, text = raw_request(base, request)
    assert code == 400 and said in text, text
    assert any(line.startswith("refused a message: ") for line in log)
    assert scontrol.calls == []


def test_a_body_shorter_than_its_content_length_is_400(serve: Any) -> None:
    base, log = serve(Scontrol("show-node-idle.txt"))
    code, text = raw_request(
        base, b"POST " + PATH.encode() + b" HTTP/1.0\r\nContent-Length: 100\r\n\r\n" + b"{" * 10
    )
    assert code == 400 and "the body ended after 10 of the 100 bytes" in text, text
    assert any("the body ended after 10 of the 100 bytes" in line for line in log)


@pytest.mark.parametrize("trickle", [False, True], ids=["silent", "a-byte-at-a-time"])
def test_a_body_that_does_not_arrive_in_time_is_400(
    serve: Any, monkeypatch: pytest.MonkeyPatch, trickle: bool
) -> None:
    """One deadline for the whole body: a client that goes silent, or sends a byte a little more often than
    the deadline, is answered 400 once READ_TIMEOUT_S has passed, and its thread is free again."""
    monkeypatch.setattr(receiver_module, "READ_TIMEOUT_S", 1.0)
    base, log = serve(Scontrol("show-node-idle.txt"))
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=WAIT_S) as connection:
        connection.sendall(f"POST {PATH} HTTP/1.0\r\nContent-Length: 100\r\n\r\n{{".encode())
        connection.settimeout(0.2)
        deadline = time.monotonic() + WAIT_S
        answer = b""
        while time.monotonic() < deadline:
            if trickle:  # a byte every 0.2 s: never silent for the 1 s a single read may wait
                with contextlib.suppress(OSError):  # the server stops reading once it has answered
                    connection.sendall(b" ")
            try:
                chunk = connection.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.0 400 "), answer
    assert b"the body did not arrive: " in answer and b" of its 100 bytes (Content-Length) in 1 s" in answer
    assert any("the body did not arrive" in line for line in log)


def test_nothing_a_client_sends_forges_a_log_line_or_answer(serve: Any) -> None:
    """Request lines, paths and JSON keys reach the log and the answers escaped (gpuforge.display.printable):
    a line feed, a carriage return or an escape sequence cannot start a line or repaint the terminal."""
    base, log = serve(Scontrol("show-node-idle.txt"))
    answers = [
        raw_request(
            base,
            b"POST /alerts\x1b[2J\rgpuforge: receiver: drained gpu-b HTTP/1.0\r\nContent-Length: 0\r\n\r\n",
        ),
        raw_request(base, b"GET /\x07\x1b]0;title\x07 HTTP/1.0\r\n\r\n"),
        raw_request(base, b"BREW\x1b[31m /alerts HTTP/1.0\r\n\r\n"),
        post(base, _bad(message(), "alerts.0.labels", {"x\ndrained gpu-b: forged": 1})),
        post(base, _bad(message(), "alerts.0.labels.node", "gpu-a\nforged")),
    ]
    assert [code for code, _ in answers] == [400, 405, 501, 400, 400]
    assert len(log) >= len(answers)
    assert all(line.isprintable() for line in log), log
    assert all(line.isprintable() for _, text in answers for line in text.rstrip("\n").split("\n")), answers
    assert not any(line.startswith("drained") for line in log)


class BreaksOnce(Scontrol):
    """The stand-in for scontrol, raising what no runner raises on its first call (a defect, not bad input)."""

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        if not self.calls:
            self.calls.append(tuple(argv))
            raise RuntimeError("scontrol\nstub broke")
        return super().__call__(argv)


def test_an_unexpected_failure_is_one_log_line_not_a_traceback(
    serve: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    scontrol = BreaksOnce("show-node-idle.txt")
    base, log = serve(scontrol)
    with pytest.raises(OSError):  # the connection is closed without an answer: Alertmanager retries
        post(base, message())
    failures = [line for line in log if line.startswith("a request from ")]
    assert len(failures) == 1 and failures[0].endswith(" failed: RuntimeError: scontrol\\nstub broke"), log
    assert "Traceback" not in capfd.readouterr().err
    assert post(base, message())[0] == 200
    assert scontrol.calls[-1] == drain_argv(NODE, REASON)
