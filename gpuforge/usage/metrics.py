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

import http.client
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuforge.display import cut
from gpuforge.errors import InputError
from gpuforge.loading import parse_json
from gpuforge.usage.window import Window

HELD = "gpuforge_job:gpu_seconds_held:1m"
USEFUL = "gpuforge_job:gpu_seconds_useful:1m"
LABEL = "hpc_job"
IDLE_SM_ACTIVE = 0.05  # the GpuforgeGpuHeldIdle alert's SM_ACTIVE threshold
RULE_INTERVAL_S = 60  # the recording rules' interval (monitoring_alerts.yaml `recording.interval`)
TIMEOUT_S = 60  # for one query's whole answer
READ_TIMEOUT_S = 15  # for the connection and each read
CHUNK_BYTES = 1 << 16
ERROR_BODY_BYTES = 4096  # of a refusal's body: enough to quote its start
# One answer: a result is about 100 bytes, so this holds some 600,000 jobs' series.
MAX_ANSWER_BYTES = 64 * 1024 * 1024
FIX = (
    "pass --prometheus with the controller's Prometheus, e.g. http://127.0.0.1:9090 (a tunnel to port 9090 "
    "from elsewhere), or leave it out for a report without metrics"
)


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
    # And only a sample inside the window, as the held sum takes: the first step's minute reaches back
    # past the window's start when evaluations do not fall on whole minutes.
    since = int(window.since.timestamp())
    idle_minutes = (
        f"({idle}) and on({LABEL}) (time() - timestamp({HELD}) < {RULE_INTERVAL_S})"
        f" and on({LABEL}) (timestamp({HELD}) > {since})"
    )
    return {
        "held": f"sum by ({LABEL}) (sum_over_time({HELD}[{span}]))",
        "useful": f"sum by ({LABEL}) (sum_over_time({USEFUL}[{span}]))",
        "idle": f"sum by ({LABEL}) (sum_over_time(({idle_minutes})[{span}:1m]))",
    }


def _fail(url: str, problem: str) -> InputError:
    return InputError(f"--prometheus {cut(url)}: {problem}. Fix: {FIX}.")


def _address(url: str, expr: str, at: datetime) -> str:
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise _fail(url, "not an http:// or https:// URL")
    return f"{url.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode(
        {"query": expr, "time": str(at.timestamp())}
    )


def _fetch(url: str, name: str, expr: str, at: datetime) -> bytes:
    """The body of the answer to one query: at most MAX_ANSWER_BYTES, within TIMEOUT_S in all."""
    address = _address(url, expr, at)
    deadline = time.monotonic() + TIMEOUT_S
    chunks: list[bytes] = []
    size = 0
    try:
        with urllib.request.urlopen(address, timeout=READ_TIMEOUT_S) as answer:
            while chunk := answer.read(CHUNK_BYTES):
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    raise _fail(url, f"the {name} query's answer is larger than {MAX_ANSWER_BYTES} bytes")
                if time.monotonic() > deadline:
                    raise _fail(url, f"the {name} query's answer took more than {TIMEOUT_S} s")
                chunks.append(chunk)
            if answer.length:  # http.client's bytes still owed by Content-Length: the connection closed early
                raise http.client.IncompleteRead(b"".join(chunks), answer.length)
    except urllib.error.HTTPError as error:
        try:
            body = error.read(ERROR_BODY_BYTES).decode(errors="replace")
        except (OSError, http.client.HTTPException):
            body = ""
        raise _fail(url, f"the {name} query was refused (HTTP {error.code}: {cut(body, 300)})") from None
    except http.client.IncompleteRead:
        raise _fail(url, f"the {name} query's answer was cut short") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
        raise _fail(url, f"no answer from Prometheus ({error})") from None
    return b"".join(chunks)


