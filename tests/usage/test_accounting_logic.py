"""The arithmetic of the report on jobs and events as the parsers hand them over: clipping to the
window, grouping (team = Slurm account), a requeued job's metrics counted once, reserved-but-unused
hours, node-hours lost with overlapping events counted once, and the jobs a failed node interrupted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from usage_support import StackMaker

from gpuforge.stack_config import load_stack_config
from gpuforge.usage.cost import Rate
from gpuforge.usage.events import NodeEvent, expand_hostlist, interrupted_jobs, node_seconds_lost
from gpuforge.usage.metrics import JobMetrics
from gpuforge.usage.report import group_jobs
from gpuforge.usage.reservations import reserved
from gpuforge.usage.sacct import Job
from gpuforge.usage.window import Window

T0 = datetime(2026, 12, 1, tzinfo=UTC)
WINDOW = Window(T0, T0 + timedelta(days=1))
NOW = T0 + timedelta(days=2)


def _job(job_id: str, account: str, start_h: float, end_h: float | None, gpus: int, **changes: str) -> Job:
    start = T0 + timedelta(hours=start_h)
    end = None if end_h is None else T0 + timedelta(hours=end_h)
    fields = {"user": "alice", "partition": "gpu", "state": "COMPLETED", "nodes": "gpu-1", **changes}
    return Job(
        job_id=job_id,
        cluster="test",
        name="train",
        user=fields["user"],
        account=account,
        partition=fields["partition"],
        state=fields["state"],
        nodes=fields["nodes"],
        submit=start,
        start=start,
        end=end,
        elapsed_s=0 if end is None else int((end - start).total_seconds()),
        suspended_s=0,
        gpus=gpus,
    )


def test_a_run_counts_end_less_start_and_one_across_the_windows_edge_is_clipped() -> None:
    inside = _job("1", "llm", 2, 4, 8)
    assert inside.held_seconds(WINDOW, NOW) == 8 * 2 * 3600
    # The allocation's span counts, whatever sacct's elapsed says (here 100 s suspended): a reader
    # recomputes the figure from start and end; gpuforge.usage.records reports the suspension.
    suspended = Job(**{**inside.__dict__, "elapsed_s": 2 * 3600 - 100, "suspended_s": 100})
    assert suspended.held_seconds(WINDOW, NOW) == 8 * 2 * 3600
    assert _job("2", "llm", -3, 1, 4).held_seconds(WINDOW, NOW) == 4 * 3600
    assert _job("3", "llm", 23, 30, 2).held_seconds(WINDOW, NOW) == 2 * 3600
    assert _job("4", "llm", 25, 26, 2).held_seconds(WINDOW, NOW) == 0
    assert _job("5", "llm", 2, 4, 0).held_seconds(WINDOW, NOW) == 0  # a CPU job holds no GPU
    running = _job("6", "llm", 20, None, 1)
    assert running.held_seconds(WINDOW, NOW) == 4 * 3600  # still running: up to the window's end
    assert running.held_seconds(WINDOW, T0 + timedelta(hours=21)) == 3600  # ... or to now


def test_groups_by_team_user_partition_and_job() -> None:
    jobs = [
        _job("1", "llm", 0, 2, 8),
        _job("2", "vision", 0, 1, 4, user="bob", partition="debug"),
        _job("3", "llm", 5, 6, 2, user="bob"),
    ]
    teams, total = group_jobs(jobs, "team", WINDOW, NOW, None)
    assert [(group.name, group.gpu_seconds_held, len(group.job_ids)) for group in teams] == [
        ("llm", (16 + 2) * 3600, 2),
        ("vision", 4 * 3600, 1),
    ]
    assert total.gpu_seconds_held == 22 * 3600 and total.metered is None
    users, _ = group_jobs(jobs, "user", WINDOW, NOW, None)
    assert {group.name: group.gpu_seconds_held for group in users} == {"alice": 16 * 3600, "bob": 6 * 3600}
    partitions, _ = group_jobs(jobs, "partition", WINDOW, NOW, None)
    assert {group.name for group in partitions} == {"gpu", "debug"}
    per_job, _ = group_jobs(jobs, "job", WINDOW, NOW, None)
    assert [group.name for group in per_job] == ["1", "2", "3"]


def test_a_requeued_jobs_runs_add_their_hours_but_its_metrics_once() -> None:
    first = _job("7", "research", 0, 1, 4, state="REQUEUED")
    second = _job("7", "research", 2, 3, 4)
    metrics = {"7": JobMetrics(held_s=8 * 3600, useful_s=4 * 3600, idle_s=3600)}
    teams, total = group_jobs([first, second], "team", WINDOW, NOW, metrics)
    (team,) = teams
    assert team.gpu_seconds_held == 8 * 3600
    assert team.metered == metrics["7"]
    assert team.useful_fraction == 0.5
    assert total.metered == metrics["7"]


def test_a_group_whose_jobs_have_no_series_says_no_metrics() -> None:
    teams, _ = group_jobs([_job("8", "llm", 0, 1, 1)], "team", WINDOW, NOW, {"9": JobMetrics(60, 30, 0)})
    assert teams[0].metered is None
    assert teams[0].to_json(Rate(None, "no price"))["metrics"] == "no metrics"


def test_reserved_but_unused_hours_of_a_capacity_block(make_stack: StackMaker) -> None:
    block = {
        "type": "capacity-block",
        "reservationId": "cr-0a1b2c3d4e5f60718",
        "start": "2026-11-30T11:30:00Z",
        "end": "2026-12-01T11:30:00Z",
    }
    config = load_stack_config(make_stack(**{"gpuforge:capacity": block, "gpuforge:nodeMode": "asg"}), "test")
    jobs = [_job("1", "llm", 10, 12, 8)]  # 10:00-12:00: 1.5 h of it inside the block
    found = reserved(config, 8, jobs, WINDOW, NOW)
    assert found is not None and found.span == Window(T0, T0 + timedelta(hours=11, minutes=30))
    assert found.gpus == 16
    assert found.gpu_seconds_reserved == 16 * int(11.5 * 3600)
    assert found.gpu_seconds_held == 8 * int(1.5 * 3600)
    assert found.gpu_seconds_unused == 16 * int(11.5 * 3600) - 8 * int(1.5 * 3600)


def test_on_demand_capacity_reserves_nothing(make_stack: StackMaker) -> None:
    assert reserved(load_stack_config(make_stack(), "test"), 8, [], WINDOW, NOW) is None


def _event(node: str, start_h: float, end_h: float | None) -> NodeEvent:
    end = None if end_h is None else T0 + timedelta(hours=end_h)
    return NodeEvent(node, T0 + timedelta(hours=start_h), end, "DRAIN", "gpuforge: xid 79")


def test_node_hours_lost_count_a_nodes_overlapping_events_once_and_clip_to_the_window() -> None:
    events = [_event("gpu-1", 1, 3), _event("gpu-1", 2, 4), _event("gpu-2", -5, 1), _event("gpu-3", 22, None)]
    assert node_seconds_lost(events, WINDOW) == (3 + 1 + 2) * 3600


def test_jobs_interrupted_by_a_node() -> None:
    jobs = [
        _job("1", "llm", 0, 1.5, 8, nodes="gpu-[1-2]", state="FAILED"),  # ended on gpu-1 while it was drained
        _job("2", "llm", 0, 1.5, 8, nodes="gpu-3", state="FAILED"),  # a node with no event
        _job("3", "llm", 0, 1.5, 8, nodes="gpu-1", state="COMPLETED"),  # finished normally
        _job("4", "llm", 0, 0.5, 8, nodes="gpu-4", state="NODE_FAIL"),
    ]
    assert [job.job_id for job in interrupted_jobs(jobs, [_event("gpu-1", 1, 3)])] == ["1", "4"]


@pytest.mark.parametrize(
    ("hostlist", "names"),
    [
        ("gpu-1", ["gpu-1"]),
        ("gpu-[1-3,7]", ["gpu-1", "gpu-2", "gpu-3", "gpu-7"]),
        ("n[08-10],ctl", ["n08", "n09", "n10", "ctl"]),
    ],
)
def test_slurm_host_lists_expand(hostlist: str, names: list[str]) -> None:
    assert expand_hostlist(hostlist) == names
