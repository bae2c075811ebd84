"""The rendered set, read by the real Prometheus 3.13 tools and Alertmanager 0.33 (scripts/monitoring-root.sh).

For every shipped stack with monitoring: `promtool check config` (which also checks the rule
files it names), `promtool check rules`, `amtool check-config`, and every flag in
prometheus.flags known to the real `prometheus`. Every alert and recording rule has a firing
and a quiet case run by `promtool test rules`; a rule without both fails the test.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from monitoring_support import SHIPPED_STACKS, StackMaker, tool

from gpuforge.cli import main
from gpuforge.monitoring.rules import ALERTS_FILE, USAGE_FILE, load_rules

MONITORED_STACKS = ["p5-prod", "p6-b200-reserved"]  # the shipped stacks with a Slurm controller
TIMEOUT = 60
DCGM = {"job": "gpuforge-dcgm", "node": "i-1", "gpu": "0"}
NODE = {"job": "gpuforge-node", "node": "i-1"}
EFA = {"job": "gpuforge-node", "node": "i-1", "device": "rdmap16s27", "port": "1"}
GPUS = 8  # p5.48xlarge, the stack these cases render
# The code each Xid alert's firing case reports (its `xid` annotation).
XID_SHOWN = {
    "GpuforgeXidNodeBad": "79",
    "GpuforgeXidApplication": "13",
    "GpuforgeXidFromLog": "154",
    "GpuforgeXidUnclassified": "1",
}


def _series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ",".join(f'{key}="{value}"' for key, value in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def _gpus(count: int) -> list[dict[str, str]]:
    return [_series("DCGM_FI_DEV_GPU_TEMP", {**DCGM, "gpu": str(gpu)}, "40x20") for gpu in range(count)]


# alert -> (firing: series, eval time, labels the alert carries), (quiet: series, eval time)
AlertCase = tuple[tuple[list[dict[str, str]], str, dict[str, str]], tuple[list[dict[str, str]], str]]
ALERT_CASES: dict[str, AlertCase] = {
    "GpuforgeXidNodeBad": (
        ([_series("DCGM_FI_DEV_XID_ERRORS", DCGM, "79x5")], "2m", DCGM),
        ([_series("DCGM_FI_DEV_XID_ERRORS", DCGM, "13x5")], "2m"),
    ),
    "GpuforgeXidApplication": (
        ([_series("DCGM_FI_DEV_XID_ERRORS", DCGM, "13x5")], "2m", DCGM),
        ([_series("DCGM_FI_DEV_XID_ERRORS", DCGM, "79x5")], "2m"),
    ),
    "GpuforgeXidFromLog": (
        ([_series("DCGM_FI_DEV_XID_ERRORS", DCGM, "154x5")], "2m", DCGM),
        ([_series("DCGM_FI_DEV_XID_ERRORS", DCGM, "79x5")], "2m"),
    ),
    "GpuforgeXidUnclassified": (
        ([_series("DCGM_FI_DEV_XID_ERRORS", DCGM, "1x5")], "2m", DCGM),  # 1: unused on these GPUs
        ([_series("DCGM_FI_DEV_XID_ERRORS", DCGM, "0x5")], "2m"),
    ),
    "GpuforgeEccDoubleBit": (
        ([_series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", DCGM, "0 0 1 1 1")], "4m", DCGM),
        ([_series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", DCGM, "3x5")], "4m"),  # old errors, none new
    ),
    "GpuforgeRowRemapFailure": (
        ([_series("DCGM_FI_DEV_ROW_REMAP_FAILURE", DCGM, "0 0 1 1 1")], "4m", DCGM),
        ([_series("DCGM_FI_DEV_ROW_REMAP_FAILURE", DCGM, "0x5")], "4m"),
    ),
    "GpuforgeRowRemapPending": (
        ([_series("DCGM_FI_DEV_ROW_REMAP_PENDING", DCGM, "0 0 1 1 1")], "4m", DCGM),
        ([_series("DCGM_FI_DEV_ROW_REMAP_PENDING", DCGM, "0x5")], "4m"),
    ),
    "GpuforgeNvlinkErrors": (
        (
            [_series("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", DCGM, "0 0 5 5 5")],
            "4m",
            {"node": "i-1", "gpu": "0"},
        ),
        ([_series("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", DCGM, "7x5")], "4m"),
    ),
    "GpuforgeThermalThrottling": (  # 30 s of each minute throttled (rate 0.5), then 1 s (rate 0.017)
        ([_series("DCGM_FI_DEV_THERMAL_VIOLATION", DCGM, "0+30000000000x30")], "20m", DCGM),
        ([_series("DCGM_FI_DEV_THERMAL_VIOLATION", DCGM, "0+1000000000x30")], "20m"),
    ),
    "GpuforgePowerThrottling": (  # 48 s of each minute (0.8) against 12 s (0.2)
        ([_series("DCGM_FI_DEV_POWER_VIOLATION", DCGM, "0+48000000000x40")], "30m", DCGM),
        ([_series("DCGM_FI_DEV_POWER_VIOLATION", DCGM, "0+12000000000x40")], "30m"),
    ),
    "GpuforgeEfaRetransmits": (  # 2000 packets a second against 100
        ([_series("gpuforge_efa_retrans_pkts_total", EFA, "0+120000x30")], "20m", EFA),
        ([_series("gpuforge_efa_retrans_pkts_total", EFA, "0+6000x30")], "20m"),
    ),
    "GpuforgeEfaUnresponsiveRemote": (
        (
            [
                _series("gpuforge_efa_unresponsive_remote_events_total", EFA, "0 0 1 1 1"),
                _series("gpuforge_efa_impaired_remote_conn_events_total", EFA, "0x5"),
            ],
            "4m",
            EFA,
        ),
        (
            [
                _series("gpuforge_efa_unresponsive_remote_events_total", EFA, "2x5"),
                _series("gpuforge_efa_impaired_remote_conn_events_total", EFA, "0x5"),
            ],
            "4m",
        ),
    ),
    "GpuforgeGpuMissing": (
        ([*_gpus(GPUS - 1), _series("up", NODE | {"job": "gpuforge-dcgm"}, "1x20")], "10m", {"node": "i-1"}),
        ([*_gpus(GPUS), _series("up", NODE | {"job": "gpuforge-dcgm"}, "1x20")], "10m"),
    ),
    "GpuforgeExporterDown": (
        (
            [_series("up", {"job": "gpuforge-dcgm", "node": "i-1"}, "0x10")],
            "8m",
            {"job": "gpuforge-dcgm", "node": "i-1"},
        ),
        ([_series("up", NODE, "0x10")], "8m"),  # node_exporter down is GpuforgeNodeDown's
    ),
    "GpuforgeNodeDown": (
        ([_series("up", NODE, "0x10")], "8m", NODE),
        ([_series("up", NODE, "1x10")], "8m"),
    ),
    "GpuforgeGpuHeldIdle": (
        (
            [
                _series("DCGM_FI_PROF_SM_ACTIVE", {**DCGM, "hpc_job": "42"}, "0.01x40"),
                _series("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", {**DCGM, "hpc_job": "42"}, "0x40"),
            ],
            "35m",
            {**DCGM, "hpc_job": "42"},
        ),
        (
            [
                _series("DCGM_FI_PROF_SM_ACTIVE", {**DCGM, "hpc_job": "42"}, "0.6x40"),
                _series("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", {**DCGM, "hpc_job": "42"}, "0.3x40"),
            ],
            "35m",
        ),
    ),
}

# Two GPUs of node i-1 held by job 42, SM active 0.5 and 0.25: 120 GPU-seconds a minute, 45 useful.
_HELD = [
    _series("DCGM_FI_DEV_GPU_TEMP", {**DCGM, "gpu": "0", "hpc_job": "42"}, "40x5"),
    _series("DCGM_FI_DEV_GPU_TEMP", {**DCGM, "gpu": "1", "hpc_job": "42"}, "40x5"),
    _series("DCGM_FI_PROF_SM_ACTIVE", {**DCGM, "gpu": "0", "hpc_job": "42"}, "0.5x5"),
    _series("DCGM_FI_PROF_SM_ACTIVE", {**DCGM, "gpu": "1", "hpc_job": "42"}, "0.25x5"),
]
_FREE = [  # the same GPUs with no job (no mapping file: dcgm-exporter adds no hpc_job label)
    _series("DCGM_FI_DEV_GPU_TEMP", DCGM, "40x5"),
    _series("DCGM_FI_PROF_SM_ACTIVE", DCGM, "0.5x5"),
]
RECORDING_CASES: dict[str, tuple[dict[str, str], float]] = {
    "gpuforge_job:gpu_seconds_held:1m": ({"hpc_job": "42"}, 120),
    "gpuforge_job:gpu_seconds_useful:1m": ({"hpc_job": "42"}, 45),
    "gpuforge_job:gpu_useful_ratio:1m": ({"hpc_job": "42"}, 0.375),
    "gpuforge_node:gpu_seconds_held:1m": ({"node": "i-1"}, 120),
    "gpuforge_node:gpu_seconds_useful:1m": ({"node": "i-1"}, 45),
    "gpuforge_node:gpu_useful_ratio:1m": ({"node": "i-1"}, 0.375),
}


def _run(*command: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(part) for part in command], capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


def _render(stack_dir: Path, stack: str, out: Path) -> Path:
    assert main(["monitoring", "render", str(stack_dir), "--stack", stack, "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("stack", MONITORED_STACKS)
def test_the_real_tools_accept_every_rendered_file(stack: str, tmp_path: Path) -> None:
    out = _render(SHIPPED_STACKS, stack, tmp_path / "out")
    checked = _run(tool("promtool"), "check", "config", out / "prometheus.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 2 rule files found" in checked.stdout
    assert f"SUCCESS: {len(ALERT_CASES)} rules found" in checked.stdout
    assert f"SUCCESS: {len(RECORDING_CASES)} rules found" in checked.stdout
    rules = _run(tool("promtool"), "check", "rules", out / "rules" / ALERTS_FILE, out / "rules" / USAGE_FILE)
    assert rules.returncode == 0, rules.stdout + rules.stderr
    alertmanager = _run(tool("amtool"), "check-config", out / "alertmanager.yml")
    assert alertmanager.returncode == 0, alertmanager.stdout + alertmanager.stderr
    known = _run(tool("prometheus"), "--help").stdout + _run(tool("prometheus"), "--help").stderr
    for line in (out / "prometheus.flags").read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            assert f"{line.split('=', 1)[0]}=" in known, line


def _annotations(out: Path) -> dict[str, dict[str, str]]:
    groups = yaml.safe_load((out / "rules" / ALERTS_FILE).read_text(encoding="utf-8"))["groups"]
    return {rule["alert"]: rule["annotations"] for group in groups for rule in group["rules"]}


def _tests(out: Path) -> list[dict[str, Any]]:
    """promtool's unit tests: one group per case (firing and quiet) of every rule."""
    annotations = _annotations(out)
    severity = {alert.name: (alert.severity, alert.drain) for alert in load_rules().alerts}
    groups: list[dict[str, Any]] = []
    for name, ((series, at, labels), (quiet, quiet_at)) in ALERT_CASES.items():
        level, drain = severity[name]
        expected = {**labels, "severity": level, "drain": "true" if drain else "false"}
        # promtool compares annotations after templating: the Xid alerts show the code DCGM reported.
        shown = {
            key: XID_SHOWN.get(name, text) if text == "{{ $value }}" else text
            for key, text in annotations[name].items()
        }
        firing = [{"exp_labels": expected, "exp_annotations": shown}]
        for inputs, when, alerts in ((series, at, firing), (quiet, quiet_at, [])):
            groups.append(
                {
                    "interval": "1m",
                    "input_series": inputs,
                    "alert_rule_test": [{"eval_time": when, "alertname": name, "exp_alerts": alerts}],
                }
            )
    for record, (labels, value) in RECORDING_CASES.items():
        inner = ",".join(f'{key}="{text}"' for key, text in labels.items())
        sample = {"labels": f"{record}{{{inner}}}", "value": value}
        for inputs, samples in ((_HELD, [sample]), (_FREE, [])):
            groups.append(
                {
                    "interval": "1m",
                    "input_series": inputs,
                    "promql_expr_test": [{"expr": record, "eval_time": "3m", "exp_samples": samples}],
                }
            )
    return groups


