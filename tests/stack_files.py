"""Stack folders for tests that read a stack the way `plan` and the render commands do.

One small Slurm stack (two p5.48xlarge on demand with a controller) that a test changes key by
key, and the two files a Pulumi stack folder holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
MATRIX = REPO / "images" / "matrices" / "p5-h100-cuda12.yaml"


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


def write_stack(folder: Path, stack: str, config: dict[str, Any]) -> Path:
    """`folder` made a Pulumi project with stack `stack` holding `config`; returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Pulumi.yaml").write_text("name: gpuforge-training\nruntime: python\n", encoding="utf-8")
    (folder / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}), encoding="utf-8")
    return folder
