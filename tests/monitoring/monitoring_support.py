"""Helpers of the monitoring tests: stack folders and the real Prometheus tools (scripts/monitoring-root.sh)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from stack_files import slurm_stack, write_stack

REPO = Path(__file__).resolve().parents[2]
SHIPPED_STACKS = REPO / "stacks" / "training"
TOOLS_ROOT = Path(os.environ.get("GPUFORGE_MONITORING_ROOT", REPO / ".cache" / "monitoring-root"))
StackMaker = Callable[..., Path]


@pytest.fixture
def make_stack(tmp_path: Path) -> StackMaker:
    """Writes Pulumi.yaml and Pulumi.<stack>.yaml into a fresh folder and returns the folder."""

    def make(stack: str = "test", **changes: Any) -> Path:
        return write_stack(tmp_path / "stack", stack, slurm_stack(**changes))

    return make


def tool(name: str) -> Path:
    """A binary of the monitoring test root. Absent: skip where the session cannot build it (not
    root), fail where it can (root: scripts/test.sh builds it first, so CI never skips silently)."""
    path = TOOLS_ROOT / "usr" / "bin" / name
    if path.is_file() and os.access(path, os.X_OK):
        return path
    if os.geteuid() != 0:
        pytest.skip(f"no {name} at {path}; scripts/monitoring-root.sh builds it (needs root)")
    pytest.fail(f"no {name} at {path}: run scripts/monitoring-root.sh (scripts/test.sh does) and run again")
