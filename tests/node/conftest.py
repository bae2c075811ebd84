"""Shared pieces for the node agent's tests (scenarios live in node_scenarios.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from node_scenarios import FIXTURES


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An empty directory standing in for the node's / (proc and sys go below it)."""
    path = tmp_path / "root"
    path.mkdir()
    return path


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, moto_server: str) -> str:
    """moto's server (tests/conftest.py) reached through boto3's standard environment."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return moto_server
