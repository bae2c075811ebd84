"""Fixtures for plan tests: an image catalog with an AMI for every shipped matrix, and stack copies.

The catalog is written with the image pipeline's own writer (`record_entry`); its AMI
ids are made up, as no image is built here (the --local build has its own tests).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from catalog_records import record_every_shipped_matrix
from plan_support import STACK_DIR, StackCopy

from gpuforge.images.catalog import Catalog, load_catalog


@pytest.fixture(scope="session")
def catalog_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A catalog holding one AMI per shipped matrix, in each region the matrix pins a base AMI for."""
    return record_every_shipped_matrix(tmp_path_factory.mktemp("catalog") / "catalog.json")


@pytest.fixture(scope="session")
def catalog(catalog_path: Path) -> Catalog:
    return load_catalog(catalog_path)


@pytest.fixture
def stack_copy(tmp_path: Path) -> StackCopy:
    """A copy of stacks/training with one stack file, changed by `overrides` (None removes a key).

    The matrix path is made absolute, since the copy lives elsewhere; `program_suffix`
    is appended to the real __main__.py.
    """

    def make(
        stack: str = "p5-prod", *, overrides: dict[str, Any] | None = None, program_suffix: str = ""
    ) -> Path:
        target = tmp_path / "stack"
        target.mkdir(exist_ok=True)
        (target / "Pulumi.yaml").write_text(
            (STACK_DIR / "Pulumi.yaml").read_text(encoding="utf-8"), encoding="utf-8"
        )
        program = (STACK_DIR / "__main__.py").read_text(encoding="utf-8") + program_suffix
        (target / "__main__.py").write_text(program, encoding="utf-8")
        data = yaml.safe_load((STACK_DIR / f"Pulumi.{stack}.yaml").read_text(encoding="utf-8"))
        config = data["config"]
        config["gpuforge:matrix"] = str((STACK_DIR / config["gpuforge:matrix"]).resolve())
        for key, value in (overrides or {}).items():
            if value is None:
                config.pop(key, None)
            else:
                config[key] = value
        (target / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
        return target

    return make
