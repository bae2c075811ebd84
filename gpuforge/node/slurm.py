"""`gpuforge node check --slurm`: the node agent as Slurm's HealthCheckProgram.

slurmd runs the HealthCheckProgram as root every HealthCheckInterval and kills
it after 60 s. In this mode the agent runs the periodic checks
(`checks.PERIODIC_CHECKS`) with every command under one time budget, and then:

1. **Healthy**: exit 0, after one `scontrol show node` (one light RPC per node
   per HealthCheckInterval): gpuforge's alert receiver on the controller
   (gpuforge.monitoring.receiver) drains nodes too, and this node's state file
   cannot know that, so a healthy node reads its state in Slurm and, drained by
   gpuforge, goes on as below (step 3) like a node its own check drained.
2. **Not healthy**: drain the node through Slurm,
   `scontrol update NodeName=<node> State=DRAIN Reason="gpuforge: <check> <detail>"`,
   e.g. `gpuforge: xid 79 on GPU 3`. Draining lets the running job finish and
   keeps new jobs off the node. Exit 1.
3. **Replace**: when Slurm shows the node drained by gpuforge (its reason
   starts `gpuforge:`) and it runs no job any more (state DRAINED, i.e.
   IDLE+DRAIN or DOWN+DRAIN, not DRAINING, and `squeue -w` lists nothing),
   the agent marks the instance Unhealthy in its Auto Scaling group
   (`--report-asg`, `gpuforge.node.asg`), once, and the group replaces it. This
   happens on the first check after the job ended: at most one
   HealthCheckInterval after the node went idle.

A node an administrator drained for another reason is never drained over (its
reason stays) and never reported. A node drained by gpuforge whose checks pass
again stays drained and the agent says so: the failure that drained it (an
Xid, a lost GPU) is not trusted to have healed, so an administrator who
disagrees resumes it (`scontrol update NodeName=<node> State=RESUME`) before
it goes idle and is replaced. Once resumed, the agent forgets the drain.

The node name is `--node-name`, else SLURMD_NODENAME (slurmd sets it for the
programs it runs), else the short hostname (the name `slurmd -Z` registers).
scontrol or squeue missing, failing or hung is an error with a fix (exit 1),
never a traceback. Standard library only, like the rest of the agent.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpuforge.atomic import write_text_atomic
from gpuforge.errors import GpuforgeError, InputError
from gpuforge.loading import read_bytes
from gpuforge.node.context import NodeContext
from gpuforge.node.gpus import gpu_query
from gpuforge.node.report import CheckResult, NodeReport
from gpuforge.node.runner import CommandResult, Runner
from gpuforge.node.xid import DMESG, classify_log, load_catalog, parse_xids
from gpuforge.scheduler import slurm_values

REASON_PREFIX = "gpuforge:"
# `sinfo -R` prints 20 characters of a reason by default; the start must say what broke.
REASON_MAX_CHARS = 80
# The drain record is a node name and a reason (each far under a KiB) as JSON: a page holds it.
DRAIN_RECORD_MAX_BYTES = 4096
NODE_NAME_ENV = "SLURMD_NODENAME"
NODE_NAME_FIELD = f"node name (--node-name, else ${NODE_NAME_ENV}, else the short hostname)"
# Time budget of one --slurm run, in seconds from its start; slurmd kills it at 60.
# Check commands end by 25 s (each at most 15); Slurm's commands by 40 s (each at most
# 12: scontrol takes 10 s to say that slurmctld is unreachable); IMDS takes at most
# 4 x 1 s and the Unhealthy report at most 2 x (2 + 4) s (gpuforge.node.asg). So even
# a node where every call hangs is done by 56 s.
CHECKS_BUDGET_S = 25.0
CHECK_COMMAND_TIMEOUT_S = 15.0
SLURM_BUDGET_S = 40.0
SLURM_COMMAND_TIMEOUT_S = 12.0
IMDS_TIMEOUT_S = 1.0
# Characters kept in a reason: scontrol reads `Reason=<text>` as one argument, and
# quotes, `=`, newlines or shell metacharacters would break it or the commands of
# anyone who pastes it from `sinfo -R`.
_UNSAFE = re.compile(r"[^A-Za-z0-9 ._:,+/()#%-]+")
_STATE = re.compile(r"(?:^|\s)State=(?P<state>\S+)")
_NODE_NAME = re.compile(r"(?:^|\s)NodeName=(?P<name>\S+)")
# Reason=<text> [<user>@<time>], the last field that scontrol prints for a node with a reason.
_REASON = re.compile(r"(?:^|\s)Reason=(?P<reason>.*?)(?: \[(?P<by>[^\]@]*)@[^\]]*\])?\s*$")


class SlurmError(GpuforgeError):
    """Slurm could not be asked or told: the node is neither drained nor reported (exit 1)."""

    exit_code = 1


@dataclass(frozen=True)
class SlurmNode:
    """One node as `scontrol show node <name> --oneliner` prints it."""

    name: str
    state: str  # the base state: IDLE, MIXED, ALLOCATED, DOWN, ...
    flags: frozenset[str]  # DRAIN, COMPLETING, NOT_RESPONDING, ...
    reason: str  # without scontrol's trailing "[user@time]"

    @property
    def drain(self) -> bool:
        return "DRAIN" in self.flags

    @property
    def drained(self) -> bool:
        """DRAINED, not DRAINING: drained, and no job runs or is completing on it."""
        return self.drain and self.state in {"IDLE", "DOWN"} and "COMPLETING" not in self.flags

    @property
    def drained_by_gpuforge(self) -> bool:
        return self.drain and self.reason.startswith(REASON_PREFIX)

    @property
    def state_text(self) -> str:
        return "+".join((self.state, *sorted(self.flags)))


def parse_node(text: str) -> SlurmNode:
    """Parse one node's `--oneliner` record; a record without a state is an error."""
    line = next((row for row in text.splitlines() if "NodeName=" in row), "")
    name, state = _NODE_NAME.search(line), _STATE.search(line)
    if name is None or state is None:
        raise SlurmError(
            f"`scontrol show node --oneliner` printed no node record: {text.strip()[:200]!r}. "
            "Fix: check that this scontrol belongs to the cluster's Slurm (scontrol --version)."
        )
    base, *flags = state.group("state").split("+")
    reason = _REASON.search(line)
    return SlurmNode(name.group("name"), base, frozenset(flags), reason.group("reason") if reason else "")