def test_every_rule_has_a_firing_and_a_quiet_case() -> None:
    data = load_rules()
    assert set(ALERT_CASES) == {alert.name for alert in data.alerts}
    assert set(RECORDING_CASES) == {rule.record for rule in data.recording}


def test_every_rule_fires_and_stays_quiet_in_the_real_promtool(tmp_path: Path) -> None:
    out = _render(SHIPPED_STACKS, "p5-prod", tmp_path / "out")
    suite = {
        "rule_files": [f"rules/{ALERTS_FILE}", f"rules/{USAGE_FILE}"],
        "evaluation_interval": "1m",
        "tests": _tests(out),
    }
    path = out / "gpuforge-rules-test.yml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False), encoding="utf-8")
    result = _run(tool("promtool"), "test", "rules", path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("labels", "receivers"),
    [
        (["alertname=GpuforgeXidNodeBad", "drain=true", "node=i-1"], "gpuforge-drain,gpuforge-notify"),
        (["alertname=GpuforgeNodeDown", "drain=false", "node=i-1"], "gpuforge-notify"),
    ],
)
def test_drain_alerts_reach_the_drain_receiver_and_sns(
    make_stack: StackMaker, tmp_path: Path, labels: list[str], receivers: str
) -> None:
    topic = "arn:aws:sns:us-east-1:123456789012:gpuforge-alerts"
    folder = make_stack(**{"gpuforge:monitoring": {"alerts": {"sns": topic}}})
    out = _render(folder, "test", tmp_path / "out")
    routed = _run(
        tool("amtool"), "config", "routes", "test", f"--config.file={out / 'alertmanager.yml'}", *labels
    )
    assert routed.returncode == 0, routed.stdout + routed.stderr
    assert routed.stdout.strip() == receivers
