"""dcgm-exporter's field list: per architecture from data, read the way dcgm-exporter reads it."""

from __future__ import annotations

import csv
import io

import pytest

from gpuforge import hardware
from gpuforge.monitoring.fields import field_list_csv, load_fields

# The fields issue 21 asks for on a profiling GPU with NVLink, with DCGM's ids (dcgm_fields.h, v4.4.2).
REQUIRED = {
    "DCGM_FI_PROF_SM_ACTIVE": 1002,
    "DCGM_FI_PROF_SM_OCCUPANCY": 1003,
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 1004,
    "DCGM_FI_PROF_DRAM_ACTIVE": 1005,
    "DCGM_FI_PROF_PCIE_TX_BYTES": 1009,
    "DCGM_FI_PROF_PCIE_RX_BYTES": 1010,
    "DCGM_FI_PROF_NVLINK_TX_BYTES": 1011,
    "DCGM_FI_PROF_NVLINK_RX_BYTES": 1012,
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 311,
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 310,
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": 395,
    "DCGM_FI_DEV_ROW_REMAP_PENDING": 396,
    "DCGM_FI_DEV_THERMAL_VIOLATION": 241,
    "DCGM_FI_DEV_POWER_VIOLATION": 240,
    "DCGM_FI_DEV_XID_ERRORS": 230,
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": 409,
}


def _rows(text: str) -> list[list[str]]:
    """The CSV as dcgm-exporter reads it: Go's csv reader with Comment '#', cells trimmed
    (internal/pkg/counters/counter_config.go, ReadCSVFile and ExtractCounters, tag 4.4.2-4.7.1)."""
    rows = []
    for record in csv.reader(line for line in io.StringIO(text) if not line.startswith("#")):
        if record:
            rows.append([cell.strip() for cell in record])
    return rows


def test_every_catalog_architecture_has_a_row() -> None:
    known = set(load_fields().profiling)
    catalog = {row.gpu_architecture for row in hardware.catalog().values()}
    assert catalog <= known


@pytest.mark.parametrize("instance_type", ["p5.48xlarge", "p6-b200.48xlarge", "p4d.24xlarge"])
def test_an_nvlink_gpu_gets_profiling_ecc_remap_throttle_and_nvlink_fields(instance_type: str) -> None:
    rows = _rows(field_list_csv(hardware.get(instance_type), cluster="c1"))
    assert all(len(row) == 3 and row[1] in ("gauge", "counter") for row in rows)
    names = {row[0] for row in rows}
    assert set(REQUIRED) <= names
    ids = {field.name: field.field_id for field in load_fields().fields}
    assert {name: ids[name] for name in REQUIRED} == REQUIRED


@pytest.mark.parametrize("instance_type", ["g6.xlarge", "g6e.48xlarge", "g5.48xlarge"])
def test_a_gpu_without_nvlink_gets_no_nvlink_rows(instance_type: str) -> None:
    names = {row[0] for row in _rows(field_list_csv(hardware.get(instance_type), cluster="c1"))}
    assert "DCGM_FI_PROF_SM_ACTIVE" in names
    assert not {name for name in names if "NVLINK" in name}


def test_the_header_names_the_cluster_and_the_pins() -> None:
    first = field_list_csv(hardware.get("p5.48xlarge"), cluster="p5-prod").splitlines()[0]
    assert first.startswith("# dcgm-exporter-fields.csv for cluster p5-prod, rendered by gpuforge")
    assert "p5.48xlarge (Hopper)" in first
    assert "DCGM v4.4.2" in first and "dcgm-exporter 4.4.2-4.7.1" in first
