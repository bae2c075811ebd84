"""GPU checks: count and model, ECC, row remapping, clocks at idle."""

from __future__ import annotations

from pathlib import Path

from node_scenarios import P5_DETAILS, context, fixture, p5_healthy

from gpuforge.node.gpus import check_clocks, check_ecc, check_inventory, check_row_remapping, model_matches
from gpuforge.node.nvidia_smi import GPU_DETAILS, GPU_QUERY
from gpuforge.node.report import Status


def _csv_with_row(index: int, old: str, new: str) -> str:
    lines = fixture("nvidia-smi/query-p5-h100.csv").splitlines()
    lines[index + 1] = lines[index + 1].replace(old, new, 1)
    return "\n".join(lines) + "\n"


def test_model_matching_uses_whole_tokens() -> None:
    assert model_matches("H100", "NVIDIA H100 80GB HBM3")
    assert model_matches("A100", "NVIDIA A100-SXM4-40GB")
    assert model_matches("A10G", "NVIDIA A10G")
    assert not model_matches("L4", "NVIDIA L40S")
    assert not model_matches("H100", "NVIDIA H200")


def test_healthy_p5(root: Path) -> None:
    ctx, _ = context(p5_healthy(), "p5.48xlarge", root)
    result = check_inventory(ctx)
    assert result.status is Status.PASS
    assert result.evidence == "8 GPU(s): NVIDIA H100 80GB HBM3 (expected 8 x H100)"
    for check in (check_ecc, check_row_remapping, check_clocks):
        assert check(ctx).status is Status.PASS, check(ctx)


def test_seven_of_eight_gpus_fails(root: Path) -> None:
    scenario = p5_healthy().set(GPU_QUERY, fixture("nvidia-smi/query-p5-h100-7of8.csv"))
    ctx, _ = context(scenario, "p5.48xlarge", root)
    result = check_inventory(ctx)
    assert result.status is Status.FAIL
    assert result.evidence.startswith("7 of 8 GPUs visible")
    assert "fallen off the bus" in result.cause


def test_wrong_gpu_model_fails(root: Path) -> None:
    scenario = p5_healthy().set(GPU_QUERY, fixture("nvidia-smi/query-p4d-a100.csv"))
    ctx, _ = context(scenario, "p5.48xlarge", root)
    result = check_inventory(ctx)
    assert result.status is Status.FAIL
    assert "are not H100: NVIDIA A100-SXM4-40GB" in result.evidence


def test_stray_device_handle_error_fails_even_with_full_count(root: Path) -> None:
    text = (
        fixture("nvidia-smi/query-p5-h100.csv")
        + "Unable to determine the device handle for GPU0000:CA:00.0: Unknown Error\n"
    )
    ctx, _ = context(p5_healthy().set(GPU_QUERY, text, 15), "p5.48xlarge", root)
    result = check_inventory(ctx)
    assert result.status is Status.FAIL and "Unknown Error" in result.evidence


def test_uncorrectable_ecc_fails(root: Path) -> None:
    scenario = p5_healthy().set(GPU_QUERY, _csv_with_row(3, "570.133.20, 0,", "570.133.20, 2,"))
    ctx, _ = context(scenario, "p5.48xlarge", root)
    result = check_ecc(ctx)
    assert result.status is Status.FAIL
    assert result.evidence == "uncorrectable ECC errors since the driver loaded: GPU 3 (00000000:86:00.0): 2"


def test_ecc_not_reported_warns(root: Path) -> None:
    scenario = p5_healthy().set(GPU_QUERY, _csv_with_row(0, "570.133.20, 0,", "570.133.20, [N/A],"))
    ctx, _ = context(scenario, "p5.48xlarge", root)
    result = check_ecc(ctx)
    assert result.status is Status.WARN and "GPU(s) 0" in result.evidence


def test_row_remapping_pending_and_failure(root: Path) -> None:
    text = fixture(P5_DETAILS)
    pending = text.replace(
        "Pending                           : No", "Pending                           : Yes", 1
    )
    ctx, _ = context(p5_healthy().set(GPU_DETAILS, pending), "p5.48xlarge", root / "a")
    result = check_row_remapping(ctx)
    assert result.status is Status.FAIL
    assert result.evidence == "row remapping pending on 00000000:18:00.0"
    assert "next GPU reset" in result.cause

    failure = text.replace(
        "Remapping Failure Occurred        : No", "Remapping Failure Occurred        : Yes", 2
    )
    ctx, _ = context(p5_healthy().set(GPU_DETAILS, failure), "p5.48xlarge", root / "b")
    result = check_row_remapping(ctx)
    assert result.status is Status.FAIL
    assert result.evidence == "row remapping failed on 00000000:18:00.0, 00000000:2A:00.0"
    assert "replace the node" in result.cause


def test_throttled_at_idle_fails_but_power_cap_only_warns(root: Path) -> None:
    # columns after the power limits: sw_power_cap, hw_slowdown, hw_thermal_slowdown, ...
    throttled = _csv_with_row(5, "700.00 W, Not Active, Not Active", "700.00 W, Not Active, Active")
    ctx, _ = context(p5_healthy().set(GPU_QUERY, throttled), "p5.48xlarge", root / "a")
    result = check_clocks(ctx)
    assert result.status is Status.FAIL
    assert result.evidence == "clocks held down at idle: GPU 5: hw_slowdown"

    capped = _csv_with_row(2, "700.00 W, 700.00 W", "500.00 W, 700.00 W")
    ctx, _ = context(p5_healthy().set(GPU_QUERY, capped), "p5.48xlarge", root / "b")
    result = check_clocks(ctx)
    assert result.status is Status.WARN
    assert result.evidence == "power limit below its default: GPU 2: 500 W of 700 W"


def test_driver_library_mismatch_is_explained(root: Path) -> None:
    scenario = p5_healthy().set(GPU_QUERY, fixture("nvidia-smi/version-mismatch.txt"), 18)
    ctx, _ = context(scenario, "p5.48xlarge", root)
    result = check_inventory(ctx)
    assert result.status is Status.FAIL
    assert "exited 18: Failed to initialize NVML: Driver/library version mismatch" in result.evidence
    assert "driver.versions" in result.cause