def default_node_name(environ: Mapping[str, str] = os.environ) -> str:
    """SLURMD_NODENAME, else the short hostname: what `slurmd -Z` registers the node as."""
    return environ.get(NODE_NAME_ENV) or socket.gethostname().split(".")[0]


def show_node_argv(node: str) -> tuple[str, ...]:
    return ("scontrol", "show", "node", node, "--oneliner")


def drain_argv(node: str, reason: str) -> tuple[str, ...]:
    # scontrol reads NodeName=ALL as every node and a nodeset's name as all of its nodes.
    slurm_values.NODE_NAME.check(node, field=NODE_NAME_FIELD)
    return ("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}")


def jobs_argv(node: str) -> tuple[str, ...]:
    return ("squeue", "-h", "-w", node)


def clean_reason(text: str) -> str:
    """`text` with unsafe characters dropped, spaces collapsed, at most REASON_MAX_CHARS long."""
    collapsed = " ".join(_UNSAFE.sub(" ", text).split())
    return collapsed[:REASON_MAX_CHARS].rstrip(" ,;:(")


def _pci_key(address: str) -> tuple[int, int, int] | None:
    """(domain, bus, device) of '0000:A8:00' (the Xid form) and '00000000:A8:00.0' (nvidia-smi's)."""
    parts = address.split(".")[0].split(":")
    try:
        domain, bus, device = (int(part, 16) for part in parts[-3:])
    except ValueError:
        return None
    return domain, bus, device


