"""A p5.48xlarge shared by GPU, and preemption with a grace period, on real Slurm daemons.

One accounting cluster (tests/scheduler/slurm_cluster.py `start_accounting_cluster`: MariaDB, slurmdbd,
slurmctld and one GPU node, each in its own network namespace) runs the rendered files of a p5.48xlarge
stack; the node registers as the catalog's p5.48xlarge row (its CPUs, sockets, threads, RealMemory and 8 GPUs
as device files), so the per-GPU defaults are those a real p5 gets. Teams and QOS are applied by
`gpuforge scheduler sync-accounts` from the rendered gpuforge-accounts.json.

What is proved:
- eight 1-GPU jobs that name no CPUs or memory run at once on the one node, each allocated its GPU's share of
  the node (DefCpuPerGPU, DefMemPerGPU), as `scontrol show job` and sacct report it; two teams share the node,
  vision at its quota of 4 GPUs;
- a research job preempted by a production job gets SIGTERM (its step records it), runs on for the research
  QOS's GraceTime, then gets the kill sequence and is requeued, with the gap between the two signals bounded
  by the setting and Slurm's documented timing.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from slurm_cluster import (
    DEFAULT_ROOT,
    REPO,
    AccountingCluster,
    SlurmTestCluster,
    open_cluster,
    run_with_cluster_clients,
    start_accounting_cluster,
    unavailable_reason,
    until_released,
)
from waiting import WAIT_S

from gpuforge import hardware
from gpuforge.components.specs import QosSpec, SchedulerSpec, TeamSpec, TeamUser
from gpuforge.scheduler.gpu_share import REAL_MEMORY_RATIO

ROOT = Path(os.environ.get("GPUFORGE_SLURM_ROOT", DEFAULT_ROOT))
_SKIP = unavailable_reason(ROOT)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")]

P5 = hardware.get("p5.48xlarge")
# Short, so the test is quick; the real stacks give minutes (README, "Preemption with a grace period").
GRACE_S = 5
# slurmctld checks running jobs against their end time, a preempted job's grace included, every PERIODIC_TIMEOUT
# seconds (`#define PERIODIC_TIMEOUT 30`, src/slurmctld/slurmctld.h, and job_time_limit() called from
# _slurmctld_background() in src/slurmctld/controller.c, SchedMD/slurm tag slurm-26-05-3-1), so the kill sequence
# comes up to that long after the grace ends.
TIME_LIMIT_CHECK_S = 30
# The kill sequence then travels slurmctld -> slurmd -> slurmstepd -> the task: within MessageTimeout ("Time
# permitted for a round-trip communication to complete", 10 s by default, slurm.conf(5) of 26.05; not set by
# gpuforge), which a loaded 2-core machine may need.
MESSAGE_TIMEOUT_S = 10
# Slurm keeps job times in whole seconds: the grace ends at the second the preemption began plus GraceTime, and
# the first signal may come up to a second into that second.
CLOCK_S = 1.0
# SIGTERMs closer than this are one delivery reaching the trap twice, not a second signal (well under GRACE_S).
BURST_S = 1.0
SCHEDULER = SchedulerSpec(
    type="slurm",
    controller_instance_type="m7i.2xlarge",
    qos=(
        QosSpec(name="production", priority=1000, preempts=("research",)),
        QosSpec(name="research", priority=100, grace_period=GRACE_S),
    ),
    teams=(
        TeamSpec(name="llm", users=(TeamUser(name="alice"),), gpu_quota=8, qos=("production", "research")),
        TeamSpec(name="vision", users=(TeamUser(name="carol"),), gpu_quota=4, qos=("research",)),
    ),
)
GPUFORGE = REPO / ".venv/bin/gpuforge"
# A research job's step: records each signal with its time in a log, as a training job's handler would before
# writing its checkpoint, and keeps running (a checkpoint longer than the grace) until the second SIGTERM, the
# kill sequence at the end of the grace, then exits. Bounded: it ends by itself after HOLD seconds.
STEP = """
import signal, sys, time
log = open(sys.argv[1], "a", buffering=1)
terms = []
def record(number, frame):
    log.write(f"{signal.Signals(number).name} {time.time():.3f}\\n")
    if number == signal.SIGTERM:
        terms.append(number)
signal.signal(signal.SIGTERM, record)
log.write(f"START {time.time():.3f}\\n")
deadline = time.monotonic() + float(sys.argv[2])
while len(terms) < 2 and time.monotonic() < deadline:
    time.sleep(0.05)
