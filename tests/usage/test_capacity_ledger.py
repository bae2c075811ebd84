"""The capacity ledger (issue 29, item 5): each hour of the window priced by the period that held it.

Jobs are the real Slurm 26.05.5 capture in tests/fixtures/accounting (cluster `gfacct`, six jobs between
2026-12-04T15:54:58Z and 15:55:20Z). The ledgers are written here: the boundary between the two blocks
is put at 15:55:12Z, inside jobs 4 (2 GPUs, 15:55:10 to 15:55:15) and 5 (1 GPU, 15:55:08 to 15:55:13),
so one job's hours are split between two prices. (AWS starts blocks at 11:30 UTC; the ledger also
holds ODCR and On-Demand periods, which start at any second, so it does not enforce that.)
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from usage_support import StackMaker

from gpuforge.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "accounting"
SACCT = FIXTURES / "sacct-duplicates.json"
CLUSTER = "gfacct"
BOUNDARY = "2026-12-04T15:55:12Z"
GPUS = 2 * 8  # two p5.48xlarge nodes, 8 GPUs each
# The capture's runs as (account, start, end, GPUs): sacct-duplicates.json's jobs 1 to 6.
RUNS = [
    ("llm", 1796399698, 1796399704, 2),
    ("llm", 1796399698, 1796399702, 1),
    ("vision", 1796399704, 1796399708, 2),
    ("llm", 1796399710, 1796399715, 2),
    ("llm", 1796399708, 1796399713, 1),
    ("vision", 1796399716, 1796399720, 1),
]
SPLIT = int(datetime.fromisoformat(BOUNDARY).timestamp())


def _block(reservation: str, start: str, end: str, fee: float) -> dict[str, Any]:
    return {
        "type": "capacity-block",
        "reservationId": reservation,
        "instanceType": "p5.48xlarge",
        "nodes": 2,
        "start": start,
        "end": end,
        "upfrontFeeUsd": fee,
    }


OLD = _block("cr-0a1b2c3d4e5f60718", "2026-11-20T11:30:00Z", BOUNDARY, 30000.0)
NEW = _block("cr-0b2c3d4e5f6071829", BOUNDARY, "2027-01-01T00:00:00Z", 50000.0)


@pytest.fixture(autouse=True)
def _no_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def _rate(block: dict[str, Any]) -> float:
    hours = (
        datetime.fromisoformat(block["end"]) - datetime.fromisoformat(block["start"])
    ).total_seconds() / 3600
    fee: float = block["upfrontFeeUsd"]
    return fee / (hours * GPUS)


def _held(account: str | None, before: bool) -> int:
    """GPU-seconds the capture's runs (of `account`, or all) held before or after the boundary."""
    total = 0
    for team, start, end, gpus in RUNS:
        if account is None or team == account:
            lo, hi = (start, min(end, SPLIT)) if before else (max(start, SPLIT), end)
            total += max(0, hi - lo) * gpus
    return total


def _stack(make_stack: StackMaker, capacity: dict[str, Any], periods: list[dict[str, Any]] | None) -> Path:
    folder = make_stack(CLUSTER, **{"gpuforge:capacity": capacity})
    if periods is not None:
        (folder / f"capacity-ledger.{CLUSTER}.yaml").write_text(
            yaml.safe_dump({"periods": periods}), encoding="utf-8"
        )
    return folder


def _report(capsys: pytest.CaptureFixture[str], stack: Path, since: str, until: str) -> dict[str, Any]:
    argv = ["usage", str(stack), "--stack", CLUSTER, "--json", "--since", since, "--until", until]
    code = main([*argv, "--sacct-json", str(SACCT)])
    out, err = capsys.readouterr()
    assert code == 0, err
    report: dict[str, Any] = json.loads(out)
    return report


def _today(block: dict[str, Any]) -> dict[str, Any]:
    """The stack file's capacity as of the block `block` (what `gpuforge:capacity` says today)."""
    return {key: block[key] for key in ("type", "reservationId", "start", "end", "upfrontFeeUsd")}


