"""gpuforge's drain receiver: Alertmanager's webhook on the controller's loopback drains bad nodes.

Alertmanager posts each notification of the `gpuforge-drain` receiver (gpuforge.monitoring.
alertmanager: alerts labelled `drain="true"`) to http://127.0.0.1:9098/alerts. For every
FIRING alert so labelled, the receiver drains the node named by its `node` label in Slurm
with a reason that starts `gpuforge: alert <alertname>`, e.g.
`gpuforge: alert GpuforgeXidNodeBad xid 79 on GPU 3`, through the node agent's own drain
(gpuforge.node.slurm.drain_unless_drained): a drained node (by gpuforge or by anyone) is left
as it is, nothing is ever resumed, and a resolved alert does nothing. The drained node is
then replaced as every gpuforge drain is: its node agent's next periodic check reads the
`gpuforge:` reason in Slurm and, once the node is idle, reports it Unhealthy to its Auto
Scaling group (gpuforge.node.slurm, step 3).

The payload is Alertmanager's webhook message, version 4 (prometheus/alertmanager v0.33.1,
commit 2c8da51e03f3dbbed24f9711ca2d76aab4eef9c5: notify/webhook/webhook.go `Message` with
`version`, `groupKey`, `truncatedAlerts` around template/template.go `Data`: `receiver`,
`status`, `alerts`, `groupLabels`, `commonLabels`, `commonAnnotations`, `externalURL`; each
`Alert` has `status`, `labels`, `annotations`, `startsAt`, `endsAt`, `generatorURL`,
`fingerprint`). The fields the receiver acts on are checked strictly; others are ignored, so
that a newer Alertmanager's added fields do not stop the drains.

Answers: 200 when every drain alert was acted on; 400 with the reason for a body that is
not such a message (a Content-Length that is not one number, a body over MAX_BODY_BYTES or
shorter than its Content-Length, not UTF-8, not JSON or nested deeper than
gpuforge.loading.MAX_DEPTH, not an object, a field missing or of the wrong type, a node name
scontrol would read as several nodes): Alertmanager does not retry a 4xx, and nothing was
drained; 500 when Slurm could not be asked or told (logged): Alertmanager retries a 5xx and the
drains are idempotent. A request the handler could not finish is logged in one line, never as a
traceback. Every log line and answer passes through gpuforge.display.printable, so a request line,
header or JSON key holding a line feed or an escape sequence cannot forge a line of the log. The
server binds 127.0.0.1 only, so nothing off the controller can drain a node.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

from gpuforge.display import cut, printable, printable_lines
from gpuforge.errors import GpuforgeError, InputError
from gpuforge.loading import parse_json
from gpuforge.monitoring.alertmanager import DRAIN_URL
from gpuforge.node.runner import Runner, SubprocessRunner
from gpuforge.node.slurm import (
    NODE_NAME_FIELD,
    REASON_MAX_CHARS,
    REASON_PREFIX,
    clean_reason,
    drain_unless_drained,
)
from gpuforge.scheduler import slurm_values

HOST = "127.0.0.1"
PORT = urlsplit(DRAIN_URL).port or 80
PATH = urlsplit(DRAIN_URL).path
# gpuforge's choice: the route groups by alertname and node, so one notification holds the
# alerts of one node (a few KB); 1 MiB leaves room for a whole cluster's and bounds a bad client.
MAX_BODY_BYTES = 1024 * 1024
# A client that stops sending is dropped after this long (gpuforge's choice).
READ_TIMEOUT_S = 10.0
# scontrol answers within 10 s or says slurmctld is unreachable (gpuforge.node.slurm);
# Alertmanager's webhook timeout is longer by default, so a late answer is still read.
SCONTROL_TIMEOUT_S = 12.0
DRAIN_LABEL = "drain"
NODE_LABEL = "node"
ALERT_REASON = f"{REASON_PREFIX} alert"
# Content-Length is 1*DIGIT (RFC 9110, section 8.6); more digits than MAX_BODY_BYTES has are refused
# before int() (which reads Unicode digits such as "²" and refuses over 4300 digits).
_LENGTH = re.compile(rf"[0-9]{{1,{len(str(MAX_BODY_BYTES))}}}\Z")
_BODY = "the body"  # how parse_json's errors name what it read
# A JSON key of a hostile body is shown in an error up to this many characters.
_WHERE_CHARS = 40


class PayloadError(InputError):
    """A request body that is not Alertmanager's webhook message (answered 400)."""


