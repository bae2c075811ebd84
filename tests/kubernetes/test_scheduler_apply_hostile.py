"""`gpuforge scheduler apply` against what goes wrong before any object is applied: a kubeconfig that cannot be
used, a server that answers garbage, a server that never answers. Each ends in gpuforge's own error with the
code README's exit table gives (2: the kubeconfig or where apply runs from; 1: the server's fault, run again),
never a traceback, and always within the command's one deadline (`--timeout`).

The servers here are stand-ins on 127.0.0.1 by necessity: a real kube-apiserver never answers an HTML page,
accepts a connection and stays silent, or trickles a byte at a time; a plain socket and Python's HTTP server
do exactly that. The happy path and the server's real refusals are in test_scheduler_apply_apiserver.py.
Before anything is contacted apply reads the EFA plugin's digest from ECR: moto's ECR plays it, as there.

The wait tests run the command in a process of its own and bound it by the subprocess timeout (the deadline
plus a margin for starting Python under load), never by a timed assertion: before the fix a server that
accepted and never answered held apply for 4 x 60 s (urllib3 retried each read three times).
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import http.server
import ipaddress
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kube_cluster import REPO
from kube_support import EFA_REPOSITORY, pinned_efa_tag, publish_efa_plugin, push_image

from gpuforge.cli import main
from gpuforge.stack_config import load_stack_config

STACKS = REPO / "stacks" / "training"
STACK = "p5-eks"
# Long enough for moto's ECR to answer on a loaded machine (the deadline covers it too).
DEADLINE_S = 15
DEADLINE = ("--timeout", str(DEADLINE_S))
# Starting Python and importing boto3, pydantic and the kubernetes client took over 50 s on a 2-core machine
# shared by eight test runs; the bound stays far below the 4 x 60 s the old client waited.
START_MARGIN_S = 120
VERSION = b'{"major": "1", "minor": "35", "gitVersion": "v1.35.8"}'

Answer = tuple[int, str, bytes]


@pytest.fixture
def efa_registry(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """moto's ECR as the stack region's add-on registry with the pinned EFA plugin tag, this process's AWS
    environment pointed at it (and inherited by the subprocesses)."""
    ecr = publish_efa_plugin(moto_server, monkeypatch, load_stack_config(STACKS, STACK).region)
    push_image(ecr, pinned_efa_tag())
    yield ecr
    ecr.delete_repository(repositoryName=EFA_REPOSITORY, force=True)


def _kubeconfig(
    folder: Path, server: str, *, user: dict[str, Any] | None = None, cluster: dict[str, Any] | None = None
) -> Path:
    """A kubeconfig of one context `c` for `server` (a token user unless `user` is given)."""
    path = folder / "kubeconfig"
    body = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server, **(cluster or {})}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "users": [{"name": "u", "user": user if user is not None else {"token": "t"}}],
    }
    path.write_text(yaml.safe_dump(body), encoding="utf-8")
    return path


def _apply(*flags: str) -> int:
    return main(["scheduler", "apply", str(STACKS), "--stack", STACK, *flags])


# --- a kubeconfig that cannot be used: exit 2, naming the file and the rule --------------------------------


def _missing(folder: Path) -> Path:
    return folder / "none.kubeconfig"


def _directory(folder: Path) -> Path:
    (folder / "dir").mkdir()
    return folder / "dir"


def _fifo(folder: Path) -> Path:
    os.mkfifo(folder / "fifo")
    return folder / "fifo"


def _not_yaml(folder: Path) -> Path:
    (folder / "k").write_text("clusters: [unclosed\n", encoding="utf-8")
    return folder / "k"


def _too_big(folder: Path) -> Path:
    (folder / "k").write_text("a: " + "x" * (2 * 1024 * 1024), encoding="utf-8")
    return folder / "k"


def _no_contexts(folder: Path) -> Path:
    (folder / "k").write_text("apiVersion: v1\nkind: Config\nclusters: []\n", encoding="utf-8")
    return folder / "k"


def _no_current_context(folder: Path) -> Path:
    path = _kubeconfig(folder, "https://127.0.0.1:9")
    body = yaml.safe_load(path.read_text(encoding="utf-8"))
    del body["current-context"]
    path.write_text(yaml.safe_dump(body), encoding="utf-8")
    return path


def _unknown_current_context(folder: Path) -> Path:
    path = _kubeconfig(folder, "https://127.0.0.1:9")
    body = yaml.safe_load(path.read_text(encoding="utf-8"))
    body["current-context"] = "gone"
    path.write_text(yaml.safe_dump(body), encoding="utf-8")
    return path


def _undefined_cluster(folder: Path) -> Path:
    path = _kubeconfig(folder, "https://127.0.0.1:9")
    body = yaml.safe_load(path.read_text(encoding="utf-8"))
    body["clusters"] = []
    path.write_text(yaml.safe_dump(body), encoding="utf-8")
    return path


def _no_url(folder: Path) -> Path:
    return _kubeconfig(folder, "ftp://127.0.0.1/")


def _plugin(command: str, *args: str) -> dict[str, Any]:
    return {
        "exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": command, "args": list(args)}
    }


def _plugin_not_installed(folder: Path) -> Path:
    return _kubeconfig(
        folder, "https://127.0.0.1:9", user=_plugin("gpuforge-no-such-aws", "eks", "get-token")
    )


def _plugin_fails(folder: Path) -> Path:
    script = "echo 'Error when retrieving token from sso: Token has expired and refresh failed' >&2; exit 255"
    return _kubeconfig(folder, "https://127.0.0.1:9", user=_plugin("sh", "-c", script))


KUBECONFIGS: list[tuple[str, Callable[[Path], Path], tuple[str, ...]]] = [
    ("missing", _missing, ("none.kubeconfig", "no such file")),
    ("a-directory", _directory, ("not a regular file",)),
    ("a-fifo", _fifo, ("not a regular file",)),
    ("not-yaml", _not_yaml, ("not valid YAML",)),
    ("too-big", _too_big, ("more than it may hold",)),
    ("no-contexts", _no_contexts, ("no contexts",)),
    ("no-current-context", _no_current_context, ("no current-context", "--context")),
    ("unknown-current-context", _unknown_current_context, ("no context 'gone'", "the contexts are: c")),
    ("undefined-cluster", _undefined_cluster, ("names cluster 'k'", "which no file defines")),
    ("server-not-https", _no_url, ("not an https:// URL",)),
    ("plugin-not-installed", _plugin_not_installed, ("gpuforge-no-such-aws", "not installed here")),
]


@pytest.mark.parametrize(
    ("make", "says"), [case[1:] for case in KUBECONFIGS], ids=[c[0] for c in KUBECONFIGS]
)
def test_a_kubeconfig_that_cannot_be_used_is_exit_2_naming_what_is_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: Callable[[Path], Path], says: tuple[str, ...]
) -> None:
    code = _apply("--kubeconfig", str(make(tmp_path)))
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("gpuforge: error: ") and "Fix:" in err and "Traceback" not in err
    for words in says:
        assert words in err, err


@pytest.mark.usefixtures("efa_registry")
def test_a_credential_plugin_that_fails_is_exit_2_with_its_own_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The client logged a failed plugin and sent the request without a token: the refusal named the identity,
    not the expired sign-in."""
    assert _apply("--kubeconfig", str(_plugin_fails(tmp_path))) == 2
    err = capsys.readouterr().err
    assert "credential plugin ('sh') failed (exit 255)" in err and "Token has expired" in err
    assert "aws sso login" in err and "Traceback" not in err


