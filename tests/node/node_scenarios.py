"""Recorded command outputs and kernel files, assembled into whole-node scenarios.

A scenario is what a node would answer: each command (argv) maps to its
stdout and exit status, and kernel files (/proc, /sys) are written under a
temporary root. The same scenario drives the unit tests, through a
`ReplayRunner` handed to the checks (the runner is the agent's injection
point), and the end-to-end tests, through executables on PATH that print the
recorded output, so that the real subprocess runner runs them.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuforge import hardware
from gpuforge.node.context import HostPaths, NodeContext
from gpuforge.node.efa import FI_INFO_EFA
from gpuforge.node.manifest import load_manifest
from gpuforge.node.nvidia_smi import GPU_DETAILS, GPU_QUERY
from gpuforge.node.runner import CachedRunner, CommandResult
from gpuforge.node.services import FABRICMANAGER_VERSION, is_active_argv
from gpuforge.node.topology import TOPOLOGY
from gpuforge.node.versions import LSMOD, UNAME
from gpuforge.node.xid import DMESG

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "node"
KERNEL = "6.8.0-1021-aws\n"
INSTANCE_STORE = "Amazon EC2 NVMe Instance Storage"
# `nvidia-smi -q` as captured on an 8 x H100 SXM node (README.md names the source).
P5_DETAILS = "nvidia-smi/q-h100-sxm-x8-565.57.01.txt"


def fixture(relative: str) -> str:
    return (FIXTURES / relative).read_text(encoding="utf-8")


@dataclass(frozen=True)
class Output:
    stdout: str
    returncode: int = 0


@dataclass
class Scenario:
    """One node: command outputs by argv, and files by path below the root."""

    commands: dict[tuple[str, ...], Output] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    dirs: list[str] = field(default_factory=list)

    def set(self, argv: Sequence[str], stdout: str, returncode: int = 0) -> Scenario:
        self.commands[tuple(argv)] = Output(stdout, returncode)
        return self

    def drop(self, *names: str) -> Scenario:
        """Remove every command whose executable is one of `names` (as if not installed)."""
        self.commands = {argv: out for argv, out in self.commands.items() if argv[0] not in names}
        return self

    def with_files(self, files: Mapping[str, str]) -> Scenario:
        self.files.update(files)
        return self

    def efa_devices(self, names: Sequence[str], p2p: str | None = "NVIDIA") -> Scenario:
        for name in names:
            self.dirs.append(f"sys/class/infiniband/{name}/device")
            if p2p is not None:
                self.files[f"sys/class/infiniband/{name}/device/p2p"] = p2p + "\n"
        return self

    def instance_store(self, disks: Sequence[str], model: str = INSTANCE_STORE) -> Scenario:
        for disk in disks:
            self.files[f"sys/block/{disk}/device/model"] = f"{model:<40}\n"
        return self

    def write_root(self, root: Path) -> Path:
        for directory in self.dirs:
            (root / directory).mkdir(parents=True, exist_ok=True)
        for relative, text in self.files.items():
            path = root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        return root


class ReplayRunner:
    """Answers from a scenario; a command it does not know is reported as not installed."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        key = tuple(argv)
        self.calls.append(key)
        output = self.scenario.commands.get(key)
        if output is None:
            return CommandResult(key, None, missing=True)
        return CommandResult(key, output.returncode, output.stdout, "")


