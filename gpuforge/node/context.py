"""What a check may look at: the instance type's facts, the manifest, commands and files.

Every check is a function of a `NodeContext`. Commands go through its runner
and files are read below its `HostPaths.root`, so a test can point a check at
recorded outputs and a temporary directory tree instead of a real GPU node.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpuforge.hardware import InstanceType
from gpuforge.loading import read_bytes
from gpuforge.node.manifest import Manifest
from gpuforge.node.runner import CachedRunner

# EFA devices can come up after user data starts on some types: retry briefly.
EFA_ATTEMPTS = 5
EFA_RETRY_DELAY_S = 3.0
# Kernel files the checks read (/proc/mounts on a node with many mounts is the largest, some KiB):
# the cap only bounds a wrong --root or a file that is not the kernel's.
KERNEL_FILE_MAX_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class HostPaths:
    """Kernel interfaces the checks read and the agent's own state files, all below `root` (`/` on a node)."""

    root: Path = Path("/")

    @property
    def driver_version(self) -> Path:
        return self.root / "proc/driver/nvidia/version"

    @property
    def mounts(self) -> Path:
        return self.root / "proc/mounts"

    @property
    def mdstat(self) -> Path:
        return self.root / "proc/mdstat"

    @property
    def infiniband(self) -> Path:
        return self.root / "sys/class/infiniband"

    @property
    def block(self) -> Path:
        return self.root / "sys/block"

    @property
    def boot_pass_marker(self) -> Path:
        """Written when the boot gate passes; slurmd's drop-in (slurmd-gpuforge.conf) starts only if it exists.

        /run is emptied at every boot, so the marker speaks for this boot only.
        """
        return self.root / "run/gpuforge/node-check.passed"

    @property
    def slurm_drain_record(self) -> Path:
        """--slurm's memory of its own drain; under /var/lib so that it survives a reboot of the node."""
        return self.root / "var/lib/gpuforge/slurm-drain.json"

    def read(self, path: Path) -> str | None:
        """A kernel file's text, or None when it is absent, unreadable, not a regular file or too large.

        Read through gpuforge.loading.read_bytes, so a FIFO or device at the path cannot block the
        check. Links are followed: /proc/mounts is one (to self/mounts).
        """
        try:
            return read_bytes(path, max_bytes=KERNEL_FILE_MAX_BYTES).decode("utf-8", errors="replace")
        except (OSError, ValueError):
            return None


@dataclass(frozen=True)
class NodeContext:
    instance: InstanceType
    manifest: Manifest
    run: CachedRunner
    paths: HostPaths = HostPaths()
    require_fsx: bool = False
    efa_attempts: int = EFA_ATTEMPTS
    efa_retry_delay_s: float = EFA_RETRY_DELAY_S
    sleep: Callable[[float], None] = time.sleep


def expects_efa(instance: InstanceType) -> bool:
    """The cluster attaches every EFA interface a type has; types without EFA get none."""
    return instance.efa_supported and instance.max_efa_interfaces > 0


def expects_gpu_nic_locality(instance: InstanceType) -> bool:
    """Whether the type is built with EFA NICs beside its GPUs for GPUDirect RDMA.

    gpuforge's rule, derived from the hardware catalog rather than a list of
    names: the NVSwitch (HGX) types that carry EFA (p4d and later) are built
    with NICs on the GPUs' PCIe switches; PCIe-only types (g5, g6, g6e) are not.
    """
    return expects_efa(instance) and instance.nvswitch
