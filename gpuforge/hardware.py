"""The hardware catalog: what each GPU instance type really has.

Rows live in `gpuforge/data/instance_types.json`. The `aws` part of each row is
AWS's own DescribeInstanceTypes data (regenerate it with
`scripts/regen_instance_types.py`); the `platform` part holds what that API does
not say (GPU architecture, NVSwitch, NVLink Subnet Manager), each with a source.

This module uses the standard library only: the node agent imports it on GPU
nodes, where it must not depend on anything but Python itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from gpuforge.errors import UnknownInstanceType

CATALOG_FILE = "data/instance_types.json"


@dataclass(frozen=True)
class NetworkCard:
    """One entry of DescribeInstanceTypes `NetworkInfo.NetworkCards`."""

    index: int
    interface_types: tuple[str, ...]
    maximum_interfaces: int
    baseline_gbps: float
    network_performance: str

    @property
    def supports_efa(self) -> bool:
        return "efa" in self.interface_types or "efa-only" in self.interface_types


@dataclass(frozen=True)
class NumaNode:
    """One NUMA node of an instance type: the GPUs (by index) attached to it.

    Its cores are the node's share of the sockets it sits on (`InstanceType.numa_cores`).
    """

    index: int
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class InstanceType:
    """One instance type, as AWS describes it plus the platform facts it omits."""

    name: str
    gpu_manufacturer: str
    gpu_model: str
    gpu_architecture: str
    gpu_count: int
    gpu_memory_mib: int
    vcpus: int
    cores: int
    threads_per_core: int
    sockets: int
    numa_nodes: tuple[NumaNode, ...]
    memory_mib: int
    efa_supported: bool
    max_efa_interfaces: int
    max_network_interfaces: int
    network_performance: str
    network_cards: tuple[NetworkCard, ...]
    instance_store_disks: int
    instance_store_disk_gb: int
    boot_modes: tuple[str, ...]
    placement_strategies: tuple[str, ...]
    # DescribeInstanceTypes `SupportedUsageClasses`: how AWS sells the type (on-demand, spot,
    # capacity-block). A Capacity Block can only be bought for a type that lists capacity-block.
    supported_usage_classes: tuple[str, ...]
    nvswitch: bool
    needs_nvlsm: bool
    # GPUDirect RDMA over EFA: aws-ofi-nccl requires it on the type (the catalog's gpudirect_rdma_source).
    gpudirect_rdma: bool
    topology_layers: int  # network nodes DescribeInstanceTopology reports; 0: the type has no topology
    source: str
    platform_source: str
    layout_source: str

    @property
    def family(self) -> str:
        """The letters before the generation digit: `p` for p5.48xlarge, `g` for g6e.48xlarge."""
        letters = ""
        for char in self.name:
            if not char.isalpha():
                break
            letters += char
        return letters

    @property
    def efa_cards(self) -> tuple[NetworkCard, ...]:
        """Cards that take an EFA interface, lowest index first, capped at the EFA maximum.

        On p6-b300 card 0 takes no EFA, so this is cards 1..16, not 0..15.
        """
        cards = [card for card in self.network_cards if card.supports_efa]
        return tuple(cards[: self.max_efa_interfaces])

    @property
    def cores_per_socket(self) -> int:
        return self.cores // self.sockets

    def numa_cores(self, numa: NumaNode) -> range:
        """The cores of one NUMA node, in Slurm's abstract core numbering (socket-major, 0-based).

        NUMA nodes split the cores evenly, in the order of their index: the layout of
        every type in the catalog, where each socket is one or more equal NUMA nodes.
        """
        per_node = self.cores // len(self.numa_nodes)
        return range(numa.index * per_node, (numa.index + 1) * per_node)

    def gpu_numa_node(self, gpu: int) -> NumaNode:
        """The NUMA node GPU `gpu` is attached to."""
        return next(node for node in self.numa_nodes if gpu in node.gpus)

    @property
    def instance_store_gb(self) -> int:
        return self.instance_store_disks * self.instance_store_disk_gb

    @property
    def gpu_memory_total_mib(self) -> int:
        return self.gpu_count * self.gpu_memory_mib


def _card(raw: Mapping[str, Any]) -> NetworkCard:
    return NetworkCard(
        index=int(raw["index"]),
        interface_types=tuple(raw["interface_types"]),
        maximum_interfaces=int(raw["maximum_interfaces"]),
        baseline_gbps=float(raw["baseline_gbps"]),
        network_performance=str(raw["network_performance"]),
    )


def _row(name: str, raw: Mapping[str, Any], default_source: str) -> InstanceType:
    aws = raw["aws"]
    platform = raw["platform"]
    return InstanceType(
        name=name,
        gpu_manufacturer=aws["gpu_manufacturer"],
        gpu_model=aws["gpu_model"],
        gpu_architecture=platform["gpu_architecture"],
        gpu_count=int(aws["gpu_count"]),
        gpu_memory_mib=int(aws["gpu_memory_mib"]),
        vcpus=int(aws["vcpus"]),
        cores=int(aws["cores"]),
        threads_per_core=int(aws["threads_per_core"]),
        sockets=int(platform["sockets"]),
        numa_nodes=tuple(
            NumaNode(index=index, gpus=tuple(int(gpu) for gpu in node["gpus"]))
            for index, node in enumerate(platform["numa_nodes"])
        ),
        memory_mib=int(aws["memory_mib"]),
        efa_supported=bool(aws["efa_supported"]),
        max_efa_interfaces=int(aws["max_efa_interfaces"]),
        max_network_interfaces=int(aws["max_network_interfaces"]),
        network_performance=aws["network_performance"],
        network_cards=tuple(_card(card) for card in aws["network_cards"]),
        instance_store_disks=int(aws["instance_store_disks"]),
        instance_store_disk_gb=int(aws["instance_store_disk_gb"]),
        boot_modes=tuple(aws["boot_modes"]),
        placement_strategies=tuple(aws["placement_strategies"]),
        supported_usage_classes=tuple(aws["supported_usage_classes"]),
        nvswitch=bool(platform["nvswitch"]),
        needs_nvlsm=bool(platform["needs_nvlsm"]),
        gpudirect_rdma=bool(platform["gpudirect_rdma"]),
        topology_layers=int(platform["topology_layers"]),
        source=raw.get("source", default_source),
        platform_source=platform["source"],
        layout_source=platform["layout_source"],
    )


def aws_fields(described: Mapping[str, Any]) -> dict[str, Any]:
    """The catalog's `aws` part of a row, from one DescribeInstanceTypes entry.

    Used by the regeneration script. The network performance is AWS's own
    `NetworkPerformance` string: per-card baselines do not add up to it.
    """
    gpus = described.get("GpuInfo", {}).get("Gpus", [{}])[0]
    network = described["NetworkInfo"]
    disks = described.get("InstanceStorageInfo", {}).get("Disks", [])
    return {
        "gpu_manufacturer": gpus.get("Manufacturer", ""),
        "gpu_model": gpus.get("Name", ""),
        "gpu_count": gpus.get("Count", 0),
        "gpu_memory_mib": gpus.get("MemoryInfo", {}).get("SizeInMiB", 0),
        "vcpus": described["VCpuInfo"]["DefaultVCpus"],
        "cores": described["VCpuInfo"]["DefaultCores"],
        "threads_per_core": described["VCpuInfo"]["DefaultThreadsPerCore"],
        "memory_mib": described["MemoryInfo"]["SizeInMiB"],
        "efa_supported": network.get("EfaSupported", False),
        "max_efa_interfaces": network.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0),
        "max_network_interfaces": network["MaximumNetworkInterfaces"],
        "network_performance": network["NetworkPerformance"],
        "network_cards": [
            {
                "index": card["NetworkCardIndex"],
                "interface_types": card.get("InterfaceTypes", ["interface"]),
                "maximum_interfaces": card["MaximumNetworkInterfaces"],
                "baseline_gbps": card.get("BaselineBandwidthInGbps", 0.0),
                "network_performance": card["NetworkPerformance"],
            }
            for card in network.get("NetworkCards", [])
        ],
        "instance_store_disks": sum(disk["Count"] for disk in disks),
        "instance_store_disk_gb": disks[0]["SizeInGB"] if disks else 0,
        "boot_modes": described.get("SupportedBootModes", []),
        "placement_strategies": described.get("PlacementGroupInfo", {}).get("SupportedStrategies", []),
        "supported_usage_classes": described.get("SupportedUsageClasses", []),
    }


@cache
def catalog() -> Mapping[str, InstanceType]:
    """Every instance type gpuforge knows, by name."""
    text = resources.files("gpuforge").joinpath(CATALOG_FILE).read_text(encoding="utf-8")
    data = json.loads(text)
    default_source = data["source"]
    return {name: _row(name, raw, default_source) for name, raw in data["instance_types"].items()}


def get(name: str) -> InstanceType:
    """The catalog row for `name`, or an error that lists the types gpuforge knows."""
    rows = catalog()
    if name not in rows:
        known = ", ".join(sorted(rows))
        raise UnknownInstanceType(
            f"instance type {name!r} is not in gpuforge's hardware catalog ({CATALOG_FILE}). "
            f"Known types: {known}. Fix: use one of these, or add the type with "
            "scripts/regen_instance_types.py and give it a platform entry."
        )
    return rows[name]
