"""Slurm Prolog and Epilog: the job on every GPU's numbers, through dcgm-exporter's job mapping files.

dcgm-exporter (`--hpc-job-mapping-dir`, env `DCGM_HPC_JOB_MAPPING_DIR`) labels a GPU's series
`hpc_job=<id>` for each line of the file named by the GPU's index in that directory. Read in
NVIDIA/dcgm-exporter tag 4.4.2-4.7.1 (the pinned exporter, commit b921c57e),
internal/pkg/transformation/hpc.go: `getGPUFiles` keeps the regular files whose whole name
`strconv.Atoi` parses (so `0`..`7`; the atomic write's `.0.<random>.tmp` is skipped), `readFile`
gives one job per line, and a file with two lines doubles every series of that GPU. The label
name is `hpcJobAttribute = "hpc_job"` (const.go). So each file holds exactly one line: the job id.
MIG names (`2.0`) are read only from later dcgm-exporter releases (the `validGPUFile` pattern at
master); gpuforge's gres.conf has no MIG devices, so the prolog writes whole-GPU names only and
treats anything else in SLURM_JOB_GPUS as garbled.

Which GPUs: `SLURM_JOB_GPUS`, "the GPU IDs of GPUs in the job allocation", set for the Prolog
and Epilog (SchedMD/slurm doc/html/prolog_epilog.shtml at 284c3b95). Its numbers are the
device's position in gres.conf (src/plugins/gres/common/gres_common.c sets it from
`gres_device->index`, which src/interfaces/gres.c `_init_gres_device` takes from the bitmap
index); gpuforge's gres.conf lists `/dev/nvidia0`..`/dev/nvidia<N-1>` in order
(gpuforge.scheduler.render), so position i is /dev/nvidia<i>, the index dcgm-exporter reports.
`CUDA_VISIBLE_DEVICES` is not read: from Slurm 25.11 it may hold GPU UUIDs (the same function
writes `gres_device->unique_id` there when the device has one).

Never fail a job: slurm.conf(5) says a prolog that exits non-zero drains the node and requeues
the job held. Both commands log every problem (to stderr: the image's wrapper sends it to the
journal) and exit 0, whatever happens. Two jobs on one node each own their GPUs' files; a file
left by an old job whose epilog never ran (slurmd killed, node rebooted without clearing /run)
is overwritten by the next job that gets the GPU. The epilog removes only files that hold its
own job id, never another job's. Slurm hands a GPU to the next job only after the epilog of
the last one has finished (the node stays COMPLETING until then), so the read-then-remove in
the epilog does not race a prolog for the same GPU.

Only regular files are read, never followed through a link, and only their first
MAPPING_MAX_BYTES (gpuforge.loading.read_bytes): a FIFO left in the folder would otherwise block
the prolog's read, and with it the job's start, for as long as nobody writes to it; a device could
feed it without end; a link could point the read at any file. Such an entry counts as holding no
job: the prolog logs that it cannot replace it, and the epilog leaves it alone.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpuforge.atomic import write_text_atomic
from gpuforge.display import printable
from gpuforge.errors import InputError
from gpuforge.loading import read_bytes

# dcgm-exporter's --hpc-job-mapping-dir on gpuforge's image (the drop-in
# images/files/nvidia-dcgm-exporter-gpuforge.conf sets DCGM_HPC_JOB_MAPPING_DIR to it).
# Under /run so that a reboot starts with no mapping at all.
DEFAULT_MAPPING_DIR = Path("/run/gpuforge/dcgm-job-map")
JOB_ID_VARIABLE = "SLURM_JOB_ID"
GPUS_VARIABLE = "SLURM_JOB_GPUS"
# Slurm prints job ids and GPU indices with %u / %d: plain decimal numbers.
_NUMBER = re.compile(r"[0-9]+\Z")
# A mapping file holds one job id and a line feed; a page is far more than any file gpuforge writes.
MAPPING_MAX_BYTES = 4096

Log = Callable[[str], None]


def _stderr(message: str) -> None:
    print(f"gpuforge: {printable(message)}", file=sys.stderr)


@dataclass(frozen=True)
class JobGpus:
    """What the environment says about the job on this node; `problems` lists what could not be read."""

    job_id: str | None
    gpus: tuple[str, ...]
    problems: tuple[str, ...]


def read_environment(env: Mapping[str, str]) -> JobGpus:
    """The job id and GPU indices from Slurm's prolog/epilog environment; garbled items are left out."""
    problems: list[str] = []
    raw_job = env.get(JOB_ID_VARIABLE, "").strip()
    job_id: str | None = raw_job
    if not _NUMBER.match(raw_job):
        problems.append(f"{JOB_ID_VARIABLE}={raw_job!r} is not a job id (digits)")
        job_id = None
    raw_gpus = env.get(GPUS_VARIABLE)
    gpus: list[str] = []
    if raw_gpus is None or not raw_gpus.strip():
        # A job without GPUs on this node: nothing to map, not a problem.
        return JobGpus(job_id, (), tuple(problems))
    for item in raw_gpus.split(","):
        token = item.strip()
        if not _NUMBER.match(token):
            problems.append(f"{GPUS_VARIABLE}={raw_gpus!r}: {token!r} is not a GPU index (digits)")
            continue
        index = str(int(token))  # "07" and "7" name the same GPU, and dcgm-exporter's key is "7"
        if index not in gpus:
            gpus.append(index)
    return JobGpus(job_id, tuple(gpus), tuple(problems))


