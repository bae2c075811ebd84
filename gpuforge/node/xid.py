"""The Xid check: scan the kernel log for `NVRM: Xid` and act on NVIDIA's catalog.

Each code's immediate action lives in gpuforge/data/xid_catalog.json with the
catalog row it came from (NVIDIA, "Analyzing Xid Errors with the Xid Catalog").
At boot the kernel log holds this boot only, so any Xid there happened on
this node since it started. A node whose Xids need a GPU reset or more fails
the gate; application-level Xids and codes the catalog does not list warn.
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
_RECOVERY_TARGET = re.compile(r"to 0x[0-9A-Fa-f]+ \((?P<action>[^)]+)\)")


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
class XidCatalog:
    source: str
    severity_order: tuple[str, ...]
    recovery_actions: Mapping[str, str]
    entries: Mapping[int, XidEntry]

    def severity(self, action: str) -> int:
        return self.severity_order.index(action)


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
    recovery = {key: value for key, value in data["recovery_actions"].items() if key != "note"}
    return XidCatalog(data["source"], tuple(data["severity_order"]), recovery, entries)


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


def classify(event: XidEvent, catalog: XidCatalog) -> XidVerdict:
    entry = catalog.entries.get(event.code)
    if entry is None:
        return XidVerdict(event, UNCLASSIFIED, "not in gpuforge's Xid catalog")
    if event.code == 154:
        match = _RECOVERY_TARGET.search(event.detail)
        stated = match.group("action").strip() if match else None
        if stated is not None and stated in catalog.recovery_actions:
            return XidVerdict(event, catalog.recovery_actions[stated], f"recovery action '{stated}'")
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
    reset = catalog.severity("reset_gpu")
    serious = [v for v in verdicts if v.action != UNCLASSIFIED and catalog.severity(v.action) >= reset]
    if serious:
        worst = max((v.action for v in serious), key=catalog.severity)
        return failed(
            check_id,
            summarize(verdicts),
            f"NVIDIA's Xid catalog ({catalog.source}) calls for '{worst}' on this node: a GPU needs a reset "
            "or more before it can be trusted; replace the node",
        )
    unclassified = [v for v in verdicts if v.action == UNCLASSIFIED]
    app_level = [v for v in verdicts if v.action == "restart_app"]
    if unclassified or app_level:
        cause = (
            f"Xid {', '.join(sorted({str(v.event.code) for v in unclassified}))} not in gpuforge's catalog: "
            f"look them up in {catalog.source}"
            if unclassified
            else "application-level Xids (the job that ran, not the GPU) were logged since boot"
        )
        return warned(check_id, summarize(verdicts), cause)
    return passed(check_id, f"informational only: {summarize(verdicts)}")
