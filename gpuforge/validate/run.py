"""The acceptance run on a deployed cluster, submitted through Slurm: diag, NVLink, fabric, slow nodes.

Every step is an `srun` from the host running `gpuforge validate` (the controller, or any
host with the cluster's Slurm client), so Slurm allocates each step's nodes whole and
each step's stdout comes straight back here; no shared folder is needed. The steps:

1. on every node at once, one `srun -w <node>` each: `dcgmi diag -r <level>`, then a
   single-node `all_reduce_perf` over NVLink on all of the node's GPUs. DCGM's profiling
   (what dcgm-exporter's SM, tensor and DRAM activity fields read) and its diagnostics take
   one lock, so the diag runs between `dcgmi profile --pause` and `dcgmi profile --resume`
   on each node (steps of their own, on the same GPUs); the resume runs also when the diag
   fails or times out, and on Ctrl-C or SIGTERM, after the diag steps are stopped
   (`diag_with_profiling_paused`);
2. the fabric, pair by pair: `find_slow_nodes` runs every pair of nodes at once, each an
   `all_reduce_perf` with one task per GPU over a size sweep up to the floor's message size,
   with the EFA environment the type needs, judged against the type's 2-node figure; later
   rounds pair each node of a failed pair with a node known good, all at once, so a node is
   named slow only when it also fails beside a good one;
3. with 3 or more nodes, one `srun` over every node, judged against the type's looser
   figure for large runs (gpuforge.validate.floors): a pair below its floor fails the run
   even when the whole-cluster figure holds, so one slow node cannot hide in a large run.

Every all_reduce_perf runs with NCCL_DEBUG=INFO (subsystems INIT and NET), and each output's
transport (network, libfabric provider, GPUDirect RDMA) is judged (gpuforge.validate.transport).

`run_acceptance` takes a `Launcher`: `Slurm` here, or gpuforge.validate.kubernetes_jobs'
`KubernetesLauncher` (the same runs as workloads admitted through Kueue); the judging, floors,
transport check and slow-node search are this module's, whichever launched the runs.

Every `srun` carries a Slurm time limit and a local timeout; a step that times out, dies or
prints a broken table is a failed verdict naming the step, never a pass.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Protocol

from gpuforge.errors import GpuforgeError
from gpuforge.hardware import InstanceType
from gpuforge.node.context import expects_efa
from gpuforge.node.runner import CommandResult
from gpuforge.node.slurm import REASON_PREFIX, SlurmError, clean_reason, drain_unless_drained
from gpuforge.validate.dcgm import parse_diag
from gpuforge.validate.floors import CLUSTER_NODES, Floors
from gpuforge.validate.report import DiagVerdict, NcclVerdict, Report, judge_nccl
from gpuforge.validate.search import Group, find_slow_nodes
from gpuforge.validate.transport import apply_transport

# The libfabric EFA provider for NCCL's aws-ofi-nccl plugin, and GPUDirect RDMA on the types
# built with EFA NICs beside their GPUs. Source: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start-nccl.html
# (the test command exports FI_PROVIDER=efa, and FI_EFA_USE_DEVICE_RDMA=1 on p4d and later).
EFA_ENV = {"FI_PROVIDER": "efa"}
GPUDIRECT_ENV = {"FI_EFA_USE_DEVICE_RDMA": "1"}
# NCCL's own account of the transport it chose (NVIDIA/nccl src/debug.cc: NCCL_DEBUG_SUBSYS names
# the subsystems; "Using network" is INIT, the channel lines INIT|NET, "GPU Direct RDMA ... for HCA" NET).
DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
SWEEP_START_BYTES = 8
# `dcgmi profile --pause` / `--resume`: "Pause DCGM profiling in order to run NVIDIA developer
# tools" and "Resume DCGM profiling that was paused previously with --pause" (NVIDIA/DCGM,
# dcgmi/CommandLineParser.cpp, ProcessProfileCommandLine, commit 72fa3feaa67d716a75323a8f47c34ff3ee73f824;
# dcgmi/DcgmiProfile.cpp prints "Successfully paused profiling." or "Error: unable to pause ...").
PROFILE_PAUSE = ("dcgmi", "profile", "--pause")
PROFILE_RESUME = ("dcgmi", "profile", "--resume")


Outputs = list[tuple[str, str | None]]


class Launcher(Protocol):
    """How the acceptance's runs reach the nodes: Slurm's srun here, Kubernetes Jobs in
    gpuforge.validate.kubernetes_jobs. `run_acceptance` judges what either returns the same way."""

    def progress(self, line: str) -> None: ...

    def diag_steps(self, plan: Plan) -> Outputs:
        """Per node of the plan, in order: the `dcgmi diag` output and the launch's problem or None."""
        ...

    def all_reduce_steps(
        self, plan: Plan, groups: Sequence[Sequence[str]], what: str, *, gpus_per_task: int = 1
    ) -> Outputs:
        """Per group, in order, all at once: one all_reduce_perf over the group's nodes, and its problem or None."""
        ...


