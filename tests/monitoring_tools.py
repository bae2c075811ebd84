"""The real Prometheus tools every test folder runs: the binaries of the monitoring test root
(scripts/monitoring-root.sh), found in one place so that GPUFORGE_MONITORING_ROOT moves them all."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DEFAULT_ROOT = REPO / ".cache" / "monitoring-root"


def tools_root() -> Path:
    """The root the tests read: GPUFORGE_MONITORING_ROOT, as scripts/monitoring-root.sh builds it,
    or its default. Read at each call, so a test or a run that sets it is always honoured."""
    return Path(os.environ.get("GPUFORGE_MONITORING_ROOT") or DEFAULT_ROOT)


def tool(name: str) -> Path:
    """A binary of the monitoring test root. Absent: skip where the session cannot build it (not
    root), fail where it can (root: scripts/test.sh builds it first, so CI never skips silently)."""
    path = tools_root() / "usr" / "bin" / name
    if path.is_file() and os.access(path, os.X_OK):
        return path
    if os.geteuid() != 0:
        pytest.skip(f"no {name} at {path}; scripts/monitoring-root.sh builds it (needs root)")
    pytest.fail(f"no {name} at {path}: run scripts/monitoring-root.sh (scripts/test.sh does) and run again")