def _xid_detail(ctx: NodeContext) -> str | None:
    """'xid 79 on GPU 5': the Xids that failed the check, and the GPUs by nvidia-smi index when known."""
    catalog = load_catalog()
    verdicts = classify_log(parse_xids(ctx.run(DMESG).stdout), catalog, nvswitch=ctx.instance.nvswitch)
    serious = [verdict for verdict in verdicts if catalog.fails(verdict.action)]
    if not serious:
        return None
    query, _ = gpu_query(ctx)
    index_of = {_pci_key(row.bus_id): row.index for row in query.rows} if query else {}
    codes = sorted({verdict.event.code for verdict in serious})
    gpus = sorted({verdict.event.pci for verdict in serious})
    named = [f"GPU {index_of[_pci_key(pci)]}" if _pci_key(pci) in index_of else pci for pci in gpus]
    return f"xid {','.join(map(str, codes))} on {', '.join(named)}"


def _short(evidence: str) -> str:
    """The first clause of a check's evidence: up to its first ';' or parenthesis."""
    return re.split(r";| \(", evidence, maxsplit=1)[0]


def drain_reason(report: NodeReport, ctx: NodeContext) -> str:
    """'gpuforge: xid 79 on GPU 3', or 'gpuforge: <check id>: <first clause>', plus '(+N more)'.

    An Xid names the cause when there is one (a GPU off the bus also fails the
    inventory and ECC checks), so it comes first; otherwise the first failure
    in report order.
    """
    failures = sorted(report.failures, key=lambda check: check.id != "xid")
    first: CheckResult = failures[0]
    detail = (_xid_detail(ctx) if first.id == "xid" else None) or f"{first.id}: {_short(first.evidence)}"
    suffix = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
    room = REASON_MAX_CHARS - len(REASON_PREFIX) - 1 - len(suffix)
    return f"{REASON_PREFIX} {clean_reason(detail)[:room].rstrip(' ,:(')}{suffix}"


@dataclass(frozen=True)
class DrainRecord:
    """What this node remembers of its own drain, so that a healthy check knows to look at Slurm."""

    node: str
    reason: str
    reported: bool = False

    @classmethod
    def load(cls, path: Path) -> DrainRecord | None:
        """The record, None when there is none; through gpuforge.loading.read_bytes, so a FIFO, a device
        or a link at the path (under /var/lib) reads as an unreadable record instead of blocking the check."""
        try:
            data = json.loads(read_bytes(path, max_bytes=DRAIN_RECORD_MAX_BYTES, follow_links=False))
            return cls(str(data["node"]), str(data["reason"]), bool(data["reported"]))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            # An unreadable record only means Slurm is asked; it decides, not the file.
            return cls(node="", reason="", reported=False)

    def save(self, path: Path) -> None:
        text = json.dumps({"node": self.node, "reason": self.reason, "reported": self.reported}) + "\n"
        try:
            write_text_atomic(path, text)
        except InputError as error:
            _say(
                f"warning: could not record the drain in {path}: {error}; a later healthy check will not "
                "look at Slurm. Fix: run the check as root, as slurmd does."
            )


def slurm_command(run: Runner, node: str, argv: tuple[str, ...]) -> CommandResult:
    """Run one scontrol/squeue call about `node`; a failure is a SlurmError with the fix."""
    result = run(argv)
    if not result.ok:
        raise SlurmError(
            f"could not ask Slurm about node {node}: {result.failure()}. Fix: install slurm-client "
            "and point it at the controller (slurm.conf or SLURM_CONF, or configless slurmd), check that "
            f"slurmctld answers (`scontrol ping`), and that {node} is the node's Slurm name "
            "(--node-name NAME or SLURMD_NODENAME)."
        )
    return result


