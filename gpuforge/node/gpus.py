"""GPU checks: count and model, uncorrectable ECC, row remapping, throttling at idle.

The instance type's GPU count and model come from the hardware catalog; the
node's come from `nvidia-smi`. A100 and later GPUs repair memory by remapping
rows (not by retiring pages), so the remapper's pending and failure flags are
what show a GPU that needs a reset or a replacement.
Source: NVIDIA A100 GPU Memory Error Management, "Error Recovery and Response
Flags", https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html
"""

from __future__ import annotations

import re

from gpuforge.node.context import NodeContext
from gpuforge.node.nvidia_smi import (
    GPU_DETAILS,
    GPU_QUERY,
    DetailsReport,
    NvidiaSmiFormatError,
    QueryResult,
    is_version_mismatch,
    parse_details,
    parse_query_csv,
)
from gpuforge.node.report import CheckResult, failed, passed, warned
from gpuforge.node.runner import CommandResult

NO_DRIVER = (
    "nvidia-smi is absent: this is not a GPU node, or the NVIDIA driver is not installed "
    "(an image built without the driver, or the wrong AMI)"
)


def _smi_cause(result: CommandResult) -> str:
    if result.missing:
        return NO_DRIVER
    if is_version_mismatch(result.stdout + result.stderr):
        return (
            "the loaded kernel module and the user-space driver differ (driver packages changed "
            "without a reboot); see driver.versions"
        )
    return "nvidia-smi cannot talk to the driver: the driver failed to load or a GPU is in a bad state"


def gpu_query(ctx: NodeContext) -> tuple[QueryResult | None, CommandResult]:
    """The `--query-gpu` CSV, parsed, or None when it gave no rows."""
    result = ctx.run(GPU_QUERY)
    if result.missing or result.timed_out:
        return None, result
    try:
        parsed = parse_query_csv(result.stdout)
    except NvidiaSmiFormatError:
        return None, result
    return (parsed if parsed.rows else None), result


def gpu_details(ctx: NodeContext) -> tuple[DetailsReport | None, CommandResult]:
    result = ctx.run(GPU_DETAILS)
    if not result.ok:
        return None, result
    try:
        return parse_details(result.stdout), result
    except NvidiaSmiFormatError:
        return None, result


def model_matches(catalog_model: str, reported_name: str) -> bool:
    """`H100` matches "NVIDIA H100 80GB HBM3" and `A100` "NVIDIA A100-SXM4-40GB", but `L4` not "NVIDIA L40S"."""
    tokens = {token.upper() for token in re.split(r"[^A-Za-z0-9]+", reported_name) if token}
    return catalog_model.upper() in tokens


def check_inventory(ctx: NodeContext) -> CheckResult:
    check_id = "gpu.inventory"
    expected = ctx.instance
    query, result = gpu_query(ctx)
    if query is None:
        return failed(check_id, f"no GPU list: {result.failure()}", _smi_cause(result))
    names = sorted({row.name for row in query.rows})
    seen = f"{len(query.rows)} GPU(s): {', '.join(names)}"
    problems: list[str] = []
    if len(query.rows) != expected.gpu_count:
        problems.append(f"{len(query.rows)} of {expected.gpu_count} GPUs visible")
    wrong = [row for row in query.rows if not model_matches(expected.gpu_model, row.name)]
    if wrong:
        problems.append(
            f"GPU(s) {', '.join(row.index for row in wrong)} are not {expected.gpu_model}: "
            f"{', '.join(sorted({row.name for row in wrong}))}"
        )
    if query.stray_lines:
        problems.append("nvidia-smi also printed: " + " | ".join(query.stray_lines))
    if problems:
        return failed(
            check_id,
            f"{'; '.join(problems)} (expected {expected.gpu_count} x {expected.gpu_model} on {expected.name})",
            "a GPU has fallen off the bus or failed to initialise (see the xid check for Xid 79), or the "
            "instance is not the type expected; the node must be replaced",
        )
    return passed(check_id, f"{seen} (expected {expected.gpu_count} x {expected.gpu_model})")


