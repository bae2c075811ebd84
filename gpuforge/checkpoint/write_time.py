"""How long one checkpoint takes to write to /fsx: a measured time, or the file system's throughput.

Units: a checkpoint's size is in GiB (2^30 bytes, as `sizeGiB` says); FSx for Lustre's throughput is in
MB/s, which AWS counts in decimal megabytes (10^6 bytes), and its storage TiB as GiB / 1000 (its own
example: 2400 GiB at 50 MB/s/TiB is 120 MB/s). The baseline figure is
`components.lustre_rules.baseline_throughput_mbps`, the same one `gpuforge plan` shows for the file system.

The estimate assumes the job's writers together reach the file system's baseline throughput (enough
nodes and files to spread over its servers) and nothing else writes at the time; bursts above the
baseline are not counted. A measured `writeSeconds` replaces it.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuforge.components.lustre_rules import baseline_throughput_mbps
from gpuforge.components.specs import LustreSpec

GIB = 2**30  # bytes
MB = 10**6  # bytes: AWS's MB/s


@dataclass(frozen=True)
class WriteTime:
    seconds: float
    source: str  # what the figure came from, for people


def estimate(size_gib: float, lustre: LustreSpec) -> WriteTime | None:
    """The write time at the file system's baseline throughput; None where AWS gives no per-TiB figure."""
    mbps = baseline_throughput_mbps(lustre)
    if not mbps:
        return None
    seconds = size_gib * GIB / (mbps * MB)
    return WriteTime(
        seconds=seconds,
        source=f"the Lustre baseline {mbps} MB/s "
        f"({lustre.storage_capacity_gib} GiB x {lustre.throughput_per_tib or 'SCRATCH_2 200'} MB/s/TiB)",
    )


def measured(seconds: float) -> WriteTime:
    return WriteTime(seconds=seconds, source="measured (writeSeconds)")
