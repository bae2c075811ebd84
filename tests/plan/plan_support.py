"""Paths and types shared by the plan tests (a module of its own: every test folder has a conftest)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STACK_DIR = REPO / "stacks" / "training"
MATRICES = REPO / "images" / "matrices"
SHIPPED_STACKS = sorted(path.name[len("Pulumi.") : -len(".yaml")] for path in STACK_DIR.glob("Pulumi.*.yaml"))

StackCopy = Callable[..., Path]
