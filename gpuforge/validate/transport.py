"""Which transport NCCL used, read from its own `NCCL_DEBUG=INFO` lines, and whether the type's should be.

The classic cause of a multi-node all-reduce at a fraction of its speed is NCCL falling back
from EFA to TCP sockets, or running without GPUDirect RDMA, and NCCL says which in its INFO
output. The lines read here, and where NCCL and aws-ofi-nccl print them:

- `Using network <name>`: the network plugin NCCL chose (NVIDIA/nccl src/init.cc,
  `INFO(NCCL_INIT, "Using network %s", ...)`). aws-ofi-nccl names itself `Libfabric` (since
  2025, aws/aws-ofi-nccl src/nccl_ofi_interface_nvidia.cpp) or `AWS Libfabric` (before);
  NCCL's own are `Socket` and `IB`.
- `NET/OFI Selected provider is <provider>...`: the libfabric provider aws-ofi-nccl picked
  (src/nccl_ofi_net.cpp); `efa` on EFA, `tcp;ofi_rxm` or `sockets` when EFA is missing.
- `[send] via NET/<name>/<dev>[/GDRDMA]`: each network channel, and whether it moves GPU
  memory straight to the NIC (NVIDIA/nccl src/transport/net.cc).
- `NET/<name> : GPU Direct RDMA Disabled for HCA ...` (NVIDIA/nccl src/graph/topo.cc) and
  aws-ofi-nccl's `GDR disabled on GDR-supported instance type` (src/platform-aws.cpp).

Whether a type has GPUDirect RDMA is the hardware catalog's `gpudirect_rdma` (from
aws-ofi-nccl's own platform table). A single-node run uses NVLink only and is not judged here.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuforge.hardware import InstanceType
from gpuforge.validate.report import NcclVerdict

# The names aws-ofi-nccl registers with NCCL (current, then before 2025).
EFA_NETWORKS = ("Libfabric", "AWS Libfabric")
EFA_PROVIDER = "efa"

_NETWORK = re.compile(r"NCCL INFO Using network (?P<name>\S.*?)\s*$")
_PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is (?P<provider>[^,\s]+)")
_CHANNEL = re.compile(r"\[(?:send|receive)\] via NET/(?P<net>[^/]+)/\d+(?:\(\d+\))?(?P<gdr>/GDRDMA)?")
_GDR_OFF = re.compile(
    r"(?:GPU Direct RDMA Disabled for HCA.*|NET/OFI GDR disabled on GDR-supported instance type.*)$"
)
# NCCL's own lines when the plugin (libnccl-net.so) was not found or not loaded.
_PLUGIN = re.compile(
    r"NET/Plugin ?: ?(?:Plugin load.*|No plugin found.*|Could not find.*libnccl-net.*|libnccl-net\S*: .*)$"
)
# How many distinct lines of one kind a problem quotes.
QUOTED = 2


@dataclass
class Transport:
    """What one output's NCCL INFO lines say about the network, per line kind."""

    networks: Counter[str] = field(default_factory=Counter)
    providers: Counter[str] = field(default_factory=Counter)
    channels: int = 0  # network channels (send and receive)
    gdr_channels: int = 0  # of them, with /GDRDMA
    gdr_off: list[str] = field(default_factory=list)
    plugin: list[str] = field(default_factory=list)

    @property
    def seen(self) -> bool:
        """Whether the output carries any of the lines (it ran with NCCL_DEBUG=INFO)."""
        return bool(self.networks or self.providers or self.channels or self.gdr_off)

    def to_json(self) -> dict[str, Any]:
        return {
            "networks": dict(sorted(self.networks.items())),
            "providers": dict(sorted(self.providers.items())),
            "net_channels": self.channels,
            "gdrdma_channels": self.gdr_channels,
        }


def read_transport(text: str) -> Transport:
    """Collect the transport lines of one output (every rank's, whatever prefix a launcher added)."""
    found = Transport()
    for line in text.splitlines():
        if "NCCL" not in line and "NET/" not in line:
            continue
        network = _NETWORK.search(line)
        if network:
            found.networks[network["name"]] += 1
        provider = _PROVIDER.search(line)
        if provider:
            found.providers[provider["provider"]] += 1
        channel = _CHANNEL.search(line)
        if channel:
            found.channels += 1
            found.gdr_channels += channel["gdr"] is not None
        for pattern, into in ((_GDR_OFF, found.gdr_off), (_PLUGIN, found.plugin)):
            match = pattern.search(line)
            if match and match.group(0) not in into:
                into.append(match.group(0))
    return found


