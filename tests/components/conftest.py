"""Every component test runs against fresh recording mocks (Pulumi SDK mocks, preview=False)."""

from __future__ import annotations

import pytest

from gpuforge.pulumi_mocks import GpuforgeMocks, install


@pytest.fixture
def mocks() -> GpuforgeMocks:
    return install(preview=False)
