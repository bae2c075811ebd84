"""Shared helpers for the matrix tests: load a shipped matrix, check a dict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpuforge.errors import Finding
from gpuforge.images.matrix import check_data

MATRICES = Path(__file__).resolve().parents[2] / "images" / "matrices"


def load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((MATRICES / name).read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def findings(data: dict[str, Any]) -> list[Finding]:
    return list(check_data(Path("test.yaml"), data).findings)


def rules(data: dict[str, Any]) -> set[str]:
    """The ids of the error-severity rules a matrix breaks."""
    return {f.rule for f in findings(data) if f.severity == "error"}


def warnings(data: dict[str, Any]) -> set[str]:
    return {f.rule for f in findings(data) if f.severity == "warning"}


def key_paths(data: Any, *, with_mappings: bool, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every key path in a parsed matrix: its leaves, and with `with_mappings` its nested mappings too."""
    if not isinstance(data, dict):
        return [prefix]
    own = [prefix] if with_mappings and prefix else []
    return own + [
        path
        for key, value in data.items()
        for path in key_paths(value, with_mappings=with_mappings, prefix=(*prefix, key))
    ]