def test_a_context_that_does_not_exist_is_exit_2_listing_the_contexts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _apply("--kubeconfig", str(_kubeconfig(tmp_path, "https://127.0.0.1:9")), "--context", "prod")
    err = capsys.readouterr().err
    assert code == 2
    assert "no context 'prod' (--context)" in err and "the contexts are: c" in err


# --- a server that answers garbage ---------------------------------------------------------------------------


class StandIn(http.server.ThreadingHTTPServer):
    """An HTTP server on 127.0.0.1 whose every GET is answered by `answer(path)`."""

    daemon_threads = True

    def __init__(self, answer: Callable[[str], Answer]) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, content_type, body = answer(self.path)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])


@pytest.fixture
def stand_in() -> Iterator[Callable[[Callable[[str], Answer]], StandIn]]:
    started: list[tuple[StandIn, threading.Thread]] = []

    def start(answer: Callable[[str], Answer]) -> StandIn:
        server = StandIn(answer)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        started.append((server, thread))
        return server

    yield start
    for server, thread in started:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _html(path: str) -> Answer:
    return 200, "text/html", b"<html><body><h1>Sign in</h1></body></html>"


def _text_as_json(path: str) -> Answer:
    return 200, "application/json", b"upstream connect error or disconnect/reset before headers"


def _failing(path: str) -> Answer:
    return 500, "text/html", b"<html>Internal Server Error</html>"


