"""Helpers of the monitoring tests: stack folders, and the real Prometheus tools (tests/monitoring_tools.py,
the one helper every test folder uses for scripts/monitoring-root.sh's binaries)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from monitoring_tools import tool
from stack_files import slurm_stack, write_stack

REPO = Path(__file__).resolve().parents[2]
SHIPPED_STACKS = REPO / "stacks" / "training"
StackMaker = Callable[..., Path]
__all__ = ["REPO", "SHIPPED_STACKS", "StackMaker", "make_stack", "tool"]


@pytest.fixture
def make_stack(tmp_path: Path) -> StackMaker:
    """Writes Pulumi.yaml and Pulumi.<stack>.yaml into a fresh folder and returns the folder."""

    def make(stack: str = "test", **changes: Any) -> Path:
        return write_stack(tmp_path / "stack", stack, slurm_stack(**changes))

    return make
