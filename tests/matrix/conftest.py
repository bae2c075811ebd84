"""Fixtures for matrix tests: fresh copies of shipped matrices to mutate."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from matrix_cases import load


@pytest.fixture
def h100() -> dict[str, Any]:
    """The shipped H100 CUDA 12 matrix, as a fresh dict a test may change."""
    return copy.deepcopy(load("p5-h100-cuda12.yaml"))


@pytest.fixture
def b200() -> dict[str, Any]:
    return copy.deepcopy(load("p6-b200-cuda12.yaml"))


@pytest.fixture
def a100() -> dict[str, Any]:
    return copy.deepcopy(load("p4d-a100-cuda12.yaml"))
