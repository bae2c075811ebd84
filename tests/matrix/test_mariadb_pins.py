"""MariaDB, the database of Slurm's accounting, is pinned beside Slurm like every other package of the image."""

from __future__ import annotations

from typing import Any

import pytest
from matrix_cases import MATRICES, findings, load, rules

from gpuforge.errors import InputError
from gpuforge.images.matrix import Matrix
from gpuforge.images.payload import matrix_values

SHIPPED = sorted(path.name for path in MATRICES.glob("*.yaml"))


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_matrix_pins_mariadb_from_its_os_archive_exactly(name: str) -> None:
    data = load(name)
    assert data["os"] == {**data["os"], "distro": "ubuntu", "release": "22.04"}
    mariadb = data["mariadb"]
    # Ubuntu 22.04's mariadb-10.6 build in jammy-updates: the version apt takes, epoch included.
    assert mariadb["version"] == "1:10.6.23-0ubuntu0.22.04.1"
    assert "jammy-updates/universe/binary-amd64/Packages.xz" in mariadb["source"]
    assert "InRelease" in mariadb["source"]
    assert [f for f in findings(data) if f.rule == "slurm.mariadb-required"] == []


def test_slurm_without_mariadb_is_refused_with_the_fix(h100: dict[str, Any]) -> None:
    del h100["mariadb"]
    assert rules(h100) == {"slurm.mariadb-required"}
    [hit] = [f for f in findings(h100) if f.rule == "slurm.mariadb-required"]
    assert hit.field == "mariadb" and "26.05.5" in hit.message and "Fix: add mariadb" in hit.message
    assert hit.source == "https://slurm.schedmd.com/accounting.html"


def test_mariadb_without_slurm_is_refused(h100: dict[str, Any]) -> None:
    del h100["slurm"], h100["pmix"]
    assert "slurm.mariadb-required" in rules(h100)


@pytest.mark.parametrize("version", ["10.6.*", "latest", "", ">=1:10.6", "1:10.6.23 "])
def test_a_version_apt_cannot_take_exactly_is_refused(h100: dict[str, Any], version: str) -> None:
    h100["mariadb"]["version"] = version
    with pytest.raises((InputError, ValueError)):
        Matrix.model_validate(h100)


def test_the_build_scripts_get_the_pinned_version(h100: dict[str, Any]) -> None:
    values = matrix_values(Matrix.model_validate(h100), "0" * 64)
    assert values["GPUFORGE_MARIADB"] == "1:10.6.23-0ubuntu0.22.04.1"


@pytest.mark.parametrize("source", ["latest", "", "Ubuntu", "https://example.com/mariadb"])
def test_a_source_that_names_no_archive_index_is_refused(h100: dict[str, Any], source: str) -> None:
    h100["mariadb"]["source"] = source
    with pytest.raises((InputError, ValueError)):
        Matrix.model_validate(h100)
