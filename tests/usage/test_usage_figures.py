"""Figures a finance reader can recompute from the inputs (issue 28, classes 2 and 10).

Inputs are the real Slurm 26.05.5 capture in tests/fixtures/accounting (cluster `gfacct`, so the stack
is named `gfacct`: gpuforge names the Slurm cluster after its stack). Where a case needs a record the
capture lacks (a run listed twice, another cluster's record, an elapsed that disagrees with start and
end), the test makes it from the real capture by the one change it names; nothing else is invented.
"""

from __future__ import annotations

import copy
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from usage_support import StackMaker

from gpuforge.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "accounting"
SINCE, UNTIL = "2026-12-04T15:54:00Z", "2026-12-04T15:56:00Z"
CLUSTER = "gfacct"  # the capture's ClusterName (sacct.json `cluster`, events.txt `Cluster`)
BLOCK = {
    "type": "capacity-block",
    "reservationId": "cr-0a1b2c3d4e5f60718",
    "start": "2026-12-04T11:30:00Z",
    "end": "2026-12-05T11:30:00Z",
}
ODCR = {"type": "reservation", "reservationId": "cr-09f8e7d6c5b4a3921"}


@pytest.fixture(autouse=True)
def _no_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def _strict_json(text: str) -> Any:
    """JSON as RFC 8259 has it: NaN and Infinity (which Python's json writes by default) are refused."""

    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def _run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(arg) for arg in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _capture(tmp_path: Path, change: Callable[[dict[str, Any]], None], name: str = "sacct.json") -> Path:
    """The real `sacct --json --duplicates` capture with `change` applied, written to tmp_path."""
    document = json.loads((FIXTURES / "sacct-duplicates.json").read_text(encoding="utf-8"))
    change(document)
    path = tmp_path / name
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def _report(capsys: pytest.CaptureFixture[str], stack: Path, *flags: str | Path) -> dict[str, Any]:
    code, out, err = _run(capsys, "usage", stack, "--stack", CLUSTER, "--json", *flags)
    assert code == 0, err
    report: dict[str, Any] = _strict_json(out)
    return report


def _window(sacct: Path) -> tuple[str | Path, ...]:
    return ("--since", SINCE, "--until", UNTIL, "--sacct-json", sacct)


def test_a_window_that_ends_after_now_is_clipped_at_now(
    capsys: pytest.CaptureFixture[str], make_stack: StackMaker, tmp_path: Path
) -> None:
    """A year's window over an ODCR, asked a week into it: only the week is reserved (and unused)."""
    stack = make_stack(CLUSTER, **{"gpuforge:capacity": ODCR})
    no_jobs = tmp_path / "sacct.json"
    no_jobs.write_text('{"jobs": []}', encoding="utf-8")
    before = datetime.now(UTC).replace(microsecond=0)
    since = before - timedelta(days=7)
    asked = since + timedelta(days=365)
    flags = ("--since", since.isoformat(), "--until", asked.isoformat(), "--sacct-json", no_jobs)
    report = _report(capsys, stack, *flags)
    after = datetime.now(UTC)
    until = datetime.fromisoformat(report["window"]["until"])
    assert before <= until <= after  # the window ends now, not at the --until asked for
    assert report["window"]["until_requested"] == asked.isoformat()
    assert "after now" in report["window"]["note"]
    reserved = report["reserved"]
    seconds = (until - since).total_seconds()
    assert reserved["until"] == until.isoformat()
    assert reserved["gpu_hours_reserved"] == round(16 * seconds / 3600, 4)  # 2 nodes x 8 GPUs, a week
    assert reserved["gpu_hours_unused"] == reserved["gpu_hours_reserved"]
    code, out, _ = _run(capsys, "usage", stack, "--stack", CLUSTER, *flags)
    assert code == 0
    assert re.search(r"--until .* is after now: the window ends now", out), out


def test_a_window_that_starts_after_now_is_exit_2(
    capsys: pytest.CaptureFixture[str], make_stack: StackMaker, tmp_path: Path
) -> None:
    no_jobs = tmp_path / "sacct.json"
    no_jobs.write_text('{"jobs": []}', encoding="utf-8")
    later = (datetime.now(UTC) + timedelta(days=2)).date().isoformat()
    code, out, err = _run(
        capsys, "usage", make_stack(CLUSTER), "--stack", CLUSTER, "--since", later, "--sacct-json", no_jobs
    )
    assert (code, out) == (2, "")
    assert re.search(rf"--since {later}T00:00:00\+00:00 is after now .* Fix:", err), err


def test_a_run_listed_twice_counts_once_and_the_report_says_so(
    capsys: pytest.CaptureFixture[str], make_stack: StackMaker, tmp_path: Path
) -> None:
    """Job 1's record (2 GPUs, 6 s) appended again, as a second copy of the same run."""
    twice = _capture(tmp_path, lambda doc: doc["jobs"].append(copy.deepcopy(doc["jobs"][0])))
    report = _report(capsys, make_stack(CLUSTER), *_window(twice), "--by", "team")
    assert {group["name"]: group["gpu_seconds_held"] for group in report["groups"]} == {
        "llm": 31,
        "vision": 12,
    }
    assert report["records"]["duplicates_dropped"] == 1
    assert report["records"]["runs"] == 6


def test_another_clusters_record_is_refused_naming_it(
    capsys: pytest.CaptureFixture[str], make_stack: StackMaker, tmp_path: Path
) -> None:
    other = _capture(tmp_path, lambda doc: doc["jobs"][3].update(cluster="gfother"))
    code, _, err = _run(capsys, "usage", make_stack(CLUSTER), "--stack", CLUSTER, *_window(other))
    assert code == 2
    assert re.search(
        r"sacct\.json: jobs\[3\] \(job 4\) is of Slurm cluster 'gfother'; stack gfacct's cluster is 'gfacct'.*Fix:",
        err,
    ), err


def test_another_clusters_node_event_is_refused(
    capsys: pytest.CaptureFixture[str], make_stack: StackMaker, tmp_path: Path
) -> None:
    """events.txt (real, with its Cluster column) with one line's cluster changed."""
    lines = (FIXTURES / "events.txt").read_text(encoding="utf-8").splitlines()
    lines[2] = lines[2].replace("gfacct|", "gfother|", 1)
    events = tmp_path / "events.txt"
    events.write_text("\n".join(lines) + "\n", encoding="utf-8")
    flags = (*_window(FIXTURES / "sacct-duplicates.json"), "--events", events)
    code, _, err = _run(capsys, "usage", make_stack(CLUSTER), "--stack", CLUSTER, *flags)
    assert code == 2
    assert re.search(r"events\.txt: line 3: Cluster = 'gfother'.*'gfacct'.*Fix:", err), err


def test_held_time_is_end_less_start_and_a_disagreeing_elapsed_is_reported(
    capsys: pytest.CaptureFixture[str], make_stack: StackMaker, tmp_path: Path
) -> None:
    """Job 1's elapsed edited from 6 to 600 s; its start and end (6 s apart) are what counts."""
    edited = _capture(tmp_path, lambda doc: doc["jobs"][0]["time"].update(elapsed=600))
    report = _report(capsys, make_stack(CLUSTER), *_window(edited), "--by", "job")
    assert {group["name"]: group["gpu_seconds_held"] for group in report["groups"]}["1"] == 2 * 6
    assert report["records"]["elapsed_mismatch"] == ["1"]
    code, out, _ = _run(capsys, "usage", make_stack(CLUSTER), "--stack", CLUSTER, *_window(edited))
    assert code == 0
    assert "elapsed differs from end - start - suspended: 1 (job id 1)" in out


@pytest.mark.parametrize("fee", ["inf", "nan", "1e999", "0"])  # -inf: argparse takes it for a flag
def test_a_fee_that_is_not_a_finite_positive_amount_is_exit_2(
    capsys: pytest.CaptureFixture[str], make_stack: StackMaker, fee: str
) -> None:
    stack = make_stack(CLUSTER, **{"gpuforge:capacity": BLOCK})
    flags = (*_window(FIXTURES / "sacct-duplicates.json"), "--capacity-block-fee", fee)
    code, out, err = _run(capsys, "usage", stack, "--stack", CLUSTER, "--json", *flags)
    assert code == 2
    assert _strict_json(out)["error"]["exit_code"] == 2
    assert re.search(r"--capacity-block-fee \S+: a fee is a positive amount in USD", err), err


