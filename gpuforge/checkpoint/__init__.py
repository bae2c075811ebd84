"""The checkpoint interval that follows the cluster (README, "Checkpoint interval").

From `gpuforge:checkpoint` (size, optional measured write time), the stack's Lustre throughput and the
mean time between node failures (the cluster's drain history, else a published figure), Young's and
Daly's interval and the fraction of GPU time lost. `gpuforge plan` and `gpuforge usage` both call
`stack_advice` (gpuforge.checkpoint.stack).
"""

from gpuforge.checkpoint.advice import CheckpointAdvice, check, checkpoint_advice
from gpuforge.checkpoint.mtbf import Mtbf, cluster_or_published, from_history, published
from gpuforge.checkpoint.spec import CheckpointSpec
from gpuforge.checkpoint.stack import stack_advice

__all__ = [
    "CheckpointAdvice",
    "CheckpointSpec",
    "Mtbf",
    "check",
    "checkpoint_advice",
    "cluster_or_published",
    "from_history",
    "published",
    "stack_advice",
]
