"""EFA hardware counters for node_exporter's textfile collector, labelled with the GPUs and job they serve.

Upstream node_exporter does not read EFA's counters. This collector reads
/sys/class/infiniband/<device>/ports/<port>/hw_counters/<counter> and writes one
`gpuforge_efa_<counter>_total` series per device and port, the names the alert rules use
(gpuforge/data/monitoring_alerts.yaml). Counter names are whatever files the driver publishes;
the Linux efa driver's list (`EFA_DEFINE_PORT_STATS` in drivers/infiniband/hw/efa/efa_verbs.c,
`KERNEL_PORT_COUNTERS` below) grew over releases, so a counter an older driver lacks is simply
absent. `lifespan` in the same folder is the RDMA core's cache time in milliseconds
(drivers/infiniband/core/sysfs.c), not a counter, and is skipped.

Labels: `device`, `port`, `gpus` (the GPU indices the device serves) and `hpc_job` (the jobs
holding those GPUs now, read from dcgm-exporter's job mapping files that gpuforge's prolog
writes; empty when idle). The device-to-GPU layout comes from the node's PCIe topology,
`nvidia-smi topo -m` (gpuforge.node.topology): a device serves the GPUs nearest to it (on p5,
four devices sit beside each GPU; on p4d, one device beside each pair). The hardware catalog
has no per-GPU NIC layout, and the topology is the node's own truth. It is read once and kept
in a cache file under /run (a reboot clears it), and read again when the set of EFA devices in
sysfs changes. When two jobs hold GPUs that share one device (a p4d pair split between jobs),
the device's traffic cannot be split: `hpc_job` then names both, comma-separated.

The file is written atomically (gpuforge.atomic), so node_exporter never serves half of it;
the temporary file ends in `.tmp`, which the textfile collector does not read (it reads
`*.prom`). Every name and label value is written by gpuforge.exposition, which escapes what
the format requires: a device or GPU name holding `"`, `}` or a line feed cannot forge labels
or series. GPUs are named by their index (`GPU3` in the matrix, `3` in the label and in the job
mapping folder); a matrix or cache naming a GPU otherwise is not trusted with either. Files are
read through gpuforge.loading.read_bytes (regular files only, never through a link, bounded), so a
FIFO in sysfs's place or under /run cannot block the collector.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpuforge import exposition
from gpuforge.atomic import write_text_atomic
from gpuforge.display import printable
from gpuforge.errors import InputError
from gpuforge.loading import MAX_CONFIG_BYTES, read_bytes
from gpuforge.node.efa import natural
from gpuforge.node.job_mapping import jobs_of
from gpuforge.node.runner import Runner
from gpuforge.node.topology import PCIE_LEVELS, TOPOLOGY, Topology, TopologyFormatError, parse_topology

# node_exporter's --collector.textfile.directory on gpuforge's nodes is the folder of this file.
DEFAULT_OUT = Path("/run/gpuforge/node-exporter/gpuforge-efa.prom")
DEFAULT_LAYOUT_CACHE = Path("/run/gpuforge/efa-layout.json")
# `nvidia-smi topo -m` answers in about a second; the unit runs every 15 s.
TOPOLOGY_TIMEOUT_S = 10.0
METRIC_PREFIX = "gpuforge_efa_"
METRIC_SUFFIX = "_total"
# The port counters of the Linux efa driver, in its order: EFA_DEFINE_PORT_STATS in
# drivers/infiniband/hw/efa/efa_verbs.c (its `efa_port_stats_descs`). tx_bytes .. rdma_read_resp_bytes
# are the port half of the driver's first list (EFA_DEFINE_STATS in torvalds/linux
# drivers/infiniband/hw/efa/efa_verbs.c at 031616c4, split into device and port stats later);
# rdma_write_*: "RDMA/efa: Add RDMA write HW statistics counters" (linux-rdma, 2023-07-03,
# Message-ID 20230703153404.30877-1-mrgolin@amazon.com); retrans_* to impaired_remote_conn_events:
# "RDMA/efa: Add Network HW statistics counters" (linux-rdma, 2025-07-06, Message-ID
# 20250706070740.22534-1-mrgolin@amazon.com).
KERNEL_PORT_COUNTERS = (
    "tx_bytes",
    "tx_pkts",
    "rx_bytes",
    "rx_pkts",
    "rx_drops",
    "send_bytes",
    "send_wrs",
    "recv_bytes",
    "recv_wrs",
    "rdma_read_wrs",
    "rdma_read_bytes",
    "rdma_read_wr_err",
    "rdma_read_resp_bytes",
    "rdma_write_wrs",
    "rdma_write_bytes",
    "rdma_write_wr_err",
    "rdma_write_recv_bytes",
    "retrans_bytes",
    "retrans_pkts",
    "retrans_timeout_events",
    "unresponsive_remote_events",
    "impaired_remote_conn_events",
)
NOT_COUNTERS = frozenset({"lifespan"})
_VALUE = re.compile(r"[0-9]+\Z")
# A sysfs attribute is at most a page (PAGE_SIZE, which sysfs also reports as every attribute's size).
COUNTER_MAX_BYTES = 4096
# `nvidia-smi topo -m` names GPUs GPU0, GPU1, ...: the number is the index dcgm-exporter labels.
_GPU_COLUMN = re.compile(r"GPU([0-9]+)\Z")
_GPU_INDEX = re.compile(r"[0-9]+\Z")

Log = Callable[[str], None]
# EFA device name -> the GPU indices it serves ("0", "1", ...).
Layout = Mapping[str, tuple[str, ...]]


def _stderr(message: str) -> None:
    print(f"gpuforge: {printable(message)}", file=sys.stderr)


@dataclass(frozen=True)
class PortCounters:
    device: str
    port: str
    counters: tuple[tuple[str, int], ...]


def efa_devices(infiniband: Path) -> tuple[str, ...]:
    """The RDMA devices in sysfs, naturally sorted; () when the folder is absent (no EFA)."""
    try:
        return tuple(sorted((entry.name for entry in os.scandir(infiniband)), key=natural))
    except OSError:
        return ()


def _read_port(folder: str, device: str, port: str, log: Log) -> PortCounters:
    counters: list[tuple[str, int]] = []
    try:
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError as error:
        log(f"efa-metrics: cannot list {folder}: {error.strerror or error}")
        return PortCounters(device, port, ())
    for entry in entries:
        name = entry.name
        if name in NOT_COUNTERS:
            continue
        if not exposition.is_metric_name(f"{METRIC_PREFIX}{name}{METRIC_SUFFIX}"):
            log(f"efa-metrics: {entry.path}: {name!r} is not a usable metric name; skipped")
            continue
        try:
            raw = read_bytes(Path(entry.path), max_bytes=COUNTER_MAX_BYTES, follow_links=False)
        except OSError as error:
            log(f"efa-metrics: cannot read {entry.path}: {error.strerror or error}")
            continue
        text = raw.decode("ascii", errors="replace").strip()
        if not _VALUE.match(text):
            log(f"efa-metrics: {entry.path} holds {text[:40]!r}, not a counter value; skipped")
            continue
        counters.append((name, int(text)))
    return PortCounters(device, port, tuple(counters))


def read_counters(infiniband: Path, log: Log = _stderr) -> list[PortCounters]:
    """Every device's and port's hardware counters, in device and port order."""
    found: list[PortCounters] = []
    for device in efa_devices(infiniband):
        ports_dir = infiniband / device / "ports"
        try:
            ports = sorted((entry.name for entry in os.scandir(ports_dir)), key=natural)
        except OSError:
            log(f"efa-metrics: {ports_dir} is missing; device {device} skipped")
            continue
        for port in ports:
            found.append(_read_port(str(ports_dir / port / "hw_counters"), device, port, log))
    return found


def unindexed_gpus(topology: Topology) -> tuple[str, ...]:
    """The matrix's GPU columns that are not `GPU<index>`: left out of the layout."""
    return tuple(gpu for gpu in topology.gpus if _GPU_COLUMN.match(gpu) is None)


