"""`gpuforge validate`'s Slurm path against real slurmctld and slurmd, with stubs for the GPU binaries.

Submission, gang allocation, collection of each step's output, the parallel rounds of the
slow-node search, timeouts and draining are Slurm's and gpuforge's own here; only
`all_reduce_perf` and `dcgmi` are stand-ins, scripts in the Slurm test root that print
published outputs (tests/fixtures/validate). The "slow" and "collapse" outputs are the
published run with its bandwidth columns scaled down in this test, as no public run of a slow
node exists; NCCL's transport lines are the NCCL INFO lines of published logs
(tests/fixtures/validate/nccl_logs), printed, as NCCL prints them, only when the step set
NCCL_DEBUG=INFO.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_cluster import DEFAULT_ROOT, REPO, SlurmTestCluster, open_cluster, unavailable_reason
from test_slurm_daemons import _idle, _name, _registered, _this_machine, start_small_cluster
from waiting import WAIT_S

from gpuforge.node.slurm import REASON_PREFIX
from gpuforge.scheduler.render import node_registration
from gpuforge.validate.floors import floors_for
from gpuforge.validate.run import Plan, Slurm, drain_failed, idle_nodes, run_acceptance

ROOT = Path(os.environ.get("GPUFORGE_SLURM_ROOT", DEFAULT_ROOT))
_SKIP = unavailable_reason(ROOT)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")]

FIXTURES = REPO / "tests/fixtures/validate"
STUBS = "/var/lib/gpuforge-test/validate"
# The published 2-node H100 run clears p4d's floors (41 GB/s for a pair, 20.6 for 3+ nodes, 208
# over NVLink at 1 GiB), so p4d's floors judge these runs; a p5's would fail the published run itself.
# Scaled by 0.1 (29.88 GB/s) it fails a pair's floor but clears the whole-cluster one: a slow node
# that a large run alone would hide. Scaled by 0.05 (14.94) it fails the whole-cluster floor too.
FLOORS = floors_for("p4d.24xlarge")
NODES = 4
# The step timeout of the failed-and-hung diag test: the hung diag ends only by it, and the failed
# one (a stub printing a file, through srun and a Python Prolog) must end well before it.
QUICK_STEP_S = 30

ALL_REDUCE = f"""#!/bin/sh
# Stand-in for nccl-tests: like the real one, only rank 0 prints. A multi-node run prints NCCL's
# transport lines when NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,NET arrived whole (EFA, or
# sockets when it includes a node marked socket),
# then the slow output when it includes a node marked slow, the collapsed one when it spans
# more than 2 nodes and the cluster is marked collapse, else the good one.
[ "${{SLURM_PROCID:-0}}" = 0 ] || exit 0
table={STUBS}/nccl-good.txt
if [ "${{SLURM_NNODES:-1}}" -gt 1 ]; then
    transport={STUBS}/info-efa.txt
    for node in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do
        [ -e {STUBS}/socket/"$node" ] && transport={STUBS}/info-socket.txt
        [ -e {STUBS}/slow/"$node" ] && table={STUBS}/nccl-slow.txt
    done
    [ "$SLURM_NNODES" -gt 2 ] && [ -e {STUBS}/collapse ] && table={STUBS}/nccl-collapse.txt
    [ "${{NCCL_DEBUG:-}}" = INFO ] && [ "${{NCCL_DEBUG_SUBSYS:-}}" = INIT,NET ] && cat "$transport"
