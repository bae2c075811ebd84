"""Fixtures of the usage tests: a stack folder, and a real Prometheus on 127.0.0.1 serving backfilled history.

The Prometheus is the monitoring test root's (tests/monitoring_tools.py);
its history is written with `promtool tsdb create-blocks-from openmetrics` into the data folder before
it starts, so a test queries minutes of series at once. Each test's Prometheus is stopped by its pid.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from monitoring_tools import prometheus, tool
from stack_files import slurm_stack, write_stack

StackMaker = Callable[..., Path]


@pytest.fixture
def make_stack(tmp_path: Path) -> StackMaker:
    def make(stack: str = "test", **changes: Any) -> Path:
        return write_stack(tmp_path / "stack", stack, slurm_stack(**changes))

    return make


@contextlib.contextmanager
def prometheus_with_history(openmetrics: str, folder: Path) -> Iterator[str]:
    """A Prometheus on 127.0.0.1 whose TSDB holds `openmetrics` (backfilled); yields its URL."""
    folder.mkdir(parents=True, exist_ok=True)
    history = folder / "history.om"
    history.write_text(openmetrics, encoding="utf-8")
    data = folder / "data"
    made = subprocess.run(
        [str(tool("promtool")), "tsdb", "create-blocks-from", "openmetrics", str(history), str(data)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    config = folder / "prometheus.yml"
    config.write_text("global: {}\n", encoding="utf-8")
    # History of a fixed date (the real accounting fixtures') stays queryable however old it gets.
    retention = ["--storage.tsdb.retention.time=36500d"]
    with prometheus(config, data, folder / "prometheus.log", extra_flags=retention) as port:
        yield f"http://127.0.0.1:{port}"
