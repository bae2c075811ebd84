"""The Xid check: scan the kernel log for `NVRM: Xid` and act on NVIDIA's catalog.

Each code's immediate action lives in gpuforge/data/xid_catalog.json with the
catalog row it came from (NVIDIA, "Analyzing Xid Errors with the Xid Catalog").
At boot the kernel log holds this boot only, so any Xid there happened on
this node since it started. The catalog's `node_agent` table says what the
agent does for each action: a node whose Xids need a GPU reset or more fails
the gate (drain, then replace: the agent resets and reboots nothing in place),
application-level Xids and codes the catalog gives no action warn.

Two kinds of code carry their action in the message rather than the table:
Xid 154 names NVML's recovery action (by label and by value, since NVML added
values the catalog gives no label for), and NVLink 5's Xids 144-150 say Fatal
or Nonfatal, which the catalog's decode sheet turns into a reset or a warning.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from gpuforge.node.context import NodeContext
from gpuforge.node.report import CheckResult, failed, passed, warned

CATALOG_FILE = "data/xid_catalog.json"
DMESG = ("dmesg",)
WORKFLOW = "workflow"
UNCLASSIFIED = "unclassified"
# Kernel log lines look like
#   [ 966.503025] NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping ...
#   NVRM: Xid (0000:01:00): 13, 0005 00000000 0000502d 00000104 00000000 00000100   (older drivers)
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)\): (?P<code>\d+),?\s*(?P<detail>.*)$")
# Xid 154: "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
_RECOVERY_TARGET = re.compile(r"to 0x(?P<value>[0-9A-Fa-f]+) \((?P<action>[^)]+)\)")
# Xids 144-150: "[pid=4, name=<unknown>, ]NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 ...)"
_NVLINK5_SEVERITY = re.compile(r"^(?:pid=[^,]*, name=[^,]*, )?[A-Z0-9_/]+\s+(?P<severity>[A-Za-z-]+)\b")
NVLINK5_WORKFLOW = "WORKFLOW_NVLINK5_ERR"
RECOVERY_XID = 154


@dataclass(frozen=True)
class XidEntry:
    code: int
    mnemonic: str
    immediate_action: str
    action: str
    workflow_action: str | None
    source: str

    @property
    def gate_action(self) -> str:
        """The action the gate applies: a workflow's boot-time action, else the action itself."""
        return self.workflow_action if self.action == WORKFLOW and self.workflow_action else self.action


@dataclass(frozen=True)
class RecoveryAction:
    """One value of NVML's nvmlDeviceGpuRecoveryAction_t and the gpuforge action it calls for."""

    value: int
    nvml: str
    label: str | None  # the text Xid 154 prints, where NVIDIA's catalog names it
    action: str


@dataclass(frozen=True)
class AgentResponse:
    """What the node agent does for one gpuforge action: the gate's verdict and, in words, the remedy."""

    gate: str  # "pass", "warn" or "fail"
    does: str


@dataclass(frozen=True)
class XidCatalog:
    source: str
    severity_order: tuple[str, ...]
    node_agent: Mapping[str, AgentResponse]
    recovery_actions: Mapping[int, RecoveryAction]
    nvlink5_severity: Mapping[str, str]
    listed_without_action: Mapping[int, str]
    entries: Mapping[int, XidEntry]

    def severity(self, action: str) -> int:
        return self.severity_order.index(action)

    def fails(self, action: str) -> bool:
        """Whether an action fails the gate (the agent drains the node, then replaces it)."""
        response = self.node_agent.get(action)
        return response is not None and response.gate == "fail"

    def recovery_by_label(self, label: str) -> RecoveryAction | None:
        return next((r for r in self.recovery_actions.values() if r.label == label), None)


def _catalog_from(data: Mapping[str, Any]) -> XidCatalog:
    entries = {
        int(code): XidEntry(
            code=int(code),
            mnemonic=row["mnemonic"],
            immediate_action=row["immediate_action"],
            action=row["action"],
            workflow_action=row.get("workflow_action"),
            source=row["source"],
        )
        for code, row in data["codes"].items()
    }
    recovery = {
        int(value): RecoveryAction(int(value), row["nvml"], row["label"], row["action"])
        for value, row in data["recovery_actions"]["values"].items()
    }
    agent = {
        action: AgentResponse(row["gate"], row["does"])
        for action, row in data["node_agent"].items()
        if action != "note"
    }
    nvlink5 = {
        word: action for word, action in data["nvlink5_severity"].items() if word not in ("note", "source")
    }
    unlisted = {int(code): text for code, text in data["listed_without_action"]["codes"].items()}
    return XidCatalog(
        data["source"], tuple(data["severity_order"]), agent, recovery, nvlink5, unlisted, entries
    )