fi
exec cat "$table"
"""
DCGMI = f"""#!/bin/sh
# Stand-in for dcgmi diag: a node marked hung never answers; one marked failing prints a failed run.
[ -e {STUBS}/hang/"$SLURMD_NODENAME" ] && exec sleep 600
[ -e {STUBS}/fail/"$SLURMD_NODENAME" ] && exec cat {STUBS}/dcgm-fail.txt
exec cat {STUBS}/dcgm-pass.txt
"""


def _scaled(text: str, factor: float) -> str:
    """The run with its algbw and busbw columns (out-of-place and in-place) multiplied by `factor`."""
    lines = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 13 and fields[0].isdigit():
            for column in (6, 7, 10, 11):
                fields[column] = f"{float(fields[column]) * factor:.2f}"
            line = "  " + "  ".join(fields)
        lines.append(line)
    return "\n".join(lines) + "\n"


def _info_lines(path: Path) -> str:
    """Only the NCCL INFO lines of a published log, so its own table and header stay out of the stub's output."""
    return "".join(
        line for line in path.read_text(encoding="utf-8").splitlines(keepends=True) if "NCCL INFO" in line
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SlurmTestCluster, Slurm, list[str]]]:
    with open_cluster(tmp_path_factory.mktemp("validate"), ROOT, REPO / "gpuforge") as test_cluster:
        stubs = test_cluster.root / STUBS.lstrip("/")
        for folder in ("slow", "hang", "fail", "socket"):
            (stubs / folder).mkdir(parents=True)
        good = (FIXTURES / "nccl-h100-2node-gcp-a3mega.txt").read_text(encoding="utf-8")
        (stubs / "nccl-good.txt").write_text(good, encoding="utf-8")
        (stubs / "nccl-slow.txt").write_text(_scaled(good, 0.1), encoding="utf-8")
        (stubs / "nccl-collapse.txt").write_text(_scaled(good, 0.05), encoding="utf-8")
        for name, log in (
            ("info-efa.txt", "p4d-2node-efa-gdrdma-aws-efa-eks-excerpt.txt"),
            ("info-socket.txt", "socket-fallback-aws-do-eks-excerpt.txt"),
        ):
            (stubs / name).write_text(_info_lines(FIXTURES / "nccl_logs" / log), encoding="utf-8")
        (stubs / "dcgm-pass.txt").write_bytes((FIXTURES / "dcgm-4.4.2-r2-pass.txt").read_bytes())
        (stubs / "dcgm-fail.txt").write_bytes((FIXTURES / "dcgm-3.3.1-r2-fail-excerpt.txt").read_bytes())
        for name, script in (("all_reduce_perf", ALL_REDUCE), ("dcgmi", DCGMI)):
            path = test_cluster.root / "usr/local/bin" / name
            path.write_text(script, encoding="utf-8")
            path.chmod(0o755)
        spec = start_small_cluster(test_cluster, "gfvalid", max_nodes=NODES)
        nodes = [_name(test_cluster, number) for number in range(1, NODES + 1)]
        for number, node in enumerate(nodes, start=1):
            test_cluster.start_node(node, 10 + number, node_registration(spec))
        for node in nodes:
            test_cluster.wait_node(node, "registered", _registered)
        progress: list[str] = []
        prefix = ("nsenter", f"--net=/var/run/netns/{test_cluster.tag}-ctl", "chroot", str(test_cluster.root))
        yield test_cluster, Slurm(prefix=prefix, step_timeout_s=WAIT_S, progress=progress.append), progress


def _plan(test_cluster: SlurmTestCluster, nodes: tuple[str, ...]) -> Plan:
    return Plan(nodes, _this_machine(test_cluster), FLOORS, diag_level=1, minutes=2)


def _mark(test_cluster: SlurmTestCluster, folder: str, node: str = "") -> Path:
    marker = test_cluster.root / STUBS.lstrip("/") / folder / node
    marker.touch()
    return marker


def _drained(slurm: Slurm) -> dict[str, str]:
    out = slurm.run(["sinfo", "-R", "-h", "-o", "%N|%E"])
    return dict(line.split("|", 1) for line in out.splitlines() if line.strip())


def _resume(test_cluster: SlurmTestCluster, slurm: Slurm, nodes: list[str]) -> None:
    """Undrain `nodes` and wait until they take jobs again, so the next test sees the whole cluster."""
    for node in nodes:
        slurm.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])
    for node in nodes:
        test_cluster.wait_node(node, "idle", _idle)


