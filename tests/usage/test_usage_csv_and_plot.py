"""`--csv` for finance and a plot with axis values and dollars (issue 29, item 5).

Jobs are the real Slurm 26.05.5 capture in tests/fixtures/accounting (cluster `gfacct`); where a case
needs an account name the capture lacks (one a spreadsheet would run as a formula), the test renames
the capture's account `llm` and changes nothing else.
"""

from __future__ import annotations

import csv
import io
import json
import xml.etree.ElementTree as ET
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from usage_support import StackMaker

from gpuforge.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "accounting"
SACCT = FIXTURES / "sacct-duplicates.json"
CLUSTER = "gfacct"
WINDOW = ("--since", "2026-12-04T15:54:00Z", "--until", "2026-12-04T15:56:00Z")
BLOCK = {
    "type": "capacity-block",
    "reservationId": "cr-0a1b2c3d4e5f60718",
    "start": "2026-12-04T11:30:00Z",
    "end": "2026-12-05T11:30:00Z",
    "upfrontFeeUsd": 12000,
}
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(autouse=True)
def _no_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def _renamed(tmp_path: Path, account: str) -> Path:
    document: dict[str, Any] = json.loads(SACCT.read_text(encoding="utf-8"))
    for job in document["jobs"]:
        if job["account"] == "llm":
            job["account"] = account
    path = tmp_path / "sacct.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def _usage(capsys: pytest.CaptureFixture[str], stack: Path, *flags: str | Path) -> tuple[int, str, str]:
    code = main(["usage", str(stack), "--stack", CLUSTER, *WINDOW, *(str(flag) for flag in flags)])
    out, err = capsys.readouterr()
    return code, out, err


def test_csv_has_a_header_a_row_per_group_unrounded_figures_and_escaped_formulas(
    make_stack: StackMaker, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    stack = make_stack(CLUSTER, **{"gpuforge:capacity": BLOCK})
    name = '=HYPERLINK("http://x","a,b")'
    out_csv = tmp_path / "usage.csv"
    code, out, err = _usage(
        capsys, stack, "--sacct-json", _renamed(tmp_path, name), "--csv", out_csv, "--json"
    )
    assert code == 0, err
    report = json.loads(out)
    data = out_csv.read_bytes()
    assert b"\r\n" in data  # RFC 4180 line ends
    rows = list(csv.DictReader(io.StringIO(data.decode("utf-8"), newline="")))
    by_name = {row["name"]: row for row in rows}
    # The formula is a quoted cell starting with ', so a spreadsheet shows it and does not run it.
    assert "'" + name in by_name
    assert '"\'=HYPERLINK(""http://x"",""a,b"")"' in data.decode("utf-8")
    rate = 12000 / (24 * 16)
    team = by_name["'" + name]
    assert int(team["gpu_seconds_held"]) == 31  # jobs 1, 2, 4, 5: 12 + 4 + 10 + 5
    assert float(team["cost_usd"]) == 31 / 3600 * rate  # unrounded: the exact figure
    assert float(team["usd_per_gpu_hour"]) == rate
    total = next(row for row in rows if row["row"] == "total")
    assert float(total["cost_usd"]) == 43 / 3600 * rate
    assert round(float(total["cost_usd"]), 2) == report["total"]["cost_usd"]
    assert {row["row"] for row in rows} == {"team", "total", "unused reserved"}


def test_csv_carries_the_ledger_cost_lines(
    make_stack: StackMaker, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    stack = make_stack(CLUSTER, **{"gpuforge:capacity": BLOCK})
    (stack / f"capacity-ledger.{CLUSTER}.yaml").write_text(
        "periods:\n"
        "  - {type: capacity-block, reservationId: cr-0a1b2c3d4e5f60718, instanceType: p5.48xlarge, nodes: 2,\n"
        "     start: '2026-12-03T11:30:00Z', end: '2026-12-04T15:55:12Z', upfrontFeeUsd: 9000}\n"
        "  - {type: on-demand, instanceType: p5.48xlarge, nodes: 2, start: '2026-12-04T15:55:12Z',\n"
        "     usdPerInstanceHour: 98.32}\n",
        encoding="utf-8",
    )
    out_csv = tmp_path / "usage.csv"
    code, _, err = _usage(capsys, stack, "--sacct-json", SACCT, "--csv", out_csv)
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out_csv.read_text(encoding="utf-8"), newline="")))
    lines = [row for row in rows if row["row"] == "cost line"]
    assert [row["name"] for row in lines] == ["capacity-block cr-0a1b2c3d4e5f60718", "on-demand"]
    hours = datetime.fromisoformat("2026-12-04T15:55:12Z") - datetime.fromisoformat("2026-12-03T11:30:00Z")
    block_rate = 9000 / (hours.total_seconds() / 3600 * 16)
    assert float(lines[0]["cost_usd"]) == pytest.approx(32 / 3600 * block_rate, rel=1e-12)
    assert float(lines[1]["cost_usd"]) == pytest.approx(11 / 3600 * 98.32 / 8, rel=1e-12)
    total = next(row for row in rows if row["row"] == "total")
    assert float(total["cost_usd"]) == pytest.approx(sum(float(row["cost_usd"]) for row in lines), rel=1e-12)


def test_plot_has_axis_values_and_each_bars_dollars(
    make_stack: StackMaker, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    stack = make_stack(CLUSTER, **{"gpuforge:capacity": BLOCK})
    plot = tmp_path / "usage.svg"
    code, out, err = _usage(capsys, stack, "--sacct-json", SACCT, "--plot", plot, "--json")
    assert code == 0, err
    report = json.loads(out)
    root = ET.fromstring(plot.read_text(encoding="utf-8"))
    ticks = [
        float(text.attrib["data-tick"]) for text in root.iter(f"{SVG}text") if "data-tick" in text.attrib
    ]
    unused_h = report["reserved"]["gpu_hours_unused"]
    assert ticks[0] == 0 and ticks[-1] >= unused_h and len(ticks) >= 3  # the axis reaches the tallest bar
    assert all(
        text.text == f"{value:g}"
        for text, value in zip(
            (t for t in root.iter(f"{SVG}text") if "data-tick" in t.attrib), ticks, strict=True
        )
    )
    dollars = {
        bar.attrib["data-group"]: next(t for t in bar.iter(f"{SVG}text") if "data-usd" in t.attrib)
        for bar in root.iter(f"{SVG}g")
    }
    for group in report["groups"]:
        assert float(dollars[group["name"]].attrib["data-usd"]) == group["cost_usd"]
        assert dollars[group["name"]].text == f"${group['cost_usd']:,.2f}"
    assert float(dollars["(unused reserved)"].attrib["data-usd"]) == report["reserved"]["cost_usd_unused"]


@pytest.mark.parametrize("name", ["usage.png", "usage.PNG", "usage"])
def test_plot_to_a_name_that_is_not_svg_is_refused_and_writes_nothing(
    make_stack: StackMaker, capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    stack = make_stack(CLUSTER, **{"gpuforge:capacity": BLOCK})
    code, out, err = _usage(capsys, stack, "--sacct-json", SACCT, "--plot", tmp_path / name)
    assert code == 2
    assert "Fix: pass a name ending in .svg" in err
    assert out == ""
    assert list(tmp_path.iterdir()) == [tmp_path / "stack"]
