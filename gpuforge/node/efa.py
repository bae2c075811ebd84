"""EFA checks: every EFA device the type has is up, and GPUDirect RDMA is available.

Devices are counted twice, in /sys/class/infiniband and as distinct domains of
`fi_info -p efa`. fi_info lists several endpoints per device (an RDM domain
`rdmap16s27-rdm`, a datagram domain `rdmap16s27-dgrm`, and with libfabric 2.x
both the `efa` and `efa-direct` fabrics), so endpoints are not devices.
Some types bring EFA up late in boot: the count is retried a few times.

GPUDirect RDMA on EFA goes through the efa driver's own peer-to-peer support,
not through nvidia_peermem (InfiniBand's peer-memory client). The efa driver
publishes the peer-memory provider it found in
/sys/class/infiniband/<dev>/device/p2p: "NVIDIA" (nvidia_p2p_* symbols of
the driver) or "NVIDIA peermem" (through efa_nv_peermem); empty means none.
Source: amzn/amzn-drivers kernel/linux/efa/src/efa_sysfs.c (p2p_show) and
efa_nvmem_impl.h (nvmem_provider_string). With the open kernel modules, the
DMA-BUF path (efa driver r1.16.0 "Add support for dmabuf", RELEASENOTES.md)
can serve instead, which sysfs does not show.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuforge.node.context import NodeContext, expects_efa, expects_gpu_nic_locality
from gpuforge.node.report import CheckResult, failed, passed, warned
from gpuforge.node.versions import loaded_driver

FI_INFO_EFA = ("fi_info", "-p", "efa")
_ENDPOINT_SUFFIXES = ("-rdm", "-dgrm")
NVIDIA_P2P_PROVIDERS = ("NVIDIA", "NVIDIA peermem")


def natural(name: str) -> tuple[tuple[int, str], ...]:
    """Sort key that puts rdmap79s0 before rdmap113s0."""
    return tuple((int(part), "") if part.isdigit() else (0, part) for part in re.split(r"(\d+)", name))


def parse_fi_info_devices(text: str) -> tuple[str, ...]:
    """Distinct EFA devices in `fi_info -p efa` output: domains without their endpoint suffix."""
    devices: set[str] = set()
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        if not sep or key.strip() != "domain":
            continue
        domain = value.strip()
        for suffix in _ENDPOINT_SUFFIXES:
            domain = domain.removesuffix(suffix)
        if domain:
            devices.add(domain)
    return tuple(sorted(devices, key=natural))


def sysfs_devices(ctx: NodeContext) -> tuple[str, ...]:
    try:
        return tuple(sorted((entry.name for entry in ctx.paths.infiniband.iterdir()), key=natural))
    except OSError:
        return ()


@dataclass(frozen=True)
class EfaCount:
    sysfs: tuple[str, ...]
    fi_info: tuple[str, ...] | None  # None when fi_info gave no usable answer
    fi_info_problem: str

    def complete(self, expected: int) -> bool:
        return len(self.sysfs) == expected and self.fi_info is not None and len(self.fi_info) == expected


def count_efa(ctx: NodeContext, fresh: bool) -> EfaCount:
    result = ctx.run.rerun(FI_INFO_EFA) if fresh else ctx.run(FI_INFO_EFA)
    # With no device, fi_info prints "fi_getinfo: -61 (No data available)" and exits non-zero: 0 listed.
    listed = None if result.missing or result.timed_out else parse_fi_info_devices(result.stdout)
    return EfaCount(sysfs_devices(ctx), listed, "" if listed is not None else result.failure())


def efa_devices(ctx: NodeContext) -> tuple[EfaCount, int]:
    """The EFA count and the attempts it took: retried (bounded: `efa_attempts` tries,
    `efa_retry_delay_s` apart) while short, because some types bring EFA up late."""
    expected = ctx.instance.max_efa_interfaces
    count = count_efa(ctx, fresh=False)
    attempts = 1
    # A missing fi_info (no EFA software) does not fix itself: only a short count is retried.
    while attempts < ctx.efa_attempts and not count.complete(expected) and count.fi_info is not None:
        ctx.sleep(ctx.efa_retry_delay_s)
        count = count_efa(ctx, fresh=True)
        attempts += 1
    return count, attempts


def check_devices(ctx: NodeContext) -> CheckResult:
    check_id = "efa.devices"
    instance = ctx.instance
    if not expects_efa(instance):
        return passed(check_id, f"no EFA on this type ({instance.name})")
    expected = instance.max_efa_interfaces
    count, attempts = efa_devices(ctx)
    listed = (
        f"fi_info lists {len(count.fi_info)} device(s)"
        if count.fi_info is not None
        else count.fi_info_problem
    )
    evidence = f"{len(count.sysfs)} of {expected} EFA device(s) in {ctx.paths.infiniband}; {listed}"
    if count.complete(expected):
        return passed(check_id, f"{evidence}: {', '.join(count.sysfs)}")
    if count.fi_info is None:
        cause = "libfabric's fi_info is missing: the EFA installer did not run on this image"
    else:
        cause = (
            "an EFA interface is missing or did not come up after retries: the launch template attaches "
            "fewer interfaces than the type supports, or a device failed; replace the node"
        )
    return failed(check_id, f"{evidence} (after {attempts} attempt(s))", cause)


def read_p2p(ctx: NodeContext, device: str) -> str | None:
    text = ctx.paths.read(ctx.paths.infiniband / device / "device" / "p2p")
    return None if text is None else text.strip()


def check_gpudirect(ctx: NodeContext) -> CheckResult:
    check_id = "efa.gpudirect"
    instance = ctx.instance
    if not expects_efa(instance):
        return passed(check_id, f"no EFA on this type ({instance.name})")
    devices = sysfs_devices(ctx)
    providers = {device: read_p2p(ctx, device) for device in devices}
    with_nvidia = [device for device, provider in providers.items() if provider in NVIDIA_P2P_PROVIDERS]
    if devices and len(with_nvidia) == len(devices):
        names = sorted({providers[device] or "" for device in devices})
        return passed(
            check_id,
            f"efa driver peer-to-peer provider {', '.join(names)} on all {len(devices)} EFA device(s)",
        )
    seen = ", ".join(f"{device}={providers[device]!r}" for device in devices) or "no EFA devices in sysfs"
    loaded = loaded_driver(ctx)
    required = expects_gpu_nic_locality(instance)
    if loaded is not None and loaded.flavor == "open":
        evidence = f"efa p2p providers: {seen}; open kernel modules {loaded.version} loaded"
        cause = (
            "the efa driver reports no NVIDIA peer-memory provider; only the DMA-BUF path (open modules, "
            "efa driver r1.16.0 or later, aws-ofi-nccl with DMA-BUF on) can give GPUDirect RDMA, and this "
            "check cannot confirm it"
        )
        return warned(check_id, evidence, cause)
    evidence = f"efa p2p providers: {seen}; " + (
        f"{loaded.flavor} kernel modules {loaded.version}" if loaded else "no NVIDIA kernel module loaded"
    )
    cause = (
        "no GPUDirect RDMA path: the efa driver was built without peer-memory support or cannot see the "
        "NVIDIA driver's P2P symbols, and the proprietary modules cannot export DMA-BUF; NCCL will stage "
        "through host memory"
    )
    if required:
        return failed(check_id, evidence, cause)
    return warned(check_id, evidence, cause)
