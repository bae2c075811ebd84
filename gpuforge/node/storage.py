"""Storage checks: /scratch on a RAID0 of every instance-store disk, /fsx on Lustre when configured.

Mounts come from /proc/mounts ("device mountpoint fstype options 0 0") and
arrays from /proc/mdstat ("md0 : active raid0 nvme2n1[1] nvme1n1[0]").
Instance-store NVMe disks report the model "Amazon EC2 NVMe Instance Storage"
in /sys/block/<disk>/device/model, EBS volumes "Amazon Elastic Block Store".
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from gpuforge.node.context import NodeContext
from gpuforge.node.report import CheckResult, failed, passed

SCRATCH = "/scratch"
FSX = "/fsx"
INSTANCE_STORE_MODEL = "Instance Storage"
_MDSTAT_ARRAY = re.compile(
    r"^(?P<name>md\S*)\s*:\s*(?P<state>\S+)\s+(?:\(\S+\)\s+)?(?P<level>raid\d+|linear)\s+(?P<members>.*)$"
)
_MEMBER = re.compile(r"(?P<disk>[^\s\[]+)\[\d+\](?:\((?P<flag>[A-Z])\))?")


@dataclass(frozen=True)
class Mount:
    device: str
    mountpoint: str
    fstype: str


@dataclass(frozen=True)
class MdArray:
    name: str
    state: str
    level: str
    members: tuple[str, ...]  # failed (F) members excluded


def _unescape(field: str) -> str:
    """/proc/mounts escapes spaces and tabs as octal (\\040)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mounts(text: str) -> tuple[Mount, ...]:
    mounts = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            mounts.append(Mount(_unescape(parts[0]), _unescape(parts[1]), parts[2]))
    return tuple(mounts)


def parse_mdstat(text: str) -> dict[str, MdArray]:
    arrays: dict[str, MdArray] = {}
    for line in text.splitlines():
        match = _MDSTAT_ARRAY.match(line.strip())
        if not match:
            continue
        members = tuple(
            m.group("disk") for m in _MEMBER.finditer(match.group("members")) if m.group("flag") != "F"
        )
        arrays[match.group("name")] = MdArray(
            match.group("name"), match.group("state"), match.group("level"), members
        )
    return arrays


def mounted_at(mounts: tuple[Mount, ...], mountpoint: str) -> Mount | None:
    """The mount that is visible at `mountpoint` (the last one wins, as in the kernel)."""
    found = [mount for mount in mounts if mount.mountpoint == mountpoint]
    return found[-1] if found else None


def md_name(device: str, root: Path) -> str | None:
    """`/dev/md0` -> md0; `/dev/md/scratch` -> the md device its symlink names."""
    if re.fullmatch(r"/dev/md\d+", device):
        return device.removeprefix("/dev/")
    if device.startswith("/dev/md/"):
        name = Path(os.path.realpath(root / device.lstrip("/"))).name
        return name if name.startswith("md") else None
    return None


def disk_model(ctx: NodeContext, disk: str) -> str | None:
    text = ctx.paths.read(ctx.paths.block / disk / "device" / "model")
    return None if text is None else text.strip()


def check_scratch(ctx: NodeContext) -> CheckResult:
    check_id = "storage.scratch"
    disks = ctx.instance.instance_store_disks
    if disks == 0:
        return passed(check_id, f"{ctx.instance.name} has no instance store; {SCRATCH} is not expected")
    mounts_text = ctx.paths.read(ctx.paths.mounts)
    if mounts_text is None:
        return failed(check_id, f"{ctx.paths.mounts} is unreadable", "not a Linux host with /proc mounted")
    mount = mounted_at(parse_mounts(mounts_text), SCRATCH)
    cause = (
        "the boot-time storage setup did not build or mount the instance-store RAID0 (user data failed "
        "before it, or a disk is missing); jobs would write scratch data to the root volume"
    )
    if mount is None:
        return failed(
            check_id, f"nothing is mounted at {SCRATCH} ({disks} instance-store disk(s) expected)", cause
        )
    name = md_name(mount.device, ctx.paths.root)
    if name is None:
        if disks == 1 and mount.device.startswith("/dev/nvme"):
            disk = mount.device.removeprefix("/dev/")
            model = disk_model(ctx, disk)
            if model is not None and INSTANCE_STORE_MODEL not in model:
                return failed(check_id, f"{SCRATCH} is on {mount.device}, a {model}", cause)
            return passed(
                check_id, f"{SCRATCH} ({mount.fstype}) on the single instance-store disk {mount.device}"
            )
        return failed(check_id, f"{SCRATCH} is on {mount.device} ({mount.fstype}), not an md array", cause)
    mdstat_text = ctx.paths.read(ctx.paths.mdstat)
    array = parse_mdstat(mdstat_text).get(name) if mdstat_text is not None else None
    if array is None:
        return failed(
            check_id, f"{SCRATCH} is on {mount.device}, but {name} is not in {ctx.paths.mdstat}", cause
        )
    models = {disk: disk_model(ctx, disk) for disk in array.members}
    not_store = [
        f"{disk} ({model})"
        for disk, model in models.items()
        if model is not None and INSTANCE_STORE_MODEL not in model
    ]
    problems: list[str] = []
    if array.level != "raid0":
        problems.append(f"{name} is {array.level}, not raid0")
    if array.state != "active":
        problems.append(f"{name} is {array.state}")
    if len(array.members) != disks:
        problems.append(f"{name} has {len(array.members)} of {disks} instance-store disk(s)")
    if not_store:
        problems.append(f"not instance store: {', '.join(not_store)}")
    evidence = (
        f"{SCRATCH} ({mount.fstype}) on {mount.device} = {name} {array.level} of {', '.join(array.members)}"
    )
    if problems:
        return failed(check_id, f"{'; '.join(problems)}; {evidence}", cause)
    unknown = [disk for disk, model in models.items() if model is None]
    if unknown:
        evidence += f" (disk model unreadable for {', '.join(unknown)})"
    return passed(check_id, evidence)


def check_fsx(ctx: NodeContext) -> CheckResult:
    check_id = "storage.fsx"
    mounts_text = ctx.paths.read(ctx.paths.mounts)
    if mounts_text is None:
        if not ctx.require_fsx:
            return passed(check_id, f"{FSX} not required; {ctx.paths.mounts} unreadable")
        return failed(check_id, f"{ctx.paths.mounts} is unreadable", "not a Linux host with /proc mounted")
    mount = mounted_at(parse_mounts(mounts_text), FSX)
    if mount is not None and mount.fstype == "lustre":
        return passed(check_id, f"{FSX} is Lustre from {mount.device}")
    seen = f"{FSX} is {mount.fstype} from {mount.device}" if mount else f"nothing is mounted at {FSX}"
    if not ctx.require_fsx:
        return passed(check_id, f"{seen}; FSx for Lustre not required (no --require-fsx)")
    return failed(
        check_id,
        seen,
        "the FSx for Lustre mount failed: Lustre client modules missing for this kernel, the file system "
        "unreachable (security group, subnet), or the mount unit did not run",
    )