"""


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AccountingCluster]:
    with open_cluster(tmp_path_factory.mktemp("share"), ROOT, REPO / "gpuforge") as cluster:
        started = start_accounting_cluster(
            cluster,
            name="gf-share",
            password="share-test-only",
            node_count=1,
            scheduler=SCHEDULER,
            instance_type=P5,
        )
        cluster.add_users(*(user.name for team in SCHEDULER.teams for user in team.users))
        accounts = cluster.root / "etc/slurm/gpuforge-accounts.json"
        applied = run_with_cluster_clients(
            cluster, [str(GPUFORGE), "scheduler", "sync-accounts", "--accounts", str(accounts)]
        )
        assert applied.returncode == 0, applied.stdout + applied.stderr
        yield started


def _submit(cluster: SlurmTestCluster, user: str, *args: str) -> str:
    done = cluster.client_as(user, ["sbatch", "--parsable", "--chdir=/tmp", *args])
    return done.stdout.strip().split(";")[0]


def _tres(text: str) -> dict[str, str]:
    """`cpu=24,mem=249036M,node=1,billing=24,gres/gpu=1` as a mapping."""
    return dict(item.split("=", 1) for item in text.split(",") if item)


def _sacct_records(cluster: SlurmTestCluster, *jobs: str) -> dict[str, list[dict[str, Any]]]:
    done = cluster.client(["sacct", "--json", "--allusers", "--duplicates", "--jobs", ",".join(jobs)])
    records: dict[str, list[dict[str, Any]]] = {}
    for record in json.loads(done.stdout)["jobs"]:
        records.setdefault(str(record["job_id"]), []).append(record)
    return records


def _allocated(record: dict[str, Any]) -> dict[str, int]:
    return {
        f"{tres['type']}/{tres['name']}" if tres["name"] else tres["type"]: tres["count"]
        for tres in record["tres"]["allocated"]
    }


def _empty_node(acct: AccountingCluster) -> None:
    cluster = acct.cluster
    for team in SCHEDULER.teams:
        cluster.client(["scancel", f"--account={team.name}"], check=False)
    cluster.wait_node(acct.nodes[0], "idle", lambda shown: shown.get("State") == "IDLE+DYNAMIC_NORM")


def test_eight_one_gpu_jobs_without_mem_share_one_p5_by_gpu(shared: AccountingCluster) -> None:
    cluster, node = shared.cluster, shared.nodes[0]
    # Each GPU's share, from the catalog row by formula: whole cores per GPU with their threads, and the
    # node's RealMemory (the instance's memory less the node's own share) per GPU.
    cpus = P5.cores // P5.gpu_count * P5.threads_per_core
    real_memory = math.floor(P5.memory_mib * REAL_MEMORY_RATIO)
    memory = real_memory // P5.gpu_count
    assert cluster.node(node)["RealMemory"] == str(real_memory)
    jobs = [
        _submit(cluster, user, "--gres=gpu:1", "--wrap", until_released("share"))
        for user, count in (("alice", 4), ("carol", 4))
        for _ in range(count)
    ]
    assert len(jobs) == P5.gpu_count
    # Every job judged: started, or pending with the scheduler's reason (Resources when the node is taken).
    for job in jobs:
        cluster.wait_job(
            job, "judged", lambda shown: shown.get("JobState") == "RUNNING" or shown.get("Reason") != "None"
        )
    shown = {job: cluster.job(job) for job in jobs}
    assert {job: (fields["JobState"], fields["NodeList"]) for job, fields in shown.items()} == {
        job: ("RUNNING", node) for job in jobs
    }, shown
    for job, fields in shown.items():
        allocated = _tres(fields["AllocTRES"])
        allocated.pop("billing")  # Slurm's own default weight (the CPU count), not gpuforge's
        assert allocated == {"cpu": str(cpus), "mem": f"{memory}M", "node": "1", "gres/gpu": "1"}, (
            job,
            fields,
        )
        assert (fields["NumCPUs"], fields["CpusPerTres"], fields["MemPerTres"]) == (
            str(cpus),
            f"gpu:{cpus}",
            f"gpu:{memory}",
        ), fields
    # The node is full by GPU, and neither its CPUs nor its memory ran out first.
    node_tres = _tres(cluster.node(node)["AllocTRES"])
    assert (node_tres["gres/gpu"], node_tres["cpu"], node_tres["mem"]) == (
        str(P5.gpu_count),
        str(P5.gpu_count * cpus),
        f"{P5.gpu_count * memory}M",
    ), node_tres
    assert P5.gpu_count * cpus <= P5.vcpus and P5.gpu_count * memory <= real_memory
    # sacct holds the same allocation for each running job (what `gpuforge usage` reads).
    records = cluster.wait_for(
        "the eight jobs in sacct",
        lambda: _sacct_records(cluster, *jobs),
        lambda found: all(job in found for job in jobs),
    )
    for job in jobs:
        (record,) = records[job]
        allocated = _allocated(record)
        assert (allocated["cpu"], allocated["mem"], allocated["gres/gpu"]) == (cpus, memory, 1), allocated
    cluster.release("share")
    _empty_node(shared)


def _signals(log: Path) -> list[tuple[str, float]]:
    if not log.exists():
        return []
    return [(name, float(when)) for name, when in (line.split() for line in log.read_text().splitlines())]


def _sigterm_bursts(signals: list[tuple[str, float]]) -> list[float]:
    """When each burst of SIGTERMs began. One warning or kill sequence can reach the step's trap more than once
    within milliseconds (seen on a fresh-clone run: SIGTERM at +1.6 s, then two at +22.6 s, 3 ms apart); the
    grace is bounded by the first of each burst, and bursts are GraceTime apart."""
    starts: list[float] = []
    last = -float("inf")
    for name, when in signals:
        if name == "SIGTERM":
            if when - last >= BURST_S:
                starts.append(when)
            last = when
    return starts


def _epoch(shown: str) -> float:
    """A time `scontrol show job` prints (the root's zone, UTC) as epoch seconds."""
    return datetime.strptime(shown, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()


def test_a_preempted_research_job_gets_sigterm_then_its_grace_then_is_requeued(
    shared: AccountingCluster,
) -> None:
    cluster, node = shared.cluster, shared.nodes[0]
    qos = cluster.client(
        ["sacctmgr", "--noheader", "--parsable2", "show", "qos", "research", "format=GraceTime"]
    )
    assert qos.stdout.strip() == f"00:00:{GRACE_S:02d}", qos.stdout
    hold = int(2 * WAIT_S)
    step = cluster.root / "tmp/grace-step.py"
    step.write_text(STEP, encoding="utf-8")
    # The step, not the batch shell, is what Slurm warns: the first SIGTERM goes to the job's steps only
    # (_signal_job sends KILL_STEPS_ONLY, src/slurmctld/job_mgr.c at slurm-26-05-3-1), as training runs under srun.
    # SLURM_RESTART_COUNT is set from the first requeue on (sbatch(1)).
    command = f'exec srun python3 /tmp/grace-step.py /tmp/grace-"$SLURM_JOB_ID"-"${{SLURM_RESTART_COUNT:-0}}".log {hold}'
    research = _submit(cluster, "carol", "--qos=research", "--gres=gpu:4", "--wrap", command)
    log = cluster.root / f"tmp/grace-{research}-0.log"
    cluster.wait_for("the research step running", lambda: _signals(log), lambda seen: bool(seen))
    production = _submit(
        cluster,
        "alice",
        "--qos=production",
        f"--gres=gpu:{P5.gpu_count}",
        "--wrap",
        until_released("production"),
    )
    # Preempted: Slurm warned its step.
    cluster.wait_for(
        "the first SIGTERM", lambda: _signals(log), lambda seen: any(name == "SIGTERM" for name, _ in seen)
    )
    # The second the preemption began (scontrol's PreemptTime); Slurm set the job's end to it plus GraceTime.
    preempted = cluster.job(research)
    end = _epoch(preempted["PreemptTime"]) + GRACE_S
    signals = cluster.wait_for(
        "the kill sequence after the grace",
        lambda: _signals(log),
        lambda seen: len(_sigterm_bursts(seen)) >= 2,
        beyond_s=GRACE_S + TIME_LIMIT_CHECK_S + MESSAGE_TIMEOUT_S,
    )
    first_at, second_at = _sigterm_bursts(signals)[:2]
    started_at = signals[0][1]
    assert signals[0][0] == "START" and started_at < first_at < second_at, signals
    assert first_at < end, (signals, preempted)  # the warning came before the grace ran out
    assert second_at >= end - CLOCK_S / 2, (signals, preempted)  # and the kill not before it ran out
    gap = second_at - first_at
    assert GRACE_S - CLOCK_S <= gap <= GRACE_S + TIME_LIMIT_CHECK_S + MESSAGE_TIMEOUT_S, (gap, signals)
    # Then requeued, not cancelled, and the production job runs on the freed GPUs.
    requeued = cluster.wait_job(
        research,
        "requeued and judged",
        lambda shown: (
            (shown.get("JobState"), shown.get("Restarts")) == ("PENDING", "1")
            and shown.get("Reason") != "None"
        ),
    )
    assert requeued["QOS"] == "research", requeued
    cluster.wait_job(production, "running", lambda shown: shown.get("JobState") == "RUNNING")
    records = cluster.wait_for(
        "the preempted run in sacct",
        lambda: _sacct_records(cluster, research),
        lambda found: "PREEMPTED" in [record["state"]["current"][0] for record in found.get(research, [])],
    )
    assert [record["state"]["current"][0] for record in records[research]] == ["PREEMPTED", "PENDING"]
    assert cluster.job(production)["NodeList"] == node
    cluster.release("production")
    _empty_node(shared)