@cache
def load_catalog() -> XidCatalog:
    text = resources.files("gpuforge").joinpath(CATALOG_FILE).read_text(encoding="utf-8")
    return _catalog_from(json.loads(text))


@dataclass(frozen=True)
class XidEvent:
    pci: str
    code: int
    detail: str


def parse_xids(log: str) -> tuple[XidEvent, ...]:
    events = []
    for line in log.splitlines():
        match = _XID.search(line)
        if match:
            events.append(
                XidEvent(match.group("pci").upper(), int(match.group("code")), match.group("detail").strip())
            )
    return tuple(events)


@dataclass(frozen=True)
class XidVerdict:
    event: XidEvent
    action: str  # one of the catalog's severity_order, or "unclassified"
    basis: str  # the catalog bucket (or Xid 154's stated action) behind it


def _recovery_verdict(event: XidEvent, catalog: XidCatalog) -> XidVerdict | None:
    """Xid 154's stated recovery action, by the catalog's label, else by NVML's value; None if unreadable."""
    match = _RECOVERY_TARGET.search(event.detail)
    if match is None:
        return None
    stated = match.group("action").strip()
    labelled = catalog.recovery_by_label(stated)
    if labelled is not None:
        return XidVerdict(event, labelled.action, f"recovery action '{stated}'")
    recovery = catalog.recovery_actions.get(int(match.group("value"), 16))
    if recovery is None:
        return None
    return XidVerdict(event, recovery.action, f"recovery action '{stated}' = {recovery.nvml}")


def _nvlink5_verdict(event: XidEvent, entry: XidEntry, catalog: XidCatalog) -> XidVerdict:
    """An NVLink 5 Xid by its severity word; a word that is not Nonfatal counts as Fatal (fail closed)."""
    match = _NVLINK5_SEVERITY.search(event.detail)
    word = match.group("severity") if match else ""
    if word in catalog.nvlink5_severity:
        return XidVerdict(event, catalog.nvlink5_severity[word], f"{entry.immediate_action}, {word}")
    return XidVerdict(event, entry.gate_action, f"{entry.immediate_action}, severity unread")


def classify(event: XidEvent, catalog: XidCatalog) -> XidVerdict:
    entry = catalog.entries.get(event.code)
    if entry is None:
        listed = catalog.listed_without_action.get(event.code)
        if listed is not None:
            return XidVerdict(event, UNCLASSIFIED, f"NVIDIA's catalog gives no action: {listed}")
        return XidVerdict(event, UNCLASSIFIED, "not in gpuforge's Xid catalog")
    if event.code == RECOVERY_XID:
        verdict = _recovery_verdict(event, catalog)
        if verdict is not None:
            return verdict
    if entry.immediate_action == NVLINK5_WORKFLOW:
        return _nvlink5_verdict(event, entry, catalog)
    return XidVerdict(event, entry.gate_action, entry.immediate_action)


def summarize(verdicts: Iterable[XidVerdict]) -> str:
    """'Xid 79 on 0000:53:00 x2 -> reboot (RESTART_BM)', one item per code, GPU and action."""
    counts = Counter((v.event.code, v.event.pci, v.action, v.basis) for v in verdicts)
    return "; ".join(
        f"Xid {code} on {pci}{f' x{n}' if n > 1 else ''} -> {action} ({basis})"
        for (code, pci, action, basis), n in sorted(counts.items())
    )


def check_xid(ctx: NodeContext) -> CheckResult:
    check_id = "xid"
    result = ctx.run(DMESG)
    if not result.ok:
        return failed(
            check_id,
            f"cannot read the kernel log: {result.failure()}",
            "dmesg is missing or restricted (run the check as root, as the systemd unit does)",
        )
    catalog = load_catalog()
    verdicts = [classify(event, catalog) for event in parse_xids(result.stdout)]
    if not verdicts:
        return passed(check_id, "no NVRM Xid in the kernel log since boot")
    serious = [v for v in verdicts if catalog.fails(v.action)]
    if serious:
        worst = max((v.action for v in serious), key=catalog.severity)
        return failed(
            check_id,
            summarize(verdicts),
            f"NVIDIA's Xid catalog ({catalog.source}) calls for '{worst}' on this node: a GPU needs a reset "
            f"or more before it can be trusted; the node agent {catalog.node_agent[worst].does}",
        )
    unclassified = [v for v in verdicts if v.action == UNCLASSIFIED]
    app_level = [v for v in verdicts if v.action == "restart_app"]
    if unclassified or app_level:
        cause = (
            f"Xid {', '.join(sorted({str(v.event.code) for v in unclassified}))} without an action in "
            f"gpuforge's catalog: look them up in {catalog.source}"
            if unclassified
            else "application-level Xids (the job that ran, not the GPU) were logged since boot"
        )
        return warned(check_id, summarize(verdicts), cause)
    return passed(check_id, f"informational only: {summarize(verdicts)}")
