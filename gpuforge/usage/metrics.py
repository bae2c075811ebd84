"""Per-job GPU-seconds held, useful and idle, from the metrics layer's recording rules in Prometheus.

The rules (gpuforge/data/monitoring_alerts.yaml, `recording`, evaluated every minute) record for each
job (label `hpc_job`, the Slurm job id) the GPU-seconds of that minute it held
(`gpuforge_job:gpu_seconds_held:1m`: 60 x its GPUs) and used (`gpuforge_job:gpu_seconds_useful:1m`:
60 x the sum of its GPUs' DCGM_FI_PROF_SM_ACTIVE, a ratio of cycles). Summed over the window
(sum_over_time) they give the job's held and useful GPU-seconds.

Idle: a minute in which the job's GPUs were active on average less than IDLE_SM_ACTIVE of their SM
cycles (useful < IDLE_SM_ACTIVE x held) counts all the job's held GPU-seconds of that minute as idle.
The threshold is the GpuforgeGpuHeldIdle alert's (SM_ACTIVE < 5%), so the report and the alert agree
on what idle means. It is counted with a subquery at one-minute steps, the rules' interval, each step
taking only a sample of its own minute.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuforge.display import cut
from gpuforge.errors import InputError
from gpuforge.usage.window import Window

HELD = "gpuforge_job:gpu_seconds_held:1m"
USEFUL = "gpuforge_job:gpu_seconds_useful:1m"
LABEL = "hpc_job"
IDLE_SM_ACTIVE = 0.05  # the GpuforgeGpuHeldIdle alert's SM_ACTIVE threshold
RULE_INTERVAL_S = 60  # the recording rules' interval (monitoring_alerts.yaml `recording.interval`)
TIMEOUT_S = 60


@dataclass(frozen=True)
class JobMetrics:
    held_s: float
    useful_s: float
    idle_s: float


def queries(window: Window) -> dict[str, str]:
    """The three PromQL queries, each evaluated at the window's end over its length."""
    span = f"{window.seconds}s"
    idle = f"{HELD} and on({LABEL}) ({USEFUL} < on({LABEL}) {IDLE_SM_ACTIVE} * {HELD})"
    # Only a sample of the step's own minute: the subquery's look-back (5 minutes) would otherwise
    # count a job's last sample again at each later step when no staleness marker follows it
    # (a restarted Prometheus, a missed evaluation, backfilled history).
    idle_minutes = f"({idle}) and on({LABEL}) (time() - timestamp({HELD}) < {RULE_INTERVAL_S})"
    return {
        "held": f"sum by ({LABEL}) (sum_over_time({HELD}[{span}]))",
        "useful": f"sum by ({LABEL}) (sum_over_time({USEFUL}[{span}]))",
        "idle": f"sum by ({LABEL}) (sum_over_time(({idle_minutes})[{span}:1m]))",
    }


def _query(url: str, expr: str, at: datetime) -> list[dict[str, Any]]:
    address = f"{url.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode(
        {"query": expr, "time": str(at.timestamp())}
    )
    fix = "pass --prometheus with the controller's Prometheus, e.g. http://127.0.0.1:9090 (a tunnel to port 9090 from elsewhere)"
    try:
        with urllib.request.urlopen(address, timeout=TIMEOUT_S) as answer:
            body = json.loads(answer.read())
    except urllib.error.HTTPError as error:
        raise InputError(
            f"--prometheus {cut(url)}: the query {expr} was refused (HTTP {error.code}: "
            f"{cut(error.read().decode(errors='replace'), 300)}). Fix: {fix}."
        ) from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise InputError(
            f"--prometheus {cut(url)}: no answer from Prometheus ({error}). Fix: {fix}."
        ) from None
    if not isinstance(body, dict) or body.get("status") != "success":
        raise InputError(f"--prometheus {cut(url)}: not a Prometheus query answer ({cut(body)}). Fix: {fix}.")
    data = body.get("data", {})
    if data.get("resultType") != "vector":
        raise InputError(f"--prometheus {cut(url)}: expected an instant vector for {expr}. Fix: {fix}.")
    result: list[dict[str, Any]] = data.get("result", [])
    return result


def job_metrics(url: str, window: Window) -> dict[str, JobMetrics]:
    """Held, useful and idle GPU-seconds of every job with series in the window, by job id."""
    answers = {
        name: {
            sample["metric"].get(LABEL, ""): float(sample["value"][1])
            for sample in _query(url, expr, window.until)
        }
        for name, expr in queries(window).items()
    }
    return {
        job: JobMetrics(held, answers["useful"].get(job, 0.0), answers["idle"].get(job, 0.0))
        for job, held in answers["held"].items()
        if job
    }
