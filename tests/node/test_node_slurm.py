"""`gpuforge node check --slurm`: drain through Slurm with a reason, then replace once idle.

Slurm's side is real: every `scontrol show node --oneliner` and `squeue` output
fed here was captured from Slurm 26.05.5 (tests/fixtures/node/slurm/README.md).
The unit tests hand `SlurmAgent` a ReplayRunner that records each argv; the end-to-end
tests put `scontrol`/`squeue` stubs on PATH that print those outputs and log
their arguments, so the agent's real subprocess runner calls them.
"""

from __future__ import annotations

import json
import shlex
import socket
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import boto3
import pytest
from node_scenarios import (
    FIXTURES,
    ReplayRunner,
    Scenario,
    context,
    fixture,
    install_commands,
    p5_healthy,
)
from test_node_asg import REGION, group_with_one_instance, health
from test_node_cli import run_node, serve_imds

from gpuforge.cli import main
from gpuforge.node.checks import PERIODIC_CHECKS, run_checks
from gpuforge.node.context import NodeContext
from gpuforge.node.efa import FI_INFO_EFA
from gpuforge.node.imds import ENDPOINT_ENV
from gpuforge.node.nvidia_smi import GPU_QUERY
from gpuforge.node.report import NodeReport
from gpuforge.node.runner import CommandResult, SubprocessRunner
from gpuforge.node.slurm import (
    REASON_MAX_CHARS,
    DrainRecord,
    SlurmAgent,
    SlurmError,
    clean_reason,
    default_node_name,
    drain_reason,
    jobs_argv,
    parse_node,
    show_node_argv,
)
from gpuforge.node.topology import TOPOLOGY
from gpuforge.node.xid import DMESG

NODE = "gpu-a"
P5_MANIFEST = FIXTURES / "manifest/p5-h100.json"
XID79_REASON = "gpuforge: xid 79,154 on GPU 5"


def slurm_out(name: str) -> str:
    return fixture(f"slurm/{name}")


def xid79() -> Scenario:
    return p5_healthy().set(DMESG, fixture("dmesg/xid79.txt"))


def gpu_missing() -> Scenario:
    return p5_healthy().set(GPU_QUERY, fixture("nvidia-smi/query-p5-h100-7of8.csv"))


def efa_missing() -> Scenario:
    """31 of 32 EFA devices: one gone from sysfs and from fi_info."""
    devices = fixture("efa-devices-p5.txt").split()
    scenario = p5_healthy().set(FI_INFO_EFA, fixture("fi_info/efa-p5-31.txt"))
    scenario.dirs = [d for d in scenario.dirs if not d.startswith(f"sys/class/infiniband/{devices[-1]}/")]
    scenario.files = {k: v for k, v in scenario.files.items() if f"/infiniband/{devices[-1]}/" not in k}
    return scenario


def periodic(scenario: Scenario, root: Path) -> tuple[NodeReport, ReplayRunner, NodeContext]:
    ctx, replay = context(scenario, "p5.48xlarge", root, attempts=1)
    return run_checks(ctx, PERIODIC_CHECKS), replay, ctx


class SlurmReplay(ReplayRunner):
    """Real captured outputs for `scontrol show node` and `squeue`; `scontrol update` succeeds.

    A recorded drain cannot be keyed by argv in advance (the argv carries the
    reason under test), so updates are answered by kind, and recorded.
    """

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        if tuple(argv[:2]) == ("scontrol", "update"):
            self.calls.append(tuple(argv))
            return CommandResult(tuple(argv), 0)
        return super().__call__(argv)