def _whole_cluster(test_cluster: SlurmTestCluster, slurm: Slurm) -> tuple[str, ...]:
    """Every node, once all are idle, with no job and nothing completing: a node stays COMPLETING
    until its Epilog (gpuforge's job mapping clean-up, a Python start) is done, so the last test's
    jobs can still hold some; a node sinfo shows "mix" still runs one."""
    names = tuple(_name(test_cluster, number) for number in range(1, NODES + 1))
    for node in names:
        test_cluster.wait_node(node, "idle", _idle)
    assert idle_nodes(slurm, "gpu") == names
    return names


def test_a_healthy_cluster_passes_every_step(cluster: tuple[SlurmTestCluster, Slurm, list[str]]) -> None:
    test_cluster, slurm, progress = cluster
    nodes = _whole_cluster(test_cluster, slurm)
    progress.clear()
    report = run_acceptance(slurm, _plan(test_cluster, nodes))
    assert report.passed, report.to_json()
    document = report.to_json()
    assert [item["file"] for item in document["diag"]] == [f"diag:{node}" for node in nodes]
    assert [item["file"] for item in document["nccl"]] == [
        *(f"nvlink:{node}" for node in nodes),
        f"pair:{nodes[0]},{nodes[1]}",
        f"pair:{nodes[2]},{nodes[3]}",
        "fabric:4 nodes",
    ]
    pairs_and_fabric = document["nccl"][NODES:]
    assert all(item["busbw_large"] == 298.82 for item in pairs_and_fabric)  # in place, at 1 GiB
    # Each multi-node step ran with NCCL_DEBUG=INFO, so the stub printed the EFA lines, judged as such.
    assert all(item["transport"]["networks"] == {"AWS Libfabric": 16} for item in pairs_and_fabric)
    assert all(item["transport"]["verdict"] == "pass" for item in pairs_and_fabric)
    assert document["nccl"][0]["transport"]["verdict"] == "not judged"  # one node: NVLink only
    assert "validate: all_reduce_perf pairs, round 1: 2/2 done" in progress
    assert f"validate: all_reduce_perf on {NODES} nodes: 1/1 done" in progress


def test_a_slow_node_cannot_hide_in_a_large_run_and_only_it_is_drained(
    cluster: tuple[SlurmTestCluster, Slurm, list[str]],
) -> None:
    test_cluster, slurm, progress = cluster
    nodes = _whole_cluster(test_cluster, slurm)
    slow = _name(test_cluster, 3)
    marker = _mark(test_cluster, "slow", slow)
    progress.clear()
    report = run_acceptance(slurm, _plan(test_cluster, nodes))
    verdicts = {item.file: item for item in report.nccl}
    # The whole-cluster run reaches 29.88 GB/s: above its own (looser) floor, so it passes ...
    assert verdicts["fabric:4 nodes"].passed and verdicts["fabric:4 nodes"].busbw_large == pytest.approx(
        29.88
    )
    # ... but the pair that holds the slow node does not, nor does the slow node beside a good one.
    assert not report.passed
    assert report.slow_nodes == (slow,) and report.unresolved_nodes == ()
    failed = sorted(item.file for item in report.nccl if not item.passed)
    assert failed == sorted([f"pair:{nodes[2]},{nodes[3]}", f"pair:{slow},{nodes[0]}"])
    assert "validate: all_reduce_perf pairs, round 2: 2/2 done" in progress  # slow and its partner, re-paired
    assert drain_failed(slurm, report) == [slow]
    drained = _drained(slurm)
    assert set(drained) == {slow}, drained  # its healthy partner of round 1 is not drained
    assert drained[slow].startswith(f"{REASON_PREFIX} validate: all-reduce below 41 GB/s beside a good node")
    assert slow not in idle_nodes(slurm, "gpu")
    _resume(test_cluster, slurm, [slow])
    marker.unlink()


def test_a_node_drained_meanwhile_keeps_its_drain_and_reason(
    cluster: tuple[SlurmTestCluster, Slurm, list[str]],
) -> None:
    # One drain path: validate --drain, like the node agent and the alert receiver, never writes over
    # a drain someone else (an administrator, an alert) made while the acceptance ran.
    test_cluster, slurm, progress = cluster
    nodes = _whole_cluster(test_cluster, slurm)
    slow = _name(test_cluster, 3)
    marker = _mark(test_cluster, "slow", slow)
    report = run_acceptance(slurm, _plan(test_cluster, nodes))
    assert report.slow_nodes == (slow,)
    slurm.run(["scontrol", "update", f"NodeName={slow}", "State=DRAIN", "Reason=admin: cable swap"])
    progress.clear()
    assert drain_failed(slurm, report) == []
    assert _drained(slurm) == {slow: "admin: cable swap"}
    assert any(f"{slow} is drained already (admin: cable swap)" in line for line in progress)
    _resume(test_cluster, slurm, [slow])
    marker.unlink()


def test_a_node_that_falls_back_to_sockets_is_found_and_drained_naming_the_network(
    cluster: tuple[SlurmTestCluster, Slurm, list[str]],
) -> None:
    test_cluster, slurm, _ = cluster
    nodes = _whole_cluster(test_cluster, slurm)
    socket = _name(test_cluster, 2)
    marker = _mark(test_cluster, "socket", socket)
    report = run_acceptance(slurm, _plan(test_cluster, nodes))
    assert not report.passed and report.slow_nodes == (socket,)
    pair = next(item for item in report.nccl if item.file == f"pair:{nodes[0]},{socket}")
    assert pair.busbw_large == 298.82  # the bandwidth held: only the transport fails it
    assert pair.problems[0].startswith(
        "NCCL used network 'Socket' on 1 rank(s), not EFA through aws-ofi-nccl"
    )
    assert drain_failed(slurm, report) == [socket]
    assert f"{REASON_PREFIX} validate: beside a good node: NCCL used network" in _drained(slurm)[socket]
    _resume(test_cluster, slurm, [socket])
    marker.unlink()


def test_a_whole_cluster_shortfall_with_every_pair_good_drains_no_node(
    cluster: tuple[SlurmTestCluster, Slurm, list[str]],
) -> None:
    test_cluster, slurm, _ = cluster
    nodes = _whole_cluster(test_cluster, slurm)
    marker = _mark(test_cluster, "collapse")
    report = run_acceptance(slurm, _plan(test_cluster, nodes))
    fabric = report.nccl[-1]
    assert fabric.file == "fabric:4 nodes" and fabric.busbw_large == pytest.approx(14.94)
    assert not report.passed and report.slow_nodes == () and report.unresolved_nodes == ()
    assert "every pair of nodes met the 2-node floor" in fabric.problems[-1]
    assert drain_failed(slurm, report) == []
    assert _drained(slurm) == {}
    marker.unlink()


def test_a_failed_and_a_hung_diag_fail_the_run_and_name_their_nodes(
    cluster: tuple[SlurmTestCluster, Slurm, list[str]],
) -> None:
    test_cluster, slurm, _ = cluster
    failing, hung = _name(test_cluster, 1), _name(test_cluster, 2)
    (test_cluster.root / STUBS.lstrip("/") / "fail" / failing).touch()
    (test_cluster.root / STUBS.lstrip("/") / "hang" / hung).touch()
    quick = Slurm(prefix=slurm.prefix, step_timeout_s=QUICK_STEP_S, progress=slurm.progress)
    report = run_acceptance(quick, _plan(test_cluster, (failing, hung)))
    verdicts = {item.file: item for item in report.diag}
    assert not verdicts[f"diag:{failing}"].passed
    assert any("Fail" in problem for problem in verdicts[f"diag:{failing}"].run.problems)
    assert verdicts[f"diag:{hung}"].run.problems[0] == (
        f"the diag step on {hung} failed: timed out after {QUICK_STEP_S} s"
    )
    assert not report.passed
    test_cluster.wait_for(
        "the hung step's job to end",
        lambda: slurm.run(["squeue", "-h", "-o", "%N"]),
        lambda queue: hung not in queue,
    )
