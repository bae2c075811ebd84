"""`nvidia-smi topo -m`: parsing, NVLink on NVSwitch types, NIC locality, affinity."""

from __future__ import annotations

from pathlib import Path

import pytest
from node_scenarios import context, fixture, g5_xlarge_healthy, p4d_healthy, p5_healthy

from gpuforge.node.report import Status
from gpuforge.node.topology import TOPOLOGY, TopologyFormatError, check_topology, parse_topology


def test_parse_p5_matrix() -> None:
    topology = parse_topology(fixture("topo/p5-h100.txt"))
    assert topology.gpus == tuple(f"GPU{i}" for i in range(8))
    assert len(topology.nics) == 32
    assert topology.links["GPU0", "GPU7"] == "NV18"
    assert topology.links["GPU3", "NIC12"] == "PXB"
    assert topology.cpu_affinity["GPU5"] == "48-95,144-191" and topology.numa_affinity["GPU5"] == "1"
    assert topology.nic_names["NIC31"] == "rdmap201s0"
    assert topology.nearest_nic("GPU2") == ("NIC8", "PXB")


def test_terminal_header_with_ansi_underline() -> None:
    text = fixture("topo/p4d-a100.txt")
    header, rest = text.split("\n", 1)
    underlined = "\t\x1b[4m" + header.lstrip("\t") + "\x1b[0m\n" + rest
    assert parse_topology(underlined) == parse_topology(text)


def test_pcie_node_without_gpu_numa_id_column() -> None:
    # drivers before the "GPU NUMA ID" column printed the same matrix without it
    text = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPHB\t0-63\t0\nGPU1\tPHB\t X \t0-63\t0\n"
    topology = parse_topology(text)
    assert topology.links["GPU0", "GPU1"] == "PHB" and topology.nics == ()
    assert topology.numa_affinity == {"GPU0": "0", "GPU1": "0"}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
        "\tGPU0\tGPU1\nGPU0\t X \tNV12\n",
    ],
)
def test_non_matrices_are_rejected(text: str) -> None:
    with pytest.raises(TopologyFormatError):
        parse_topology(text)


def test_nvswitch_types_pass_with_local_nics(root: Path) -> None:
    ctx, _ = context(p5_healthy(), "p5.48xlarge", root / "p5")
    result = check_topology(ctx)
    assert result.status is Status.PASS
    assert result.evidence.startswith(
        "NVLink between all GPUs; 8 GPU(s), 32 NIC(s); GPU0: CPU 0-47,96-143, NUMA 0, NIC NIC0 (rdmap79s0) PXB"
    )
    ctx, _ = context(p4d_healthy(), "p4d.24xlarge", root / "p4d")
    assert "GPU7: CPU 24-47,72-95, NUMA 1, NIC NIC3 (rdmap160s27) PXB" in check_topology(ctx).evidence


CAPTURED_H100 = "topo/h100-sxm-x8-mlx5.txt"


def test_captured_h100_matrix_keeps_its_empty_cells() -> None:
    # Captured on an 8 x H100 node (driver 545): GPU0-GPU3 rows end "NODE\t\t0\t\tN/A", an empty
    # CPU Affinity before NUMA node 0. Splitting on blanks read that as CPU "0" and NUMA "N/A".
    text = fixture(CAPTURED_H100)
    assert "NODE\t\t0\t\tN/A\n" in text
    topology = parse_topology(text)
    assert topology.gpus == tuple(f"GPU{i}" for i in range(8)) and len(topology.nics) == 6
    assert (topology.cpu_affinity["GPU0"], topology.numa_affinity["GPU0"]) == ("N/A", "0")
    assert (topology.cpu_affinity["GPU4"], topology.numa_affinity["GPU4"]) == ("1", "1")
    assert topology.links["GPU3", "NIC2"] == "PIX" and topology.links["NIC5", "GPU6"] == "PIX"
    assert topology.nic_names["NIC5"] == "mlx5_5"
    assert topology.nearest_nic("GPU6") == ("NIC5", "PIX")
    assert topology.nearest_nic("GPU1") == ("NIC0", "NODE")


