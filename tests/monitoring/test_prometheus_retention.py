"""Retention is prometheus.yml's `storage.tsdb.retention.time`, not the deprecated flag: the real promtool and
Prometheus the matrices pin (scripts/monitoring-root.sh) read it from the rendered file.

Prometheus deprecated `--storage.tsdb.retention.time` in 3.8 in favour of the config file's field
(gpuforge/monitoring/prometheus.py, prometheus_flags). The stack asks for 7 days, not Prometheus's default
of 15, so that a file Prometheus ignored would show as 15d. Prometheus is started by this test on 127.0.0.1
and stopped by its own pid (tests/monitoring_tools.py).
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from monitoring_support import StackMaker, tool
from monitoring_tools import prometheus

from gpuforge.cli import main

pytestmark = pytest.mark.slow
RETENTION_DAYS = 7
# Prometheus prints a duration in its largest units (prometheus/common model.Duration.String): 7d is 1w.
SHOWN = "1w"


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return json.loads(answer.read())["data"]


@pytest.fixture
def rendered(make_stack: StackMaker, tmp_path: Path) -> Path:
    folder = make_stack(**{"gpuforge:monitoring": {"retentionDays": RETENTION_DAYS}})
    out = tmp_path / "out"
    assert main(["monitoring", "render", str(folder), "--stack", "test", "--out", str(out)]) == 0
    return out


def test_retention_is_written_to_prometheus_yml_and_not_as_the_deprecated_flag(rendered: Path) -> None:
    config = yaml.safe_load((rendered / "prometheus.yml").read_text(encoding="utf-8"))
    assert config["storage"]["tsdb"]["retention"] == {"time": f"{RETENTION_DAYS}d"}
    assert "retention" not in (rendered / "prometheus.flags").read_text(encoding="utf-8")


def test_promtool_accepts_the_retention_field(rendered: Path) -> None:
    checked = subprocess.run(
        [str(tool("promtool")), "check", "config", str(rendered / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_real_prometheus_keeps_the_rendered_retention(rendered: Path, tmp_path: Path) -> None:
    flags = [
        line
        for line in (rendered / "prometheus.flags").read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#") and not line.startswith("--web.listen-address=")
    ]
    with prometheus(
        rendered / "prometheus.yml", tmp_path / "data", tmp_path / "prometheus.log", extra_flags=flags
    ) as port:
        runtime = _get(f"http://127.0.0.1:{port}/api/v1/status/runtimeinfo")
    assert runtime["storageRetention"] == SHOWN