def _version_then_html(path: str) -> Answer:
    return (200, "application/json", VERSION) if path.startswith("/version") else _html(path)


def _version_then_500(path: str) -> Answer:
    return (200, "application/json", VERSION) if path.startswith("/version") else _failing(path)


def _version_then_list(path: str) -> Answer:
    return (
        (200, "application/json", VERSION)
        if path.startswith("/version")
        else (200, "application/json", b"[]")
    )


SERVERS: list[tuple[str, Callable[[str], Answer], int, tuple[str, ...]]] = [
    ("html-page", _html, 2, ("an HTML page", "not a Kubernetes API server")),
    ("text-as-json", _text_as_json, 2, ("upstream connect error", "not a Kubernetes API server")),
    ("http-500", _failing, 1, ("HTTP 500", "run again")),
    ("discovery-html", _version_then_html, 1, ("discover the API", "what no Kubernetes API server sends")),
    ("discovery-500", _version_then_500, 1, ("discover the API", "HTTP 500")),
    ("discovery-json-list", _version_then_list, 1, ("discover the API", "not a JSON object")),
]


@pytest.mark.usefixtures("efa_registry")
@pytest.mark.parametrize(
    ("answer", "code", "says"), [case[1:] for case in SERVERS], ids=[case[0] for case in SERVERS]
)
def test_a_server_answering_garbage_is_a_clear_error(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    stand_in: Callable[[Callable[[str], Answer]], StandIn],
    answer: Callable[[str], Answer],
    code: int,
    says: tuple[str, ...],
) -> None:
    server = stand_in(answer)
    kubeconfig = _kubeconfig(tmp_path, f"http://127.0.0.1:{server.port}")
    assert _apply("--kubeconfig", str(kubeconfig)) == code
    err = capsys.readouterr().err
    assert err.startswith("gpuforge: error: ") and "Fix:" in err and "Traceback" not in err
    for words in says:
        assert words in err, err


def _self_signed(folder: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / f"{name}.crt", folder / f"{name}.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


@pytest.fixture
def tls_stand_in(
    tmp_path: Path, stand_in: Callable[[Callable[[str], Answer]], StandIn]
) -> tuple[StandIn, Path]:
    """A stand-in speaking TLS with a certificate of its own, and that certificate (which no kubeconfig here
    trusts: each names another CA)."""
    server = stand_in(lambda path: (200, "application/json", VERSION))
    cert, key = _self_signed(tmp_path, "server")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    return server, cert


@pytest.mark.usefixtures("efa_registry")
def test_a_server_whose_certificate_the_kubeconfig_does_not_trust_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tls_stand_in: tuple[StandIn, Path]
) -> None:
    server, _ = tls_stand_in
    other_ca, _ = _self_signed(tmp_path, "other-ca")
    ca_data = base64.b64encode(other_ca.read_bytes()).decode()
    kubeconfig = _kubeconfig(
        tmp_path, f"https://127.0.0.1:{server.port}", cluster={"certificate-authority-data": ca_data}
    )
    assert _apply("--kubeconfig", str(kubeconfig)) == 2
    err = capsys.readouterr().err
    assert "CERTIFICATE_VERIFY_FAILED" in err and "certificate-authority" in err and "Traceback" not in err


