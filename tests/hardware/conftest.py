"""A moto server on 127.0.0.1 serving AWS's DescribeInstanceTypes data over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def aws_endpoint(monkeypatch_module: pytest.MonkeyPatch, moto_server: str) -> Iterator[str]:
    endpoint = moto_server
    monkeypatch_module.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch_module.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch_module.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch_module.setenv("AWS_ENDPOINT_URL", endpoint)
    yield endpoint


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch
