"""Service checks: nvidia-persistenced, NVIDIA Fabric Manager and the NVLink Subnet Manager.

On NVSwitch (HGX) types the GPUs reach each other only after Fabric Manager
has programmed the switches, and Fabric Manager refuses to start unless its
version equals the loaded driver's exactly (compat_facts.yaml, fabric_manager
version_rule). Hopper and later GPUs report the fabric registration in
`nvidia-smi -q` ("Fabric / State: Completed, Status: Success"); A100's fabric
state probe is not supported, so it prints N/A even when healthy.
Source: NVML nvmlGpuFabricInfo_t, https://docs.nvidia.com/deploy/nvml-api/structnvmlGpuFabricInfo__t.html
On NVLink 5 (B200 and later) Fabric Manager also needs NVLSM; its start script
launches the `nvlsm` daemon, so the process is what is checked (secondary
sources: NVIDIA driver-container and installer scripts, compat_facts.yaml).
"""

from __future__ import annotations

import re

from gpuforge.node.context import NodeContext
from gpuforge.node.gpus import gpu_details
from gpuforge.node.report import CheckResult, failed, passed
from gpuforge.node.versions import loaded_driver

FABRICMANAGER_UNIT = "nvidia-fabricmanager"
PERSISTENCED_UNIT = "nvidia-persistenced"
FABRICMANAGER_VERSION = ("nv-fabricmanager", "--version")
NVLSM_PROCESS = ("pgrep", "-x", "nvlsm")
_FM_VERSION = re.compile(r"Fabric Manager version is\s*:\s*(\S+)")
# GPU architectures whose fabric state probe is unsupported: nvidia-smi prints N/A.
FABRIC_STATE_NOT_REPORTED = frozenset({"Ampere"})


def is_active_argv(unit: str) -> tuple[str, ...]:
    return ("systemctl", "is-active", unit)


def unit_state(ctx: NodeContext, unit: str) -> tuple[str | None, str]:
    """The unit's state word ("active", "failed", ...) or None, and why it is None."""
    result = ctx.run(is_active_argv(unit))
    if result.missing or result.timed_out:
        return None, result.failure()
    words = result.stdout.split()
    return (words[0] if words else None), result.failure()


def parse_fabricmanager_version(text: str) -> str | None:
    match = _FM_VERSION.search(text)
    return match.group(1) if match else None


def check_persistenced(ctx: NodeContext) -> CheckResult:
    check_id = "service.persistenced"
    state, why = unit_state(ctx, PERSISTENCED_UNIT)
    if state == "active":
        return passed(check_id, f"{PERSISTENCED_UNIT} is active")
    return failed(
        check_id,
        f"{PERSISTENCED_UNIT} is {state}" if state else f"{PERSISTENCED_UNIT} state unknown: {why}",
        "without the persistence daemon the driver tears GPU state down between jobs, and every job "
        "start pays GPU initialisation; the image did not enable the service or the driver is missing",
    )


def check_fabricmanager(ctx: NodeContext) -> CheckResult:
    check_id = "fabric.manager"
    instance = ctx.instance
    if not instance.nvswitch:
        return passed(check_id, f"{instance.name} has no NVSwitch; Fabric Manager is not needed")
    problems: list[str] = []
    facts: list[str] = []
    state, why = unit_state(ctx, FABRICMANAGER_UNIT)
    if state != "active":
        problems.append(
            f"{FABRICMANAGER_UNIT} is {state}" if state else f"{FABRICMANAGER_UNIT} state unknown: {why}"
        )
    else:
        facts.append(f"{FABRICMANAGER_UNIT} active")

    loaded = loaded_driver(ctx)
    version_result = ctx.run(FABRICMANAGER_VERSION)
    fm_version = parse_fabricmanager_version(version_result.stdout + version_result.stderr)
    version_problems: list[str] = []
    if fm_version is None:
        version_problems.append(f"Fabric Manager version unknown: {version_result.failure()}")
    else:
        if loaded is None:
            version_problems.append(f"Fabric Manager {fm_version}, but no loaded driver to compare with")
        elif fm_version != loaded.version:
            version_problems.append(
                f"Fabric Manager {fm_version} differs from the loaded driver {loaded.version}"
            )
        if fm_version != ctx.manifest.fabricmanager:
            version_problems.append(
                f"Fabric Manager {fm_version} differs from the manifest's pin {ctx.manifest.fabricmanager}"
            )
    if version_problems:
        problems.extend(version_problems)
    else:
        facts.append(f"version {fm_version} = loaded driver = manifest")

    details, result = gpu_details(ctx)
    if details is None:
        problems.append(f"fabric state unknown: {result.failure()}")
    else:
        not_reported_ok = instance.gpu_architecture in FABRIC_STATE_NOT_REPORTED
        incomplete: list[str] = []
        for gpu in details.gpus:
            fabric_state = gpu.get("Fabric", "State") or "missing"
            status = gpu.get("Fabric", "Status") or "missing"
            if fabric_state == "Completed" and status == "Success":
                continue
            if fabric_state == "N/A" and not_reported_ok:
                continue
            incomplete.append(f"{gpu.bus_id} {fabric_state}/{status}")
        if incomplete:
            problems.append(f"fabric registration incomplete: {', '.join(incomplete)}")
        elif not_reported_ok:
            facts.append(
                f"fabric state N/A on {len(details.gpus)} {instance.gpu_architecture} GPU(s), as expected"
            )
        else:
            facts.append(f"fabric Completed/Success on {len(details.gpus)} GPU(s)")
    if problems:
        return failed(
            check_id,
            "; ".join(problems),
            "without a running Fabric Manager of the driver's exact version the NVSwitch fabric is not "
            "programmed and GPU-to-GPU NVLink traffic (and CUDA init) fails; check `journalctl -u "
            "nvidia-fabricmanager` for a version mismatch or a failed GPU",
        )
    return passed(check_id, "; ".join(facts))


def check_nvlsm(ctx: NodeContext) -> CheckResult:
    check_id = "fabric.nvlsm"
    instance = ctx.instance
    if not instance.needs_nvlsm:
        return passed(check_id, f"{instance.name} does not need the NVLink Subnet Manager")
    problems: list[str] = []
    if ctx.manifest.nvlsm is None:
        problems.append("the manifest pins no nvlsm component")
    result = ctx.run(NVLSM_PROCESS)
    pids = result.stdout.split() if result.ok else []
    if not pids:
        problems.append(
            "no nvlsm process running"
            if result.returncode == 1
            else f"nvlsm state unknown: {result.failure()}"
        )
    if problems:
        return failed(
            check_id,
            "; ".join(problems),
            "NVLink 5 systems need NVLSM beside Fabric Manager; without it Fabric Manager cannot bring the "
            "fabric up and CUDA reports the system not ready",
        )
    return passed(check_id, f"nvlsm running (pid {', '.join(pids)}), manifest pins {ctx.manifest.nvlsm}")
