"""The acceptance run after `pulumi up`: NCCL and DCGM jobs judged against per-type floors.

`nccl` and `dcgm` parse the tools' own text output; `floors` reads the expected bus
bandwidth per instance type from the hardware catalog; `report` judges and renders;
`search` finds the nodes that hold a cluster below its floor; `slurm` submits the jobs.
"""

from gpuforge.validate.search import SearchResult, find_slow_nodes

__all__ = ["SearchResult", "find_slow_nodes"]