def install_commands(scenario: Scenario, bin_dir: Path) -> Path:
    """Write one executable per command name that prints the recorded output for its arguments."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    by_name: dict[str, list[tuple[tuple[str, ...], Output]]] = {}
    for argv, output in scenario.commands.items():
        by_name.setdefault(argv[0], []).append((argv[1:], output))
    for name, cases in by_name.items():
        lines = ["#!/bin/sh", 'case "$*" in']
        for number, (args, output) in enumerate(cases):
            data = bin_dir / f".{name}.{number}.out"
            data.write_text(output.stdout, encoding="utf-8")
            lines.append(f"  '{' '.join(args)}') /bin/cat '{data}'; exit {output.returncode} ;;")
        lines += ['  *) echo "unexpected arguments: $*" >&2; exit 64 ;;', "esac", ""]
        script = bin_dir / name
        script.write_text("\n".join(lines), encoding="utf-8")
        script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return bin_dir


def p5_healthy() -> Scenario:
    """A healthy p5.48xlarge: 8 H100, 32 EFA, driver 570.133.20 (open), Fabric Manager up."""
    devices = fixture("efa-devices-p5.txt").split()
    return (
        Scenario()
        .set(GPU_QUERY, fixture("nvidia-smi/query-p5-h100.csv"))
        .set(GPU_DETAILS, fixture(P5_DETAILS))
        .set(TOPOLOGY, fixture("topo/p5-h100.txt"))
        .set(LSMOD, fixture("lsmod/p5-h100.txt"))
        .set(UNAME, KERNEL)
        .set(is_active_argv("nvidia-persistenced"), fixture("systemctl/is-active-active.txt"))
        .set(is_active_argv("nvidia-fabricmanager"), fixture("systemctl/is-active-active.txt"))
        .set(FABRICMANAGER_VERSION, fixture("fabricmanager/version-570.133.20.txt"))
        .set(FI_INFO_EFA, fixture("fi_info/efa-p5-32.txt"))
        .set(DMESG, fixture("dmesg/boot-clean.txt"))
        .efa_devices(devices)
        .instance_store([f"nvme{i}n1" for i in range(1, 9)])
        .with_files(
            {
                "proc/driver/nvidia/version": fixture("proc/driver-version-570.133.20-open.txt"),
                "proc/mounts": fixture("storage/mounts-p5.txt"),
                "proc/mdstat": fixture("storage/mdstat-p5.txt"),
            }
        )
    )


def p4d_healthy() -> Scenario:
    """A healthy p4d.24xlarge: 8 A100 (fabric state N/A), 4 EFA, driver 535.183.06 (proprietary)."""
    return (
        Scenario()
        .set(GPU_QUERY, fixture("nvidia-smi/query-p4d-a100.csv"))
        .set(GPU_DETAILS, fixture("nvidia-smi/q-a100-sxm4-40gb-x8-535.129.03.txt"))
        .set(TOPOLOGY, fixture("topo/p4d-a100.txt"))
        .set(LSMOD, fixture("lsmod/p5-h100.txt"))
        .set(UNAME, KERNEL)
        .set(is_active_argv("nvidia-persistenced"), fixture("systemctl/is-active-active.txt"))
        .set(is_active_argv("nvidia-fabricmanager"), fixture("systemctl/is-active-active.txt"))
        .set(FABRICMANAGER_VERSION, fixture("fabricmanager/version-535.183.06.txt"))
        .set(FI_INFO_EFA, fixture("fi_info/efa-p4d-4-rdm.txt"))
        .set(DMESG, fixture("dmesg/boot-clean.txt"))
        .efa_devices(fixture("efa-devices-p4d.txt").split())
        .instance_store([f"nvme{i}n1" for i in range(1, 9)])
        .with_files(
            {
                "proc/driver/nvidia/version": fixture("proc/driver-version-535.183.06-proprietary.txt"),
                "proc/mounts": fixture("storage/mounts-p5.txt"),
                "proc/mdstat": fixture("storage/mdstat-p5.txt"),
            }
        )
    )


def g5_xlarge_healthy() -> Scenario:
    """A healthy g5.xlarge dev node: 1 A10G, no EFA, no NVSwitch, one instance-store disk."""
    return (
        Scenario()
        .set(GPU_QUERY, fixture("nvidia-smi/query-g5-a10g.csv"))
        .set(GPU_DETAILS, fixture("nvidia-smi/q-a10g-535.247.01.txt"))
        .set(TOPOLOGY, fixture("topo/g5-xlarge.txt"))
        .set(LSMOD, fixture("lsmod/g5-xlarge.txt"))
        .set(UNAME, KERNEL)
        .set(is_active_argv("nvidia-persistenced"), fixture("systemctl/is-active-active.txt"))
        .set(DMESG, fixture("dmesg/boot-clean.txt"))
        .instance_store(["nvme1n1"])
        .with_files(
            {
                "proc/driver/nvidia/version": fixture("proc/driver-version-570.133.20-open.txt"),
                "proc/mounts": fixture("storage/mounts-g5-xlarge.txt"),
            }
        )
    )


MANIFESTS = {
    "p5.48xlarge": "manifest/p5-h100.json",
    "p4d.24xlarge": "manifest/p4d-a100.json",
    "g5.xlarge": "manifest/g5-dev.json",
    "g5.48xlarge": "manifest/g5-dev.json",
    "p6-b200.48xlarge": "manifest/p6-b200.json",
}


def context(
    scenario: Scenario,
    instance_type: str,
    root: Path,
    *,
    manifest: Path | None = None,
    require_fsx: bool = False,
    attempts: int = 3,
    sleep: Callable[[float], None] | None = None,
) -> tuple[NodeContext, ReplayRunner]:
    """A NodeContext over `scenario`, its files written below `root`."""
    scenario.write_root(root)
    replay = ReplayRunner(scenario)
    ctx = NodeContext(
        instance=hardware.get(instance_type),
        manifest=load_manifest(manifest or FIXTURES / MANIFESTS[instance_type]),
        run=CachedRunner(replay),
        paths=HostPaths(root),
        require_fsx=require_fsx,
        efa_attempts=attempts,
        efa_retry_delay_s=0.5,
        sleep=sleep or (lambda seconds: None),
    )
    return ctx, replay


def only_on_path(bin_dir: Path) -> dict[str, str]:
    """An environment whose PATH holds only the scenario's commands (the stubs call /bin/cat directly)."""
    return {**os.environ, "PATH": str(bin_dir)}
