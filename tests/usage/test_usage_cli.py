"""`gpuforge usage`: exit 2 with the flag or file, the field and the fix for bad input; a window with no
jobs is a report of zeros; the JSON keys README documents."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from usage_support import StackMaker

from gpuforge.cli import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(arg) for arg in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def no_jobs(tmp_path: Path) -> Path:
    path = tmp_path / "sacct.json"
    path.write_text('{"jobs": []}', encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--since", "yesterday"], r"--since 'yesterday': not a date .* Fix: pass e\.g\. --since 2026-12-01"),
        (["--until", "2026-12-01T09:00:00"], r"--until .*with a time zone\. Fix:"),
        (["--since", "2026-12-02", "--until", "2026-12-01"], r"--since .* is not before --until .* Fix:"),
        (
            ["--by", "project"],
            r"--by project: not a grouping\. Fix: pass --by with one of job, user, team, partition",
        ),
        (["--capacity-block-fee", "-5"], r"--capacity-block-fee -5\.0: a fee is a positive amount"),
    ],
)
def test_bad_flags_are_exit_2_with_the_fix(
    capsys: pytest.CaptureFixture[str], make_stack: StackMaker, no_jobs: Path, flags: list[str], expected: str
) -> None:
    code, out, err = _run(capsys, "usage", make_stack(), "--stack", "test", "--sacct-json", no_jobs, *flags)
    assert code == 2
    assert out == ""
    assert re.search(expected, err), err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{not json", r"sacct\.json: not valid JSON \(line 1, column 2"),
        (
            '{"meta": {}}',
            r"sacct\.json: the document\.jobs is missing\. Fix: pass the output of `sacct --json",
        ),
        ('{"jobs": {}}', r"sacct\.json: jobs = \{\}: a list is expected"),
        ('{"jobs": [{"job_id": 1}]}', r"sacct\.json: jobs\[0\]\.time is missing"),
        (
            '{"jobs": [{"job_id": 1, "time": {"start": "soon"}, "state": {"current": ["COMPLETED"]}}]}',
            r"sacct\.json: jobs\[0\]\.name is missing",
        ),
    ],
)
def test_malformed_sacct_json_names_the_file_and_the_field(
    capsys: pytest.CaptureFixture[str], make_stack: StackMaker, tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "sacct.json"
    path.write_text(text, encoding="utf-8")
    code, out, err = _run(capsys, "usage", make_stack(), "--stack", "test", "--sacct-json", path, "--json")
    assert code == 2
    assert json.loads(out)["error"]["exit_code"] == 2  # --json prints an object on failure too
    assert re.search(expected, err), err


def test_an_unreadable_sacct_file_is_exit_2(
    capsys: pytest.CaptureFixture[str], make_stack: StackMaker, tmp_path: Path
) -> None:
    code, _, err = _run(
        capsys, "usage", make_stack(), "--stack", "test", "--sacct-json", tmp_path / "missing.json"
    )
    assert code == 2
    assert "missing.json" in err and "Fix:" in err


def _one_day(
    capsys: pytest.CaptureFixture[str], stack: Path, sacct: Path, *more: str
) -> tuple[int, str, str]:
    """`gpuforge usage` of the test stack over 2026-12-01, from a saved sacct answer."""
    return _run(
        capsys,
        "usage",
        stack,
        "--stack",
        "test",
        "--sacct-json",
        sacct,
        "--since",
        "2026-12-01",
        "--until",
        "2026-12-02",
        *more,
    )


def test_a_window_with_no_jobs_is_a_report_of_zeros(
    capsys: pytest.CaptureFixture[str], make_stack: StackMaker, no_jobs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    stack = make_stack()
    code, out, _ = _one_day(capsys, stack, no_jobs, "--json")
    assert code == 0
    report = json.loads(out)
    assert report["window"] == {
        "since": "2026-12-01T00:00:00+00:00",
        "until": "2026-12-02T00:00:00+00:00",
        "until_requested": "2026-12-02T00:00:00+00:00",
        "note": None,
    }
    assert report["groups"] == []
    assert report["total"]["gpu_seconds_held"] == 0
    assert report["total"]["cost_usd"] == 0.0
    assert report["total"]["useful_fraction"] is None and report["total"]["metrics"] == "no metrics"
    assert report["reserved"] is None  # on-demand capacity
    assert report["failures"] is None  # no --events and not on the controller
    assert report["price"]["usd_per_gpu_hour"] == pytest.approx(55.04 / 8)
    assert "gpuforge/data/prices.yaml, price list of 2026-07-28" in report["price"]["source"]
    code, out, _ = _one_day(capsys, stack, no_jobs)
    assert code == 0
    assert "total                0        0.00  no metrics" in out


def test_a_stack_without_slurm_is_exit_2(
    capsys: pytest.CaptureFixture[str], make_stack: StackMaker, no_jobs: Path
) -> None:
    stack = make_stack(**{"gpuforge:scheduler": {"type": "none"}})
    code, _, err = _run(capsys, "usage", stack, "--stack", "test", "--sacct-json", no_jobs)
    assert code == 2
    assert "gpuforge:scheduler.type is none" in err and "Fix:" in err


def test_off_the_controller_without_sacct_json_is_exit_2_with_the_fix(
    capsys: pytest.CaptureFixture[str],
    make_stack: StackMaker,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no sacct here
    code, _, err = _run(capsys, "usage", make_stack(), "--stack", "test")
    assert code == 2
    assert "sacct is not on PATH" in err and "pass --sacct-json FILE" in err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Cluster|NodeName|TimeStart\n",
            r"events\.txt: line 1: the header .* lacks column\(s\) TimeEnd, State, Reason",
        ),
        (
            "NodeName|TimeStart|TimeEnd|State|Reason\ngpu-1|2026-12-01T01:00:00|Unknown|DRAIN\n",
            r"events\.txt: line 2: 4 column\(s\), the header has 5",
        ),
        (
            "NodeName|TimeStart|TimeEnd|State|Reason\ngpu-1|12/01 01:00|Unknown|DRAIN|gpuforge: xid\n",
            r"events\.txt: line 2: TimeStart = '12/01 01:00': sacctmgr's time YYYY-MM-DDTHH:MM:SS is expected\. Fix:",
        ),
    ],
)
def test_a_malformed_events_file_names_the_line_and_column(
    capsys: pytest.CaptureFixture[str],
    make_stack: StackMaker,
    no_jobs: Path,
    tmp_path: Path,
    text: str,
    expected: str,
) -> None:
    path = tmp_path / "events.txt"
    path.write_text(text, encoding="utf-8")
    code, _, err = _run(
        capsys, "usage", make_stack(), "--stack", "test", "--sacct-json", no_jobs, "--events", path
    )
    assert code == 2
    assert re.search(expected, err), err