def mapping_files(directory: Path) -> list[Path]:
    """The files dcgm-exporter reads as mapping files: regular files (not links) named by a GPU index."""
    try:
        with os.scandir(directory) as entries:
            found = [
                Path(entry.path)
                for entry in entries
                if _NUMBER.match(entry.name) and entry.is_file(follow_symlinks=False)
            ]
    except FileNotFoundError:
        return []
    return sorted(found, key=lambda entry: int(entry.name))


def read_jobs(path: Path) -> tuple[str, ...]:
    """The job ids in one mapping file (one per line); () when it is missing, unreadable, a link, not a
    regular file or over MAPPING_MAX_BYTES (never blocks: gpuforge.loading.read_bytes)."""
    try:
        text = read_bytes(path, max_bytes=MAPPING_MAX_BYTES, follow_links=False).decode(
            "utf-8", errors="replace"
        )
    except (OSError, ValueError):
        return ()
    return tuple(line.strip() for line in text.splitlines() if line.strip())


def claim(directory: Path, job: JobGpus, log: Log = _stderr) -> list[str]:
    """Prolog: write `<directory>/<gpu>` holding the job id for each of the job's GPUs; returns those written.

    Each file is written atomically (gpuforge.atomic), so dcgm-exporter reads the old content
    or the new, never an empty file; a stale file of an old job is replaced.
    """
    for problem in job.problems:
        log(f"prolog: {problem}; those GPUs get no job label")
    if job.job_id is None or not job.gpus:
        return []
    written: list[str] = []
    for gpu in job.gpus:
        target = directory / gpu
        previous = read_jobs(target)
        if previous and previous != (job.job_id,):
            log(
                f"prolog: GPU {gpu} still mapped to job(s) {', '.join(previous)}; job {job.job_id} replaces it"
            )
        try:
            write_text_atomic(target, f"{job.job_id}\n")
        except InputError as error:
            log(f"prolog: job {job.job_id}: {error}")
            continue
        written.append(gpu)
    return written


def release(directory: Path, job_id: str | None, log: Log = _stderr) -> list[str]:
    """Epilog: remove every mapping file that holds exactly `job_id`; returns the GPUs released.

    The whole directory is read, not only SLURM_JOB_GPUS, so a job whose epilog lacks the
    variable still leaves nothing behind; a file naming another job is never touched.
    """
    if job_id is None:
        return []
    released: list[str] = []
    for path in mapping_files(directory):
        if read_jobs(path) != (job_id,):
            continue
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        except OSError as error:
            log(f"epilog: job {job_id}: cannot remove {path}: {error.strerror or error}")
            continue
        released.append(path.name)
    return released


def run_prolog(directory: Path, env: Mapping[str, str] | None = None, log: Log = _stderr) -> int:
    """`gpuforge node prolog`: map the job's GPUs. Always 0 (a failing prolog drains the node)."""
    try:
        job = read_environment(os.environ if env is None else env)
        written = claim(directory, job, log)
        if written:
            log(f"prolog: job {job.job_id} mapped to GPU(s) {','.join(written)} in {directory}")
    except Exception as error:  # noqa: BLE001 - the job must start whatever went wrong here
        log(f"prolog: job mapping failed ({type(error).__name__}: {error}); the job runs without the label")
    return 0


def run_epilog(directory: Path, env: Mapping[str, str] | None = None, log: Log = _stderr) -> int:
    """`gpuforge node epilog`: remove the job's mapping files. Always 0 (a failing epilog drains the node)."""
    try:
        job = read_environment(os.environ if env is None else env)
        if job.job_id is None:
            log(f"epilog: {JOB_ID_VARIABLE} missing or garbled; no mapping file removed")
            return 0
        released = release(directory, job.job_id, log)
        if released:
            log(f"epilog: job {job.job_id} released GPU(s) {','.join(released)}")
    except Exception as error:  # noqa: BLE001 - the node must stay in service whatever went wrong here
        log(f"epilog: removing the job mapping failed ({type(error).__name__}: {error})")
    return 0


def jobs_of(directory: Path, gpus: Iterable[str]) -> tuple[str, ...]:
    """The distinct jobs holding any of `gpus` now (sorted numerically): what the EFA collector labels.

    Only GPU indices name a file: anything else (`../x`, an absolute path) is never joined to the folder."""
    found = {
        job for gpu in gpus if _NUMBER.match(gpu) for job in read_jobs(directory / gpu) if _NUMBER.match(job)
    }
    return tuple(sorted(found, key=int))
