"""Slurm accounting on a real database: MariaDB, slurmdbd, slurmctld and two GPU nodes.

What is proved with the real daemons of the Slurm test root (tests/scheduler/slurm_cluster.py,
`start_accounting_cluster`): `gpuforge scheduler sync-accounts` applies the rendered teams,
users and QOS with the real sacctmgr, and a second run changes nothing; jobs with known GPU counts and durations are in `sacct` with
`gres/gpu` in their allocated TRES; a research job is requeued, not killed, when a production
job needs its GPUs; a team at its GPU quota (GrpTRES=gres/gpu=N) pends with Slurm's own reason;
a job of a user or account Slurm does not know is refused (AccountingStorageEnforce); a node
drained with a `gpuforge:` reason is in the event history the MTBF is read from.

One cluster serves the module; each test ends with its jobs gone and the nodes idle. The
database password holds the characters Slurm's config parser treats specially ('#', a
backslash, quotes), so slurmdbd connecting at all proves the StoragePass escaping.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from slurm_cluster import (
    DEFAULT_ROOT,
    REPO,
    UNTIL_CANCELLED,
    AccountingCluster,
    SlurmTestCluster,
    open_cluster,
    run_with_cluster_clients,
    start_accounting_cluster,
    unavailable_reason,
)

from gpuforge.components.specs import QosSpec, SchedulerSpec, TeamSpec, TeamUser

ROOT = Path(os.environ.get("GPUFORGE_SLURM_ROOT", DEFAULT_ROOT))
_SKIP = unavailable_reason(ROOT)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")]

PASSWORD = "test#only\\pw'\"x"
# Teams as the stack config names them: llm may use both QOS (production first, its default),
# vision only research, with a quota of one GPU; applied by `gpuforge scheduler sync-accounts`
# from the rendered gpuforge-accounts.json. mallory is a Unix user with no association.
SCHEDULER = SchedulerSpec(
    type="slurm",
    controller_instance_type="m7i.2xlarge",
    qos=(
        QosSpec(name="production", priority=1000, preempts=("research",)),
        QosSpec(name="research", priority=100),
    ),
    teams=(
        TeamSpec(
            name="llm",
            users=(TeamUser(name="alice"), TeamUser(name="bob")),
            gpu_quota=4,
            qos=("production", "research"),
        ),
        TeamSpec(name="vision", users=(TeamUser(name="carol"),), gpu_quota=1, qos=("research",)),
    ),
)
UNKNOWN_USER = "mallory"
GPUFORGE = REPO / ".venv/bin/gpuforge"
FINAL = ("COMPLETED", "CANCELLED", "FAILED", "PREEMPTED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY")


def _sync_accounts(cluster: SlurmTestCluster) -> subprocess.CompletedProcess[str]:
    """`gpuforge scheduler sync-accounts` as the controller runs it: the rendered gpuforge-accounts.json
    (written to /etc/slurm with the other files), sacctmgr of this cluster on PATH."""
    accounts = cluster.root / "etc/slurm/gpuforge-accounts.json"
    return run_with_cluster_clients(
        cluster, [str(GPUFORGE), "scheduler", "sync-accounts", "--accounts", str(accounts)]
    )


@pytest.fixture(scope="module")
def acct(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AccountingCluster]:
    with open_cluster(tmp_path_factory.mktemp("accounting"), ROOT, REPO / "gpuforge") as cluster:
        # A name with a hyphen, like p5-prod: slurmdbd names the cluster's tables after it.
        started = start_accounting_cluster(cluster, name="gf-acct", password=PASSWORD, scheduler=SCHEDULER)
        cluster.add_users(*(user.name for team in SCHEDULER.teams for user in team.users), UNKNOWN_USER)
        applied = _sync_accounts(cluster)
        assert applied.returncode == 0, applied.stdout + applied.stderr
        yield started


def _submit(cluster: SlurmTestCluster, user: str, *args: str) -> str:
    done = cluster.client_as(user, ["sbatch", "--parsable", "--chdir=/tmp", *args])
    return done.stdout.strip().split(";")[0]


def _sacct(cluster: SlurmTestCluster, *jobs: str) -> dict[str, list[dict[str, Any]]]:
    """`sacct --json --duplicates` of `jobs`: each job's records (one per run of a requeued job), by job id."""
    done = cluster.client(["sacct", "--json", "--allusers", "--duplicates", "--jobs", ",".join(jobs)])
    records: dict[str, list[dict[str, Any]]] = {}
    for record in json.loads(done.stdout)["jobs"]:
        records.setdefault(str(record["job_id"]), []).append(record)
    return records


