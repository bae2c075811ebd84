"""The drain receiver: Alertmanager's webhook body in, one drain per bad node out, through Slurm.

The body is one the real Alertmanager 0.33.1 sent (tests/fixtures/monitoring/README.md); Slurm's
side is the node agent's captured `scontrol show node` outputs of Slurm 26.05.5
(tests/fixtures/node/slurm/README.md), answered by a recording stand-in for scontrol: the receiver
against real slurmctld is tests/monitoring/test_end_to_end.py. The server runs on 127.0.0.1, on a
free port, in this process, and is shut down by each test.
"""

from __future__ import annotations

import copy
import json
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from gpuforge.cli import main
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
    scontrol = Scontrol("show-node-idle.txt")
    base, _ = serve(scontrol)
    code, text = post(base, b" " * (MAX_BODY_BYTES + 1))
    assert code == 400 and "over the limit" in text
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
