"""The hardware catalog against AWS's own DescribeInstanceTypes data, served by moto on 127.0.0.1.

moto ships a copy of AWS's DescribeInstanceTypes output; reading it through boto3
over real HTTP checks every catalog row field by field against that copy.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest

from gpuforge import hardware
from gpuforge.errors import UnknownInstanceType

REQUIRED = {
    "p4d.24xlarge",
    "p4de.24xlarge",
    "p5.48xlarge",
    "p5e.48xlarge",
    "p5en.48xlarge",
    "p6-b200.48xlarge",
    "p6-b300.48xlarge",
    "g5.48xlarge",
    "g5.12xlarge",
    "g6.48xlarge",
    "g6e.48xlarge",
}
DEV_TYPES = {"g5.xlarge", "g6.xlarge"}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def described(aws_endpoint: str) -> dict[str, Any]:
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=aws_endpoint)
    names = sorted(hardware.catalog())
    response = ec2.describe_instance_types(InstanceTypes=names)
    return {entry["InstanceType"]: entry for entry in response["InstanceTypes"]}


def test_catalog_covers_required_and_dev_types() -> None:
    assert set(hardware.catalog()) >= REQUIRED | DEV_TYPES


@pytest.mark.parametrize("name", sorted(REQUIRED | DEV_TYPES))
def test_row_matches_describe_instance_types(name: str, described: dict[str, Any]) -> None:
    row = hardware.get(name)
    aws = described[name]
    gpu = aws["GpuInfo"]["Gpus"][0]
    net = aws["NetworkInfo"]
    assert (row.gpu_manufacturer, row.gpu_model, row.gpu_count) == (
        gpu["Manufacturer"],
        gpu["Name"],
        gpu["Count"],
    )
    assert row.gpu_memory_mib == gpu["MemoryInfo"]["SizeInMiB"]
    assert row.gpu_memory_total_mib == aws["GpuInfo"]["TotalGpuMemoryInMiB"]
    assert row.vcpus == aws["VCpuInfo"]["DefaultVCpus"]
    assert row.cores == aws["VCpuInfo"]["DefaultCores"]
    assert row.threads_per_core == aws["VCpuInfo"]["DefaultThreadsPerCore"]
    assert row.memory_mib == aws["MemoryInfo"]["SizeInMiB"]
    assert row.efa_supported is net["EfaSupported"]
    assert row.max_efa_interfaces == net.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0)
    assert row.max_network_interfaces == net["MaximumNetworkInterfaces"]
    assert row.network_performance == net["NetworkPerformance"]
    assert len(row.network_cards) == net["MaximumNetworkCards"]
    for card, raw in zip(row.network_cards, net["NetworkCards"], strict=True):
        assert card.index == raw["NetworkCardIndex"]
        assert card.interface_types == tuple(raw["InterfaceTypes"])
        assert card.maximum_interfaces == raw["MaximumNetworkInterfaces"]
        assert card.baseline_gbps == raw["BaselineBandwidthInGbps"]
    disks = aws["InstanceStorageInfo"]["Disks"]
    assert row.instance_store_disks == sum(d["Count"] for d in disks)
    assert row.instance_store_gb == aws["InstanceStorageInfo"]["TotalSizeInGB"]
    assert set(row.boot_modes) == set(aws["SupportedBootModes"])
    assert set(row.placement_strategies) == set(aws["PlacementGroupInfo"]["SupportedStrategies"])
    assert row.supported_usage_classes == tuple(aws["SupportedUsageClasses"])


def test_capacity_blocks_are_sold_for_the_p_types_only() -> None:
    """As moto's copy of DescribeInstanceTypes reports SupportedUsageClasses (capacity-block on p4d
    and newer P types; g5, g6 and g6e are on-demand and spot only)."""
    blocks = {
        name for name, row in hardware.catalog().items() if "capacity-block" in row.supported_usage_classes
    }
    assert blocks == {name for name in hardware.catalog() if name.startswith("p")}


@pytest.mark.parametrize("name", sorted(hardware.catalog()))
def test_cpu_and_numa_layout_is_consistent(name: str) -> None:
    row = hardware.get(name)
    assert row.sockets >= 1 and row.cores % row.sockets == 0
    assert row.cores * row.threads_per_core == row.vcpus
    assert len(row.numa_nodes) % row.sockets == 0
    assert row.cores % len(row.numa_nodes) == 0
    assert [node.index for node in row.numa_nodes] == list(range(len(row.numa_nodes)))
    placed = [gpu for node in row.numa_nodes for gpu in node.gpus]
    assert sorted(placed) == list(range(row.gpu_count))
    for gpu in range(row.gpu_count):
        assert row.gpu_numa_node(gpu).gpus.count(gpu) == 1
    covered = [core for node in row.numa_nodes for core in row.numa_cores(node)]
    assert covered == list(range(row.cores))


@pytest.mark.parametrize("name", sorted(hardware.catalog()))
def test_layout_source_cites_a_url_or_says_it_is_unconfirmed(name: str) -> None:
    source = hardware.get(name).layout_source
    assert source.strip()
    assert "https://" in source or "not confirmed by a public source" in source


@pytest.mark.parametrize(
    ("name", "sockets", "numa_gpus"),
    [
        # AWS's own NCCL topology files in aws/aws-ofi-nccl (see each row's layout_source).
        ("p4d.24xlarge", 2, ((0, 1, 2, 3), (4, 5, 6, 7))),
        ("p4de.24xlarge", 2, ((0, 1, 2, 3), (4, 5, 6, 7))),
        ("p5.48xlarge", 2, ((0, 1, 2, 3), (4, 5, 6, 7))),
        ("g5.48xlarge", 2, ((0, 1, 2, 3), (4, 5, 6, 7))),
        # aws/aws-ofi-nccl#466: single-socket G5 sizes have one NUMA node.
        ("g5.12xlarge", 1, ((0, 1, 2, 3),)),
    ],
)
def test_publicly_sourced_layouts(name: str, sockets: int, numa_gpus: tuple[tuple[int, ...], ...]) -> None:
    row = hardware.get(name)
    assert row.sockets == sockets
    assert tuple(node.gpus for node in row.numa_nodes) == numa_gpus
    assert "github.com/aws/aws-ofi-nccl" in row.layout_source


def test_p4d_numa_cores_match_awss_topology_file() -> None:
    # p4d-24xl-topo.xml: numaid 0 has CPUs 0-23 (+ siblings 48-71), numaid 1 has CPUs 24-47.
    row = hardware.get("p4d.24xlarge")
    assert row.numa_cores(row.gpu_numa_node(0)) == range(0, 24)
    assert row.numa_cores(row.gpu_numa_node(7)) == range(24, 48)


def test_dev_types_have_no_efa() -> None:
    for name in DEV_TYPES:
        row = hardware.get(name)
        assert not row.efa_supported and row.max_efa_interfaces == 0 and row.efa_cards == ()


@pytest.mark.parametrize(
    ("name", "efa", "first_card"),
    [
        ("p5.48xlarge", 32, 0),
        ("p5e.48xlarge", 32, 0),
        ("p5en.48xlarge", 16, 0),
        ("p6-b200.48xlarge", 8, 0),
        ("p6-b300.48xlarge", 16, 1),
        ("p4d.24xlarge", 4, 0),
        ("g5.48xlarge", 1, 0),
    ],
)
def test_efa_cards(name: str, efa: int, first_card: int) -> None:
    cards = hardware.get(name).efa_cards
    assert len(cards) == efa and cards[0].index == first_card


def test_p6_b300_card_zero_takes_no_efa() -> None:
    row = hardware.get("p6-b300.48xlarge")
    assert row.network_cards[0].interface_types == ("interface",)
    assert len(row.network_cards) == 17


def test_network_performance_is_awss_figure_not_a_sum() -> None:
    row = hardware.get("p6-b200.48xlarge")
    assert row.network_performance == "3200 Gigabit"
    assert sum(card.baseline_gbps for card in row.network_cards) != 3200


def test_p4d_boots_legacy_bios_only() -> None:
    assert hardware.get("p4d.24xlarge").boot_modes == ("legacy-bios",)


def test_nvswitch_and_nvlsm() -> None:
    assert all(hardware.get(n).nvswitch for n in REQUIRED if n.startswith("p"))
    assert not any(hardware.get(n).nvswitch for n in REQUIRED | DEV_TYPES if n.startswith("g"))
    assert hardware.get("p6-b200.48xlarge").needs_nvlsm and not hardware.get("p5.48xlarge").needs_nvlsm


def test_every_row_has_sources() -> None:
    for row in hardware.catalog().values():
        assert row.source and row.platform_source and row.gpu_architecture


def test_unknown_type_error_lists_known_types() -> None:
    with pytest.raises(UnknownInstanceType, match=r"p5\.48xlarge"):
        hardware.get("p5.96xlarge")


def test_hardware_module_uses_the_standard_library_only() -> None:
    code = "import sys, gpuforge.hardware; print(sorted(m.split('.')[0] for m in sys.modules))"
    script = Path(sys.executable).parent / "python"
    out = subprocess.run(
        [str(script), "-c", code], capture_output=True, text=True, check=True, cwd="/"
    ).stdout
    loaded = set(json.loads(out.replace("'", '"')))
    assert not loaded & {"yaml", "pydantic", "boto3", "botocore", "pulumi", "packaging"}


def test_regeneration_script_reproduces_the_data(aws_endpoint: str, tmp_path: Path) -> None:
    out = tmp_path / "instance_types.json"
    script = ROOT / "scripts" / "regen_instance_types.py"
    subprocess.run(
        [sys.executable, str(script), "--output", str(out)], check=True, capture_output=True, text=True
    )
    regenerated = json.loads(out.read_text())["instance_types"]
    committed = json.loads((ROOT / "gpuforge" / hardware.CATALOG_FILE).read_text())["instance_types"]
    assert regenerated == committed


def test_regeneration_refuses_a_type_without_platform_facts(aws_endpoint: str, tmp_path: Path) -> None:
    out = tmp_path / "instance_types.json"
    script = ROOT / "scripts" / "regen_instance_types.py"
    done = subprocess.run(
        [sys.executable, str(script), "--output", str(out), "g6e.12xlarge"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "add a sourced 'platform' entry by hand for: g6e.12xlarge" in done.stderr
    assert not out.exists()
