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
not such a message (too large, not JSON, a field missing or of the wrong type, a node
name scontrol would read as several nodes): Alertmanager does not retry a 4xx, and nothing
was drained; 500 when Slurm could not be asked or told (logged): Alertmanager retries a 5xx
and the drains are idempotent. The server binds 127.0.0.1 only, so nothing off the
controller can drain a node.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

from gpuforge.errors import GpuforgeError, InputError
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


def parse_message(body: bytes) -> WebhookMessage:
    """The message in `body`; anything else is a PayloadError naming what is wrong."""
    if len(body) > MAX_BODY_BYTES:
        raise PayloadError(f"the body is {len(body)} bytes, over the limit of {MAX_BODY_BYTES}")
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError) as error:
        raise PayloadError(f"the body is not JSON: {error}") from None
    try:
        return WebhookMessage.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(map(str, item['loc'])) or '(body)'}: {item['msg']}" for item in error.errors()[:5]
        )
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
                self.log(line)
                done.append(line)
        return done


def _log(message: str) -> None:
    print(f"gpuforge: receiver: {message}", file=sys.stderr, flush=True)


def make_server(receiver: DrainReceiver, port: int = PORT) -> ThreadingHTTPServer:
    """The HTTP server on 127.0.0.1:`port` (port 0: any free one); serve_forever() runs it."""

    class Handler(BaseHTTPRequestHandler):
        timeout = READ_TIMEOUT_S
        server_version = "gpuforge-receiver"

        def log_message(self, format: str, *args: object) -> None:
            receiver.log(format % args)

        def _answer(self, status: HTTPStatus, text: str) -> None:
            body = (text + "\n").encode("utf-8")
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
            length = self.headers.get("Content-Length", "")
            if not length.isdigit():
                self._answer(HTTPStatus.LENGTH_REQUIRED, "a Content-Length header (a number) is required")
                return
            if int(length) > MAX_BODY_BYTES:
                self._answer(
                    HTTPStatus.BAD_REQUEST, f"the body is {length} bytes, over the limit of {MAX_BODY_BYTES}"
                )
                return
            body = self.rfile.read(int(length))
            try:
                done = receiver.handle(body)
            except PayloadError as error:
                receiver.log(f"refused a message: {error}")
                self._answer(HTTPStatus.BAD_REQUEST, str(error))
            except GpuforgeError as error:
                receiver.log(f"could not drain (Alertmanager retries): {error}")
                self._answer(HTTPStatus.INTERNAL_SERVER_ERROR, str(error))
            else:
                self._answer(HTTPStatus.OK, "\n".join(done) or "no firing drain alert: nothing to do")

    return ThreadingHTTPServer((HOST, port), Handler)


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
