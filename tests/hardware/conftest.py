"""A moto server on 127.0.0.1 serving AWS's DescribeInstanceTypes data over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def aws_endpoint(module_env: pytest.MonkeyPatch, moto_server: str) -> Iterator[str]:
    endpoint = moto_server
    module_env.setenv("AWS_ACCESS_KEY_ID", "testing")
    module_env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    module_env.setenv("AWS_DEFAULT_REGION", "us-east-1")
    module_env.setenv("AWS_ENDPOINT_URL", endpoint)
    yield endpoint