def _states(cluster: SlurmTestCluster, job: str) -> list[str]:
    return [record["state"]["current"][0] for record in _sacct(cluster, job).get(job, [])]


def _wait_in_sacct_finished(cluster: SlurmTestCluster, *jobs: str) -> None:
    """Until every job's last run is in sacct in a final state (so with its end time); fails showing sacct's records."""

    def finished(shown: dict[str, list[dict[str, Any]]]) -> bool:
        return all(job in shown and shown[job][-1]["state"]["current"][0] in FINAL for job in jobs)

    cluster.wait_for(f"jobs {', '.join(jobs)} finished in sacct", lambda: _sacct(cluster, *jobs), finished)


def _wait_state(cluster: SlurmTestCluster, job: str, state: str) -> None:
    cluster.wait_job(job, state, lambda shown: shown.get("JobState") == state)


def _gpus(record: dict[str, Any]) -> int:
    return sum(
        tres["count"]
        for tres in record["tres"]["allocated"]
        if (tres["type"], tres["name"]) == ("gres", "gpu")
    )


def _all_idle(acct: AccountingCluster) -> None:
    """Cancel what is left and wait for every node idle: the next test starts from an empty cluster."""
    cluster = acct.cluster
    cluster.client(["scancel", "--full", "--user=root"], check=False)
    for team in SCHEDULER.teams:
        cluster.client(["scancel", f"--account={team.name}"], check=False)
    for node in acct.nodes:
        cluster.wait_node(node, "idle", lambda shown: shown.get("State") == "IDLE+DYNAMIC_NORM")


def test_gpu_jobs_are_in_sacct_with_their_gpus_and_durations(acct: AccountingCluster) -> None:
    cluster = acct.cluster
    two = _submit(cluster, "alice", "--gres=gpu:2", "-w", acct.nodes[0], "--wrap", "sleep 4")
    one = _submit(cluster, "bob", "--gres=gpu:1", "-w", acct.nodes[1], "--wrap", "sleep 2")
    _wait_in_sacct_finished(cluster, two, one)
    shown = _sacct(cluster, two, one)
    for job, user, gpus, seconds in ((two, "alice", 2, 4), (one, "bob", 1, 2)):
        (record,) = shown[job]
        assert (record["user"], record["account"], record["qos"]) == (user, "llm", "production")
        assert record["state"]["current"] == ["COMPLETED"]
        assert _gpus(record) == gpus, record["tres"]["allocated"]
        times = record["time"]
        assert times["elapsed"] == times["end"] - times["start"]
        # Slurm counts whole seconds from the batch step's start to its end: the sleep, and the
        # prolog, epilog and step launch around it (one or two seconds on a busy machine).
        assert seconds <= times["elapsed"] <= seconds + 5, times
    text = cluster.client(
        ["sacct", "--noheader", "--parsable2", "--allocations", "--jobs", two, "--format=AllocTRES"]
    )
    assert "gres/gpu=2" in text.stdout.split(","), text.stdout
    _all_idle(acct)


def test_a_research_job_is_requeued_when_a_production_job_needs_its_gpus(acct: AccountingCluster) -> None:
    cluster = acct.cluster
    node = acct.nodes[1]
    research = _submit(
        cluster, "bob", "--qos=research", "--gres=gpu:2", "-w", node, "--wrap", UNTIL_CANCELLED
    )
    _wait_state(cluster, research, "RUNNING")
    production = _submit(
        cluster, "alice", "--qos=production", "--gres=gpu:2", "-w", node, "--wrap", UNTIL_CANCELLED
    )
    _wait_state(cluster, production, "RUNNING")
    # The requeue is done (pending again, restarted once) and the scheduler has judged the job again.
    requeued = cluster.wait_job(
        research,
        "requeued and judged",
        lambda shown: (
            (shown.get("JobState"), shown.get("Restarts")) == ("PENDING", "1")
            and shown.get("Reason") != "None"
        ),
    )
    # Requeued, not killed: pending again (Slurm holds a requeued job back a while: BeginTime)
    # with one restart, and its first run recorded as PREEMPTED.
    assert (requeued["JobState"], requeued["Reason"], requeued["Restarts"]) == (
        "PENDING",
        "BeginTime",
        "1",
    ), requeued
    cluster.wait_for(
        "the preempted run in sacct", lambda: _states(cluster, research), lambda states: "PREEMPTED" in states
    )
    preempted, again = _sacct(cluster, research)[research]
    assert (preempted["state"]["current"], again["state"]["current"]) == (["PREEMPTED"], ["PENDING"])
    record = preempted
    assert (record["qos"], _gpus(record)) == ("research", 2)
    _all_idle(acct)


