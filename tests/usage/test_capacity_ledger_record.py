"""`gpuforge capacity-ledger`: the stack's current capacity appended to its ledger, so that after the
stack moves to the next block, last month's report still prices at last month's blocks.

Jobs are the real Slurm 26.05.5 capture in tests/fixtures/accounting (cluster `gfacct`, 2026-12-04
15:54:58Z to 15:55:20Z); the block boundary is put at 15:55:12Z, inside two of its jobs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from stack_files import slurm_stack, write_stack

from gpuforge.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "accounting"
CLUSTER = "gfacct"
BOUNDARY = "2026-12-04T15:55:12Z"
A = {
    "type": "capacity-block",
    "reservationId": "cr-0a1b2c3d4e5f60718",
    "start": "2026-11-20T11:30:00Z",
    "end": BOUNDARY,
    "upfrontFeeUsd": 30000.0,
}
B = {
    "type": "capacity-block",
    "reservationId": "cr-0b2c3d4e5f6071829",
    "start": BOUNDARY,
    "end": "2027-01-01T00:00:00Z",
    "upfrontFeeUsd": 50000.0,
}


@pytest.fixture(autouse=True)
def _no_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def _set_capacity(folder: Path, capacity: dict[str, Any]) -> Path:
    return write_stack(folder, CLUSTER, slurm_stack(**{"gpuforge:capacity": capacity}))


def _run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(arg) for arg in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _record(capsys: pytest.CaptureFixture[str], stack: Path, *flags: str) -> tuple[int, str, str]:
    return _run(capsys, "capacity-ledger", stack, "--stack", CLUSTER, *flags)


def _periods(stack: Path) -> list[dict[str, Any]]:
    document = yaml.safe_load((stack / f"capacity-ledger.{CLUSTER}.yaml").read_text(encoding="utf-8"))
    periods: list[dict[str, Any]] = document["periods"]
    return periods


def test_recording_each_block_as_the_stack_moves_on_keeps_last_months_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = _set_capacity(tmp_path / "stack", A)
    assert _record(capsys, stack)[0] == 0
    stack = _set_capacity(stack, B)  # the next block replaces the first in the stack file
    code, out, err = _record(capsys, stack)
    assert code == 0, err
    assert "recorded capacity-block cr-0b2c3d4e5f6071829" in out
    assert [(p["reservationId"], p["upfrontFeeUsd"]) for p in _periods(stack)] == [
        ("cr-0a1b2c3d4e5f60718", 30000.0),
        ("cr-0b2c3d4e5f6071829", 50000.0),
    ]
    code, out, err = _run(
        capsys,
        *("usage", stack, "--stack", CLUSTER, "--json", "--since", "2026-12-04", "--until", "2026-12-05"),
        *("--sacct-json", FIXTURES / "sacct-duplicates.json"),
    )
    assert code == 0, err
    lines = json.loads(out)["ledger"]["cost_lines"]
    assert [line["period"]["upfront_fee_usd"] for line in lines] == [30000.0, 50000.0]
    assert [line["gpu_seconds_held"] for line in lines] == [32, 11]


def test_recording_the_same_capacity_twice_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = _set_capacity(tmp_path / "stack", A)
    assert _record(capsys, stack)[0] == 0
    before = (stack / f"capacity-ledger.{CLUSTER}.yaml").read_bytes()
    code, out, _ = _record(capsys, stack)
    assert code == 0 and "nothing to record" in out
    assert (stack / f"capacity-ledger.{CLUSTER}.yaml").read_bytes() == before


def test_an_open_period_is_closed_where_the_next_begins_and_an_overlap_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = _set_capacity(tmp_path / "stack", {"type": "on-demand"})
    assert (
        _record(capsys, stack, "--since", "2026-11-01T00:00:00Z", "--usd-per-instance-hour", "98.32")[0] == 0
    )
    stack = _set_capacity(stack, A)
    assert _record(capsys, stack)[0] == 0
    periods = _periods(stack)
    assert periods[0] == {
        "type": "on-demand",
        "instanceType": "p5.48xlarge",
        "nodes": 2,
        "start": "2026-11-01T00:00:00Z",
        "end": "2026-11-20T11:30:00Z",
        "usdPerInstanceHour": 98.32,
    }
    before = (stack / f"capacity-ledger.{CLUSTER}.yaml").read_bytes()
    # A block that starts inside the recorded one: refused, and the ledger is as it was.
    stack = _set_capacity(stack, {**B, "start": "2026-12-01T11:30:00Z"})
    code, _, err = _record(capsys, stack)
    assert code == 2
    assert "does not start after the last one" in err and "Fix:" in err
    assert (stack / f"capacity-ledger.{CLUSTER}.yaml").read_bytes() == before


def test_a_block_without_its_fee_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack = write_stack(
        tmp_path / "stack",
        CLUSTER,
        slurm_stack(**{"gpuforge:capacity": {k: v for k, v in A.items() if k != "upfrontFeeUsd"}}),
    )
    code, _, err = _record(capsys, stack)
    assert code == 2
    assert "upfrontFeeUsd is not set" in err
    assert not (stack / f"capacity-ledger.{CLUSTER}.yaml").exists()