def test_captured_h100_matrix_passes_on_an_nvswitch_type(root: Path) -> None:
    ctx, _ = context(p5_healthy().set(TOPOLOGY, fixture(CAPTURED_H100)), "p5.48xlarge", root)
    result = check_topology(ctx)
    assert result.status is Status.PASS
    assert result.evidence.startswith(
        "NVLink between all GPUs; 8 GPU(s), 6 NIC(s); GPU0: CPU N/A, NUMA 0, NIC NIC0 (mlx5_0) PIX; "
        "GPU1: CPU N/A, NUMA 0, NIC NIC0 (mlx5_0) NODE"
    )


def test_pasted_copy_with_blanks_instead_of_tabs() -> None:
    # A published 8 x A100 matrix whose tabs became blanks when it was pasted.
    text = fixture("topo/a100-sxm4-x8-nv12-spaces.txt")
    assert "\t" not in text
    topology = parse_topology(text)
    assert len(topology.gpus) == 8 and len(topology.nics) == 17
    assert topology.links["GPU0", "GPU7"] == "NV12" and topology.links["GPU6", "NIC12"] == "PXB"
    assert (topology.cpu_affinity["GPU7"], topology.numa_affinity["GPU7"]) == ("0-103", "0")
    assert topology.nic_names["NIC16"] == "mlx5_bond_0"
    assert topology.nearest_nic("GPU7") == ("NIC12", "PXB")


def test_lost_nvlink_fails(root: Path) -> None:
    # derived from the captured H100 matrix: the GPU3-GPU5 link reported as SYS both ways
    lines = fixture(CAPTURED_H100).split("\n")
    for row, column in ((4, 6), (6, 4)):  # line 4 is GPU3's row, cell 6 is the GPU5 column
        cells = lines[row].split("\t")
        assert cells[column] == "NV18"
        cells[column] = "SYS"
        lines[row] = "\t".join(cells)
    ctx, _ = context(p5_healthy().set(TOPOLOGY, "\n".join(lines)), "p5.48xlarge", root)
    result = check_topology(ctx)
    assert result.status is Status.FAIL
    assert result.evidence.startswith("GPU pairs not on NVLink: GPU3-GPU5 SYS.")


def test_remote_or_missing_nic_fails_on_gpudirect_types(root: Path) -> None:
    # rewrite the p4d matrix so that GPU6 and GPU7 reach their NIC only across the sockets
    lines = fixture("topo/p4d-a100.txt").split("\n")
    for number in (7, 8):  # rows GPU6, GPU7
        cells = lines[number].split("\t")
        cells[9:13] = ["SYS"] * 4
        lines[number] = "\t".join(cells)
    ctx, _ = context(p4d_healthy().set(TOPOLOGY, "\n".join(lines)), "p4d.24xlarge", root)
    result = check_topology(ctx)
    assert result.status is Status.FAIL
    assert result.evidence.startswith("GPU6's nearest NIC NIC0 is SYS; GPU7's nearest NIC NIC0 is SYS.")


def test_pcie_types_report_links_without_nic_requirement(root: Path) -> None:
    ctx, _ = context(
        p5_healthy().set(TOPOLOGY, fixture("topo/g5-48xlarge-pcie.txt")), "g5.48xlarge", root / "a"
    )
    result = check_topology(ctx)
    assert result.status is Status.PASS
    assert result.evidence.startswith(
        "GPU-GPU links NODE, PHB, SYS (no NVSwitch on g5.48xlarge); 8 GPU(s), 1 NIC(s)"
    )
    ctx, _ = context(g5_xlarge_healthy(), "g5.xlarge", root / "b")
    assert check_topology(ctx).evidence == (
        "GPU-GPU links none (one GPU) (no NVSwitch on g5.xlarge); 1 GPU(s), 0 NIC(s); GPU0: CPU 0-3, NUMA N/A"
    )


def test_pcie_matrix_on_an_nvswitch_type_fails(root: Path) -> None:
    ctx, _ = context(p5_healthy().set(TOPOLOGY, fixture("topo/g5-48xlarge-pcie.txt")), "p5.48xlarge", root)
    result = check_topology(ctx)
    assert result.status is Status.FAIL
    assert "GPU0-GPU1 PHB" in result.evidence and "GPU0-GPU4 SYS" in result.evidence