@pytest.mark.usefixtures("efa_registry")
def test_plain_http_behind_an_https_url_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], stand_in: Callable[[Callable[[str], Answer]], StandIn]
) -> None:
    server = stand_in(lambda path: (200, "application/json", VERSION))
    assert _apply("--kubeconfig", str(_kubeconfig(tmp_path, f"https://127.0.0.1:{server.port}"))) == 2
    err = capsys.readouterr().err
    assert "TLS handshake failed" in err and "Traceback" not in err


@pytest.mark.usefixtures("efa_registry")
def test_an_http_url_to_a_tls_server_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tls_stand_in: tuple[StandIn, Path]
) -> None:
    server, _ = tls_stand_in
    assert _apply("--kubeconfig", str(_kubeconfig(tmp_path, f"http://127.0.0.1:{server.port}"))) == 2
    err = capsys.readouterr().err
    assert "closed the connection" in err and "an API server is https://" in err and "Traceback" not in err


# --- waits: one deadline bounds them all ---------------------------------------------------------------------


def _command() -> list[str]:
    """`gpuforge scheduler apply` of the shipped p5-eks stack, as a process of its own runs it."""
    return [sys.executable, "-m", "gpuforge.cli", "scheduler", "apply", str(STACKS), "--stack", STACK]


def _run_apply(
    folder: Path, *flags: str, env: dict[str, str] | None = None, prefix: Sequence[str] = ()
) -> subprocess.CompletedProcess[str]:
    """`gpuforge scheduler apply ...` in a process of its own, bounded by the subprocess timeout: if it has not
    ended by then, subprocess.TimeoutExpired fails the test. The wait tests pass `*DEADLINE`; the pipe tests
    none (a pipe must be refused whatever the deadline)."""
    return subprocess.run(
        [*prefix, *_command(), *flags],
        cwd=folder,  # not the checkout: `-m` would import its gpuforge folder, not the installed package
        env=env if env is not None else dict(os.environ),
        capture_output=True,
        text=True,
        timeout=DEADLINE_S + START_MARGIN_S,
        check=False,
    )


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    yield server
    server.close()


@pytest.fixture
def silent_server(listener: socket.socket) -> Iterator[int]:
    """A server that accepts every connection and never sends a byte."""
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(listener.getsockname()[1])
    stop.set()
    thread.join(timeout=10)
    for connection in held:
        connection.close()


@pytest.fixture
def full_backlog(listener: socket.socket) -> Iterator[int]:
    """A server that never accepts: its accept queue is filled first, so a new connection's SYN is dropped and
    connect() waits, as for a private endpoint whose packets are black-holed."""
    listener.listen(0)
    port = int(listener.getsockname()[1])
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(("127.0.0.1", port))
        fillers.append(filler)
    yield port
    for filler in fillers:
        filler.close()


@pytest.fixture
def trickling_server(listener: socket.socket) -> Iterator[int]:
    """A server that answers one byte of a header every 0.2 s, for ever: each read gets something in time."""
    listener.listen(16)
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        connections: list[socket.socket] = []
        line = b"HTTP/1.1 200 OK\r\n" + b"X-Slow: " + b"x" * 100_000
        while not stop.is_set():
            try:
                connections.append(listener.accept()[0])
            except TimeoutError:
                pass
            except OSError:
                return
            for index, connection in enumerate(connections):
                try:
                    connection.sendall(line[index % len(line) : index % len(line) + 1])
                except OSError:
                    continue
            time.sleep(0.2)
        for connection in connections:
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield int(listener.getsockname()[1])
    stop.set()
    thread.join(timeout=10)