def check_ecc(ctx: NodeContext) -> CheckResult:
    check_id = "gpu.ecc"
    query, result = gpu_query(ctx)
    if query is None:
        return failed(check_id, f"no ECC counters: {result.failure()}", _smi_cause(result))
    bad = [row for row in query.rows if row.ecc_uncorrected]
    if bad:
        detail = ", ".join(f"GPU {row.index} ({row.bus_id}): {row.ecc_uncorrected}" for row in bad)
        return failed(
            check_id,
            f"uncorrectable ECC errors since the driver loaded: {detail}",
            "GPU memory returned uncorrectable errors; the GPU needs a reset and, if they recur, the node "
            "needs replacing",
        )
    unknown = [row.index for row in query.rows if row.ecc_uncorrected is None]
    if unknown:
        return warned(
            check_id,
            f"ECC counters not reported for GPU(s) {', '.join(unknown)}",
            "ECC is disabled or not supported on these GPUs, so memory errors go unseen",
        )
    return passed(check_id, f"0 uncorrectable ECC errors on {len(query.rows)} GPU(s)")


def check_row_remapping(ctx: NodeContext) -> CheckResult:
    check_id = "gpu.row_remapping"
    details, result = gpu_details(ctx)
    if details is None:
        return failed(check_id, f"no row-remapper state: {result.failure()}", _smi_cause(result))
    failures: list[str] = []
    pending: list[str] = []
    unsupported: list[str] = []
    for gpu in details.gpus:
        if gpu.get("Remapped Rows") is not None:
            unsupported.append(gpu.bus_id)
            continue
        if (gpu.get("Remapped Rows", "Remapping Failure Occurred") or "").lower() == "yes":
            failures.append(gpu.bus_id)
        if (gpu.get("Remapped Rows", "Pending") or "").lower() == "yes":
            pending.append(gpu.bus_id)
    if failures:
        return failed(
            check_id,
            f"row remapping failed on {', '.join(failures)}"
            + (f"; pending on {', '.join(pending)}" if pending else ""),
            "the GPU ran out of spare memory rows (remapping failure): NVIDIA's RMA threshold; replace the node",
        )
    if pending:
        return failed(
            check_id,
            f"row remapping pending on {', '.join(pending)}",
            "a memory row awaits remapping, which happens only at the next GPU reset; reset the GPU or "
            "replace the node",
        )
    evidence = f"no remapping pending or failed on {len(details.gpus) - len(unsupported)} GPU(s)"
    if unsupported:
        evidence += f"; row remapper not supported on {', '.join(unsupported)}"
    return passed(check_id, evidence)


def check_clocks(ctx: NodeContext) -> CheckResult:
    check_id = "gpu.clocks"
    query, result = gpu_query(ctx)
    if query is None:
        return failed(check_id, f"no clock event reasons: {result.failure()}", _smi_cause(result))
    throttled = [
        f"GPU {row.index}: {', '.join(row.active_clock_events)}"
        for row in query.rows
        if row.active_clock_events
    ]
    if throttled:
        return failed(
            check_id,
            f"clocks held down at idle: {'; '.join(throttled)}",
            "an idle GPU should not be power-capped or slowed: hardware slowdown or power brake points at "
            "the board or its power supply, thermal slowdown at cooling; replace the node",
        )
    capped = [
        f"GPU {row.index}: {row.power_limit_w:g} W of {row.power_default_limit_w:g} W"
        for row in query.rows
        if row.power_limit_w is not None
        and row.power_default_limit_w is not None
        and row.power_limit_w < row.power_default_limit_w
    ]
    if capped:
        return warned(
            check_id,
            f"power limit below its default: {'; '.join(capped)}",
            "someone lowered the power limit (nvidia-smi -pl); the GPUs will run slower than their peers",
        )
    return passed(
        check_id, f"no clock slowdown or power cap active on {len(query.rows)} GPU(s) (idle reason ignored)"
    )
