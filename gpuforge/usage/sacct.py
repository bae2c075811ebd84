"""Jobs from Slurm's accounting: `sacct --json` (Slurm's data_parser, https://slurm.schedmd.com/rest_api.html).

A job record of data_parser v0.0.40 and later carries, among much else:
`job_id`, `user`, `account` (the team: gpuforge's teams are Slurm accounts), `partition`, `name`,
`cluster`, `nodes` (a hostlist), `state.current` (a list of flags, e.g. ["COMPLETED"]), `time.submission`,
`time.start`, `time.end`, `time.suspended` and `time.elapsed` (seconds; a number, or
`{"set", "infinite", "number"}` in the versions that wrap numbers), and `tres.allocated` (a list of
`{"type", "name", "id", "count"}`; GPUs are type `gres`, name `gpu` when slurm.conf has
`AccountingStorageTRES=gres/gpu`). Each record is an allocation; its steps are nested in it (`steps`),
so a step is never a record of its own here. A requeued job shows once per run with `sacct --duplicates`,
each run with its own times.

GPU time held is the allocation's span, `end - start`, clipped to the window: what a reader can
recompute from the record's two times. slurmdbd derives `elapsed` from the same two times less the
seconds suspended (SchedMD/slurm src/plugins/accounting_storage/mysql/as_mysql_jobacct_process.c,
commit 00cabba3e0d1882809e12c1b1be424ebe1fb2ada: `job->elapsed = job->end - job->start;
job->elapsed -= job->suspended;`), so it is kept only to check the record (gpuforge.usage.records).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuforge.display import cut
from gpuforge.errors import GpuforgeError, InputError
from gpuforge.loading import parse_json, read_text
from gpuforge.usage.window import Window

MAX_SACCT_BYTES = 512 * 1024 * 1024  # a month of a busy cluster's jobs with their steps fits well under this
SACCT_TIMEOUT_S = 300
POLL_S = 0.2  # how often a running accounting tool's output size and deadline are checked
FIX = (
    "pass the output of `sacct --json --allusers --duplicates --starttime T --endtime T` run on the controller "
    "(Slurm 23.02 or later), unedited"
)


@dataclass(frozen=True)
class Job:
    """One run of one job, as accounting recorded it."""

    job_id: str
    cluster: str
    name: str
    user: str
    account: str
    partition: str
    state: str
    nodes: str
    submit: datetime | None
    start: datetime | None  # None: it never started
    end: datetime | None  # None: still running
    elapsed_s: int  # sacct's, checked against start, end and suspended_s; never counted
    suspended_s: int
    gpus: int  # gres/gpu in AllocTRES

    def held_seconds(self, window: Window, now: datetime) -> int:
        """GPU-seconds held inside the window: GPUs x [start, end) clipped to it; a run with no end
        (still running when sacct answered) counts to now or the window's end, whichever is first."""
        if self.start is None or self.gpus == 0:
            return 0
        end = self.end if self.end is not None else min(now, window.until)
        return self.gpus * window.clip(self.start, end)


def _field(source: str, where: str, record: Mapping[str, Any], key: str) -> Any:
    if key not in record:
        raise InputError(f"{source}: {where}.{key} is missing. Fix: {FIX}.")
    return record[key]


def _text(source: str, where: str, record: Mapping[str, Any], key: str) -> str:
    value = _field(source, where, record, key)
    if not isinstance(value, str):
        raise InputError(f"{source}: {where}.{key} = {cut(value)}: a string is expected. Fix: {FIX}.")
    return value


def _number(source: str, where: str, record: Mapping[str, Any], key: str) -> int | None:
    """A data_parser number: a plain integer, or `{"set", "infinite", "number"}` (None when unset or infinite)."""
    value = _field(source, where, record, key)
    if isinstance(value, dict) and {"set", "infinite", "number"} <= set(value):
        if value["set"] is not True or value["infinite"] is True:
            return None
        value = value["number"]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(
            f"{source}: {where}.{key} = {cut(value)}: a whole number of seconds (or data_parser's "
            f'{{"set", "infinite", "number"}}) is expected. Fix: {FIX}.'
        )
    return value


def _time(source: str, where: str, record: Mapping[str, Any], key: str) -> datetime | None:
    """An epoch time; 0 (Slurm's "not yet") is None."""
    seconds = _number(source, where, record, key)
    if not seconds:
        return None
    try:
        return datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, OSError, ValueError):  # past year 9999: no clock of Slurm's wrote it
        raise InputError(
            f"{source}: {where}.{key} = {cut(seconds)}: not a time (seconds since 1970 up to year 9999). Fix: {FIX}."
        ) from None


def _mapping(source: str, where: str, value: object) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise InputError(f"{source}: {where} = {cut(value)}: an object is expected. Fix: {FIX}.")
    return value


def _gpus(source: str, where: str, tres: Mapping[str, Any]) -> int:
    allocated = _field(source, where, tres, "allocated")
    if not isinstance(allocated, list):
        raise InputError(f"{source}: {where}.allocated = {cut(allocated)}: a list is expected. Fix: {FIX}.")
    gpus = 0
    for index, item in enumerate(allocated):
        entry = _mapping(source, f"{where}.allocated[{index}]", item)
        if entry.get("type") == "gres" and entry.get("name") == "gpu":
            gpus += _number(source, f"{where}.allocated[{index}]", entry, "count") or 0
    return gpus