def _object(url: str, where: str, value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(url, f"{where} = {cut(value)}: an object is expected")
    return value


def _samples(url: str, name: str, data: bytes) -> dict[str, float]:
    """Job id -> value of an instant-vector answer; InputError naming the field for any other shape."""
    source = f"the answer to the {name} query"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _fail(url, f"{source}: not UTF-8 (byte {error.start})") from None
    body = parse_json(text, source=f"--prometheus {cut(url)}: {source}", fix=FIX)
    if not isinstance(body, dict):
        raise _fail(
            url, f'{source}: {cut(body)}: a Prometheus query answer ({{"status", "data"}}) is expected'
        )
    if body.get("status") == "error":
        raise _fail(
            url,
            f"Prometheus refused the {name} query: {cut(body.get('errorType'))}: {cut(body.get('error'), 300)}",
        )
    if body.get("status") != "success":
        raise _fail(url, f'{source}: status = {cut(body.get("status"))}: "success" or "error" is expected')
    answer = _object(url, f"{source}: data", body.get("data"))
    if answer.get("resultType") != "vector":
        raise _fail(
            url, f"{source}: data.resultType = {cut(answer.get('resultType'))}: an instant vector is expected"
        )
    result = answer.get("result")
    if not isinstance(result, list):
        raise _fail(url, f"{source}: data.result = {cut(result)}: a list is expected")
    found: dict[str, float] = {}
    for index, raw in enumerate(result):
        where = f"{source}: data.result[{index}]"
        sample = _object(url, where, raw)
        job = _object(url, f"{where}.metric", sample.get("metric")).get(LABEL, "")
        if not isinstance(job, str):
            raise _fail(url, f"{where}.metric.{LABEL} = {cut(job)}: a job id (text) is expected")
        pair = sample.get("value")
        try:
            if not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[1], str):
                raise ValueError
            value = float(pair[1])
        except ValueError:
            raise _fail(url, f'{where}.value = {cut(pair)}: [time, "number"] is expected') from None
        if job in found:
            raise _fail(url, f"{where}.metric.{LABEL} = {cut(job)}: a second sample of the same job")
        if job:
            found[job] = value
    return found


def _gpu_seconds(url: str, name: str, job: str, value: float, most: float) -> float:
    """`value` when it is GPU-seconds a job can have held in the window, else InputError naming it."""
    if math.isfinite(value) and 0 <= value <= most:
        return value
    shown = "NaN" if math.isnan(value) else f"{value:g}"
    raise _fail(
        url,
        f"the {name} query gave job {cut(job)} {shown} GPU-seconds: a finite amount from 0 to {most:g} (every GPU "
        "of the cluster for the whole window) is expected; the recording rules record 60 x the GPUs a job holds "
        "each minute, so check them and the exporter, or leave --prometheus out for a report without metrics",
    )


def _within_held(url: str, name: str, job: str, value: float, held: float) -> float:
    if value <= held * (1 + 1e-9) + 1e-6:  # the same samples summed in another order
        return value
    raise _fail(
        url,
        f"the {name} query gave job {cut(job)} {value:g} GPU-seconds, more than the {held:g} its held query gave: "
        "a job cannot use or idle more GPU time than it holds (check the recording rules and dcgm-exporter)",
    )


def job_metrics(url: str, window: Window, *, max_gpus: int | None = None) -> dict[str, JobMetrics]:
    """Held, useful and idle GPU-seconds of every job with series in the window, by job id.

    Every value is checked before it is counted: a finite amount from 0 to what `max_gpus` GPUs
    (the cluster's, when given) hold over the window, and useful and idle at most the job's held. A
    value outside is refused (exit 2) naming the query, the job and the value, not left out: one
    such series means the rules or the exporter are broken, and the other jobs' figures with them.
    """
    answers = {
        name: _samples(url, name, _fetch(url, name, expr, window.until))
        for name, expr in queries(window).items()
    }
    most = math.inf if max_gpus is None else float(max_gpus * (window.seconds + RULE_INTERVAL_S))
    found: dict[str, JobMetrics] = {}
    for job in sorted({job for values in answers.values() for job in values}):
        held = _gpu_seconds(url, "held", job, answers["held"].get(job, 0.0), most)
        useful = _gpu_seconds(url, "useful", job, answers["useful"].get(job, 0.0), most)
        idle = _gpu_seconds(url, "idle", job, answers["idle"].get(job, 0.0), most)
        found[job] = JobMetrics(
            held, _within_held(url, "useful", job, useful, held), _within_held(url, "idle", job, idle, held)
        )
    return {job: metrics for job, metrics in found.items() if job in answers["held"]}
