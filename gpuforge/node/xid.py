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
or Nonfatal, which the catalog's decode sheet turns into a reset or a warning;
its promotable ('Non-fatal*') rows take their second action when the message's
IntrInfo register carries the sheet's Action 2 bits.

One code's action depends on the rest of the log: Xid 45 alone calls for a
Fabric Manager restart (NVIDIA's WORKFLOW_XID_45), beside other Xids it follows
them. `classify_log` judges a whole log; `classify` one line on its own.
Codes NVIDIA marks as applying to none of its current GPUs carry no action.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
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
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)\): (?P<code>[0-9]+),?\s*(?P<detail>.*)$")
# Xid 154: "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
_RECOVERY_TARGET = re.compile(r"to 0x(?P<value>[0-9A-Fa-f]+) \((?P<action>[^)]+)\)")
# Xids 144-150: "[pid=4, name=<unknown>, ]NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 ...)"
_NVLINK5_SEVERITY = re.compile(r"^(?:pid=[^,]*, name=[^,]*, )?[A-Z0-9_/]+\s+(?P<severity>[A-Za-z-]+)\b")
# Xids 144-150 end in "(<intrInfo> <errorStatus> <errorDebugData[0]> ...)".
_NVLINK5_REGISTERS = re.compile(r"\((?P<intr>0x[0-9A-Fa-f]{1,8})\s+(?P<status>0x[0-9A-Fa-f]{1,8})\b")
NVLINK5_WORKFLOW = "WORKFLOW_NVLINK5_ERR"
RECOVERY_XID = 154
NEEDS_NVSWITCH = "nvswitch"


@dataclass(frozen=True)
class XidEntry:
    code: int
    mnemonic: str
    immediate_action: str
    action: str
    workflow_action: str | None
    source: str
    solo_action: str | None = None  # the action when no other Xid is in the log (Xid 45)

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
    needs: str | None = None  # "nvswitch": the action exists only on NVSwitch types


@dataclass(frozen=True)
class PromotableRow:
    """A 'Non-fatal*' row of the catalog's XID 144-150 decode sheet: its second action and the bits that call it."""

    xid: int
    subcode: str
    error_status: frozenset[int]
    action_2_bucket: str
    action_2: str
    action_2_patterns: tuple[str, ...]  # IntrInfo low bits per message layout (v1, v2), '-' = any

    def promoted(self, intr_info: int, error_status: int) -> bool:
        return error_status in self.error_status and any(
            _bits_match(intr_info, pattern) for pattern in self.action_2_patterns
        )


def _bits_match(value: int, pattern: str) -> bool:
    """Whether `value`'s low bits read as `pattern` (most significant first; '-' matches either bit)."""
    width = len(pattern)
    return all(
        bit == "-" or int(bit) == (value >> (width - 1 - position)) & 1
        for position, bit in enumerate(pattern)
    )


