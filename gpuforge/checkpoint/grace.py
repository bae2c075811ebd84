"""A preempted QOS's grace period beside the checkpoint advice: whether a preempted job can save its state.

A job of a QOS with `gracePeriod` gets SIGTERM when it is preempted and that many seconds before it is requeued
(Slurm's QOS GraceTime; the pods' terminationGracePeriodSeconds on Kubernetes). A job that writes its checkpoint
on SIGTERM, and can write it within the grace, loses at most the grace's GPU time; one that cannot loses the
work since its last scheduled checkpoint, up to the checkpoint interval the advisor gives (Daly's). `gpuforge
plan` prints one line per preempted QOS, and an advice line where the checkpoint does not fit its grace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuforge.checkpoint.advice import KEY, CheckpointAdvice, duration

if TYPE_CHECKING:
    from gpuforge.components.specs import QosSpec


@dataclass(frozen=True)
class GraceAdvice:
    """One preempted QOS: its grace, who preempts it, and the stack's checkpoint advice (None without one)."""

    qos: str
    grace_seconds: int | None  # None: requeued at once
    preempted_by: tuple[str, ...]
    checkpoint: CheckpointAdvice | None

    @property
    def saves_in_grace(self) -> bool | None:
        """Whether the checkpoint's write fits the grace; None when the stack gives no checkpoint."""
        if self.checkpoint is None:
            return None
        return self.grace_seconds is not None and self.checkpoint.write_seconds <= self.grace_seconds

    def line(self) -> str:
        """The plan's line: the grace, and what a preempted job loses with the stack's checkpoint."""
        who = f"{self.qos} (preempted by {', '.join(self.preempted_by)})"
        grace = (
            f"SIGTERM, then {self.grace_seconds} s before the requeue"
            if self.grace_seconds is not None
            else "requeued at once, no SIGTERM first (no gracePeriod)"
        )
        advice = self.checkpoint
        if advice is None:
            return f"{who}: {grace}; set {KEY} to see whether a checkpoint fits it"
        interval = duration(advice.daly_seconds)
        if self.saves_in_grace:
            return (
                f"{who}: {grace}; the {advice.size_gib:g} GiB checkpoint writes in {advice.write_seconds:.0f} s, so a "
                f"job that saves on SIGTERM loses at most the grace, not up to its {interval} checkpoint interval"
            )
        return f"{who}: {grace}; a preempted job loses up to its {interval} checkpoint interval (Daly)"

    def warning(self) -> str | None:
        """Advice where a grace is set but the checkpoint's write does not fit it."""
        advice = self.checkpoint
        if advice is None or self.grace_seconds is None or self.saves_in_grace:
            return None
        return (
            f"QOS {self.qos}: its gracePeriod ({self.grace_seconds} s) is shorter than writing the {advice.size_gib:g} "
            f"GiB checkpoint ({advice.write_seconds:.0f} s, {advice.write_source}), so a preempted job cannot save "
            f"on SIGTERM and loses up to its {duration(advice.daly_seconds)} checkpoint interval. Fix: set "
            f"gracePeriod to at least {_whole_seconds(advice.write_seconds)}, or make the checkpoint write faster"
        )

    def to_json(self) -> dict[str, Any]:
        """The plan's `preemption` entries (README, "Preemption with a grace period")."""
        advice = self.checkpoint
        return {
            "qos": self.qos,
            "preempted_by": list(self.preempted_by),
            "grace_seconds": self.grace_seconds,
            "checkpoint_write_seconds": None if advice is None else round(advice.write_seconds, 1),
            "checkpoint_interval_seconds": None if advice is None else round(advice.daly_seconds),
            "saves_in_grace": self.saves_in_grace,
        }


def _whole_seconds(seconds: float) -> int:
    return int(-(-seconds // 1))


def grace_advice(qos: Sequence[QosSpec], checkpoint: CheckpointAdvice | None) -> list[GraceAdvice]:
    """One entry per QOS that another preempts, in the stack's order; [] when nothing is preempted."""
    return [
        GraceAdvice(
            qos=level.name,
            grace_seconds=level.grace_period,
            preempted_by=tuple(other.name for other in qos if level.name in other.preempts),
            checkpoint=checkpoint,
        )
        for level in qos
        if any(level.name in other.preempts for other in qos)
    ]