def _job(source: str, index: int, raw: object) -> Job:
    where = f"jobs[{index}]"
    record = _mapping(source, where, raw)
    times = _mapping(source, f"{where}.time", _field(source, where, record, "time"))
    state = _mapping(source, f"{where}.state", _field(source, where, record, "state"))
    current = _field(source, f"{where}.state", state, "current")
    flags = current if isinstance(current, list) else [current]
    if not flags or not all(isinstance(flag, str) for flag in flags):
        raise InputError(
            f"{source}: {where}.state.current = {cut(current)}: a list of state names is expected. Fix: {FIX}."
        )
    job = Job(
        job_id=str(_number(source, where, record, "job_id")),
        name=_text(source, where, record, "name"),
        user=_text(source, where, record, "user"),
        account=_text(source, where, record, "account"),
        partition=_text(source, where, record, "partition"),
        state=flags[0],
        nodes=_text(source, where, record, "nodes"),
        cluster=_text(source, where, record, "cluster"),
        submit=_time(source, f"{where}.time", times, "submission"),
        start=_time(source, f"{where}.time", times, "start"),
        end=_time(source, f"{where}.time", times, "end"),
        elapsed_s=_number(source, f"{where}.time", times, "elapsed") or 0,
        suspended_s=_number(source, f"{where}.time", times, "suspended") or 0,
        gpus=_gpus(
            source, f"{where}.tres", _mapping(source, f"{where}.tres", _field(source, where, record, "tres"))
        ),
    )
    if job.start is not None and job.end is not None and job.end < job.start:
        raise InputError(
            f"{source}: {where}.time: end {job.end.isoformat()} is before start {job.start.isoformat()} (slurmdbd "
            f"never records that: it moves such a start to the end). Fix: {FIX}."
        )
    return job


def parse_sacct(text: str, *, source: str) -> list[Job]:
    """Every job run of a `sacct --json` document; InputError naming the file and the field otherwise."""
    document = _mapping(source, "the document", parse_json(text, source=source, fix=FIX))
    jobs = _field(source, "the document", document, "jobs")
    if not isinstance(jobs, list):
        raise InputError(f"{source}: jobs = {cut(jobs)}: a list is expected. Fix: {FIX}.")
    return [_job(source, index, raw) for index, raw in enumerate(jobs)]


def read_sacct(path: Path) -> list[Job]:
    return parse_sacct(
        read_text(path, what="sacct output", max_bytes=MAX_SACCT_BYTES, fix=FIX), source=str(path)
    )


def _slurm_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def run_accounting_tool(
    command: list[str], timeout_s: float, *, max_bytes: int, not_run_fix: str, failed_fix: str
) -> str:
    """Run a Slurm accounting client (sacct, sacctmgr) in UTC and return its stdout; a start failure,
    a timeout, more than `max_bytes` of output (the cap its file form has) or a non-zero exit is a
    GpuforgeError naming the command and the fix.

    The output goes to an unnamed temporary file whose size is watched while the tool runs, so a
    tool that never stops writing is stopped at the cap instead of filling memory or the disk.
    """
    shown = " ".join(command)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env={**os.environ, "TZ": "UTC"}
            )
        except OSError as error:
            raise GpuforgeError(f"{shown} did not run ({error}). Fix: {not_run_fix}.") from None
        deadline = time.monotonic() + timeout_s
        try:
            while process.poll() is None:
                if os.fstat(out.fileno()).st_size > max_bytes:
                    break
                if time.monotonic() > deadline:
                    raise GpuforgeError(
                        f"{shown} did not run (no answer within {timeout_s:g} s). Fix: {not_run_fix}."
                    )
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=POLL_S)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        if os.fstat(out.fileno()).st_size > max_bytes:
            raise GpuforgeError(
                f"{shown} wrote more than {max_bytes} bytes, more than the report reads. "
                "Fix: pass a shorter window (--since, --until)."
            )
        if process.returncode != 0:
            err.seek(0)
            stderr = err.read(4096).decode("utf-8", errors="replace")
            raise GpuforgeError(
                f"{shown} failed (exit {process.returncode}): {cut(stderr.strip(), 400)}. Fix: {failed_fix}."
            )
        out.seek(0)
        data = out.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise GpuforgeError(
            f"{shown} printed text that is not UTF-8 (byte {error.start}). Fix: {failed_fix}."
        ) from None


def run_sacct(window: Window) -> list[Job]:
    """On the controller: ask sacct for every run of every job that ran in the window (TZ=UTC, so its
    window means the report's)."""
    sacct = shutil.which("sacct")
    if sacct is None:
        raise InputError(
            "sacct is not on PATH, so Slurm's accounting cannot be read here. Fix: run `gpuforge usage` on the "
            "controller, or pass --sacct-json FILE with the controller's `sacct --json --allusers --duplicates` output."
        )
    command = [
        sacct, "--json", "--allusers", "--duplicates",
        "--starttime", _slurm_time(window.since), "--endtime", _slurm_time(window.until),
    ]  # fmt: skip
    stdout = run_accounting_tool(
        command,
        SACCT_TIMEOUT_S,
        max_bytes=MAX_SACCT_BYTES,
        not_run_fix="check slurmdbd (`systemctl status slurmdbd`)",
        failed_fix="check that slurmdbd is up (`sacctmgr show cluster`) and that you may read all jobs",
    )
    return parse_sacct(stdout, source="sacct --json")
