"""The usage report: per group (job, user, team or partition) over the window, as text or JSON.

The JSON keys are a contract (README, "Usage and cost"): `stack`, `window` {`since`, `until`,
`until_requested`, `note`: the window ends at now at the latest, and says so when it was clipped},
`by`, `groups` and `total` (each {`name`, `jobs`, `gpu_seconds_held`, `gpu_hours_held`,
`gpu_hours_metered`, `gpu_hours_useful`, `useful_fraction`, `gpu_hours_idle`, `metrics`, `cost_usd`}), `metrics`
{`source`, `idle_rule`}, `reserved` (null for On-Demand capacity), `failures` (null without an event
history), `records` (what was made of sacct's records: gpuforge.usage.records), `price`
{`usd_per_gpu_hour`, `source`}, `ledger` (the window priced by the capacity ledger,
gpuforge.usage.ledger: {`file`, `cost_lines`, `cost_usd`}, or null with `ledger_note` saying the report
was priced from today's stack file), `checkpoint` (gpuforge.checkpoint's advice, or null
when the stack sets no `gpuforge:checkpoint` or it cannot be computed; `checkpoint_note` says which). A figure that cannot be known is null and its text is "no metrics" or "no price",
never an estimate.

The text view is for a terminal: every line of it passes through gpuforge.display.printable in one
place (render_text), so a user, account or partition name, a price's source or anything else that
came from a file or AWS cannot move the cursor, clear the screen or forge a line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuforge.checkpoint import CheckpointAdvice
from gpuforge.display import printable
from gpuforge.usage.cost import Rate
from gpuforge.usage.events import NodeEvent, interrupted_jobs, node_seconds_lost
from gpuforge.usage.ledger import Period
from gpuforge.usage.metrics import IDLE_SM_ACTIVE, JobMetrics
from gpuforge.usage.records import Records
from gpuforge.usage.reservations import Reserved
from gpuforge.usage.sacct import Job
from gpuforge.usage.window import Window

GROUPINGS: dict[str, Callable[[Job], str]] = {
    "job": lambda job: job.job_id,
    "user": lambda job: job.user,
    "team": lambda job: job.account,  # gpuforge's teams are Slurm accounts
    "partition": lambda job: job.partition,
}
NO_METRICS = "no metrics"
SHOWN_IDS = 20  # job ids a text line lists before it says how many more (--json lists them all)
HELD_RULE = "GPUs (gres/gpu in AllocTRES) x (end - start) of each run, clipped to the window"
IDLE_RULE = (
    f"a minute in which a job's GPUs averaged under {IDLE_SM_ACTIVE:.0%} SM activity "
    "(DCGM_FI_PROF_SM_ACTIVE, the GpuforgeGpuHeldIdle alert's threshold) counts all its held GPU-seconds "
    "of that minute as idle"
)


def _hours(seconds: float) -> float:
    return round(seconds / 3600, 4)


@dataclass
class Group:
    name: str
    job_ids: set[str] = field(default_factory=set)
    gpu_seconds_held: int = 0
    metered: JobMetrics | None = None  # summed over the group's jobs that have series; None: no metrics

    def add_metrics(self, metrics: JobMetrics) -> None:
        base = self.metered or JobMetrics(0.0, 0.0, 0.0)
        self.metered = JobMetrics(
            base.held_s + metrics.held_s, base.useful_s + metrics.useful_s, base.idle_s + metrics.idle_s
        )

    @property
    def useful_fraction(self) -> float | None:
        if self.metered is None or self.metered.held_s <= 0:
            return None
        return self.metered.useful_s / self.metered.held_s

    def to_json(self, rate: Rate) -> dict[str, Any]:
        fraction = self.useful_fraction
        return {
            "name": self.name,
            "jobs": len(self.job_ids),
            "gpu_seconds_held": self.gpu_seconds_held,
            "gpu_hours_held": _hours(self.gpu_seconds_held),
            # The held GPU-hours Prometheus metered: useful_fraction is gpu_hours_useful over this.
            "gpu_hours_metered": None if self.metered is None else _hours(self.metered.held_s),
            "gpu_hours_useful": None if self.metered is None else _hours(self.metered.useful_s),
            "useful_fraction": None if fraction is None else round(fraction, 4),
            "gpu_hours_idle": None if self.metered is None else _hours(self.metered.idle_s),
            "metrics": "prometheus" if self.metered is not None else NO_METRICS,
            "cost_usd": rate.dollars(self.gpu_seconds_held),
        }


@dataclass(frozen=True)
class Failures:
    node_seconds_lost: int
    events: int
    interrupted: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "node_hours_lost": _hours(self.node_seconds_lost),
            "events": self.events,
            "interrupted_jobs": list(self.interrupted),
        }


@dataclass(frozen=True)
class CostLine:
    """One ledger period's part of the window: the GPU-seconds each group held in it, priced at its rate.
    Figures are unrounded, so the lines sum to the total a reader recomputes."""

    period: Period
    span: Window
    held: dict[str, int]  # group name -> GPU-seconds held inside span
    gpu_seconds_held: int

    @property
    def gpu_seconds_reserved(self) -> int:
        return 0 if self.period.kind == "on-demand" else self.period.gpus * self.span.seconds

    @property
    def gpu_seconds_unused(self) -> int:
        return max(0, self.gpu_seconds_reserved - self.gpu_seconds_held) if self.gpu_seconds_reserved else 0

    def cost(self, gpu_seconds: float) -> float:
        return gpu_seconds / 3600 * self.period.usd_per_gpu_hour

    def to_json(self) -> dict[str, Any]:
        return {
            "period": self.period.to_json(),
            "since": self.span.since.isoformat(),
            "until": self.span.until.isoformat(),
            "gpu_seconds_held": self.gpu_seconds_held,
            "usd_per_gpu_hour": self.period.usd_per_gpu_hour,
            "rate_source": self.period.source(),
            "cost_usd": self.cost(self.gpu_seconds_held),
            "gpu_seconds_reserved": self.gpu_seconds_reserved,
            "gpu_seconds_unused": self.gpu_seconds_unused,
            "cost_usd_unused": self.cost(self.gpu_seconds_unused),
        }


@dataclass(frozen=True)
class Ledger:
    """The window priced by the capacity ledger (gpuforge.usage.ledger): one line per period it meets."""

    file: str  # the ledger's name in the stack folder
    lines: tuple[CostLine, ...]


@dataclass(frozen=True)
class UsageReport:
    stack: str
    window: Window
    by: str
    groups: tuple[Group, ...]
    total: Group
    metrics_source: str | None  # the Prometheus URL; None: no metrics
    reserved: Reserved | None
    failures: Failures | None
    rate: Rate
    checkpoint: CheckpointAdvice | None = None
    checkpoint_note: str = ""  # why there is no advice
    records: Records | None = None  # None: no sacct records were screened (a report built by hand)
    until_requested: datetime | None = None  # --until as asked; None: the window's own until
    window_note: str | None = None  # why the window ends before --until
    ledger: Ledger | None = None  # None: priced from today's stack file (`rate`)
    ledger_note: str | None = None  # why there is no ledger, and what that means

    def cost_exact(self, group: Group) -> float | None:
        """`group`'s dollars, unrounded: each ledger line's GPU-seconds at its rate, else at `rate`."""
        if self.ledger is None:
            rate = self.rate.usd_per_gpu_hour
            return None if rate is None else group.gpu_seconds_held / 3600 * rate
        return sum(
            line.cost(line.gpu_seconds_held if group is self.total else line.held.get(group.name, 0))
            for line in self.ledger.lines
        )

    def cost(self, group: Group) -> float | None:
        exact = self.cost_exact(group)
        return None if exact is None else round(exact, 2)

    def unused_cost(self) -> float | None:
        if self.reserved is None:
            return None
        if self.ledger is None:
            return self.rate.dollars(self.reserved.gpu_seconds_unused)
        return round(sum(line.cost(line.gpu_seconds_unused) for line in self.ledger.lines), 2)

    def group_json(self, group: Group) -> dict[str, Any]:
        return {**group.to_json(self.rate), "cost_usd": self.cost(group)}

    def to_json(self) -> dict[str, Any]:
        requested = self.until_requested or self.window.until
        return {
            "stack": self.stack,
            "window": {
                "since": self.window.since.isoformat(),
                "until": self.window.until.isoformat(),
                "until_requested": requested.isoformat(),
                "note": self.window_note,
            },
            "by": self.by,
            "groups": [self.group_json(group) for group in self.groups],
            "total": self.group_json(self.total),
            "metrics": {"source": self.metrics_source or NO_METRICS, "idle_rule": IDLE_RULE},
            "reserved": None
            if self.reserved is None
            else {
                **self.reserved.to_json(),
                "cost_usd_unused": self.unused_cost(),
            },
            "failures": None if self.failures is None else self.failures.to_json(),
            "records": None if self.records is None else {**self.records.to_json(), "held_rule": HELD_RULE},
            "price": self.rate.to_json(),
            "ledger": None
            if self.ledger is None
            else {
                "file": self.ledger.file,
                "cost_lines": [line.to_json() for line in self.ledger.lines],
                "cost_usd": self.cost_exact(self.total),
            },
            **({} if self.ledger is not None else {"ledger_note": self.ledger_note}),
            "checkpoint": None if self.checkpoint is None else self.checkpoint.to_json(),
            **({} if self.checkpoint is not None else {"checkpoint_note": self.checkpoint_note}),
        }


def group_jobs(
    jobs: list[Job], by: str, window: Window, now: datetime, metrics: dict[str, JobMetrics] | None
) -> tuple[list[Group], Group]:
    """Groups by `by` with their GPU-seconds held in the window, and the total; a job's metrics are
    added once per group however many runs (requeues) it had."""
    key = GROUPINGS[by]
    groups: dict[str, Group] = {}
    total = Group("total")
    for job in jobs:
        held = job.held_seconds(window, now)
        if held <= 0:
            continue
        group = groups.setdefault(key(job), Group(key(job)))
        for target in (group, total):
            target.gpu_seconds_held += held
            if metrics is not None and job.job_id in metrics and job.job_id not in target.job_ids:
                target.add_metrics(metrics[job.job_id])
            target.job_ids.add(job.job_id)
    return sorted(groups.values(), key=lambda group: (-group.gpu_seconds_held, group.name)), total


def failures(jobs: list[Job], events: list[NodeEvent] | None, window: Window) -> Failures | None:
    if events is None:
        return None
    hit = interrupted_jobs(jobs, events)
    return Failures(
        node_seconds_lost(events, window),
        len(events),
        tuple(dict.fromkeys(job.job_id for job in hit)),
    )


def _counted(ids: tuple[str, ...]) -> str:
    """`ids` as a count, then which: "0", "1 (job id 6)", "3 (job ids 1, 2, 7)"."""
    if not ids:
        return "0"
    shown = ", ".join(ids[:SHOWN_IDS])
    more = f" and {len(ids) - SHOWN_IDS} more (--json lists all)" if len(ids) > SHOWN_IDS else ""
    return f"{len(ids)} (job id{'s' if len(ids) > 1 else ''} {shown}{more})"


def render_text(report: UsageReport) -> str:
    """The terminal view: one row per group, then the total, reservation, failures, records and the price.
    Each line is escaped here, the one place (names from files and AWS are in them)."""
    header = (
        f"{report.by:<16} {'jobs':>5} {'GPU-h held':>11} {'useful':>11} {'GPU-h idle':>11} {'cost $':>12}"
    )
    lines = [
        f"usage of stack {report.stack}, {report.window.since.isoformat()} to {report.window.until.isoformat()}"
    ]
    if report.window_note is not None:
        lines.append(f"window: {report.window_note}")
    lines.append(header)
    for group in (*report.groups, report.total):
        data = report.group_json(group)
        fraction = NO_METRICS if data["useful_fraction"] is None else f"{data['useful_fraction']:.1%}"
        idle = "-" if data["gpu_hours_idle"] is None else f"{data['gpu_hours_idle']:.2f}"
        cost = "no price" if data["cost_usd"] is None else f"{data['cost_usd']:,.2f}"
        lines.append(
            f"{group.name[:16]:<16} {data['jobs']:>5} {data['gpu_hours_held']:>11.2f} {fraction:>11} {idle:>11} {cost:>12}"
        )
    lines.append(f"GPU-h held: {HELD_RULE}")
    lines.append(f"useful: {report.metrics_source or NO_METRICS}; idle: {IDLE_RULE}")
    if report.reserved is None:
        lines.append("reserved: none (On-Demand capacity)")
    else:
        reserved = report.reserved.to_json()
        unused_cost = report.unused_cost()
        lines.append(
            f"reserved: {reserved['gpu_hours_reserved']:.2f} GPU-h, held {reserved['gpu_hours_held']:.2f}, "
            f"unused {reserved['gpu_hours_unused']:.2f} GPU-h "
            f"({'no price' if unused_cost is None else f'${unused_cost:,.2f}'}); {reserved['note']}"
        )
    if report.failures is None:
        lines.append("failures: no event history (run on the controller, or pass --events FILE)")
    else:
        lines.append(
            f"failures: {_hours(report.failures.node_seconds_lost):.2f} node-hours lost to {report.failures.events} "
            f"node down/drain event(s); jobs interrupted: {_counted(report.failures.interrupted)}"
        )
    if report.records is not None:
        records = report.records
        lines.append(
            f"records: {records.runs} run(s) counted; {records.duplicates_dropped} duplicate record(s) dropped; "
            f"{records.never_started} never started; {records.without_gpus} without GPUs"
        )
        lines.append(
            f"records: still running, counted to the window's end: {_counted(records.running)}; suspended, "
            f"counted as held: {_counted(records.suspended)}; elapsed differs from end - start - suspended: "
            f"{_counted(records.elapsed_mismatch)}"
        )
    lines.extend(_ledger_lines(report))
    rate = report.rate.usd_per_gpu_hour
    lines.append(f"price: {'' if rate is None else f'${rate:,.6f} per GPU-hour: '}{report.rate.source}")
    advice = report.checkpoint
    lines.append(f"checkpoint interval: {report.checkpoint_note if advice is None else advice.line()}")
    return "".join(printable(line) + "\n" for line in lines)


def _ledger_lines(report: UsageReport) -> list[str]:
    """One line per ledger period the window meets, then their sum: the total a reader recomputes."""
    if report.ledger is None:
        return [] if report.ledger_note is None else [f"ledger: {report.ledger_note}"]
    lines = []
    for line in report.ledger.lines:
        lines.append(
            f"cost line: {line.period.name}, {line.span.since.isoformat()} to {line.span.until.isoformat()}: "
            f"{line.gpu_seconds_held / 3600:.4f} GPU-h held x ${line.period.usd_per_gpu_hour:,.6f}/GPU-h = "
            f"${line.cost(line.gpu_seconds_held):,.2f} ({line.period.source()})"
        )
    total = report.cost_exact(report.total) or 0.0
    lines.append(
        f"cost total: ${total:,.2f}, the sum of the {len(report.ledger.lines)} line(s) ({report.ledger.file})"
    )
    return lines
