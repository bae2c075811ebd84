"""The topology check: parse `nvidia-smi topo -m`.

The matrix is tab-separated. Its header names the device columns (GPU0..,
NIC0..) then "CPU Affinity", "NUMA Affinity" and, on newer drivers, "GPU NUMA
ID"; on a terminal the header is wrapped in ANSI underline codes. A "NIC
Legend" below the matrix maps NIC0.. to RDMA device names (rdmap16s27 on EFA).

Cells can be empty, so a row is split on each tab, never on runs of blanks.
Captured outputs show it (tests/fixtures/node/README.md): an 8 x H100 node
prints GPU rows ending "NODE<tab><tab>0<tab><tab>N/A", an empty CPU Affinity
before NUMA node 0, and the captures that print "GPU NUMA ID" all put an
empty cell before it. NIC rows end in empty affinity cells. Copies of the
output pasted into documents often carry blanks instead of tabs; those are
read by splitting on two or more blanks, which cannot see an empty cell.
Link levels, nearest first: NV# (a bonded set of # NVLinks), PIX (one PCIe
switch), PXB (several PCIe switches), PHB (a PCIe host bridge), NODE (host
bridges within one NUMA node), SYS (across NUMA nodes).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from gpuforge.node.context import NodeContext, expects_gpu_nic_locality
from gpuforge.node.report import CheckResult, failed, passed

TOPOLOGY = ("nvidia-smi", "topo", "-m")
AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
# PCIe distance, nearest first. A GPU's NIC counts as local up to NODE (same NUMA node).
PCIE_LEVELS = ("PIX", "PXB", "PHB", "NODE", "SYS")
LOCAL_LEVELS = frozenset({"PIX", "PXB", "PHB", "NODE"})
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_LEGEND = re.compile(r"^\s*(NIC\d+):\s*(\S+)\s*$")
_BLANKS = re.compile(r"\s{2,}")


class TopologyFormatError(ValueError):
    """Output that is not an `nvidia-smi topo -m` matrix."""


@dataclass(frozen=True)
class Topology:
    devices: tuple[str, ...]  # column order: GPU0.., then NIC0..
    links: Mapping[tuple[str, str], str]
    cpu_affinity: Mapping[str, str]
    numa_affinity: Mapping[str, str]
    nic_names: Mapping[str, str]

    @property
    def gpus(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices if d.startswith("GPU"))

    @property
    def nics(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices if not d.startswith("GPU"))

    def nearest_nic(self, gpu: str) -> tuple[str, str] | None:
        """(NIC, level) for the GPU's nearest NIC, or None when there are no NICs."""
        distance = {level: rank for rank, level in enumerate(PCIE_LEVELS)}
        ranked = sorted(
            (distance.get(self.links[gpu, nic], len(PCIE_LEVELS)), column, nic)
            for column, nic in enumerate(self.nics)
        )
        if not ranked:
            return None
        nic = ranked[0][2]
        return nic, self.links[gpu, nic]


def _cells(line: str, tabbed: bool) -> list[str]:
    """A matrix line's cells, stripped; empty cells kept where tabs delimit them."""
    parts = line.split("\t") if tabbed else _BLANKS.split(line.strip())
    return [part.strip() for part in parts]


def parse_topology(text: str) -> Topology:
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    header_at = next((i for i, line in enumerate(lines) if re.search(r"\bGPU0\b", line)), None)
    if header_at is None:
        raise TopologyFormatError("no header line naming GPU0")
    tabbed = "\t" in lines[header_at]
    columns = [cell for cell in _cells(lines[header_at], tabbed) if cell]
    devices = tuple(c for c in columns if c not in AFFINITY_COLUMNS)
    links: dict[tuple[str, str], str] = {}
    cpu: dict[str, str] = {}
    numa: dict[str, str] = {}
    for line in lines[header_at + 1 :]:
        tokens = _cells(line, tabbed)
        if not tokens or tokens[0] not in devices:
            continue
        row, cells = tokens[0], tokens[1:]
        if len(cells) < len(devices) or not all(cells[: len(devices)]):
            raise TopologyFormatError(
                f"row {row} has {len([c for c in cells[: len(devices)] if c])} link cells "
                f"for {len(devices)} devices"
            )
        for column, value in zip(devices, cells, strict=False):
            links[row, column] = value
        rest = cells[len(devices) :]
        if row.startswith("GPU"):
            # an empty cell is what nvidia-smi printed: no affinity listed
            cpu[row] = rest[0] if rest and rest[0] else "N/A"
            numa[row] = rest[1] if len(rest) > 1 and rest[1] else "N/A"
    missing = [d for d in devices if (d, d) not in links]
    if missing:
        raise TopologyFormatError(f"no matrix row for {', '.join(missing)}")
    legend = {m.group(1): m.group(2) for m in (_LEGEND.match(line) for line in lines) if m}
    return Topology(devices, links, cpu, numa, legend)


def check_topology(ctx: NodeContext) -> CheckResult:
    check_id = "topology"
    instance = ctx.instance
    result = ctx.run(TOPOLOGY)
    if not result.ok:
        return failed(
            check_id,
            f"no topology: {result.failure()}",
            "nvidia-smi is absent or cannot reach the driver: not a GPU node, or the driver is broken",
        )
    try:
        topology = parse_topology(result.stdout)
    except TopologyFormatError as error:
        return failed(
            check_id, f"unreadable `nvidia-smi topo -m` output: {error}", "nvidia-smi printed no matrix"
        )

    problems: list[str] = []
    if instance.nvswitch:
        slow = sorted(
            f"{a}-{b} {topology.links[a, b]}"
            for a in topology.gpus
            for b in topology.gpus
            if a < b and not topology.links[a, b].startswith("NV")
        )
        if slow:
            problems.append(f"GPU pairs not on NVLink: {', '.join(slow)}")
    affinity: list[str] = []
    for gpu in topology.gpus:
        nearest = topology.nearest_nic(gpu)
        nic_text = ""
        if nearest is not None:
            nic, level = nearest
            nic_text = (
                f", NIC {nic}{f' ({topology.nic_names[nic]})' if nic in topology.nic_names else ''} {level}"
            )
        affinity.append(
            f"{gpu}: CPU {topology.cpu_affinity.get(gpu)}, NUMA {topology.numa_affinity.get(gpu)}{nic_text}"
        )
        if expects_gpu_nic_locality(instance):
            if nearest is None:
                problems.append(f"{gpu} has no NIC in the matrix")
            elif nearest[1] not in LOCAL_LEVELS:
                problems.append(f"{gpu}'s nearest NIC {nearest[0]} is {nearest[1]}")
    kinds = sorted({topology.links[a, b] for a in topology.gpus for b in topology.gpus if a != b})
    links = (
        "NVLink between all GPUs"
        if instance.nvswitch
        else f"GPU-GPU links {', '.join(kinds) or 'none (one GPU)'} (no NVSwitch on {instance.name})"
    )
    evidence = f"{len(topology.gpus)} GPU(s), {len(topology.nics)} NIC(s); " + "; ".join(affinity)
    if problems:
        return failed(
            check_id,
            f"{'; '.join(problems)}. {evidence}",
            "the type is built with NVLink between all GPUs and an EFA NIC on each GPU's PCIe switch or NUMA "
            "node; a missing link or a remote NIC means a failed NVLink/NVSwitch or a missing EFA device",
        )
    return passed(check_id, f"{links}; {evidence}")
