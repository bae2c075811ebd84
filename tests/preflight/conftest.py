"""A moto server on 127.0.0.1 for each test module that asks for one (real HTTP, real botocore)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def moto_endpoint(module_env: pytest.MonkeyPatch, moto_server: str) -> Iterator[str]:
    """moto's server (tests/conftest.py), with test credentials in the environment."""
    module_env.setenv("AWS_ACCESS_KEY_ID", "testing")
    module_env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    module_env.delenv("AWS_PROFILE", raising=False)
    module_env.setenv("AWS_EC2_METADATA_DISABLED", "true")
    yield moto_server