class Reports:
    """Stands in for --report-asg's SetInstanceHealth in unit tests (the moto tests use the real one)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> str:
        self.count += 1
        return "i-0123456789abcdef0"


def slurm_agent(show: str, state: Path, reports: Reports | None = None) -> tuple[SlurmAgent, SlurmReplay]:
    scenario = (
        Scenario()
        .set(show_node_argv(NODE), slurm_out(show))
        .set(jobs_argv(NODE), slurm_out("squeue-empty.txt"))
    )
    replay = SlurmReplay(scenario)
    return SlurmAgent(NODE, replay, state, reports), replay


# --- parsing real scontrol output -------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "state", "flags", "reason", "drained", "by_gpuforge"),
    [
        ("show-node-idle.txt", "IDLE", set(), "", False, False),
        ("show-node-draining-gpuforge.txt", "MIXED", {"DRAIN"}, "gpuforge: xid 79 on GPU 3", False, True),
        ("show-node-drained-gpuforge.txt", "IDLE", {"DRAIN"}, "gpuforge: xid 79 on GPU 3", True, True),
        (
            "show-node-drained-gpuforge-not-responding.txt",
            "IDLE",
            {"DRAIN", "NOT_RESPONDING"},
            "gpuforge: gpu.inventory 7 of 8 GPUs",
            True,
            True,
        ),
        (
            "show-node-allocated-drain-gpuforge.txt",
            "ALLOCATED",
            {"DRAIN", "NOT_RESPONDING"},
            "gpuforge: gpu.inventory 7 of 8 GPUs",
            False,
            True,
        ),
        (
            "show-node-drained-admin.txt",
            "IDLE",
            {"DRAIN", "NOT_RESPONDING"},
            "disk replacement, ticket OPS-1234",
            True,
            False,
        ),
        ("show-node-draining-admin.txt", "ALLOCATED", {"DRAIN"}, "maintenance window", False, False),
    ],
)
def test_parse_real_scontrol_oneliner(
    name: str, state: str, flags: set[str], reason: str, drained: bool, by_gpuforge: bool
) -> None:
    node = parse_node(slurm_out(name))
    assert (node.name, node.state, set(node.flags), node.reason) == (NODE, state, flags, reason)
    assert (node.drained, node.drained_by_gpuforge) == (drained, by_gpuforge)


def test_an_error_instead_of_a_record_is_a_slurm_error() -> None:
    with pytest.raises(SlurmError, match="Node gpu-zz not found"):
        parse_node(slurm_out("show-node-unknown.txt"))


def test_reason_drops_characters_that_break_the_argument() -> None:
    cleaned = clean_reason('gpuforge: bad "quote" $(rm -rf) a=b\nnext;line `x`')
    assert cleaned == "gpuforge: bad quote (rm -rf) a b next line x"
    assert len(clean_reason("x" * 300)) == REASON_MAX_CHARS


def test_node_name_is_slurmd_nodename_else_the_short_hostname() -> None:
    assert default_node_name({"SLURMD_NODENAME": "gpu-7"}) == "gpu-7"
    assert default_node_name({}) == socket.gethostname().split(".")[0]
    assert "." not in default_node_name({})


# --- drain on failure ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: xid79(), XID79_REASON),
        (lambda: gpu_missing(), "gpuforge: gpu.inventory: 7 of 8 GPUs visible"),
        (lambda: efa_missing(), "gpuforge: efa.devices: 31 of 32 EFA device(s) in "),
    ],
    ids=["xid79", "gpu-missing", "efa-missing"],
)
def test_a_failure_drains_the_node_with_a_gpuforge_reason(
    make: Callable[[], Scenario], expected: str, root: Path, tmp_path: Path
) -> None:
    report, _, ctx = periodic(make(), root)
    assert not report.healthy
    state = tmp_path / "slurm-drain.json"
    reports = Reports()
    drainer, replay = slurm_agent("show-node-idle.txt", state, reports)
    drainer.act(report, ctx)
    show, update = replay.calls
    assert show == ("scontrol", "show", "node", NODE, "--oneliner")
    reason = update[-1].removeprefix("Reason=")
    assert update == ("scontrol", "update", f"NodeName={NODE}", "State=DRAIN", f"Reason={reason}")
    assert reason.startswith(expected) and len(reason) <= REASON_MAX_CHARS
    assert DrainRecord.load(state) == DrainRecord(NODE, reason, reported=False)
    assert reports.count == 0  # drained, not yet idle in Slurm's eyes: no replacement in the same run


def test_the_xid_names_the_gpu_by_its_nvidia_smi_index(root: Path) -> None:
    report, _, ctx = periodic(xid79(), root)
    assert [check.id for check in report.failures] == ["xid"]
    assert drain_reason(report, ctx) == XID79_REASON  # PCI a8:00 is GPU 5 in the query fixture


def test_a_lone_xid_45_drains_naming_the_xid_and_its_gpu(root: Path) -> None:
    # The check judges the whole log (a lone 45 on an NVSwitch type: RESTART_FM); the reason must too,
    # or it falls back to the check's evidence instead of naming the GPU.
    lone_45 = "[  955.302044] NVRM: Xid (PCI:0000:86:00): 45, pid=30212, name=python3, Ch 00000010\n"
    report, _, ctx = periodic(p5_healthy().set(DMESG, lone_45), root)
    assert [check.id for check in report.failures] == ["xid"]
    assert drain_reason(report, ctx) == "gpuforge: xid 45 on GPU 3"


def test_several_failures_name_the_first_and_count_the_rest(root: Path) -> None:
    scenario = xid79().set(GPU_QUERY, fixture("nvidia-smi/query-p5-h100-7of8.csv"))
    report, _, ctx = periodic(scenario, root)
    assert {check.id for check in report.failures} == {"xid", "gpu.inventory"}
    # the GPU that fell off the bus is gone from nvidia-smi, so the Xid names its PCI address
    assert drain_reason(report, ctx) == "gpuforge: xid 79,154 on 0000:A8:00 (+1 more)"


def test_healthy_node_exits_0_after_reading_its_state_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "slurm.log"
    code = run_slurm(p5_healthy(), tmp_path, monkeypatch, log, "show-node-idle.txt")
    assert code == 0
    # One read (an alert may have drained the node), never a drain, squeue or report.
    (call,) = log.read_text(encoding="utf-8").splitlines()
    assert call.startswith("show\tnode\t") and call.endswith("\t--oneliner\t")
    assert capsys.readouterr().out.rstrip().endswith("healthy")


def test_a_healthy_node_that_an_alert_drained_is_reported_once_idle(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The alert receiver drained it on the controller: this node's state file knows nothing.
    report, _, ctx = periodic(p5_healthy(), root)
    assert report.healthy
    reports = Reports()
    state = tmp_path / "state.json"
    drainer, replay = slurm_agent("show-node-drained-gpuforge.txt", state, reports)
    drainer.act(report, ctx)
    assert replay.calls == [show_node_argv(NODE), jobs_argv(NODE)]  # read, never drained over or resumed
    assert reports.count == 1
    assert DrainRecord.load(state) == DrainRecord(NODE, "gpuforge: xid 79 on GPU 3", reported=True)
    drainer.act(report, ctx)
    assert reports.count == 1
    assert "stays drained" in capsys.readouterr().err


def test_a_healthy_node_an_alert_is_draining_waits_for_its_job(root: Path, tmp_path: Path) -> None:
    report, _, ctx = periodic(p5_healthy(), root)
    reports = Reports()
    drainer, replay = slurm_agent("show-node-draining-gpuforge.txt", tmp_path / "state.json", reports)
    drainer.act(report, ctx)
    assert replay.calls == [show_node_argv(NODE)] and reports.count == 0


def test_periodic_mode_runs_the_periodic_set_without_topology_or_efa_retry(root: Path) -> None:
    sleeps: list[float] = []
    ctx, replay = context(efa_missing(), "p5.48xlarge", root, attempts=1, sleep=sleeps.append)
    report = run_checks(ctx, PERIODIC_CHECKS)
    assert [check.id for check in report.checks] == [
        "gpu.inventory",
        "gpu.ecc",
        "gpu.row_remapping",
        "driver.versions",
        "service.persistenced",
        "fabric.manager",
        "fabric.nvlsm",
        "efa.devices",
        "xid",
        "storage.scratch",
        "storage.fsx",
    ]
    assert TOPOLOGY not in replay.calls and sleeps == []
    assert replay.calls.count(FI_INFO_EFA) == 1


# --- replacement: only a node drained by gpuforge, only once idle, only once ----------------------


def test_draining_with_a_job_running_is_not_reported(root: Path, tmp_path: Path) -> None:
    report, _, ctx = periodic(xid79(), root)
    reports = Reports()
    drainer, replay = slurm_agent("show-node-draining-gpuforge.txt", tmp_path / "state.json", reports)
    drainer.act(report, ctx)
    assert replay.calls == [show_node_argv(NODE)]  # no second drain, no squeue, no report
    assert reports.count == 0


def test_drained_by_gpuforge_and_idle_is_reported_once(root: Path, tmp_path: Path) -> None:
    report, _, ctx = periodic(xid79(), root)
    reports = Reports()
    state = tmp_path / "state.json"
    drainer, replay = slurm_agent("show-node-drained-gpuforge.txt", state, reports)
    drainer.act(report, ctx)
    assert replay.calls == [show_node_argv(NODE), jobs_argv(NODE)]
    drainer.act(report, ctx)
    assert reports.count == 1
    assert DrainRecord.load(state) == DrainRecord(NODE, "gpuforge: xid 79 on GPU 3", reported=True)


@pytest.mark.parametrize("show", ["show-node-drained-admin.txt", "show-node-draining-admin.txt"])
def test_drained_by_an_administrator_is_never_drained_over_or_reported(
    show: str, root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report, _, ctx = periodic(xid79(), root)
    reports = Reports()
    drainer, replay = slurm_agent(show, tmp_path / "state.json", reports)
    drainer.act(report, ctx)
    assert replay.calls == [show_node_argv(NODE)]
    assert reports.count == 0
    assert "drained by someone else" in capsys.readouterr().err


def test_a_passing_check_leaves_a_gpuforge_drain_in_place_and_says_so(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state.json"
    DrainRecord(NODE, "gpuforge: xid 79 on GPU 3").save(state)
    report, _, ctx = periodic(p5_healthy(), root)
    assert report.healthy
    drainer, replay = slurm_agent("show-node-draining-gpuforge.txt", state)
    drainer.act(report, ctx)
    assert replay.calls == [show_node_argv(NODE)]  # read, never resumed or drained again
    err = capsys.readouterr().err
    assert "stays drained ('gpuforge: xid 79 on GPU 3'): an administrator resumes it" in err
    assert f"scontrol update NodeName={NODE} State=RESUME" in err


def test_after_a_resume_the_agent_forgets_its_drain(root: Path, tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    DrainRecord(NODE, "gpuforge: xid 79 on GPU 3").save(state)
    report, _, ctx = periodic(p5_healthy(), root)
    drainer, replay = slurm_agent("show-node-idle.txt", state)
    drainer.act(report, ctx)
    assert replay.calls == [show_node_argv(NODE)] and not state.exists()
    drainer.act(report, ctx)
    assert replay.calls == [show_node_argv(NODE)] * 2  # healthy, resumed: read, and nothing done
    assert not state.exists()


# --- end to end: the real parser, subprocesses and scontrol/squeue stubs on PATH ---------------


def install_slurm(bin_dir: Path, log: Path, show: str, squeue: str = "squeue-empty.txt") -> None:
    """scontrol and squeue stubs: log each call's argv (tab-separated), answer with a real capture."""
    show_path, squeue_path = FIXTURES / "slurm" / show, FIXTURES / "slurm" / squeue
    show_rc = 1 if show in {"show-node-unknown.txt", "show-node-controller-down.txt"} else 0
    record = f'for a in "$@"; do printf "%s\\t" "$a"; done >>{shlex.quote(str(log))}; echo >>{shlex.quote(str(log))}'
    scripts = {
        "scontrol": f'#!/bin/sh\n{record}\ncase "$1" in\n  show) /bin/cat {shlex.quote(str(show_path))}; '
        f"exit {show_rc} ;;\n  update) exit 0 ;;\nesac\nexit 64\n",
        "squeue": f"#!/bin/sh\n{record}\n/bin/cat {shlex.quote(str(squeue_path))}\n",
    }
    for name, text in scripts.items():
        path = bin_dir / name
        path.write_text(text, encoding="utf-8")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)


def logged(log: Path) -> list[tuple[str, ...]]:
    return (
        [tuple(line.rstrip("\t").split("\t")) for line in log.read_text().splitlines()]
        if log.exists()
        else []
    )


def run_slurm(
    scenario: Scenario,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    log: Path,
    show: str | None,
    *args: str,
) -> int:
    """`gpuforge node check --slurm` on the scenario's node; `show` None leaves scontrol uninstalled."""
    bin_dir = install_commands(scenario, tmp_path / "bin")
    if show is not None:
        install_slurm(bin_dir, log, show)
    return run_node(
        scenario,
        tmp_path,
        monkeypatch,
        "--slurm",
        "--expect",
        "p5.48xlarge",
        "--manifest",
        str(P5_MANIFEST),
        *args,
    )


def test_end_to_end_drain_uses_slurmd_nodename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SLURMD_NODENAME", NODE)
    log = tmp_path / "slurm.log"
    assert run_slurm(xid79(), tmp_path, monkeypatch, log, "show-node-idle.txt") == 1
    assert logged(log) == [
        ("show", "node", NODE, "--oneliner"),
        ("update", f"NodeName={NODE}", "State=DRAIN", f"Reason={XID79_REASON}"),
    ]
    assert f"drained {NODE}: {XID79_REASON}" in capsys.readouterr().err