class ValidateError(GpuforgeError):
    """Slurm could not be asked to run the acceptance (exit 2: the cluster is not reachable as given)."""


@dataclass(frozen=True)
class Slurm:
    """How this host reaches the cluster's Slurm: a command prefix (empty on the controller) and limits."""

    prefix: tuple[str, ...] = ()
    step_timeout_s: float = 900.0
    progress: Callable[[str], None] = field(default=lambda line: print(line, file=sys.stderr, flush=True))

    def command(self, argv: Sequence[str], *, timeout: float = 60.0) -> CommandResult:
        """One Slurm command's result, never an exception: the node agent's Runner, so that the
        drain of `validate --drain` is the node agent's own (gpuforge.node.slurm.drain_unless_drained)."""
        try:
            done = subprocess.run(
                [*self.prefix, *argv], capture_output=True, text=True, timeout=timeout, check=False
            )
        except OSError:
            return CommandResult(tuple(argv), None, missing=True)
        except subprocess.TimeoutExpired:
            return CommandResult(tuple(argv), None, timed_out=True)
        return CommandResult(tuple(argv), done.returncode, done.stdout, done.stderr)

    def run(self, argv: Sequence[str], *, timeout: float = 60.0) -> str:
        result = self.command(argv, timeout=timeout)
        if result.missing or result.timed_out:
            raise ValidateError(f"{result.failure()}. Fix: run where Slurm's client works.")
        if not result.ok:
            raise ValidateError(f"{result.failure()}. Fix: check that slurmctld answers (`scontrol ping`).")
        return result.stdout

    def diag_steps(self, plan: Plan) -> Outputs:
        return diag_with_profiling_paused(self, plan)

    def all_reduce_steps(
        self, plan: Plan, groups: Sequence[Sequence[str]], what: str, *, gpus_per_task: int = 1
    ) -> Outputs:
        return self.steps([plan.all_reduce(group, gpus_per_task=gpus_per_task) for group in groups], what)

    def steps(self, commands: Sequence[Sequence[str]], what: str) -> list[tuple[str, str | None]]:
        """Run `commands` at once; per command (stdout, problem or None), with a progress line as each ends."""
        procs = [
            subprocess.Popen([*self.prefix, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for argv in commands
        ]
        deadline = time.monotonic() + self.step_timeout_s
        results: list[tuple[str, str | None]] = []
        try:
            for done, proc in enumerate(procs, start=1):
                try:
                    out, err = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    out, err = _stop(proc)
                    results.append((out, f"timed out after {self.step_timeout_s:.0f} s"))
                else:
                    problem = (
                        None
                        if proc.returncode == 0
                        else f"srun exited {proc.returncode}: {err.strip()[-300:]}"
                    )
                    results.append((out, problem))
                self.progress(f"validate: {what}: {done}/{len(procs)} done")
        except BaseException:
            # Ctrl-C or SIGTERM: one SIGINT only makes srun print its tasks' state, so every
            # step still running is ended here (srun cancels it on its nodes) before going on.
            for proc in procs:
                if proc.poll() is None:
                    _stop(proc)
            raise
        return results


def _stop(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """End a timed-out srun: SIGTERM makes srun cancel its step on every node; SIGKILL if it lingers."""
    proc.terminate()
    try:
        return proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()


def srun_argv(
    nodes: Sequence[str],
    tasks_per_node: int,
    gpus: int,
    env: dict[str, str],
    command: Sequence[str],
    minutes: int,
) -> list[str]:
    """One step on exactly `nodes`, all at once (gang), with its own GPUs and a Slurm time limit."""
    exports = ",".join(["ALL", *(_export(key, value) for key, value in sorted(env.items()))])
    return [
        "srun",
        f"--nodes={len(nodes)}",
        f"--nodelist={','.join(nodes)}",
        f"--ntasks-per-node={tasks_per_node}",
        f"--gres=gpu:{gpus}",
        f"--time={minutes}",
        "--kill-on-bad-exit=1",
        "--chdir=/tmp",
        f"--export={exports}",
        *command,
    ]


def _export(key: str, value: str) -> str:
    """One `--export` item. srun splits the list at commas outside quotes and strips the quotes of a
    whole quoted item (Slurm's find_quote_token, src/common/env.c), so an item whose value holds a
    comma (NCCL_DEBUG_SUBSYS=INIT,NET) is quoted whole, or srun would cut it at the comma."""
    item = f"{key}={value}"
    if '"' in item or "'" in item:
        raise ValueError(f"srun --export cannot carry a quote: {item!r}")
    return f'"{item}"' if "," in item else item


@dataclass(frozen=True)
class Plan:
    """What to run: the nodes, their type's floors and GPUs, the dcgmi level."""

    nodes: tuple[str, ...]
    instance_type: InstanceType
    floors: Floors
    diag_level: int = 1
    minutes: int = 15

    @property
    def env(self) -> dict[str, str]:
        env = dict(EFA_ENV) if expects_efa(self.instance_type) else {}
        gpudirect = (
            GPUDIRECT_ENV if expects_efa(self.instance_type) and self.instance_type.gpudirect_rdma else {}
        )
        return env | gpudirect | DEBUG_ENV

    def all_reduce(self, nodes: Sequence[str], *, gpus_per_task: int = 1) -> list[str]:
        gpus = self.instance_type.gpu_count
        per_node = gpus // gpus_per_task
        return srun_argv(
            nodes, per_node, gpus, self.env, self.all_reduce_command(gpus_per_task), self.minutes
        )

    def all_reduce_command(self, gpus_per_task: int = 1) -> list[str]:
        """The all_reduce_perf argv of every run, whichever scheduler launches it (Slurm or Kubernetes)."""
        return [
            "all_reduce_perf",
            "-b",
            str(SWEEP_START_BYTES),
            "-e",
            str(self.floors.message_bytes),
            "-f",
            "2",
            "-g",
            str(gpus_per_task),
            # Check every result (nccl-tests' default, said outright): #wrong is judged on every row.
            "-c",
            "1",
        ]

    def diag(self, node: str) -> list[str]:
        gpus = self.instance_type.gpu_count
        return srun_argv([node], 1, gpus, {}, ["dcgmi", "diag", "-r", str(self.diag_level)], self.minutes)

    def profile(self, node: str, command: Sequence[str]) -> list[str]:
        """`dcgmi profile --pause|--resume` on `node`, on its GPUs: a resume waits until the diag's step is gone."""
        return srun_argv([node], 1, self.instance_type.gpu_count, {}, list(command), self.minutes)


def idle_nodes(slurm: Slurm, partition: str) -> tuple[str, ...]:
    """The partition's nodes that can take a job now (idle or mixed, not drained or down)."""
    # sinfo's -t idle also matches drained nodes (their base state is idle); %t tells them apart.
    out = slurm.run(["sinfo", "-h", "-N", "-p", partition, "-o", "%N %t"])
    return tuple(
        sorted(
            {name for name, state in (line.split() for line in out.splitlines()) if state in {"idle", "mix"}}
        )
    )


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt here, so a killed `gpuforge validate` resumes profiling as Ctrl-C does."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _interrupts_held(slurm: Slurm) -> Iterator[None]:
    """Ctrl-C and SIGTERM wait while profiling is resumed: a second Ctrl-C must not leave it paused."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        held.append(signum)
        slurm.progress("validate: resuming DCGM profiling first; stopping after that")

    previous = {number: signal.signal(number, hold) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    if held:
        raise KeyboardInterrupt(f"signal {held[0]}")


def diag_with_profiling_paused(slurm: Slurm, plan: Plan) -> list[tuple[str, str | None]]:
    """`dcgmi diag` on every node, between `dcgmi profile --pause` and `--resume` on each.

    The resume runs however the diag ends: passed, failed, timed out (its srun stopped),
    or interrupted by Ctrl-C or SIGTERM (every diag srun stopped first; the interrupt goes
    on after the resume). A pause or resume that fails is said on the progress stream, with
    the fix for a node left paused; it does not judge the node: the diag does.
    """
    nodes = plan.nodes
    try:
        with _sigterm_as_interrupt():
            paused = slurm.steps(
                [plan.profile(node, PROFILE_PAUSE) for node in nodes], "dcgmi profile --pause"
            )
            for node, (_, problem) in zip(nodes, paused, strict=True):
                if problem:
                    slurm.progress(
                        f"validate: warning: could not pause DCGM profiling on {node} ({problem}); its diag "
                        "may fail on DCGM's profiling lock"
                    )
            return slurm.steps([plan.diag(node) for node in nodes], f"dcgmi diag -r {plan.diag_level}")
    finally:
        with _interrupts_held(slurm):
            resumed = slurm.steps(
                [plan.profile(node, PROFILE_RESUME) for node in nodes], "dcgmi profile --resume"
            )
            for node, (_, problem) in zip(nodes, resumed, strict=True):
                if problem:
                    slurm.progress(
                        f"validate: warning: could not resume DCGM profiling on {node} ({problem}); "
                        f"dcgm-exporter's profiling fields stay empty there. Fix: run `dcgmi profile --resume` on {node}"
                    )


def run_acceptance(slurm: Launcher, plan: Plan) -> Report:
    """The whole acceptance (see the module docstring); the report's verdicts say what fell short."""
    report = Report(floors=plan.floors, nodes=len(plan.nodes))
    diag = slurm.diag_steps(plan)
    for node, (text, problem) in zip(plan.nodes, diag, strict=True):
        run = parse_diag(text)
        if problem:
            run.problems.insert(0, f"the diag step on {node} failed: {problem}")
        report.diag.append(DiagVerdict(f"diag:{node}", run))
    gpus = plan.instance_type.gpu_count
    nvlink = slurm.all_reduce_steps(
        plan, [[node] for node in plan.nodes], "NVLink all_reduce_perf", gpus_per_task=gpus
    )
    for node, (text, problem) in zip(plan.nodes, nvlink, strict=True):
        report.nccl.append(_judged(f"nvlink:{node}", text, problem, plan, 1))
    if len(plan.nodes) < 2:
        return report
    rounds = 0

    def measure(groups: Sequence[Group]) -> list[float]:
        """One round of pairs at once; each pair is a verdict of the report, and a failed one counts as 0."""
        nonlocal rounds
        rounds += 1
        results = slurm.all_reduce_steps(plan, groups, f"all_reduce_perf pairs, round {rounds}")
        verdicts = [
            _judged(f"pair:{','.join(group)}", text, problem, plan, len(group))
            for group, (text, problem) in zip(groups, results, strict=True)
        ]
        report.nccl.extend(verdicts)
        return [
            item.busbw_large if item.passed and item.busbw_large is not None else 0.0 for item in verdicts
        ]

    found = find_slow_nodes(plan.nodes, measure, plan.floors.floor(2))
    report.slow_nodes, report.unresolved_nodes = found.slow, found.unresolved
    if len(plan.nodes) < CLUSTER_NODES:
        return report
    ((text, problem),) = slurm.all_reduce_steps(
        plan, [plan.nodes], f"all_reduce_perf on {len(plan.nodes)} nodes"
    )
    fabric = _judged(f"fabric:{len(plan.nodes)} nodes", text, problem, plan, len(plan.nodes))
    if not fabric.passed and all(item.passed for item in report.nccl if item.file.startswith("pair:")):
        fabric.problems.append(
            "every pair of nodes met the 2-node floor, so no node is to blame: the shortfall is the whole "
            "placement's (the network between the pairs), and no node is drained for it"
        )
    report.nccl.append(fabric)
    return report


def _judged(file: str, text: str, problem: str | None, plan: Plan, nodes: int) -> NcclVerdict:
    verdict = judge_nccl(file, text, plan.floors, nodes)
    if problem:
        verdict.problems.insert(0, f"the step failed: {problem}")
    # The run set NCCL_DEBUG=INFO, so an output without NCCL's transport lines is itself a failure.
    apply_transport([verdict], text, plan.instance_type, required=True)
    return verdict


@dataclass(frozen=True)
class FailedNode:
    """A node the acceptance found bad: what `validate --drain` drains it with, on Slurm or Kubernetes."""

    node: str
    check: str
    """The failed check's id (`validate-nccl`, `validate-dcgm-diag`): the Kubernetes taint's value."""
    reason: str
    """`gpuforge: validate: ...`, cleaned as a Slurm reason: Slurm's drain reason, Kubernetes' condition message."""


# The check ids of the acceptance's failures (the node agent's are its checks' ids, e.g. `xid`).
SLOW_CHECK = "validate-nccl"
DIAG_CHECK = "validate-dcgm-diag"


def failed_nodes(report: Report) -> list[FailedNode]:
    """Every slow node and every node whose diag failed, by name, with the check and the reason naming it.

    A node both slow and failing its diag is drained for its slowness (found first)."""
    found: dict[str, FailedNode] = {}
    floor = report.floors.floor(2)
    for node in report.slow_nodes:
        reason = f"{REASON_PREFIX} validate: {_slow_reason(report, node, floor)}"
        found[node] = FailedNode(node, SLOW_CHECK, clean_reason(reason))
    for item in report.diag:
        if not item.passed:
            node = item.file.removeprefix("diag:")
            reason = f"{REASON_PREFIX} validate: dcgmi diag: {item.run.problems[0]}"
            found.setdefault(node, FailedNode(node, DIAG_CHECK, clean_reason(reason)))
    return [found[node] for node in sorted(found)]


def drain_failed(slurm: Slurm, report: Report) -> list[str]:
    """Drain every node of `failed_nodes`, with its reason naming the check.

    Through the node agent's drain: a node already drained (by gpuforge, an alert or an
    administrator) keeps its drain and reason. Returns the nodes this call drained."""
    drained = []
    for failed in failed_nodes(report):
        node = failed.node
        try:
            left_alone = drain_unless_drained(slurm.command, node, failed.reason)
        except SlurmError as error:
            raise ValidateError(str(error)) from None
        if left_alone is None:
            drained.append(node)
        else:
            slurm.progress(f"validate: {node} is drained already ({left_alone.reason}); left as it is")
    return drained


def _slow_reason(report: Report, node: str, floor: float) -> str:
    """Why `node` is slow: its last failed pair (beside a known-good node) fell below the floor, or what else it said."""
    failed = [
        item
        for item in report.nccl
        if item.file.startswith("pair:")
        and node in item.file.removeprefix("pair:").split(",")
        and not item.passed
    ]
    deciding = failed[-1] if failed else None
    if deciding is None or deciding.busbw_large is None or deciding.busbw_large < floor:
        return f"all-reduce below {floor:.0f} GB/s beside a good node"
    return f"beside a good node: {deciding.problems[0]}"
