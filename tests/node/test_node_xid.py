"""The Xid catalog (data with sources) and the kernel-log check built on it."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
from node_scenarios import context, fixture, g5_xlarge_healthy, p5_healthy

from gpuforge.node.report import Status
from gpuforge.node.xid import DMESG, XidEvent, check_xid, classify, classify_log, load_catalog, parse_xids

CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
REQUIRED = (
    *(13, 31, 43, 45, 48, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120, 140),
    *range(144, 152),
    *(154, 155, 156, 157, 158, 159, 160, 161),
)
ACTIONS = {"ignore", "restart_app", "restart_fm", "reset_gpu", "reset_bus", "reboot", "replace", "workflow"}
# NVML's nvmlDeviceGpuRecoveryAction_t through v615 (NVML change log): value -> gate verdict.
NVML_RECOVERY = {0: "pass", 1: "fail", 2: "fail", 3: "fail", 4: "fail", 5: "fail", 6: "fail", 7: "fail"}


def _raw() -> dict[str, object]:
    data: dict[str, object] = json.loads(
        resources.files("gpuforge").joinpath("data/xid_catalog.json").read_text(encoding="utf-8")
    )
    return data


def test_catalog_rows_carry_an_action_and_a_source() -> None:
    codes = _raw()["codes"]
    assert isinstance(codes, dict)
    assert set(map(str, REQUIRED)) <= set(codes)
    for code, row in codes.items():
        assert row["action"] in ACTIONS, code
        assert row["source"].startswith(CATALOG_URL), code
        assert row["immediate_action"], code
        if row["action"] == "workflow":
            assert row["workflow_action"] in ACTIONS - {"workflow"} and row["workflow_basis"], code


def test_every_action_and_recovery_action_has_a_node_agent_response() -> None:
    catalog = load_catalog()
    assert set(catalog.node_agent) == set(catalog.severity_order)
    assert {r.gate for r in catalog.node_agent.values()} == {"pass", "warn", "fail"}
    assert {
        value: catalog.node_agent[r.action].gate for value, r in catalog.recovery_actions.items()
    } == NVML_RECOVERY
    nvml = {r.nvml for r in catalog.recovery_actions.values()}
    assert {"NVML_GPU_RECOVERY_ACTION_BUS_RESET", "NVML_GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN"} <= nvml
    entries = catalog.entries.values()
    assert all(e.gate_action in catalog.node_agent for e in entries)


@pytest.mark.parametrize(
    ("code", "bucket", "gate_action"),
    [
        (79, "RESTART_BM", "reboot"),
        (48, "WORKFLOW_XID_48", "reset_gpu"),
        (64, "RESET_GPU", "reset_gpu"),
        (95, "RESET_GPU", "reset_gpu"),
        (94, "RESTART_APP", "restart_app"),
        (13, "RESTART_APP", "restart_app"),
        (31, "RESTART_APP", "restart_app"),
        (63, "IGNORE", "ignore"),
        (92, "IGNORE", "ignore"),
        (74, "WORKFLOW_NVLINK_ERR", "reset_gpu"),
        (119, "RESET_GPU", "reset_gpu"),
        (120, "RESET_GPU", "reset_gpu"),
        (140, "RESET_GPU", "reset_gpu"),
        (144, "WORKFLOW_NVLINK5_ERR", "reset_gpu"),
        (149, "WORKFLOW_NVLINK5_ERR", "reset_gpu"),
        (150, "WORKFLOW_NVLINK5_ERR", "reset_gpu"),
        (151, "RESTART_VM", "reboot"),
        (157, "IGNORE", "ignore"),
        (159, "CHECK_UVM", "reset_gpu"),
        (54, "CHECK_MECHANICALS", "replace"),
    ],
)
def test_catalog_actions_as_nvidia_lists_them(code: int, bucket: str, gate_action: str) -> None:
    entry = load_catalog().entries[code]
    assert (entry.immediate_action, entry.gate_action) == (bucket, gate_action)


def test_parse_both_line_formats() -> None:
    log = (
        "[ 966.503025] NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.\n"
        "May  6 00:38:27 host kernel: [ 4909.922970] NVRM: Xid (0000:01:00): 13, 0005 00000000 0000502d 00000104\n"
        "[    7.902311] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.133.20\n"
    )
    assert parse_xids(log) == (
        XidEvent(
            "0000:10:1C", 63, "pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate."
        ),
        XidEvent("0000:01:00", 13, "0005 00000000 0000502d 00000104"),
    )


def test_xid_154_takes_the_stated_recovery_action() -> None:
    catalog = load_catalog()
    reboot = XidEvent(
        "0000:A8:00", 154, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
    )
    assert classify(reboot, catalog).action == "reboot"
    none = XidEvent(
        "0000:A8:00", 154, "GPU recovery action changed from 0x2 (Node Reboot Required) to 0x0 (None)"
    )
    assert classify(none, catalog).action == "ignore"
    unreadable = XidEvent("0000:A8:00", 154, "something new")
    assert classify(unreadable, catalog).action == "reset_gpu"


@pytest.mark.parametrize(
    ("detail", "action"),
    [
        # The catalog's Xid 154 labels.
        ("GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)", "reset_gpu"),
        ("GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)", "reset_gpu"),
        ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", "reset_gpu"),
        # Values NVML added (v595, v615) that the catalog names no label for: read by value.
        ("GPU recovery action changed from 0x0 (None) to 0x5 (Recover IMEX Domain)", "reset_gpu"),
        ("GPU recovery action changed from 0x0 (None) to 0x6 (Bus Reset Required)", "reset_bus"),
        ("GPU recovery action changed from 0x0 (None) to 0x7 (System Reboot Required)", "reboot"),
    ],
)
def test_xid_154_reads_every_nvml_recovery_action(detail: str, action: str) -> None:
    assert classify(XidEvent("0000:A8:00", 154, detail), load_catalog()).action == action


# A 149 line as published in public Xid parsers' tests (search corpus code-index id 30820515515) and
# NVIDIA's own message format for Xids 144-150 (catalog, guidance class WORKFLOW_NVLINK5_ERR).
FATAL_149 = "NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"


def test_nvlink5_xids_take_their_severity_word() -> None:
    catalog = load_catalog()
    fatal = classify(XidEvent("0009:01:00", 149, FATAL_149), catalog)
    assert (fatal.action, fatal.basis) == ("reset_gpu", "WORKFLOW_NVLINK5_ERR, Fatal")
    nonfatal = XidEvent("0000:00:1E", 146, "TLW_RX_PIPE1 Nonfatal XC0 i0 Link 03 (0x00000010 0x00000020)")
    assert classify(nonfatal, catalog).action == "restart_app"
    with_pid = XidEvent(
        "0000:00:1E", 145, "pid=4, name=<unknown>, RLW_SRC_TRACK Fatal XC0 i1 Link 00 (0x1 0x2)"
    )
    assert classify(with_pid, catalog).action == "reset_gpu"
    unread = classify(
        XidEvent("0000:97:00", 144, "pid='<unknown>', name=<unknown>, NVLink: SAW MVB error"), catalog
    )
    assert (unread.action, unread.basis) == ("reset_gpu", "WORKFLOW_NVLINK5_ERR, severity unread")


def test_fatal_nvlink5_xid_fails_and_names_what_the_agent_does(root: Path) -> None:
    log = f"[171167.620236] NVRM: Xid (PCI:0009:01:00): 149, {FATAL_149}\n"
    ctx, _ = context(p5_healthy().set(DMESG, log), "p6-b200.48xlarge", root)
    result = check_xid(ctx)
    assert result.status is Status.FAIL
    assert "'reset_gpu'" in result.cause and "drains the node, then replaces it once idle" in result.cause


def test_codes_the_catalog_lists_without_an_action_warn() -> None:
    verdict = classify(XidEvent("0000:97:00", 167, ""), load_catalog())
    assert verdict.action == "unclassified" and "PCIE_FATAL_TIMEOUT" in verdict.basis


def test_clean_log_passes(root: Path) -> None:
    ctx, _ = context(p5_healthy(), "p5.48xlarge", root)
    assert check_xid(ctx).evidence == "no NVRM Xid in the kernel log since boot"


def test_xid_79_fails_the_node(root: Path) -> None:
    ctx, _ = context(p5_healthy().set(DMESG, fixture("dmesg/xid79.txt")), "p5.48xlarge", root)
    result = check_xid(ctx)
    assert result.status is Status.FAIL
    assert result.evidence == (
        "Xid 79 on 0000:A8:00 -> reboot (RESTART_BM); "
        "Xid 154 on 0000:A8:00 -> reboot (recovery action 'Node Reboot Required')"
    )
    assert "'reboot'" in result.cause and CATALOG_URL in result.cause


def test_captured_h100_xid_79_beside_nvswitch_sxids(root: Path) -> None:
    # Captured on an H100 NVSwitch node: one Xid 79, then SXid lines of the NVSwitch driver,
    # which are not GPU Xids and must not be read as such.
    text = fixture("dmesg/captured-h100-xid79-sxid.txt")
    assert text.count("SXid (PCI:") == 8
    assert parse_xids(text) == (
        XidEvent("0000:91:00", 79, "pid='<unknown>', name=<unknown>, GPU has fallen off the bus."),
    )
    ctx, _ = context(p5_healthy().set(DMESG, text), "p5.48xlarge", root)
    result = check_xid(ctx)
    assert (result.status, result.evidence) == (Status.FAIL, "Xid 79 on 0000:91:00 -> reboot (RESTART_BM)")


def test_reset_level_xids_fail(root: Path) -> None:
    ctx, _ = context(p5_healthy().set(DMESG, fixture("dmesg/xid-reset-needed.txt")), "p5.48xlarge", root)
    result = check_xid(ctx)
    assert result.status is Status.FAIL
    assert "Xid 48 on 0000:86:00 -> reset_gpu (WORKFLOW_XID_48)" in result.evidence
    assert "Xid 95 on 0000:86:00 -> reset_gpu (RESET_GPU)" in result.evidence
    assert "Xid 45 on 0000:86:00 -> ignore (WORKFLOW_XID_45)" in result.evidence


def test_application_xids_only_warn(root: Path) -> None:
    ctx, _ = context(p5_healthy().set(DMESG, fixture("dmesg/xid-application.txt")), "p5.48xlarge", root)
    result = check_xid(ctx)
    assert result.status is Status.WARN
    assert "Xid 13 on 0000:53:00 x2 -> restart_app (RESTART_APP)" in result.evidence
    assert "Xid 63 on 0000:75:00 -> ignore (IGNORE)" in result.evidence
    assert "application-level" in result.cause


def test_codes_marked_unused_warn_with_a_pointer(root: Path) -> None:
    ctx, _ = context(p5_healthy().set(DMESG, fixture("dmesg/xid-unlisted.txt")), "p5.48xlarge", root)
    result = check_xid(ctx)
    assert result.status is Status.WARN
    assert result.evidence == (
        "Xid 87 on 0000:97:00 -> unclassified (NVIDIA's catalog marks it as applying to none of "
        "A100, H100, B100 and GB200: NVTELEMETRY_DRIVER_REPORT)"
    )
    assert CATALOG_URL in result.cause


def test_codes_outside_nvidias_catalog_warn() -> None:
    # NVIDIA's Xids sheet ends at 172; a newer driver's code is not acted on, nor passed silently.
    verdict = classify(XidEvent("0000:97:00", 173, ""), load_catalog())
    assert (verdict.action, verdict.basis) == ("unclassified", "not in gpuforge's Xid catalog")


def test_unreadable_kernel_log_fails(root: Path) -> None:
    scenario = p5_healthy().set(DMESG, "dmesg: read kernel buffer failed: Operation not permitted\n", 1)
    ctx, _ = context(scenario, "p5.48xlarge", root)
    result = check_xid(ctx)
    assert result.status is Status.FAIL
    assert "Operation not permitted" in result.evidence and "root" in result.cause


# --- NVIDIA's workflows as the catalog states them (issue 20, item 3) ---------------------------

# The Xid 45 line of dmesg/xid-reset-needed.txt, alone in the log.
LONE_XID_45 = "[  955.302044] NVRM: Xid (PCI:0000:86:00): 45, pid=30212, name=python3, Ch 00000010\n"


def test_lone_xid_45_on_an_nvswitch_type_restarts_fabric_manager(root: Path) -> None:
    # WORKFLOW_XID_45: "Solo: RESTART_FM Not Solo: IGNORE (follow guidance in other Xid)".
    ctx, _ = context(p5_healthy().set(DMESG, LONE_XID_45), "p5.48xlarge", root)
    result = check_xid(ctx)
    assert result.status is Status.FAIL
    assert result.evidence == "Xid 45 on 0000:86:00 -> restart_fm (WORKFLOW_XID_45, solo: RESTART_FM)"
    catalog = load_catalog()
    assert "'restart_fm'" in result.cause and catalog.node_agent["restart_fm"].does in result.cause
    assert "Fabric Manager" in result.cause


def test_lone_xid_45_without_nvswitch_has_no_fabric_manager_to_restart(root: Path) -> None:
    ctx, _ = context(g5_xlarge_healthy().set(DMESG, LONE_XID_45), "g5.xlarge", root)
    result = check_xid(ctx)
    assert result.status is Status.PASS
    assert "Xid 45 on 0000:86:00 -> ignore (WORKFLOW_XID_45, solo: RESTART_FM" in result.evidence
    assert "no NVSwitch" in result.evidence


def test_xid_45_beside_other_xids_follows_them() -> None:
    events = parse_xids(fixture("dmesg/xid-reset-needed.txt"))
    verdicts = {v.event.code: v for v in classify_log(events, load_catalog(), nvswitch=True)}
    assert verdicts[45].action == "ignore"
    assert verdicts[48].action == "reset_gpu"


def test_restart_fm_is_an_action_of_the_catalogs_vocabulary() -> None:
    raw = _raw()
    catalog = load_catalog()
    assert raw["bucket_mapping"]["RESTART_FM"] == "restart_fm"  # type: ignore[index]
    assert catalog.node_agent["restart_fm"].needs == "nvswitch"
    assert catalog.fails("restart_fm")
    order = catalog.severity_order
    assert order.index("restart_app") < order.index("restart_fm") < order.index("reset_gpu")
    entry = catalog.entries[45]
    assert (entry.solo_action, entry.gate_action) == ("restart_fm", "ignore")


UNUSED = (
    *range(1, 8), 9, 10, 12, *range(15, 25), *range(26, 31), *range(33, 37), 42, 47,
    *range(49, 54), *range(55, 60), 61, 65, 73, 81, 87, 90, 91, *range(111, 119),
    *range(122, 126), 138, 152, 153,
)  # fmt: skip


def test_codes_nvidia_marks_for_none_of_its_gpus_carry_no_action() -> None:
    # Every row of NVIDIA's Xids sheet whose four "Applies to" columns (A100, H100, B100, GB200)
    # all say NO, 61 (PMU_BREAKPOINT, "Unused") among them.
    catalog = load_catalog()
    assert set(catalog.unused) == set(UNUSED)
    assert not set(catalog.unused) & set(catalog.entries)
    verdict = classify(XidEvent("0000:53:00", 61, ""), catalog)
    assert verdict.action == "unclassified"
    assert "PMU_BREAKPOINT" in verdict.basis and "A100, H100, B100 and GB200" in verdict.basis


def test_xid_61_warns_and_does_not_replace_the_node(root: Path) -> None:
    # The bare form "NVRM: Xid (PCI:<bus>): <code>" of public parsers' tests (code index id 55744232279).
    log = "[  812.000001] NVRM: Xid (PCI:0000:53:00): 61\n"
    ctx, _ = context(p5_healthy().set(DMESG, log), "p5.48xlarge", root)
    result = check_xid(ctx)
    assert result.status is Status.WARN
    assert result.evidence.startswith("Xid 61 on 0000:53:00 -> unclassified (NVIDIA's catalog marks it")


# Xid 145 lines in the form leptonai/gpud's tests use (code index id 30235319091):
# "<subcode> <Fatal|Nonfatal> XC0 i0 Link 00 (<intrInfo> <errorStatus> ...)". The promoted ones set
# the bit NVIDIA's 'XID 144-150 Decode' sheet names for Action 2 of the RLW_RXPIPE rows.
def _rxpipe(intr: str, status: str) -> XidEvent:
    return XidEvent(
        "0000:04:00", 145, f"RLW_RXPIPE Nonfatal XC0 i0 Link 00 ({intr} {status} 0x00000000 0x00000000)"
    )


@pytest.mark.parametrize(
    ("intr", "status", "action"),
    [
        ("0x00000006", "0x00000001", "restart_app"),  # V2 (R575+), Action 1: stays non-fatal
        ("0x00000086", "0x00000001", "reset_gpu"),  # V2, bit 7: promoted, Action 2 RESET_GPU
        ("0x00000086", "0x00000002", "reset_gpu"),
        ("0x00000086", "0x00000004", "reset_gpu"),
        ("0x000000c2", "0x00000004", "restart_app"),  # V1 (before R575), Action 1
        ("0x000004c2", "0x00000001", "reset_gpu"),  # V1, bit 10: promoted
        ("0x00000086", "0x00000008", "restart_app"),  # status 0x8 is a plain Non-fatal row
    ],
)
def test_promotable_nvlink5_rows_take_their_second_action(intr: str, status: str, action: str) -> None:
    verdict = classify(_rxpipe(intr, status), load_catalog())
    assert verdict.action == action
    if action == "reset_gpu":
        assert verdict.basis == "WORKFLOW_NVLINK5_ERR, RLW_RXPIPE Non-fatal* promoted: Action 2 RESET_GPU"


def test_promotable_rows_carry_their_source() -> None:
    section = _raw()["nvlink5_promotable"]
    assert isinstance(section, dict)
    assert section["source"].startswith(CATALOG_URL)
    assert [row["subcode"] for row in section["rows"]] == ["RLW_RXPIPE"]
