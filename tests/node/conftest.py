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