@pytest.mark.usefixtures("efa_registry")
def test_a_server_that_accepts_and_never_answers_ends_at_the_deadline(
    tmp_path: Path, silent_server: int
) -> None:
    done = _run_apply(
        tmp_path, *DEADLINE, "--kubeconfig", str(_kubeconfig(tmp_path, f"http://127.0.0.1:{silent_server}"))
    )
    assert done.returncode == 1, done.stderr
    assert "gave no answer to GET /version" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.usefixtures("efa_registry")
def test_a_server_that_never_accepts_ends_at_the_deadline(tmp_path: Path, full_backlog: int) -> None:
    done = _run_apply(
        tmp_path, *DEADLINE, "--kubeconfig", str(_kubeconfig(tmp_path, f"http://127.0.0.1:{full_backlog}"))
    )
    assert done.returncode == 2, done.stderr
    assert "cannot reach the Kubernetes API server" in done.stderr and "timed out" in done.stderr


@pytest.mark.usefixtures("efa_registry")
def test_a_server_that_trickles_its_answer_ends_at_the_deadline(
    tmp_path: Path, trickling_server: int
) -> None:
    """No per-read timeout ever fires (a byte arrives every 0.2 s): the deadline's backstop ends it."""
    done = _run_apply(
        tmp_path,
        *DEADLINE,
        "--kubeconfig",
        str(_kubeconfig(tmp_path, f"http://127.0.0.1:{trickling_server}")),
    )
    assert done.returncode == 1, done.stderr
    assert f"no answer within the command's deadline of {DEADLINE_S} s (--timeout)" in done.stderr
    assert "GET http://127.0.0.1" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.usefixtures("efa_registry")
def test_a_credential_plugin_that_hangs_ends_at_the_deadline(tmp_path: Path) -> None:
    sleep = shutil.which("sleep")
    assert sleep is not None
    kubeconfig = _kubeconfig(tmp_path, "https://127.0.0.1:9", user=_plugin(sleep, "600"))
    done = _run_apply(tmp_path, *DEADLINE, "--kubeconfig", str(kubeconfig))
    assert done.returncode == 2, done.stderr
    assert "credential plugin" in done.stderr and "did not finish within" in done.stderr


@pytest.mark.usefixtures("efa_registry")
def test_a_kubeconfig_pipe_named_by_kubeconfig_env_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "kubeconfig"
    os.mkfifo(fifo)
    done = _run_apply(tmp_path, env={**os.environ, "KUBECONFIG": str(fifo)})
    assert done.returncode == 2, done.stderr
    assert "not a regular file" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.usefixtures("efa_registry")
def test_a_certificate_authority_pipe_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "ca.crt"
    os.mkfifo(fifo)
    kubeconfig = _kubeconfig(tmp_path, "https://127.0.0.1:9", cluster={"certificate-authority": str(fifo)})
    done = _run_apply(tmp_path, "--kubeconfig", str(kubeconfig))
    assert done.returncode == 2, done.stderr
    assert "certificate-authority" in done.stderr and "not a regular file" in done.stderr


def test_an_unreadable_kubeconfig_is_exit_2(tmp_path: Path) -> None:
    """Mode 000: as root, run the command without the capabilities that let root read any file."""
    kubeconfig = _kubeconfig(tmp_path, "https://127.0.0.1:9")
    kubeconfig.chmod(0)
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv (util-linux): root reads a mode-000 file")
        caps = "-dac_override,-dac_read_search"
        prefix = [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}"]
    done = _run_apply(tmp_path, "--kubeconfig", str(kubeconfig), prefix=prefix)
    assert done.returncode == 2, done.stderr
    assert "cannot read the kubeconfig: Permission denied" in done.stderr and "Traceback" not in done.stderr


def test_non_ascii_digits_in_timeout_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """int() and float() read '٣' as 3: a flag value must be plain digits."""
    with pytest.raises(SystemExit) as exit_:
        _apply("--timeout", "\u0663\u0660")
    assert exit_.value.code == 2
    assert "\\u0663\\u0660" in capsys.readouterr().err