def drain_unless_drained(run: Runner, node: str, reason: str) -> SlurmNode | None:
    """Drain `node` with `reason` (it starts REASON_PREFIX) unless Slurm shows it drained already.

    The drain of the node agent, `gpuforge validate` and the alert receiver: a node drained
    by anyone (gpuforge or an administrator) keeps its drain and its reason, and nothing here
    ever resumes a node. Returns None when this call drained the node, else the node as
    Slurm showed it (left alone). Slurm failing is a SlurmError.
    """
    if not reason.startswith(REASON_PREFIX):
        raise ValueError(f"a gpuforge drain reason starts {REASON_PREFIX!r}: {reason!r}")
    argv = drain_argv(node, reason)  # checks the name before Slurm is asked anything
    shown = parse_node(slurm_command(run, node, show_node_argv(node)).stdout)
    if shown.drain:
        return shown
    slurm_command(run, node, argv)
    return None


def _say(message: str) -> None:
    print(f"gpuforge: slurm: {message}", file=sys.stderr)


@dataclass
class SlurmAgent:
    """The drain-then-replace steps of one --slurm run (see the module docstring)."""

    node: str
    run: Runner
    state_file: Path
    report_asg: Callable[[], str] | None  # reports Unhealthy, returns what it marked; None: no --report-asg

    def __post_init__(self) -> None:
        # Before Slurm is asked anything: a name scontrol reads as many nodes (ALL, a nodeset)
        # or as more than one word would drain nodes that are not this one.
        slurm_values.NODE_NAME.check(self.node, field=NODE_NAME_FIELD)

    def _scontrol(self, argv: tuple[str, ...]) -> CommandResult:
        return slurm_command(self.run, self.node, argv)

    def show(self) -> SlurmNode:
        return parse_node(self._scontrol(show_node_argv(self.node)).stdout)

    def act(self, report: NodeReport, ctx: NodeContext) -> None:
        record = DrainRecord.load(self.state_file)
        slurm = self.show()  # healthy too: an alert may have drained this node (module docstring, 1)
        if report.healthy and record is None and not slurm.drained_by_gpuforge:
            return
        if slurm.drain and not slurm.drained_by_gpuforge:
            self._forget()
            _say(
                f"{self.node} is {slurm.state_text}, drained by someone else (reason {slurm.reason!r}): gpuforge "
                "neither drains it over nor reports it for replacement"
            )
            return
        if not slurm.drain:
            if report.healthy:
                self._forget()
                _say(
                    f"{self.node} is {slurm.state_text}: resumed, so gpuforge no longer tracks a drain of it"
                )
                return
            reason = drain_reason(report, ctx)
            self._scontrol(drain_argv(self.node, reason))
            DrainRecord(self.node, reason).save(self.state_file)
            _say(f"drained {self.node}: {reason} (running jobs finish; no new job starts here)")
            return
        reported = record is not None and record.reported and record.node == self.node
        DrainRecord(self.node, slurm.reason, reported).save(self.state_file)
        if report.healthy:
            _say(
                f"checks pass, but {self.node} stays drained ({slurm.reason!r}): an administrator resumes it "
                f"with `scontrol update NodeName={self.node} State=RESUME`"
            )
        if not slurm.drained:
            _say(
                f"{self.node} is {slurm.state_text}: draining; waiting for its job(s) to end before replacement"
            )
            return
        self._replace(slurm.reason, reported)

    def _replace(self, reason: str, reported: bool) -> None:
        if reported:
            _say(
                f"{self.node} was already reported Unhealthy; waiting for its Auto Scaling group to replace it"
            )
            return
        if self.report_asg is None:
            _say(
                f"{self.node} is drained and idle; with --report-asg its Auto Scaling group would replace it"
            )
            return
        jobs = [line for line in self._scontrol(jobs_argv(self.node)).stdout.splitlines() if line.strip()]
        if jobs:
            _say(f"{self.node} shows DRAINED but squeue still lists {len(jobs)} job(s): not reported yet")
            return
        marked = self.report_asg()
        DrainRecord(self.node, reason, reported=True).save(self.state_file)
        _say(f"{self.node} is drained and idle: marked {marked} Unhealthy in its Auto Scaling group")

    def _forget(self) -> None:
        try:
            self.state_file.unlink(missing_ok=True)
        except OSError as error:
            _say(f"warning: could not remove {self.state_file}: {error}")
