#!/usr/bin/env python3
"""Measure how much MariaDB space Slurm's accounting takes per job, to size the controller's state volume.

Runs real MariaDB, slurmdbd, slurmctld and two slurmd (tests/scheduler/slurm_cluster.py: Slurm 26.05.5 and
MariaDB 11.8 in the forky chroot, as root), submits JOBS batch jobs of one GPU, each with one srun step (the
shape of a training job: the batch step, the extern step and one srun step), waits until sacct lists them all,
and prints the bytes InnoDB holds for the cluster's job and step tables (data + index, from
information_schema after ANALYZE TABLE) divided by the number of jobs, with a year's figure at a given rate.

Usage (as root, from the repository root): .venv/bin/python -P scripts/bench_accounting_size.py [JOBS] [JOBS_PER_DAY]
Prints figures only; sizing decisions are made from them in components/slurm_controller.py (STATE_VOLUME_GIB).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "scheduler"))

from slurm_cluster import (  # noqa: E402  (the harness lives in the tests)
    DB_NAME,
    DB_SOCKET,
    DEFAULT_ROOT,
    open_cluster,
    start_accounting_cluster,
    unavailable_reason,
)

GIB = 1024**3


def main(argv: list[str]) -> int:
    jobs = int(argv[1]) if len(argv) > 1 else 200
    per_day = int(argv[2]) if len(argv) > 2 else 5000
    reason = unavailable_reason(DEFAULT_ROOT)
    if reason is not None:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2
    base = Path(f"/tmp/gpuforge-bench-accounting-{int(time.time())}")
    with open_cluster(base, DEFAULT_ROOT, REPO / "gpuforge") as cluster:
        acct = start_accounting_cluster(cluster, name="gfbench", password="bench-only")

        def table_bytes() -> dict[str, int]:
            sql = (
                f"ANALYZE TABLE {DB_NAME}.gfbench_job_table, {DB_NAME}.gfbench_step_table;"
                f"SELECT table_name, data_length + index_length FROM information_schema.tables "
                f"WHERE table_schema = '{DB_NAME}' AND table_name IN ('gfbench_job_table', 'gfbench_step_table');"
            )
            out = cluster.chroot(["mariadb", f"--socket={DB_SOCKET}", "-N", "-B", "-e", sql]).stdout
            rows = [line.split("\t") for line in out.splitlines() if line.startswith("gfbench_")]
            return {name: int(size) for name, size in rows if size.isdigit()}

        before = table_bytes()
        started = time.monotonic()
        for index in range(jobs):
            cluster.client(
                [
                    "sbatch",
                    "--parsable",
                    "--chdir=/tmp",
                    "--gres=gpu:1",
                    f"--job-name=bench-{index}",
                    "-w",
                    acct.nodes[index % len(acct.nodes)],
                    "--wrap",
                    "srun true",
                ]
            )

        def listed() -> int:
            out = cluster.client(
                ["sacct", "--allusers", "-X", "--noheader", "--parsable2", "--format=JobID,State"]
            )
            return sum(1 for line in out.stdout.splitlines() if line.endswith("|COMPLETED"))

        cluster.wait_for(f"{jobs} jobs COMPLETED in sacct", lambda: listed() >= jobs, 60 + jobs)
        steps = cluster.client(["sacct", "--allusers", "--noheader", "--parsable2", "--format=JobID"]).stdout
        after = table_bytes()
        took = time.monotonic() - started
    grown = {name: after.get(name, 0) - before.get(name, 0) for name in after}
    per_job = sum(grown.values()) / jobs
    year = per_job * per_day * 365
    print(f"jobs {jobs}, sacct rows (jobs and steps) {len(steps.splitlines())}, ran in {took:.0f} s")
    for name, size in sorted(grown.items()):
        print(f"{name}: {size} bytes grown ({size / jobs:.0f} per job)")
    print(f"per job (job + steps, data + index): {per_job:.0f} bytes")
    print(f"a year at {per_day} jobs/day: {year / GIB:.2f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
