"""What the report makes of sacct's records before it counts them, so a reader can redo the count.

Rules (README, "Usage and cost"):
- **This cluster only.** gpuforge names the Slurm cluster after its stack (ClusterName = the stack's
  name), so a record whose `cluster` is another is refused (exit 2) rather than priced at this stack's
  rate: a file from `sacct -M all` or another controller is a wrong input, not part of this bill.
- **One record per run.** The same run listed twice (the same cluster, job id, submit and start times)
  counts once, and the last record printed is kept: sacct itself shows one record, the most recent, of
  a job id unless asked for --duplicates, and tells records of one id apart by their submit time
  (https://slurm.schedmd.com/sacct.html#OPT_duplicates). Runs of a requeued job differ in their start
  and all count. How many records were dropped is shown.
- **Elapsed is checked, not counted.** Held time is `end - start`; a finished run whose sacct
  `elapsed` is not `end - start - suspended` (slurmdbd's own formula) is listed, as is a run that was
  suspended (its suspended seconds count as held: the allocation lasted from start to end).
- Runs still going when sacct answered (no end) are listed: they count to the window's end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuforge.display import cut
from gpuforge.errors import InputError
from gpuforge.usage.sacct import Job


@dataclass(frozen=True)
class Records:
    runs: int  # records counted, after duplicates were dropped
    duplicates_dropped: int
    running: tuple[str, ...]  # job ids of runs with no end
    elapsed_mismatch: tuple[str, ...]
    suspended: tuple[str, ...]
    never_started: int  # runs with no start (cancelled while pending): they hold nothing
    without_gpus: int  # runs that started with no gres/gpu

    def to_json(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "duplicates_dropped": self.duplicates_dropped,
            "running": list(self.running),
            "elapsed_mismatch": list(self.elapsed_mismatch),
            "suspended": list(self.suspended),
            "never_started": self.never_started,
            "without_gpus": self.without_gpus,
        }


def _ids(jobs: list[Job]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(job.job_id for job in jobs))


def screen(jobs: list[Job], *, cluster: str, stack: str, source: str) -> tuple[list[Job], Records]:
    """The runs to count (this cluster's, each once) and what was found on the way; InputError for a
    record of another cluster, naming it."""
    for index, job in enumerate(jobs):
        if job.cluster != cluster:
            raise InputError(
                f"{source}: jobs[{index}] (job {job.job_id}) is of Slurm cluster {cut(job.cluster)}; stack {stack}'s "
                f"cluster is {cut(cluster)} (gpuforge names it after the stack), and another cluster's runs are not "
                f"this stack's to price. Fix: pass `sacct --clusters {cluster} ...` output, or the --stack that "
                "cluster belongs to."
            )
    kept: dict[tuple[str, str, object, object], Job] = {}
    for job in jobs:
        key = (job.cluster, job.job_id, job.submit, job.start)
        kept.pop(key, None)  # the last record printed wins, in the place it was printed
        kept[key] = job
    runs = list(kept.values())
    started = [job for job in runs if job.start is not None]
    finished = [job for job in started if job.end is not None]
    return runs, Records(
        runs=len(runs),
        duplicates_dropped=len(jobs) - len(runs),
        running=_ids([job for job in started if job.end is None]),
        elapsed_mismatch=_ids(
            [
                job
                for job in finished
                if job.end is not None
                and job.start is not None
                and job.elapsed_s != int((job.end - job.start).total_seconds()) - job.suspended_s
            ]
        ),
        suspended=_ids([job for job in started if job.suspended_s > 0]),
        never_started=len(runs) - len(started),
        without_gpus=sum(1 for job in started if job.gpus == 0),
    )