def layout_from_topology(topology: Topology) -> dict[str, tuple[str, ...]]:
    """Each named NIC's nearest GPUs (the GPUs whose PCIe path to it is the shortest level), by index.

    Only `GPU<index>` columns count: the index names the GPU's job mapping file and is the `gpu` label
    dcgm-exporter writes, so a column named otherwise could neither be joined nor trusted as a path.
    """
    rank = {level: index for index, level in enumerate(PCIE_LEVELS)}
    gpus = {gpu: match[1] for gpu in topology.gpus if (match := _GPU_COLUMN.match(gpu))}
    layout: dict[str, tuple[str, ...]] = {}
    for nic in topology.nics:
        name = topology.nic_names.get(nic)
        if name is None or not gpus:
            continue
        distance = {gpu: rank.get(topology.links[gpu, nic], len(PCIE_LEVELS)) for gpu in gpus}
        nearest = min(distance.values())
        layout[name] = tuple(index for gpu, index in gpus.items() if distance[gpu] == nearest)
    return layout


def _read_cache(path: Path, devices: tuple[str, ...]) -> dict[str, tuple[str, ...]] | None:
    """The cached layout if it was made for exactly these devices and names GPUs by index, else None.

    The cache lives under /run: a file that is not the one load_layout wrote (a link, a FIFO, other
    device or GPU names) is not trusted, and the layout is read again from nvidia-smi.
    """
    try:
        data = json.loads(read_bytes(path, max_bytes=MAX_CONFIG_BYTES, follow_links=False))
        if data["devices"] != list(devices):
            return None
        layout = {name: tuple(gpus) for name, gpus in data["layout"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
    trusted = all(
        name in devices and all(isinstance(gpu, str) and _GPU_INDEX.match(gpu) for gpu in gpus)
        for name, gpus in layout.items()
    )
    return layout if trusted else None


def load_layout(
    cache: Path, devices: tuple[str, ...], run: Runner, log: Log = _stderr
) -> dict[str, tuple[str, ...]]:
    """The device-to-GPU layout: from the cache, or from `nvidia-smi topo -m` (then cached).

    A failed nvidia-smi gives an empty layout (every device unlabelled) and is not cached,
    so the next run tries again.
    """
    if not devices:
        return {}
    cached = _read_cache(cache, devices)
    if cached is not None:
        return cached
    result = run(TOPOLOGY)
    if not result.ok:
        log(f"efa-metrics: no GPU layout ({result.failure()}); devices get empty gpus and hpc_job labels")
        return {}
    try:
        topology = parse_topology(result.stdout)
    except TopologyFormatError as error:
        log(f"efa-metrics: no GPU layout (unreadable `nvidia-smi topo -m`: {error})")
        return {}
    odd = unindexed_gpus(topology)
    if odd:
        log(f"efa-metrics: `nvidia-smi topo -m` names GPU columns {odd!r}, not GPU<index>; left out")
    layout = layout_from_topology(topology)
    unmatched = [device for device in devices if device not in layout]
    if unmatched:
        log(f"efa-metrics: `nvidia-smi topo -m` names no GPU for {', '.join(unmatched)}")
    try:
        write_text_atomic(
            cache,
            json.dumps({"devices": list(devices), "layout": {k: list(v) for k, v in layout.items()}}) + "\n",
        )
    except InputError as error:
        log(f"efa-metrics: layout not cached: {error}")
    return layout


def render(ports: list[PortCounters], layout: Layout, mapping_dir: Path) -> str:
    """The textfile: per counter one HELP and TYPE line, then one sample per device and port."""
    labels: dict[tuple[str, str], exposition.Labels] = {}
    families: dict[str, list[tuple[tuple[str, str], int]]] = {}
    for port in ports:
        gpus = layout.get(port.device, ())
        labels[port.device, port.port] = (
            ("device", port.device),
            ("port", port.port),
            ("gpus", ",".join(gpus)),
            ("hpc_job", ",".join(jobs_of(mapping_dir, gpus))),
        )
        for name, value in port.counters:
            families.setdefault(name, []).append(((port.device, port.port), value))
    return "".join(
        exposition.family(
            f"{METRIC_PREFIX}{name}{METRIC_SUFFIX}",
            "counter",
            f"EFA hardware counter {name} (sysfs ports/<port>/hw_counters/{name}).",
            ((labels[key], value) for key, value in families[name]),
        )
        for name in sorted(families)
    )


def collect(infiniband: Path, mapping_dir: Path, layout_cache: Path, run: Runner, log: Log = _stderr) -> str:
    """One run's textfile content (no devices: an empty file, so that old series end)."""
    devices = efa_devices(infiniband)
    layout = load_layout(layout_cache, devices, run, log)
    return render(read_counters(infiniband, log), layout, mapping_dir)


def write(out: Path, text: str) -> None:
    """Replace `out` atomically; InputError (exit 2) naming the path when it cannot be written."""
    write_text_atomic(out, text)