def test_a_team_at_its_gpu_quota_pends_with_slurms_reason(acct: AccountingCluster) -> None:
    cluster = acct.cluster
    running = _submit(cluster, "carol", "--gres=gpu:1", "--wrap", UNTIL_CANCELLED)
    _wait_state(cluster, running, "RUNNING")
    over = _submit(cluster, "carol", "--gres=gpu:1", "--wrap", UNTIL_CANCELLED)
    waiting = cluster.wait_job(over, "judged", lambda shown: shown.get("Reason") != "None")
    # Three GPUs are free, but vision's GrpTRES=gres/gpu=1 is used up.
    assert (waiting["JobState"], waiting["Reason"]) == ("PENDING", "AssocGrpGRES"), waiting
    _all_idle(acct)


def test_sync_accounts_applied_the_teams_and_a_second_run_changes_nothing(acct: AccountingCluster) -> None:
    cluster = acct.cluster
    shown = cluster.client(
        [
            "sacctmgr",
            "--noheader",
            "--parsable2",
            "show",
            "assoc",
            "format=Account,User,GrpTRES,QOS,DefaultQOS",
        ]
    ).stdout.splitlines()
    for team in SCHEDULER.teams:
        qos = ",".join(sorted(team.qos))
        assert f"{team.name}||gres/gpu={team.gpu_quota}|{qos}|{team.qos[0]}" in shown, shown
        for user in team.users:
            assert any(line.startswith(f"{team.name}|{user.name}|") for line in shown), shown
    again = _sync_accounts(cluster)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "nothing to change" in again.stdout + again.stderr, again.stdout + again.stderr


def test_jobs_of_unknown_users_and_accounts_are_refused(acct: AccountingCluster) -> None:
    cluster = acct.cluster
    refusal = "Batch job submission failed: Invalid account or account/partition combination specified"
    for user, args in ((UNKNOWN_USER, ()), ("alice", ("--account=nosuchteam",))):
        done = cluster.client_as(user, ["sbatch", "--chdir=/tmp", *args, "--wrap", "true"], check=False)
        assert done.returncode != 0 and refusal in done.stderr, (user, done)
    assert cluster.client(["squeue", "--noheader", "--all"]).stdout == ""


def _events(cluster: SlurmTestCluster, node: str) -> list[dict[str, str]]:
    fields = "NodeName,TimeStart,TimeEnd,State,Reason"
    done = cluster.client(
        ["sacctmgr", "--noheader", "--parsable2", "show", "event", f"nodes={node}", f"format={fields}"]
    )
    return [dict(zip(fields.split(","), line.split("|"), strict=True)) for line in done.stdout.splitlines()]


def test_a_gpuforge_drain_is_in_the_event_history(acct: AccountingCluster) -> None:
    cluster = acct.cluster
    node = acct.nodes[0]
    reason = "gpuforge: xid 79 on GPU 1"
    cluster.client(["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"])
    cluster.wait_for(
        "the drain in the history",
        lambda: _events(cluster, node),
        lambda events: any(e["Reason"] == reason for e in events),
    )
    (open_event,) = [event for event in _events(cluster, node) if event["Reason"] == reason]
    assert (open_event["State"], open_event["TimeEnd"]) == ("DRAIN", "Unknown"), open_event
    cluster.client(["scontrol", "update", f"nodename={node}", "state=resume"])
    cluster.wait_for(
        "the drain closed",
        lambda: _events(cluster, node),
        lambda events: [e["TimeEnd"] for e in events if e["Reason"] == reason] != ["Unknown"],
    )
    (closed,) = [event for event in _events(cluster, node) if event["Reason"] == reason]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", closed["TimeEnd"]), closed
    assert closed["TimeStart"] <= closed["TimeEnd"]
    _all_idle(acct)
