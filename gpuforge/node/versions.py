"""Version and module checks: kernel driver vs user-space driver vs the manifest.

A driver upgrade that replaces the user-space libraries but not the loaded
kernel module is the classic outage: nvidia-smi then fails with "Driver/library
version mismatch" on every node that took the upgrade. The loaded module's
version is in /proc/driver/nvidia/version; its first line also says whether it
is the open or the proprietary flavour:

    NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build  (...)
    NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.06  Wed Jun 26 06:46:07 UTC 2024
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuforge.node.context import NodeContext, expects_efa
from gpuforge.node.gpus import gpu_query
from gpuforge.node.nvidia_smi import is_version_mismatch, nvml_library_version
from gpuforge.node.report import CheckResult, failed, passed

LSMOD = ("lsmod",)
UNAME = ("uname", "-r")
_NVRM = re.compile(
    r"NVRM version:\s+NVIDIA UNIX\s+(?P<open>Open Kernel Module for \S+|\S+ Kernel Module)\s+"
    r"(?P<version>\d+\.\d+(?:\.\d+)?)"
)


@dataclass(frozen=True)
class LoadedDriver:
    version: str
    flavor: str  # "open" or "proprietary", the manifest's words


def parse_driver_version(text: str) -> LoadedDriver | None:
    match = _NVRM.search(text)
    if match is None:
        return None
    flavor = "open" if match.group("open").startswith("Open") else "proprietary"
    return LoadedDriver(match.group("version"), flavor)


def loaded_driver(ctx: NodeContext) -> LoadedDriver | None:
    text = ctx.paths.read(ctx.paths.driver_version)
    return parse_driver_version(text) if text is not None else None


def parse_lsmod(text: str) -> dict[str, str]:
    """Module name -> its "Used by" column, from `lsmod` (header line skipped)."""
    modules: dict[str, str] = {}
    for line in text.splitlines()[1:]:
        parts = line.split(None, 2)
        if len(parts) == 3:
            modules[parts[0]] = parts[2]
    return modules


def check_driver_versions(ctx: NodeContext) -> CheckResult:
    check_id = "driver.versions"
    pinned = ctx.manifest.nvidia_driver
    loaded = loaded_driver(ctx)
    if loaded is None:
        return failed(
            check_id,
            f"{ctx.paths.driver_version} is absent or unreadable (manifest pins {pinned})",
            "the nvidia kernel module is not loaded: not a GPU node, or the module failed to build or load "
            "for this kernel (DKMS)",
        )
    query, result = gpu_query(ctx)
    output = result.stdout + result.stderr
    if is_version_mismatch(output):
        library = nvml_library_version(output) or "unknown"
        return failed(
            check_id,
            f"kernel module {loaded.version}, user-space NVML {library}: nvidia-smi reports "
            f"'Driver/library version mismatch' (manifest pins {pinned})",
            "the driver packages were upgraded without reloading the kernel module (no reboot after the "
            "upgrade); the node must be rebuilt from the pinned image",
        )
    if query is None:
        return failed(
            check_id,
            f"kernel module {loaded.version}; user-space driver unknown: {result.failure()}",
            "the user-space driver (nvidia-smi, NVML) is missing or broken",
        )
    user_space = sorted({row.driver_version or "unknown" for row in query.rows})
    problems: list[str] = []
    if user_space != [loaded.version]:
        problems.append(
            f"user-space driver {', '.join(user_space)} differs from kernel module {loaded.version}"
        )
    if loaded.version != pinned:
        problems.append(f"loaded driver {loaded.version} differs from the manifest's pin {pinned}")
    if loaded.flavor != ctx.manifest.kernel_modules:
        problems.append(f"{loaded.flavor} kernel modules loaded, manifest pins {ctx.manifest.kernel_modules}")
    if problems:
        return failed(
            check_id,
            "; ".join(problems),
            "the node is not running the driver its image was built and tested with (a package update "
            "after the image was built, or a DKMS rebuild of the other flavour)",
        )
    return passed(
        check_id,
        f"kernel module {loaded.version} ({loaded.flavor}) = user-space {loaded.version} = manifest {pinned}",
    )


def check_image(ctx: NodeContext) -> CheckResult:
    """The image was built for this instance type and boots the kernel it pins."""
    check_id = "image.manifest"
    manifest = ctx.manifest
    problems: list[str] = []
    if ctx.instance.name not in manifest.targets:
        problems.append(
            f"{ctx.instance.name} is not among the image's targets ({', '.join(manifest.targets)})"
        )
    uname = ctx.run(UNAME)
    running = uname.stdout.strip() if uname.ok else None
    if running is None:
        problems.append(f"running kernel unknown: {uname.failure()}")
    elif running != manifest.kernel:
        problems.append(f"running kernel {running}, manifest pins {manifest.kernel}")
    identity = f"matrix {manifest.matrix_name} {manifest.matrix_version} ({manifest.matrix_digest})"
    if problems:
        return failed(
            check_id,
            f"{'; '.join(problems)}; {identity}",
            "the launch template uses an image built for other types, or the kernel changed after the "
            "image was built (an unattended upgrade), so the pinned modules may not match it",
        )
    return passed(check_id, f"{identity} targets {ctx.instance.name}; kernel {running}")


def check_modules(ctx: NodeContext) -> CheckResult:
    check_id = "kernel.modules"
    required = ["nvidia", "nvidia_uvm"] + (["efa"] if expects_efa(ctx.instance) else [])
    result = ctx.run(LSMOD)
    if not result.ok:
        return failed(
            check_id,
            f"cannot list kernel modules: {result.failure()} (required: {', '.join(required)})",
            "lsmod (kmod) is missing: not a standard Linux node image",
        )
    modules = parse_lsmod(result.stdout)
    missing = [name for name in required if name not in modules]
    note = ""
    if "nvidia_peermem" in modules:
        note = "; nvidia_peermem is loaded but unused by EFA (it is InfiniBand's peer-memory client)"
    if missing:
        causes = {
            "nvidia": "the NVIDIA driver did not load (not a GPU node, or no module for this kernel)",
            "nvidia_uvm": "CUDA's unified-memory module is not loaded (nvidia-modprobe did not run)",
            "efa": "the EFA driver is not loaded: EFA installer missing, or no EFA interface attached",
        }
        return failed(
            check_id,
            f"missing: {', '.join(missing)}; loaded: {', '.join(n for n in required if n in modules) or 'none'}{note}",
            "; ".join(causes[name] for name in missing),
        )
    return passed(check_id, f"loaded: {', '.join(required)}{note}")