@dataclass(frozen=True)
class TransportVerdict:
    """The transport seen, whether it was judged, and what is wrong with it."""

    transport: Transport
    judged: bool
    problems: tuple[str, ...]
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        verdict = "not judged" if not self.judged else ("pass" if not self.problems else "fail")
        return {
            **self.transport.to_json(),
            "verdict": verdict,
            "problems": list(self.problems),
            **({"note": self.note} if self.note else {}),
        }

    def summary(self) -> str:
        """One line for the terminal: what NCCL chose, and the verdict."""

        def counts(seen: Counter[str]) -> str:
            return ", ".join(f"{name} x{count}" for name, count in sorted(seen.items())) or "none"

        verdict = f"NOT JUDGED ({self.note})" if not self.judged else ("FAIL" if self.problems else "PASS")
        gdr = (
            f"; GDRDMA on {self.transport.gdr_channels}/{self.transport.channels} net channels"
            if self.transport.channels
            else ""
        )
        return f"networks {counts(self.transport.networks)}; providers {counts(self.transport.providers)}{gdr}; {verdict}"


def apply_transport(
    verdicts: Sequence[NcclVerdict], text: str, instance: InstanceType, *, required: bool
) -> None:
    """Judge the transport of one output (`text`, whose runs `verdicts` are) once, record it on each verdict and
    add its problems to each. Once: a saved file may hold thousands of runs, and reading all its lines again
    for each run made a 3 MB file take minutes."""
    if not verdicts:
        return
    judged = judge_transport(text, instance, verdicts[0].nodes, required=required)
    for verdict in verdicts:
        verdict.transport = judged
        verdict.problems.extend(judged.problems)


def _quote(lines: list[str]) -> str:
    return "; ".join(repr(line) for line in lines[:QUOTED])


def judge_transport(text: str, instance: InstanceType, nodes: int, *, required: bool) -> TransportVerdict:
    """Judge one all_reduce_perf output's transport against what `instance` has.

    `required`: the run was started with NCCL_DEBUG=INFO (as `gpuforge validate` starts it), so
    an output without the lines is itself a failure; for saved files it is only noted.
    """
    transport = read_transport(text)
    if nodes < 2:
        return TransportVerdict(transport, False, (), "one node: NVLink only, no network to judge")
    if not (instance.efa_supported and instance.max_efa_interfaces > 0):
        return TransportVerdict(
            transport, False, (), f"{instance.name} has no EFA: its network is not judged"
        )
    if not transport.seen:
        if required:
            return TransportVerdict(
                transport,
                True,
                (
                    "NCCL printed no transport line (no 'Using network'), though the run set NCCL_DEBUG=INFO: "
                    "the output was cut, or NCCL_DEBUG was overridden (check the job's environment)",
                ),
            )
        return TransportVerdict(
            transport,
            False,
            (),
            "no NCCL_DEBUG=INFO lines in the output: run all_reduce_perf with NCCL_DEBUG=INFO "
            "NCCL_DEBUG_SUBSYS=INIT,NET to have the transport judged",
        )
    return TransportVerdict(transport, True, tuple(_problems(transport, instance, required=required)))


def _problems(transport: Transport, instance: InstanceType, *, required: bool) -> list[str]:
    problems: list[str] = []
    other = sorted(name for name in transport.networks if name not in EFA_NETWORKS)
    if other:
        counts = ", ".join(f"{name!r} on {transport.networks[name]} rank(s)" for name in other)
        evidence = f" NCCL said: {_quote(transport.plugin)}." if transport.plugin else ""
        problems.append(
            f"NCCL used network {counts}, not EFA through aws-ofi-nccl ({' or '.join(map(repr, EFA_NETWORKS))}).{evidence} "
            "Likely causes: the plugin (libnccl-net.so of aws-ofi-nccl) is not on LD_LIBRARY_PATH or failed to "
            "load; NCCL_NET is set to another network; the EFA interfaces are not attached (`fi_info -p efa` "
            "prints nothing); the EFA security group does not allow all traffic to and from itself"
        )
    if required and not transport.networks:
        problems.append(
            "NCCL printed no 'Using network' line, so the network it chose is unknown: "
            "run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET"
        )
    wrong = sorted(name for name in transport.providers if name != EFA_PROVIDER)
    if wrong:
        counts = ", ".join(f"{name!r} on {transport.providers[name]} rank(s)" for name in wrong)
        problems.append(
            f"aws-ofi-nccl selected libfabric provider {counts}, not {EFA_PROVIDER!r}. Likely causes: "
            "FI_PROVIDER is set to another provider; the EFA device is missing, so libfabric fell back to TCP "
            "(`fi_info -p efa`); the EFA installer's libfabric is not the one loaded (LD_LIBRARY_PATH)"
        )
    if instance.gpudirect_rdma:
        plain = transport.channels - transport.gdr_channels
        if plain:
            problems.append(
                f"{plain} of {transport.channels} network channel(s) run without GPUDirect RDMA (no /GDRDMA), "
                f"which {instance.name} has. Likely causes: FI_EFA_USE_DEVICE_RDMA=1 not set (older libfabric); "
                "the NVIDIA peer-memory module (nvidia-peermem) or dma-buf support missing; NCCL_NET_GDR_LEVEL "
                "set too low"
            )
        if transport.gdr_off:
            problems.append(
                f"GPUDirect RDMA is off on {instance.name}, which has it: {_quote(transport.gdr_off)}. Likely causes: "
                "the NVIDIA peer-memory module (nvidia-peermem) or dma-buf support missing; an EFA installer "
                "too old for the GPU driver"
            )
    return problems
