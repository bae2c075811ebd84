"""Fixtures every test folder shares."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator

import pytest
from moto.server import ThreadedMotoServer
from waiting import WAIT_S


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def module_env() -> Iterator[pytest.MonkeyPatch]:
    """Environment changes that last for one test module (pytest's monkeypatch is per test)."""
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@pytest.fixture(scope="module")
def moto_server() -> Iterator[str]:
    """moto's server on a free 127.0.0.1 port for one test module; yields its endpoint URL.

    Servers started in one process share moto's backends, so a module would see the
    instances and AMIs an earlier module left behind: the state is reset before use.
    """
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=_free_port(), verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        reset = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")
        with urllib.request.urlopen(reset, timeout=WAIT_S) as response:
            assert response.status == 200
        yield endpoint
    finally:
        server.stop()