def test_node_name_flag_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURMD_NODENAME", "someone-else")
    log = tmp_path / "slurm.log"
    run_slurm(gpu_missing(), tmp_path, monkeypatch, log, "show-node-idle.txt", "--node-name", NODE)
    assert [call[:3] for call in logged(log)] == [
        ("show", "node", NODE),
        ("update", f"NodeName={NODE}", "State=DRAIN"),
    ]


@pytest.mark.parametrize(
    ("show", "message"),
    [
        (None, "`scontrol` is not installed or not on PATH"),
        ("show-node-controller-down.txt", "Unable to contact slurm controller (connect failure)"),
        ("show-node-unknown.txt", "Node gpu-zz not found"),
    ],
    ids=["absent", "controller-down", "unknown-node"],
)
def test_scontrol_absent_or_failing_is_a_clear_error_not_a_traceback(
    show: str | None,
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scenario = xid79()
    bin_dir = install_commands(scenario, tmp_path / "bin")
    if show is not None:
        install_slurm(bin_dir, tmp_path / "slurm.log", show)
    monkeypatch.setenv("PATH", str(bin_dir))
    code = main(
        [
            "node",
            "check",
            "--slurm",
            "--node-name",
            NODE,
            "--expect",
            "p5.48xlarge",
            "--manifest",
            str(P5_MANIFEST),
        ]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert message in err and "Fix:" in err
    assert "Traceback" not in err


# --- end to end against moto's server: SetInstanceHealth, once -----------------------------------


@pytest.fixture
def imds_for(aws: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[object, str]]:
    autoscaling, instance_id = group_with_one_instance(f"gpu-slurm-{time.monotonic_ns()}")
    imds = serve_imds(
        {"instance-id": instance_id, "instance-type": "p5.48xlarge", "placement/region": REGION}
    )
    monkeypatch.setenv(ENDPOINT_ENV, next(imds))
    yield autoscaling, instance_id
    imds.close()


@pytest.mark.slow
def test_drained_by_gpuforge_is_reported_once_through_set_instance_health(
    imds_for: tuple[object, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    autoscaling, instance_id = imds_for
    log = tmp_path / "slurm.log"

    def check_drained_node() -> int:
        """One periodic check of a node gpuforge already drained for Xid 79, reporting to its group."""
        return run_slurm(
            xid79(),
            tmp_path,
            monkeypatch,
            log,
            "show-node-drained-gpuforge.txt",
            "--node-name",
            NODE,
            "--report-asg",
        )

    assert check_drained_node() == 1
    assert health(autoscaling, instance_id).upper() == "UNHEALTHY"
    assert logged(log) == [("show", "node", NODE, "--oneliner"), ("-h", "-w", NODE)]
    assert f"marked {instance_id} Unhealthy" in capsys.readouterr().err
    # Set it back: a second check must not report again (the group is already replacing it).
    boto3.client("autoscaling", region_name=REGION).set_instance_health(
        InstanceId=instance_id, HealthStatus="Healthy"
    )
    assert check_drained_node() == 1
    assert health(autoscaling, instance_id) == "Healthy"
    assert "already reported Unhealthy" in capsys.readouterr().err
    state = json.loads((tmp_path / "root/var/lib/gpuforge/slurm-drain.json").read_text())
    assert state == {"node": NODE, "reason": "gpuforge: xid 79 on GPU 3", "reported": True}


@pytest.mark.slow
@pytest.mark.parametrize("show", ["show-node-draining-gpuforge.txt", "show-node-drained-admin.txt"])
def test_draining_or_admin_drained_leaves_the_group_alone(
    show: str, imds_for: tuple[object, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    autoscaling, instance_id = imds_for
    log = tmp_path / "slurm.log"
    assert run_slurm(xid79(), tmp_path, monkeypatch, log, show, "--node-name", NODE, "--report-asg") == 1
    assert logged(log) == [("show", "node", NODE, "--oneliner")]
    assert health(autoscaling, instance_id) == "Healthy"


# --- the time budget --------------------------------------------------------------------------


def test_commands_share_one_deadline() -> None:
    started = time.monotonic()
    runner = SubprocessRunner(timeout_s=30, deadline=started + 0.3)
    assert runner(["sleep", "5"]).timed_out
    assert time.monotonic() - started < 3
    late = runner(["true"])  # the deadline has passed: not even started
    assert late.timed_out and late.returncode is None
