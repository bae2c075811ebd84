"""A moto server on 127.0.0.1 serving AWS's DescribeInstanceTypes data over real HTTP."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from moto.server import ThreadedMotoServer


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def aws_endpoint(monkeypatch_module: pytest.MonkeyPatch) -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=_free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    monkeypatch_module.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch_module.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch_module.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch_module.setenv("AWS_ENDPOINT_URL", endpoint)
    yield endpoint
    server.stop()


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch
