"""`gpuforge usage` on real Slurm 26.05.5 accounting output (tests/fixtures/accounting, README there:
six GPU jobs of two teams, one preempted and requeued, one cancelled, one ended by NODE_FAIL; node
events: a DOWN and two drains with gpuforge reasons, the last still open).

Every expected figure is read from sacct's own `--parsable2` table of the same jobs (sacct.txt:
ElapsedRaw x gres/gpu in AllocTRES), not from the JSON the report parses.
"""

from __future__ import annotations

import copy
import json
import re
import time
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from usage_support import StackMaker, prometheus_with_history

from gpuforge.cli import main
from gpuforge.usage.metrics import HELD, USEFUL
from gpuforge.usage.sacct import read_sacct

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "accounting"
SINCE, UNTIL = "2026-12-04T15:54:00Z", "2026-12-04T15:56:00Z"
CLUSTER = "gfacct"  # the capture's ClusterName: gpuforge names the cluster after the stack


def _table() -> list[dict[str, str]]:
    lines = (FIXTURES / "sacct.txt").read_text(encoding="utf-8").splitlines()
    header = lines[0].split("|")
    return [dict(zip(header, line.split("|"), strict=True)) for line in lines[1:]]


def _gpu_seconds(row: dict[str, str]) -> int:
    found = re.search(r"gres/gpu=(\d+)", row["AllocTRES"])
    return int(row["ElapsedRaw"]) * (int(found.group(1)) if found else 0)


def _usage(capsys: pytest.CaptureFixture[str], stack: Path, *flags: str | Path) -> dict[str, Any]:
    name = () if "--stack" in flags else ("--stack", CLUSTER)
    code = main(["usage", str(stack), *name, "--json", *(str(flag) for flag in flags)])
    out, err = capsys.readouterr()
    assert code == 0, err
    report: dict[str, Any] = json.loads(out)
    return report


@pytest.fixture(autouse=True)
def _no_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_the_json_parses_to_what_sacct_prints_in_its_table() -> None:
    jobs = read_sacct(FIXTURES / "sacct-duplicates.json")
    table = _table()
    assert len(jobs) == len(table) == 6
    for job, row in zip(jobs, table, strict=True):
        assert (job.job_id, job.user, job.account, job.partition, job.nodes) == (
            row["JobID"],
            row["User"],
            row["Account"],
            row["Partition"],
            row["NodeList"],
        )
        assert row["State"].startswith(job.state)  # "CANCELLED by 0" in the table
        assert job.elapsed_s == int(row["ElapsedRaw"])
        assert job.start is not None and job.start.strftime("%Y-%m-%dT%H:%M:%S") == row["Start"]
        assert job.end is not None and job.end.strftime("%Y-%m-%dT%H:%M:%S") == row["End"]
        assert job.gpus * job.elapsed_s == _gpu_seconds(row)


def test_the_report_matches_sacct_per_job_and_per_team(
    capsys: pytest.CaptureFixture[str], make_stack: StackMaker
) -> None:
    stack = make_stack(CLUSTER)
    window = ("--since", SINCE, "--until", UNTIL, "--sacct-json", FIXTURES / "sacct-duplicates.json")
    per_job = _usage(capsys, stack, *window, "--by", "job")
    assert {group["name"]: group["gpu_seconds_held"] for group in per_job["groups"]} == {
        row["JobID"]: _gpu_seconds(row) for row in _table()
    }
    per_team = _usage(capsys, stack, *window, "--by", "team")
    expected: dict[str, int] = {}
    for row in _table():
        expected[row["Account"]] = expected.get(row["Account"], 0) + _gpu_seconds(row)
    assert (
        {group["name"]: group["gpu_seconds_held"] for group in per_team["groups"]}
        == expected
        == {"llm": 31, "vision": 12}
    )
    assert per_team["total"]["gpu_seconds_held"] == 43
    assert per_team["total"]["cost_usd"] == round(43 / 3600 * 55.04 / 8, 2)
    users = _usage(capsys, stack, *window, "--by", "user")
    assert {group["name"] for group in users["groups"]} == {"alice", "bob", "carol"}


def test_a_window_cuts_runs_at_its_edges(capsys: pytest.CaptureFixture[str], make_stack: StackMaker) -> None:
    report = _usage(
        capsys,
        make_stack(CLUSTER),
        "--since",
        SINCE,
        "--until",
        "2026-12-04T15:55:06Z",
        "--by",
        "job",
        "--sacct-json",
        FIXTURES / "sacct.json",
    )
    # Jobs 1 (2 GPUs, 15:54:58-15:55:04) and 2 (1 GPU, -15:55:02) whole; job 3 (2 GPUs from 15:55:04) for 2 s.
    assert {group["name"]: group["gpu_seconds_held"] for group in report["groups"]} == {
        "1": 12,
        "2": 4,
        "3": 4,
    }


def test_failures_from_the_real_event_history(
    capsys: pytest.CaptureFixture[str], make_stack: StackMaker
) -> None:
    report = _usage(
        capsys,
        make_stack(CLUSTER),
        *("--since", SINCE, "--until", UNTIL),
        *("--sacct-json", FIXTURES / "sacct-duplicates.json", "--events", FIXTURES / "events.txt"),
    )
    failures = report["failures"]
    assert failures["events"] == 3  # the DOWN and the two drains; the cluster's own event is not a node's
    # gpu1 DOWN for 0 s; gpu2 drained 15:55:22-15:55:25, then from 15:55:27 to the window's end (still open).
    assert round(failures["node_hours_lost"] * 3600) == 3 + 33
    assert failures["interrupted_jobs"] == [
        "6"
    ]  # NODE_FAIL; the cancelled and preempted jobs ended before any event


def test_a_fixture_with_a_field_removed_or_mistyped_names_it(
    capsys: pytest.CaptureFixture[str], make_stack: StackMaker, tmp_path: Path
) -> None:
    real = json.loads((FIXTURES / "sacct.json").read_text(encoding="utf-8"))
    for change, expected in (
        (lambda doc: doc["jobs"][2].pop("tres"), r"jobs\[2\]\.tres is missing"),
        (
            lambda doc: doc["jobs"][0]["time"].update(elapsed="6"),
            r"jobs\[0\]\.time\.elapsed = '6': a whole number",
        ),
        (
            lambda doc: doc["jobs"][4]["tres"].update(allocated={}),
            r"jobs\[4\]\.tres\.allocated = \{\}: a list",
        ),
    ):
        document = copy.deepcopy(real)
        change(document)
        path = tmp_path / "sacct.json"
        path.write_text(json.dumps(document), encoding="utf-8")
        code = main(["usage", str(make_stack(CLUSTER)), "--stack", CLUSTER, "--sacct-json", str(path)])
        err = capsys.readouterr().err
        assert code == 2
        assert str(path) in err and re.search(expected, err), err


def _history() -> str:
    """The recording rules' samples for the minute 15:55:00, when jobs 1 (2 GPUs) and 2 (1 GPU) ran:
    job 1 at SM_ACTIVE 0.6, job 2 idle at 0.01. No series for the vision team's jobs."""
    at = int(datetime(2026, 12, 4, 15, 55, tzinfo=UTC).timestamp())
    return "\n".join(
        [
            f"# TYPE {HELD} gauge",
            f'{HELD}{{hpc_job="1"}} 120 {at}',
            f'{HELD}{{hpc_job="2"}} 60 {at}',
            f"# TYPE {USEFUL} gauge",
            f'{USEFUL}{{hpc_job="1"}} 72 {at}',
            f'{USEFUL}{{hpc_job="2"}} 0.6 {at}',
            "# EOF",
            "",
        ]
    )


@pytest.mark.slow
def test_useful_idle_and_the_plot_through_the_cli(
    capsys: pytest.CaptureFixture[str], make_stack: StackMaker, tmp_path: Path
) -> None:
    assert time.time() > datetime(2026, 12, 4, 15, 56, tzinfo=UTC).timestamp()  # the history is in the past
    plot = tmp_path / "usage.svg"
    with prometheus_with_history(_history(), tmp_path / "prometheus") as url:
        report = _usage(
            capsys,
            make_stack(CLUSTER),
            *("--since", SINCE, "--until", UNTIL, "--sacct-json", FIXTURES / "sacct-duplicates.json"),
            *("--prometheus", url, "--plot", plot),
        )
    teams = {group["name"]: group for group in report["groups"]}
    assert teams["llm"]["metrics"] == "prometheus"
    assert teams["llm"]["useful_fraction"] == round((72 + 0.6) / 180, 4)
    # What the fraction is over: the GPU-seconds Prometheus metered (job 1: 120, job 2: 60).
    assert teams["llm"]["gpu_hours_metered"] == round(180 / 3600, 4)
    assert teams["llm"]["gpu_hours_idle"] == round(60 / 3600, 4)  # job 2's minute
    assert teams["vision"]["metrics"] == "no metrics" and teams["vision"]["useful_fraction"] is None
    assert report["metrics"]["source"] == f"Prometheus {url}"
    bars = {
        bar.attrib["data-group"]: {
            rect.attrib["data-series"] for rect in bar.iter("{http://www.w3.org/2000/svg}rect")
        }
        for bar in ET.parse(plot).getroot().iter("{http://www.w3.org/2000/svg}g")
    }
    assert bars == {"llm": {"useful", "idle held", "other held"}, "vision": {"held (no metrics)"}}


def test_a_capacity_block_costs_its_fee_over_its_hours_and_shows_what_nobody_used(
    capsys: pytest.CaptureFixture[str], make_stack: StackMaker
) -> None:
    block = {
        "type": "capacity-block",
        "reservationId": "cr-0a1b2c3d4e5f60718",
        "start": "2026-12-04T11:30:00Z",
        "end": "2026-12-05T11:30:00Z",
    }
    stack = make_stack(CLUSTER, **{"gpuforge:capacity": block})  # 2 x p5.48xlarge: 16 GPUs for 24 h
    flags = ("--since", SINCE, "--until", UNTIL, "--sacct-json", FIXTURES / "sacct-duplicates.json")
    unpriced = _usage(capsys, stack, *flags)
    assert unpriced["price"]["usd_per_gpu_hour"] is None
    assert unpriced["price"]["source"].startswith("no price: a Capacity Block is paid by its upfront fee")
    assert unpriced["total"]["cost_usd"] is None
    report = _usage(capsys, stack, *flags, "--capacity-block-fee", "12000")
    rate = 12000 / (24 * 2 * 8)
    assert report["price"]["usd_per_gpu_hour"] == round(rate, 6)
    assert report["total"]["cost_usd"] == round(43 / 3600 * rate, 2)
    reserved = report["reserved"]
    assert reserved["capacity_type"] == "capacity-block"
    assert (reserved["since"], reserved["until"]) == (
        "2026-12-04T15:54:00+00:00",
        "2026-12-04T15:56:00+00:00",
    )
    assert reserved["gpu_hours_reserved"] == round(16 * 120 / 3600, 4)
    assert reserved["gpu_hours_unused"] == round((16 * 120 - 43) / 3600, 4)
    assert reserved["cost_usd_unused"] == round((16 * 120 - 43) / 3600 * rate, 2)


def test_an_odcr_is_reserved_for_the_whole_window_at_the_on_demand_rate(
    capsys: pytest.CaptureFixture[str], make_stack: StackMaker
) -> None:
    stack = make_stack(
        CLUSTER, **{"gpuforge:capacity": {"type": "reservation", "reservationId": "cr-09f8e7d6c5b4a3921"}}
    )
    report = _usage(
        capsys, stack, "--since", SINCE, "--until", UNTIL, "--sacct-json", FIXTURES / "sacct-duplicates.json"
    )
    reserved = report["reserved"]
    assert reserved["capacity_type"] == "reservation"
    assert reserved["note"].endswith(
        "the stack names no dates, so it is taken as active for the whole window"
    )
    assert reserved["gpu_hours_unused"] == round((16 * 120 - 43) / 3600, 4)
    assert reserved["cost_usd_unused"] == round((16 * 120 - 43) / 3600 * 55.04 / 8, 2)


def test_the_checkpoint_interval_is_gpuforge_checkpoints_advice(
    capsys: pytest.CaptureFixture[str], make_stack: StackMaker, tmp_path: Path
) -> None:
    from gpuforge.checkpoint import checkpoint_advice, published
    from gpuforge.stack_config import load_stack_config

    flags = ("--since", SINCE, "--until", UNTIL, "--sacct-json", FIXTURES / "sacct-duplicates.json")
    events = ("--events", FIXTURES / "events.txt")
    without = _usage(capsys, make_stack(CLUSTER), *flags, *events)
    assert without["checkpoint"] is None
    assert (
        without["checkpoint_note"]
        == "none: the stack sets no gpuforge:checkpoint (README, 'Checkpoint interval')"
    )
    # The shipped p5-prod stack's cluster is p5-prod: the same capture, its cluster renamed so.
    document = json.loads((FIXTURES / "sacct-duplicates.json").read_text(encoding="utf-8"))
    for job in document["jobs"]:
        job["cluster"] = "p5-prod"
    sacct = tmp_path / "sacct.json"
    sacct.write_text(json.dumps(document), encoding="utf-8")
    renamed = tmp_path / "events.txt"
    renamed.write_text(
        (FIXTURES / "events.txt").read_text(encoding="utf-8").replace(f"{CLUSTER}|", "p5-prod|"),
        encoding="utf-8",
    )
    flags = ("--since", SINCE, "--until", UNTIL, "--sacct-json", sacct)
    events = ("--events", renamed)
    stack = REPO / "stacks" / "training"
    report = _usage(capsys, stack, "--stack", "p5-prod", *flags, *events)
    config = load_stack_config(stack, "p5-prod")
    assert config.checkpoint is not None
    # Three node events are too few for the cluster's own MTBF: the published figure, which the advice names.
    expected = checkpoint_advice(config.checkpoint, config.lustre, config.node_count, published())
    assert report["checkpoint"] == expected.to_json()
    assert "checkpoint_note" not in report
    code = main(["usage", str(stack), "--stack", "p5-prod", *(str(flag) for flag in (*flags, *events))])
    assert code == 0
    assert f"checkpoint interval: {expected.line()}" in capsys.readouterr().out


def test_a_capacity_block_fee_in_the_stack_prices_the_report_and_the_flag_overrides_it(
    capsys: pytest.CaptureFixture[str], make_stack: StackMaker
) -> None:
    block = {
        "type": "capacity-block",
        "reservationId": "cr-0a1b2c3d4e5f60718",
        "start": "2026-12-04T11:30:00Z",
        "end": "2026-12-05T11:30:00Z",
        "upfrontFeeUsd": 12000,
    }
    stack = make_stack(CLUSTER, **{"gpuforge:capacity": block})  # 2 x p5.48xlarge: 16 GPUs for 24 h
    flags = ("--since", SINCE, "--until", UNTIL, "--sacct-json", FIXTURES / "sacct-duplicates.json")
    report = _usage(capsys, stack, *flags)
    assert report["price"]["usd_per_gpu_hour"] == round(12000 / (24 * 2 * 8), 6)
    assert "gpuforge:capacity.upfrontFeeUsd" in report["price"]["source"]
    assert report["total"]["cost_usd"] == round(43 / 3600 * 12000 / (24 * 2 * 8), 2)
    flagged = _usage(capsys, stack, *flags, "--capacity-block-fee", "24000")
    assert flagged["price"]["usd_per_gpu_hour"] == round(24000 / (24 * 2 * 8), 6)
    assert "--capacity-block-fee" in flagged["price"]["source"]
