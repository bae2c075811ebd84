"""The advice for one stack: what `gpuforge plan` and `gpuforge usage` call.

`gpuforge plan` passes no events (a cluster not yet built has no history): the published MTBF.
`gpuforge usage` passes the node events of its window (`sacctmgr show event`, gpuforge.usage.events):
the cluster's own MTBF when the window holds enough gpuforge failures (gpuforge.checkpoint.mtbf).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuforge.checkpoint.advice import CheckpointAdvice, checkpoint_advice
from gpuforge.checkpoint.mtbf import MIN_EVENTS, cluster_or_published
from gpuforge.usage.events import NodeEvent
from gpuforge.usage.window import Window

if TYPE_CHECKING:  # gpuforge.stack_config imports this package
    from gpuforge.stack_config import StackConfig


def stack_advice(
    config: StackConfig,
    events: list[NodeEvent] | None = None,
    window: Window | None = None,
    *,
    min_events: int = MIN_EVENTS,
) -> CheckpointAdvice | None:
    """Young's and Daly's interval and the lost fraction for a job on every node of the stack; None
    without `gpuforge:checkpoint`. The stack config has already refused a checkpoint without a write time."""
    if config.checkpoint is None:
        return None
    mtbf = cluster_or_published(events, window, config.node_count, min_events=min_events)
    return checkpoint_advice(config.checkpoint, config.lustre, config.node_count, mtbf)
