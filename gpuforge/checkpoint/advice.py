"""The checkpoint advice `gpuforge plan` and `gpuforge usage` print: Young's and Daly's interval for the
stack's checkpoint, and the fraction of GPU time lost at Daly's.

`checkpoint_advice` is the one computation both commands call; `check` is the plan-time rule (a refusal
when no interval can make progress, exit 2), run when the stack config is read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gpuforge.checkpoint import interval, write_time
from gpuforge.checkpoint.mtbf import Mtbf
from gpuforge.checkpoint.spec import CheckpointSpec
from gpuforge.components.specs import LustreSpec
from gpuforge.errors import InputError

KEY = "gpuforge:checkpoint"
# Above this lost fraction the advice carries a warning. A choice, not a published figure: a tenth of
# the GPU time is where Meta's Llama 3 run sat ("higher than 90% effective training time", arXiv
# 2407.21783, section 3.3.4) with every other loss included, so checkpointing alone should stay below.
WARN_LOST_FRACTION = 0.10
FIX_FASTER = (
    "make the checkpoint smaller (shard it, drop the optimizer state from some saves), write it faster "
    "(raise gpuforge:lustre.throughputPerTiB or storageCapacityGiB), or run the job on fewer nodes"
)


@dataclass(frozen=True)
class CheckpointAdvice:
    """All times in seconds. `restart_seconds` is taken as one write time: a restart reads the same
    checkpoint back at the same throughput (job requeue and start-up come on top, uncounted)."""

    size_gib: float
    write_seconds: float
    write_source: str
    nodes: int
    mtbf_node_seconds: float
    mtbf_job_seconds: float
    mtbf_source: str
    young_seconds: float
    daly_seconds: float
    restart_seconds: float
    lost_fraction: float  # at Daly's interval, first-order model (gpuforge.checkpoint.interval)
    warning: str | None

    def to_json(self) -> dict[str, Any]:
        """The JSON form (a contract once written; README "Checkpoint interval")."""
        return {
            "size_gib": self.size_gib,
            "write_seconds": round(self.write_seconds, 1),
            "write_source": self.write_source,
            "nodes": self.nodes,
            "mtbf_node_hours": round(self.mtbf_node_seconds / 3600, 1),
            "mtbf_job_hours": round(self.mtbf_job_seconds / 3600, 2),
            "mtbf_source": self.mtbf_source,
            "young_seconds": round(self.young_seconds),
            "daly_seconds": round(self.daly_seconds),
            "lost_fraction": round(self.lost_fraction, 4),
            "warning": self.warning,
        }

    def line(self) -> str:
        """The same as one line (`gpuforge usage`'s text report)."""
        return "; ".join(self.lines())

    def lines(self) -> list[str]:
        """The summary's lines: the interval and the loss, the write, the MTBF, and any warning."""
        lines = [
            f"every {duration(self.daly_seconds)} (Daly; Young {duration(self.young_seconds)}), "
            f"~{self.lost_fraction:.1%} of GPU time lost",
            f"write {self.size_gib:g} GiB in {self.write_seconds:.0f} s: {self.write_source}",
            f"job MTBF {self.mtbf_job_seconds / 3600:.1f} h on {self.nodes} node(s), "
            f"{self.mtbf_node_seconds / 3600:.1f} h per node: {self.mtbf_source}",
        ]
        return lines if self.warning is None else [*lines, f"WARNING: {self.warning}"]


def duration(seconds: float) -> str:
    """Seconds as a person reads them: seconds below two minutes, minutes below two hours, then hours."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class NoWriteTime(InputError):
    """Neither a measured write time nor a Lustre throughput to estimate one from."""


def _write_time(spec: CheckpointSpec, lustre: LustreSpec | None) -> write_time.WriteTime:
    if spec.write_seconds is not None:
        return write_time.measured(spec.write_seconds)
    estimate = None if lustre is None else write_time.estimate(spec.size_gib, lustre)
    if estimate is None:
        has = "no gpuforge:lustre" if lustre is None else f"a {lustre.deployment_type} file system"
        raise NoWriteTime(
            f"{KEY}.sizeGiB = {spec.size_gib:g}: the stack has {has}, so there is no throughput to estimate "
            f"the write time from. Fix: set {KEY}.writeSeconds to a measured write time, or give the stack "
            "a PERSISTENT gpuforge:lustre with throughputPerTiB."
        )
    if not math.isfinite(estimate.seconds):
        raise InputError(
            f"{KEY}.sizeGiB = {spec.size_gib:g}: too large to write in any finite time. "
            "Fix: give the checkpoint's size in GiB (a 70B-parameter model with Adam is about 1043)."
        )
    return estimate


def checkpoint_advice(
    spec: CheckpointSpec, lustre: LustreSpec | None, nodes: int, mtbf: Mtbf
) -> CheckpointAdvice:
    """The intervals and the lost fraction for a job on `nodes` nodes; NoWriteTime without a write time."""
    write = _write_time(spec, lustre)
    delta = write.seconds
    job_mtbf = mtbf.job_seconds(nodes)
    young = interval.young_interval(delta, job_mtbf)
    daly = interval.daly_interval(delta, job_mtbf)
    lost = interval.lost_fraction(daly, delta, job_mtbf, restart_s=delta)
    warning = None
    if interval.beyond_mtbf(delta, job_mtbf):
        warning = (
            f"the write ({delta:.0f} s) is half the job's MTBF ({job_mtbf:.0f} s) or more, so Young's interval "
            f"would exceed the MTBF and no interval makes progress. Fix: {FIX_FASTER}"
        )
    elif lost > WARN_LOST_FRACTION:
        warning = (
            f"{KEY}: {lost:.1%} of GPU time would be lost to checkpoints and recomputation "
            f"(over {WARN_LOST_FRACTION:.0%}). Fix: {FIX_FASTER}"
        )
    return CheckpointAdvice(
        size_gib=spec.size_gib,
        write_seconds=delta,
        write_source=write.source,
        nodes=nodes,
        mtbf_node_seconds=mtbf.node_seconds,
        mtbf_job_seconds=job_mtbf,
        mtbf_source=mtbf.source,
        young_seconds=young,
        daly_seconds=daly,
        restart_seconds=delta,
        lost_fraction=lost,
        warning=warning,
    )


def check(spec: CheckpointSpec, lustre: LustreSpec | None, nodes: int, mtbf: Mtbf) -> CheckpointAdvice:
    """The plan-time rule: refuse (InputError, exit 2) a checkpoint no interval can make progress with
    on a job over all `nodes` nodes; a large lost fraction stays a warning in the advice."""
    advice = checkpoint_advice(spec, lustre, nodes, mtbf)
    if interval.beyond_mtbf(advice.write_seconds, advice.mtbf_job_seconds):
        raise InputError(
            f"{KEY}: writing {spec.size_gib:g} GiB takes {advice.write_seconds:.0f} s ({advice.write_source}), "
            f"half or more of the mean time between failures of a job on all {nodes} nodes "
            f"({advice.mtbf_job_seconds:.0f} s; {advice.mtbf_source}): Young's interval "
            f"({advice.young_seconds:.0f} s) would exceed the MTBF, and the job would lose all its GPU time. "
            f"Fix: {FIX_FASTER}."
        )
    return advice