@dataclass(frozen=True)
class XidCatalog:
    source: str
    severity_order: tuple[str, ...]
    actions: Mapping[str, str]  # what each action means, in words
    node_agent: Mapping[str, AgentResponse]
    recovery_actions: Mapping[int, RecoveryAction]
    nvlink5_severity: Mapping[str, str]
    nvlink5_promotable: tuple[PromotableRow, ...]
    listed_without_action: Mapping[int, str]
    unused: Mapping[int, str]  # codes NVIDIA marks as applying to none of its current GPUs
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
            solo_action=row.get("solo_action"),
        )
        for code, row in data["codes"].items()
    }
    recovery = {
        int(value): RecoveryAction(int(value), row["nvml"], row["label"], row["action"])
        for value, row in data["recovery_actions"]["values"].items()
    }
    agent = {
        action: AgentResponse(row["gate"], row["does"], row.get("needs"))
        for action, row in data["node_agent"].items()
        if action != "note"
    }
    buckets = data["bucket_mapping"]
    promotable = tuple(
        PromotableRow(
            xid=row["xid"],
            subcode=row["subcode"],
            error_status=frozenset(int(status, 16) for status in row["error_status"]),
            action_2_bucket=row["action_2"]["bucket"],
            action_2=buckets[row["action_2"]["bucket"]],
            action_2_patterns=tuple(row["action_2"]["intrinfo"].values()),
        )
        for row in data["nvlink5_promotable"]["rows"]
    )
    nvlink5 = {
        word: action for word, action in data["nvlink5_severity"].items() if word not in ("note", "source")
    }
    unlisted = {int(code): text for code, text in data["listed_without_action"]["codes"].items()}
    unused = {int(code): mnemonic for code, mnemonic in data["unused"]["codes"].items()}
    return XidCatalog(
        source=data["source"],
        severity_order=tuple(data["severity_order"]),
        actions=dict(data["actions"]),
        node_agent=agent,
        recovery_actions=recovery,
        nvlink5_severity=nvlink5,
        nvlink5_promotable=promotable,
        listed_without_action=unlisted,
        unused=unused,
        entries=entries,
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


def _promoted_verdict(event: XidEvent, entry: XidEntry, catalog: XidCatalog) -> XidVerdict | None:
    """A promotable ('Non-fatal*') NVLink 5 row whose IntrInfo carries the Action 2 bits, else None."""
    registers = _NVLINK5_REGISTERS.search(event.detail)
    if registers is None:
        return None
    intr_info, status = int(registers.group("intr"), 16), int(registers.group("status"), 16)
    row = next(
        (r for r in catalog.nvlink5_promotable if r.xid == event.code and r.promoted(intr_info, status)), None
    )
    if row is None:
        return None
    basis = f"{entry.immediate_action}, {row.subcode} Non-fatal* promoted: Action 2 {row.action_2_bucket}"
    return XidVerdict(event, row.action_2, basis)


def _nvlink5_verdict(event: XidEvent, entry: XidEntry, catalog: XidCatalog) -> XidVerdict:
    """An NVLink 5 Xid: a promoted row's Action 2, else its severity word (not Nonfatal counts as Fatal)."""
    promoted = _promoted_verdict(event, entry, catalog)
    if promoted is not None:
        return promoted
    match = _NVLINK5_SEVERITY.search(event.detail)
    word = match.group("severity") if match else ""
    if word in catalog.nvlink5_severity:
        return XidVerdict(event, catalog.nvlink5_severity[word], f"{entry.immediate_action}, {word}")
    return XidVerdict(event, entry.gate_action, f"{entry.immediate_action}, severity unread")


def classify(event: XidEvent, catalog: XidCatalog) -> XidVerdict:
    """One Xid on its own: a code whose action depends on the rest of the log (Xid 45) takes its not-solo action."""
    entry = catalog.entries.get(event.code)
    if entry is None:
        listed = catalog.listed_without_action.get(event.code)
        if listed is not None:
            return XidVerdict(event, UNCLASSIFIED, f"NVIDIA's catalog gives no action: {listed}")
        unused = catalog.unused.get(event.code)
        if unused is not None:
            return XidVerdict(
                event,
                UNCLASSIFIED,
                f"NVIDIA's catalog marks it as applying to none of A100, H100, B100 and GB200: {unused}",
            )
        return XidVerdict(event, UNCLASSIFIED, "not in gpuforge's Xid catalog")
    if event.code == RECOVERY_XID:
        verdict = _recovery_verdict(event, catalog)
        if verdict is not None:
            return verdict
    if entry.immediate_action == NVLINK5_WORKFLOW:
        return _nvlink5_verdict(event, entry, catalog)
    return XidVerdict(event, entry.gate_action, entry.immediate_action)


def _solo_verdict(
    verdict: XidVerdict, bucket: str, solo_action: str, catalog: XidCatalog, nvswitch: bool
) -> XidVerdict:
    """A code alone in the log takes its solo action, unless that action needs NVSwitch and the type has none."""
    basis = f"{bucket}, solo: {solo_action.upper()}"
    if catalog.node_agent[solo_action].needs == NEEDS_NVSWITCH and not nvswitch:
        return XidVerdict(verdict.event, verdict.action, f"{basis}; no NVSwitch, so nothing to restart")
    return XidVerdict(verdict.event, solo_action, basis)


def classify_log(events: Sequence[XidEvent], catalog: XidCatalog, *, nvswitch: bool) -> list[XidVerdict]:
    """Every Xid of one log (this boot's), judged together: 'solo' means no Xid of another code in it."""
    codes = {event.code for event in events}
    verdicts = []
    for event in events:
        verdict = classify(event, catalog)
        entry = catalog.entries.get(event.code)
        if entry is not None and entry.solo_action is not None and codes == {event.code}:
            verdict = _solo_verdict(verdict, entry.immediate_action, entry.solo_action, catalog, nvswitch)
        verdicts.append(verdict)
    return verdicts


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
    verdicts = classify_log(parse_xids(result.stdout), catalog, nvswitch=ctx.instance.nvswitch)
    if not verdicts:
        return passed(check_id, "no NVRM Xid in the kernel log since boot")
    serious = [v for v in verdicts if catalog.fails(v.action)]
    if serious:
        worst = max((v.action for v in serious), key=catalog.severity)
        return failed(
            check_id,
            summarize(verdicts),
            f"NVIDIA's Xid catalog ({catalog.source}) calls for '{worst}' on this node "
            f"({catalog.actions[worst]}) before it can be trusted; the node agent {catalog.node_agent[worst].does}",
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