@pytest.mark.parametrize("fee", ["\u0661\u0662\u0660\u0660\u0660", "12_000", " 12000"])
def test_a_fee_not_written_in_ascii_digits_is_exit_2(
    capsys: pytest.CaptureFixture[str], make_stack: StackMaker, fee: str
) -> None:
    """float() reads Arabic-Indic digits, '_' and blanks as 12000: a value read as another is refused."""
    stack = make_stack(CLUSTER, **{"gpuforge:capacity": BLOCK})
    flags = (*_window(FIXTURES / "sacct-duplicates.json"), "--capacity-block-fee", fee)
    with pytest.raises(SystemExit) as exited:
        main(["usage", str(stack), "--stack", CLUSTER, *(str(flag) for flag in flags)])
    assert exited.value.code == 2
    assert "argument --capacity-block-fee:" in capsys.readouterr().err


@pytest.mark.parametrize("capacity", [{"type": "on-demand"}, ODCR])
def test_a_capacity_block_fee_on_a_stack_without_a_block_is_exit_2(
    capsys: pytest.CaptureFixture[str], make_stack: StackMaker, capacity: dict[str, str]
) -> None:
    stack = make_stack(CLUSTER, **{"gpuforge:capacity": capacity})
    flags = (*_window(FIXTURES / "sacct-duplicates.json"), "--capacity-block-fee", "12000")
    code, out, err = _run(capsys, "usage", stack, "--stack", CLUSTER, *flags)
    assert (code, out) == (2, "")
    assert re.search(
        rf"--capacity-block-fee 12000\.0: stack {CLUSTER}'s gpuforge:capacity\.type is {capacity['type']}, not "
        r"capacity-block.*Fix: leave the flag out",
        err,
    ), err


def test_the_json_carries_no_path_of_the_machine_that_ran_it(
    capsys: pytest.CaptureFixture[str], make_stack: StackMaker, tmp_path: Path
) -> None:
    stack = make_stack(CLUSTER, **{"gpuforge:capacity": {**BLOCK, "upfrontFeeUsd": 12000}})
    code, out, err = _run(
        capsys, "usage", stack, "--stack", CLUSTER, "--json", *_window(FIXTURES / "sacct-duplicates.json")
    )
    assert code == 0, err
    assert str(tmp_path) not in out
    assert "gpuforge:capacity.upfrontFeeUsd in Pulumi.gfacct.yaml" in _strict_json(out)["price"]["source"]


def test_interrupted_jobs_read_as_a_count_and_their_ids(
    capsys: pytest.CaptureFixture[str], make_stack: StackMaker
) -> None:
    flags = (*_window(FIXTURES / "sacct-duplicates.json"), "--events", FIXTURES / "events.txt")
    code, out, err = _run(capsys, "usage", make_stack(CLUSTER), "--stack", CLUSTER, *flags)
    assert code == 0, err
    # Job 6 ended NODE_FAIL: one job, whose id is 6 (not "jobs interrupted: 6").
    assert "jobs interrupted: 1 (job id 6)" in out, out


@pytest.mark.parametrize(
    ("by", "bars"),
    [("user", {"alice", "bob", "carol"}), ("partition", {"gpu"}), ("team", {"llm", "vision"})],
)
def test_the_plot_follows_by(
    capsys: pytest.CaptureFixture[str], make_stack: StackMaker, tmp_path: Path, by: str, bars: set[str]
) -> None:
    plot = tmp_path / "usage.svg"
    flags = (*_window(FIXTURES / "sacct-duplicates.json"), "--by", by, "--plot", plot)
    code, _, err = _run(capsys, "usage", make_stack(CLUSTER), "--stack", CLUSTER, *flags)
    assert code == 0, err
    root = ET.parse(plot).getroot()
    assert {group.attrib["data-group"] for group in root.iter("{http://www.w3.org/2000/svg}g")} == bars
    assert f"GPU-hours per {by}" in ET.tostring(root, encoding="unicode")


def test_a_run_with_no_end_counts_to_the_windows_end_and_is_listed(
    capsys: pytest.CaptureFixture[str], make_stack: StackMaker, tmp_path: Path
) -> None:
    """Job 6 (1 GPU from 15:55:16) made still running: its end removed (0, Slurm's "not yet")."""

    def running(doc: dict[str, Any]) -> None:
        doc["jobs"][5]["time"].update(end=0)
        doc["jobs"][5]["state"]["current"] = ["RUNNING"]

    report = _report(capsys, make_stack(CLUSTER), *_window(_capture(tmp_path, running)), "--by", "job")
    assert {group["name"]: group["gpu_seconds_held"] for group in report["groups"]}["6"] == 44  # to 15:56:00
    assert report["records"]["running"] == ["6"]
    assert report["records"]["elapsed_mismatch"] == []  # a running job's elapsed is not checked
