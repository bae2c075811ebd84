"""Helpers of the monitoring tests: stack folders and the real Prometheus tools (scripts/monitoring-root.sh)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SHIPPED_STACKS = REPO / "stacks" / "training"
MATRIX = REPO / "images" / "matrices" / "p5-h100-cuda12.yaml"
TOOLS_ROOT = Path(os.environ.get("GPUFORGE_MONITORING_ROOT", REPO / ".cache" / "monitoring-root"))
StackMaker = Callable[..., Path]


def slurm_stack(**changes: Any) -> dict[str, Any]:
    """A p5 stack with a Slurm controller; `changes` replace or add keys (None removes one)."""
    config: dict[str, Any] = {
        "aws:region": "us-east-1",
        "gpuforge:matrix": str(MATRIX),
        "gpuforge:instanceType": "p5.48xlarge",
        "gpuforge:nodeCount": 2,
        "gpuforge:nodeMode": "asg",
        "gpuforge:availabilityZone": "us-east-1a",
        "gpuforge:capacity": {"type": "on-demand"},
        "gpuforge:scheduler": {"type": "slurm", "controllerInstanceType": "m7i.2xlarge"},
    }
    config.update(changes)
    return {key: value for key, value in config.items() if value is not None}


@pytest.fixture
def make_stack(tmp_path: Path) -> StackMaker:
    """Writes Pulumi.yaml and Pulumi.<stack>.yaml into a fresh folder and returns the folder."""

    def make(stack: str = "test", **changes: Any) -> Path:
        folder = tmp_path / "stack"
        folder.mkdir(exist_ok=True)
        (folder / "Pulumi.yaml").write_text("name: gpuforge-training\nruntime: python\n", encoding="utf-8")
        text = yaml.safe_dump({"config": slurm_stack(**changes)})
        (folder / f"Pulumi.{stack}.yaml").write_text(text, encoding="utf-8")
        return folder

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
