"""A moto server on 127.0.0.1 for each test module that asks for one (real HTTP, real botocore)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def module_env() -> Iterator[pytest.MonkeyPatch]:
    """Environment changes that last for one test module."""
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@pytest.fixture(scope="module")
def moto_endpoint(module_env: pytest.MonkeyPatch) -> Iterator[str]:
    """moto's server on a free loopback port, with test credentials in the environment."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=_free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    module_env.setenv("AWS_ACCESS_KEY_ID", "testing")
    module_env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    module_env.delenv("AWS_PROFILE", raising=False)
    module_env.setenv("AWS_EC2_METADATA_DISABLED", "true")
    yield f"http://{host}:{port}"
    server.stop()