class WebhookAlert(BaseModel):
    """One alert of the message: only what the receiver reads is required."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    status: Literal["firing", "resolved"]
    labels: dict[StrictStr, StrictStr]
    annotations: dict[StrictStr, StrictStr] = Field(default_factory=dict)


class WebhookMessage(BaseModel):
    """Alertmanager's webhook message, version 4 (see the module docstring for the source)."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    version: Literal["4"]
    status: Literal["firing", "resolved"]
    receiver: StrictStr
    alerts: list[WebhookAlert]


@dataclass(frozen=True)
class Drain:
    """One node to drain, and why."""

    node: str
    reason: str


def _where(loc: Sequence[object]) -> str:
    """A validation error's place in the body, each key bounded: keys are the sender's text."""
    parts = [
        printable(str(part)[:_WHERE_CHARS]) + ("..." if len(str(part)) > _WHERE_CHARS else "") for part in loc
    ]
    return ".".join(parts) or "(body)"


def parse_message(body: bytes) -> WebhookMessage:
    """The message in `body`; anything else is a PayloadError naming what is wrong.

    JSON is read by gpuforge.loading.parse_json: nesting deeper than its cap is refused before the
    parser recurses (a RecursionError otherwise), and so are duplicate keys, NaN and Infinity.
    """
    if len(body) > MAX_BODY_BYTES:
        raise PayloadError(f"the body is {len(body)} bytes, over the limit of {MAX_BODY_BYTES}")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise PayloadError(
            f"the body is not JSON: not UTF-8 (byte {error.start} is {body[error.start : error.start + 1]!r})"
        ) from None
    try:
        data = parse_json(text, source=_BODY, fix="send Alertmanager's webhook message (version 4) as JSON")
    except InputError as error:
        raise PayloadError(f"the body is not JSON: {error.message.removeprefix(f'{_BODY}: ')}") from None
    try:
        return WebhookMessage.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(f"{_where(item['loc'])}: {item['msg']}" for item in error.errors()[:5])
        raise PayloadError(f"not an Alertmanager webhook message (version 4): {problems}") from None


def alert_reason(alert: WebhookAlert) -> str:
    """`gpuforge: alert <alertname> [xid <code>] [on GPU <n>]`, cleaned and bounded as every drain reason."""
    name = alert.labels.get("alertname", "unnamed")
    parts = [ALERT_REASON, name]
    if "xid" in alert.annotations:
        parts.append(f"xid {alert.annotations['xid']}")
    if "gpu" in alert.labels:
        parts.append(f"on GPU {alert.labels['gpu']}")
    return clean_reason(" ".join(parts))[:REASON_MAX_CHARS]


def drains(message: WebhookMessage) -> list[Drain]:
    """The firing drain alerts' nodes, each once (its first alert's reason); every name checked first."""
    found: dict[str, str] = {}
    for index, alert in enumerate(message.alerts):
        if alert.status != "firing" or alert.labels.get(DRAIN_LABEL) != "true":
            continue
        node = alert.labels.get(NODE_LABEL)
        if node is None:
            raise PayloadError(
                f"alerts.{index}: a firing drain alert has no {NODE_LABEL!r} label, so no node can be "
                "drained. Fix: keep the `node` label that prometheus.yml's relabelling sets on every target."
            )
        try:
            slurm_values.NODE_NAME.check(node, field=f"alerts.{index}.labels.{NODE_LABEL}")
        except InputError as error:
            raise PayloadError(f"{error} ({NODE_NAME_FIELD} is the Slurm node name)") from None
        found.setdefault(node, alert_reason(alert))
    return [Drain(node, reason) for node, reason in found.items()]


@dataclass
class DrainReceiver:
    """Acts on one message: drains each node, serialised, so two notifications never race on one node."""

    run: Runner
    log: Callable[[str], None]
    lock: threading.Lock

    def note(self, line: str) -> None:
        """Log `line` escaped (gpuforge.display.printable): it quotes what the client sent."""
        self.log(printable(line))

    def handle(self, body: bytes) -> list[str]:
        """What was done, per node; PayloadError for a bad body, SlurmError when Slurm failed."""
        message = parse_message(body)
        done: list[str] = []
        with self.lock:
            for drain in drains(message):
                shown = drain_unless_drained(self.run, drain.node, drain.reason)
                if shown is None:
                    line = f"drained {drain.node}: {drain.reason}"
                else:
                    line = f"left {drain.node} as it is: {shown.state_text}, reason {shown.reason!r}"
                self.note(line)
                done.append(line)
        return done


def _log(message: str) -> None:
    print(f"gpuforge: receiver: {message}", file=sys.stderr, flush=True)


def content_length(values: Sequence[str]) -> int:
    """The body's length from the request's Content-Length headers (at least one); PayloadError when they
    disagree, when it is not one plain number, or when it is over MAX_BODY_BYTES."""
    if len(set(values)) > 1:
        raise PayloadError(f"{len(values)} Content-Length headers that disagree")
    if _LENGTH.match(values[0]) is None:
        raise PayloadError(
            f"Content-Length {cut(values[0], _WHERE_CHARS)} is not a number of bytes up to {MAX_BODY_BYTES}"
        )
    length = int(values[0])
    if length > MAX_BODY_BYTES:
        raise PayloadError(f"the body is {length} bytes, over the limit of {MAX_BODY_BYTES}")
    return length


def make_server(receiver: DrainReceiver, port: int = PORT) -> ThreadingHTTPServer:
    """The HTTP server on 127.0.0.1:`port` (port 0: any free one); serve_forever() runs it."""

    class Handler(BaseHTTPRequestHandler):
        timeout = READ_TIMEOUT_S
        server_version = "gpuforge-receiver"

        def log_message(self, format: str, *args: object) -> None:
            receiver.note(format % args)

        def _answer(self, status: HTTPStatus, text: str) -> None:
            body = (printable_lines(text) + "\n").encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._answer(HTTPStatus.METHOD_NOT_ALLOWED, f"POST Alertmanager's webhook message to {PATH}")

        def do_POST(self) -> None:
            if self.path != PATH:
                self._answer(HTTPStatus.NOT_FOUND, f"no such path {self.path[:100]!r}: POST to {PATH}")
                return
            values = self.headers.get_all("Content-Length") or []
            if not values:
                self._answer(HTTPStatus.LENGTH_REQUIRED, "a Content-Length header (a number) is required")
                return
            try:
                done = receiver.handle(self._body(content_length(values)))
            except PayloadError as error:
                receiver.note(f"refused a message: {error}")
                self._answer(HTTPStatus.BAD_REQUEST, str(error))
            except GpuforgeError as error:
                receiver.note(f"could not drain (Alertmanager retries): {error}")
                self._answer(HTTPStatus.INTERNAL_SERVER_ERROR, str(error))
            else:
                self._answer(HTTPStatus.OK, "\n".join(done) or "no firing drain alert: nothing to do")

        def _body(self, length: int) -> bytes:
            """Exactly `length` bytes of body, all within READ_TIMEOUT_S; PayloadError otherwise.

            One deadline for the whole body, not per read: a client trickling a byte at a time would
            otherwise hold a thread for as many timeouts as the body has bytes.
            """
            deadline = time.monotonic() + READ_TIMEOUT_S
            body = bytearray()
            while len(body) < length:
                left_s = deadline - time.monotonic()
                try:
                    if left_s <= 0:
                        raise TimeoutError
                    self.connection.settimeout(left_s)
                    chunk = self.rfile.read1(length - len(body))
                except TimeoutError:
                    raise PayloadError(
                        f"the body did not arrive: {len(body)} of its {length} bytes (Content-Length) "
                        f"in {READ_TIMEOUT_S:g} s"
                    ) from None
                if not chunk:
                    raise PayloadError(
                        f"the body ended after {len(body)} of the {length} bytes its Content-Length says"
                    )
                body += chunk
            return bytes(body)

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: object, client_address: object) -> None:
            """One log line for a request the handler could not finish (socketserver prints a traceback)."""
            error = sys.exc_info()[1]
            receiver.note(f"a request from {client_address} failed: {type(error).__name__}: {error}")

    return Server((HOST, port), Handler)


def serve(port: int = PORT) -> int:
    """`gpuforge monitoring receiver`: serve until stopped (SIGTERM from systemd, or Ctrl-C).

    A drain in flight when it stops may or may not have reached Slurm; Alertmanager did not get
    its answer, so it sends the alert again, and a second drain of the node changes nothing.
    """
    receiver = DrainReceiver(SubprocessRunner(timeout_s=SCONTROL_TIMEOUT_S), _log, threading.Lock())
    try:
        server = make_server(receiver, port)
    except OSError as error:
        raise InputError(
            f"the receiver cannot listen on {HOST}:{port}: {error}. Fix: stop what holds the port "
            f"(`ss -ltnp 'sport = :{port}'`), or give another with --port and the same in alertmanager.yml."
        ) from None
    _log(f"listening on http://{HOST}:{server.server_address[1]}{PATH}")
    with server:  # Ctrl-C: the CLI's exit 130; systemd's SIGTERM ends the process (143)
        server.serve_forever()
    return 0
