"""Parsers for nvidia-smi's CSV query and -q report, against recorded-format outputs."""

from __future__ import annotations

import pytest
from node_scenarios import P5_DETAILS, fixture

from gpuforge.node.nvidia_smi import (
    GPU_QUERY,
    QUERY_FIELDS,
    NvidiaSmiFormatError,
    is_version_mismatch,
    nvml_library_version,
    parse_details,
    parse_query_csv,
)


def test_query_command_asks_for_clock_event_fields_not_the_idle_reason() -> None:
    assert GPU_QUERY[0] == "nvidia-smi" and GPU_QUERY[-1] == "--format=csv"
    assert "clocks_event_reasons.hw_slowdown" in QUERY_FIELDS
    assert not any("gpu_idle" in field or "throttle" in field for field in QUERY_FIELDS)


def test_csv_with_units_in_header() -> None:
    text = fixture("nvidia-smi/query-p5-h100.csv")
    assert text.splitlines()[0].startswith("index, pci.bus_id, name, uuid, driver_version")
    assert "power.limit [W]" in text.splitlines()[0]
    parsed = parse_query_csv(text)
    assert len(parsed.rows) == 8 and parsed.stray_lines == ()
    first = parsed.rows[0]
    assert (first.index, first.bus_id, first.name) == ("0", "00000000:53:00.0", "NVIDIA H100 80GB HBM3")
    assert first.driver_version == "570.133.20" and first.ecc_uncorrected == 0
    assert (first.power_limit_w, first.power_default_limit_w) == (700.0, 700.0)
    assert first.active_clock_events == ()


def test_csv_missing_values_and_stray_lines() -> None:
    header = fixture("nvidia-smi/query-g5-a10g.csv").splitlines()[0]
    row = "0, 00000000:00:1E.0, NVIDIA A10G, GPU-1, 570.133.20, [N/A], [N/A], 300.00 W, Active, Not Active, Not Active, Not Active, Active"
    stray = "Unable to determine the device handle for GPU0000:00:1F.0: Unknown Error"
    parsed = parse_query_csv("\n".join([header, row, stray]))
    (gpu,) = parsed.rows
    assert gpu.ecc_uncorrected is None and gpu.power_limit_w is None
    assert gpu.active_clock_events == ("sw_power_cap", "sw_thermal_slowdown")
    assert parsed.stray_lines == (stray,)


def test_not_a_csv_is_rejected() -> None:
    with pytest.raises(NvidiaSmiFormatError):
        parse_query_csv("")
    with pytest.raises(NvidiaSmiFormatError):
        parse_query_csv(fixture("nvidia-smi/version-mismatch.txt"))


def test_driver_library_mismatch_message() -> None:
    text = fixture("nvidia-smi/version-mismatch.txt")
    assert is_version_mismatch(text)
    assert nvml_library_version(text) == "570.124"
    assert nvml_library_version("Failed to initialize NVML: Driver/library version mismatch") is None


def test_details_report_per_gpu_fields() -> None:
    report = parse_details(fixture(P5_DETAILS))
    assert report.driver_version == "565.57.01"
    assert [gpu.bus_id for gpu in report.gpus] == [
        f"00000000:{bus}:00.0" for bus in ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")
    ]
    gpu = report.gpus[0]
    assert gpu.get("Product Name") == "NVIDIA H100 80GB HBM3"
    assert gpu.get("Fabric", "State") == "Completed" and gpu.get("Fabric", "Status") == "Success"
    assert gpu.get("Fabric", "CliqueId") == "0"
    assert gpu.get("Fabric", "Health", "Bandwidth") == "N/A"
    assert gpu.get("Remapped Rows", "Pending") == "No"
    assert gpu.get("Remapped Rows", "Bank Remap Availability Histogram", "Max") == "2560 bank(s)"
    assert gpu.get("Clocks Event Reasons", "HW Slowdown", "HW Thermal Slowdown") is None
    assert gpu.get("Clocks Event Reasons", "HW Thermal Slowdown") == "Not Active"
    assert gpu.get("PCI", "GPU Link Info", "Link Width", "Current") == "16x"
    # a section header with a trailing blank, as printed
    assert gpu.get("GPU Memory Power Readings", "Power Draw") == "69.61 W"
    assert gpu.get("Platform Info", "Module Id") == "2"


def test_captured_reports_of_other_drivers_and_gpus() -> None:
    a100 = parse_details(fixture("nvidia-smi/q-a100-sxm4-40gb-x8-535.129.03.txt"))
    assert a100.driver_version == "535.129.03" and len(a100.gpus) == 8
    assert {(gpu.get("Fabric", "State"), gpu.get("Fabric", "Status")) for gpu in a100.gpus} == {
        ("N/A", "N/A")
    }
    # driver 535.129.03 prints one SRAM Uncorrectable counter where 535.247.01 and 565 split it
    assert a100.gpus[0].get("ECC Errors", "Volatile", "SRAM Uncorrectable") == "0"
    a10g = parse_details(fixture("nvidia-smi/q-a10g-535.247.01.txt"))
    (gpu,) = a10g.gpus
    assert (a10g.driver_version, gpu.bus_id) == ("535.247.01", "00000000:00:1E.0")
    assert gpu.get("ECC Errors", "Volatile", "SRAM Uncorrectable Parity") == "0"
    assert gpu.get("Remapped Rows", "Remapping Failure Occurred") == "No"
    # the blank line printed inside PCI does not end the section
    assert gpu.get("PCI", "Rx Throughput") == "0 KB/s"
    assert gpu.get("Processes", "Used GPU Memory") == "8716 MiB" and gpu.get("Processes", "Name") == ""


def test_details_inline_na_section_as_printed_for_gpus_without_a_row_remapper() -> None:
    # The shape nvidia-smi 535 prints for a GPU without ECC or a row remapper (public RTX 3090 sample).
    text = (
        "==============NVSMI LOG==============\n\n"
        "Driver Version                            : 535.154.05\n"
        "CUDA Version                              : 12.2\n\n"
        "Attached GPUs                             : 1\n"
        "GPU 00000000:04:00.0\n"
        "    Product Name                          : NVIDIA GeForce RTX 3090\n"
        "    Retired Pages\n"
        "        Single Bit ECC                    : N/A\n"
        "    Remapped Rows                         : N/A\n"
        "    Fabric\n"
        "        State                             : N/A\n"
        "        Status                            : N/A\n"
        "    Processes                             : None\n"
    )
    (gpu,) = parse_details(text).gpus
    assert gpu.get("Remapped Rows") == "N/A"
    assert gpu.get("Remapped Rows", "Pending") is None
    assert gpu.get("Retired Pages", "Single Bit ECC") == "N/A"
    assert gpu.get("Fabric", "State") == "N/A"


def test_details_rejects_unrelated_text() -> None:
    with pytest.raises(NvidiaSmiFormatError):
        parse_details("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