def test_a_month_spanning_two_blocks_is_two_priced_lines_that_sum_to_the_total(
    make_stack: StackMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = _stack(make_stack, _today(NEW), [OLD, NEW])
    report = _report(capsys, stack, "2026-12-01", "2026-12-31T00:00:00Z")
    lines = report["ledger"]["cost_lines"]
    assert [line["period"]["reservation_id"] for line in lines] == [
        OLD["reservationId"],
        NEW["reservationId"],
    ]
    assert lines[0]["until"] == "2026-12-04T15:55:12+00:00"
    assert [line["gpu_seconds_held"] for line in lines] == [_held(None, True), _held(None, False)] == [32, 11]
    old_rate, new_rate = _rate(OLD), _rate(NEW)
    assert old_rate != pytest.approx(new_rate)
    assert lines[0]["usd_per_gpu_hour"] == pytest.approx(old_rate, rel=1e-12)
    assert lines[1]["usd_per_gpu_hour"] == pytest.approx(new_rate, rel=1e-12)
    expected = 32 / 3600 * old_rate + 11 / 3600 * new_rate
    assert lines[0]["cost_usd"] + lines[1]["cost_usd"] == pytest.approx(expected, rel=1e-12)
    assert report["ledger"]["cost_usd"] == pytest.approx(expected, rel=1e-12)
    assert report["total"]["cost_usd"] == round(expected, 2)
    teams = {group["name"]: group["cost_usd"] for group in report["groups"]}
    for team in ("llm", "vision"):
        priced = _held(team, True) / 3600 * old_rate + _held(team, False) / 3600 * new_rate
        assert teams[team] == round(priced, 2)


def test_last_month_after_the_stack_moved_on_keeps_last_months_prices(
    make_stack: StackMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    later = _block("cr-0c3d4e5f607182930", "2027-01-05T11:30:00Z", "2027-01-19T11:30:00Z", 99999.0)
    # The stack file now names only the January block; December's blocks live in the ledger.
    stack = _stack(make_stack, _today(later), [OLD, {**NEW, "end": "2027-01-05T11:30:00Z"}, later])
    report = _report(capsys, stack, "2026-12-04", "2026-12-05")
    old_rate = _rate(OLD)
    new_rate = _rate({**NEW, "end": "2027-01-05T11:30:00Z"})
    expected = 32 / 3600 * old_rate + 11 / 3600 * new_rate
    assert report["ledger"]["cost_usd"] == pytest.approx(expected, rel=1e-12)
    assert report["total"]["cost_usd"] == round(expected, 2)
    assert report["total"]["cost_usd"] != round(43 / 3600 * _rate(later), 2)  # not at today's block's rate
    # The reservation is December's two blocks, not today's block (which is outside the window).
    assert report["reserved"]["gpu_hours_reserved"] == pytest.approx(24 * GPUS, abs=1e-3)
    assert OLD["reservationId"] in report["reserved"]["note"]


def test_a_window_the_ledger_does_not_cover_is_refused(
    make_stack: StackMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = _stack(make_stack, _today(NEW), [NEW])
    code = main(
        [
            "usage",
            str(stack),
            "--stack",
            CLUSTER,
            "--since",
            "2026-12-01",
            "--until",
            "2026-12-05",
            "--sacct-json",
            str(SACCT),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "no period covers 2026-12-01T00:00:00+00:00 to 2026-12-04T15:55:12+00:00" in err
    assert "Fix:" in err


@pytest.mark.parametrize(
    ("periods", "said"),
    [
        ([NEW, OLD], "periods[1].start: periods are oldest first and do not overlap"),
        ([{**OLD, "end": None}], "periods[0].end: a Capacity Block has an end"),
        (
            [{**OLD, "upfrontFeeUsd": float("nan")}],
            "periods[0].upfrontFeeUsd: must be a finite number above 0",
        ),
        ([{**OLD, "usdPerInstanceHour": 98.32}], "a capacity-block period is priced by upfrontFeeUsd"),
        ([{**OLD, "start": "2026-11-20T11:30:00"}], "periods[0].start: must be an ISO 8601 time with a zone"),
        ([{**OLD, "nodes": 0}], "periods[0].nodes: must be a whole number of nodes"),
        (
            [{**OLD, "reservationId": "cr-\x1b[2J"}],
            "periods[0].reservationId: a Capacity Reservation id is 'cr-' followed by 17",
        ),
        ([{**OLD, "colour": "red"}], "periods[0]: has a key that is not a ledger key"),
    ],
)
def test_a_bad_ledger_is_exit_2_naming_the_period_and_field(
    make_stack: StackMaker, capsys: pytest.CaptureFixture[str], periods: list[dict[str, Any]], said: str
) -> None:
    stack = _stack(make_stack, _today(NEW), periods)
    code = main(
        ["usage", str(stack), "--stack", CLUSTER, "--since", "2026-12-04", "--sacct-json", str(SACCT)]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert f"capacity-ledger.{CLUSTER}.yaml: " in err and said in err and "Fix:" in err
    assert "Traceback" not in err


def test_an_on_demand_period_after_a_block_is_priced_at_its_instance_hour_rate(
    make_stack: StackMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    on_demand = {
        "type": "on-demand",
        "instanceType": "p5.48xlarge",
        "nodes": 2,
        "start": BOUNDARY,
        "usdPerInstanceHour": 98.32,
    }
    stack = _stack(make_stack, {"type": "on-demand"}, [OLD, on_demand])
    report = _report(capsys, stack, "2026-12-04", "2026-12-05")
    lines = report["ledger"]["cost_lines"]
    assert lines[1]["usd_per_gpu_hour"] == pytest.approx(98.32 / 8)
    assert lines[1]["gpu_seconds_reserved"] == 0  # On-Demand reserves nothing
    assert report["ledger"]["cost_usd"] == pytest.approx(32 / 3600 * _rate(OLD) + 11 / 3600 * 98.32 / 8)


def test_without_a_ledger_the_report_prices_from_the_stack_and_says_so(
    make_stack: StackMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = _stack(make_stack, _today(NEW), None)
    report = _report(capsys, stack, "2026-12-04T15:55:12Z", "2026-12-05")
    assert report["ledger"] is None
    assert f"capacity-ledger.{CLUSTER}.yaml" in report["ledger_note"]
    assert report["total"]["cost_usd"] == round(11 / 3600 * _rate(NEW), 2)
