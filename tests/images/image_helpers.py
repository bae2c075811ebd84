"""Constants and matrix helpers for the image pipeline tests (a uniquely named module to import)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
MATRICES = REPO / "images" / "matrices"
SHIPPED = sorted(MATRICES.glob("*.yaml"))
FIXTURES = REPO / "tests" / "fixtures" / "images"
BASE_AMI = "ami-0c7217cdde317cfec"  # every shipped matrix's us-east-1 base image
REGION = "us-east-1"


def load_matrix_data(name: str = "p5-h100-cuda12") -> dict[str, Any]:
    data = yaml.safe_load((MATRICES / f"{name}.yaml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def write_matrix(directory: Path, data: dict[str, Any], filename: str = "matrix.yaml") -> Path:
    path = directory / filename
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def variant(directory: Path, name: str, base: str = "p5-h100-cuda12", **changes: Any) -> Path:
    """A shipped matrix under a new name (so a new digest and AMI name), with top-level changes."""
    data = load_matrix_data(base)
    data["name"] = name
    data.update(changes)
    return write_matrix(directory, data, f"{name}.yaml")
