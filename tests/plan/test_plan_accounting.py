"""`gpuforge plan` says where Slurm's accounting lives: MariaDB on the controller's state volume, or Aurora."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from plan_support import STACK_DIR

from gpuforge.cli import main


def test_p5_prod_plans_mariadb_on_the_controller_s_state_volume(
    capsys: pytest.CaptureFixture[str], catalog_path: Path
) -> None:
    code = main(["plan", str(STACK_DIR), "--stack", "p5-prod", "--catalog", str(catalog_path)])
    text = capsys.readouterr().out
    assert code == 0
    assert (
        "  accounting slurmdbd with MariaDB on the controller's encrypted state volume "
        "(20 GiB, shared with slurmctld's state)\n"
    ) in text
    assert "aws:rds/" not in text  # no managed database with the default


def test_the_json_summary_carries_the_accounting_block(
    capsys: pytest.CaptureFixture[str], catalog_path: Path
) -> None:
    code = main(["plan", str(STACK_DIR), "--stack", "p5-prod", "--catalog", str(catalog_path), "--json"])
    document = json.loads(capsys.readouterr().out)
    assert code == 0
    assert document["summary"]["accounting"] == {
        "database": "local",
        "engine_version": None,
        "endpoint": None,
        "state_volume_gib": 20,
    }
