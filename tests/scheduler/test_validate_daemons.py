"""`gpuforge validate`'s Slurm path against real slurmctld and slurmd, with stubs for the GPU binaries.

Submission, gang allocation, collection of each step's output, the parallel rounds of the
slow-node search, timeouts and draining are Slurm's and gpuforge's own here; only
`all_reduce_perf` and `dcgmi` are stand-ins, scripts in the Slurm test root that print
published outputs (tests/fixtures/validate). The "slow" output is the published run with
its bandwidth columns scaled down in this test, as no public run of a slow node exists.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_cluster import DEFAULT_ROOT, REPO, SlurmTestCluster, open_cluster, unavailable_reason
from test_slurm_daemons import _name, _this_machine, start_small_cluster

from gpuforge.node.slurm import REASON_PREFIX
from gpuforge.scheduler.render import node_registration
from gpuforge.validate.floors import floors_for
from gpuforge.validate.run import Plan, Slurm, drain_failed, idle_nodes, run_acceptance

ROOT = Path(os.environ.get("GPUFORGE_SLURM_ROOT", DEFAULT_ROOT))
_SKIP = unavailable_reason(ROOT)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")]

FIXTURES = REPO / "tests/fixtures/validate"
STUBS = "/var/lib/gpuforge-test/validate"
# The published 2-node H100 run clears p4d's floors (41 GB/s over EFA, 208 over NVLink at 1 GiB),
# so p4d's floors judge these runs; a p5's would fail the published run itself.
FLOORS = floors_for("p4d.24xlarge")
NODES = 4

ALL_REDUCE = f"""#!/bin/sh
# Stand-in for nccl-tests: like the real one, only rank 0 prints. A multi-node run that
# includes a node marked slow prints the slow output.
[ "${{SLURM_PROCID:-0}}" = 0 ] || exit 0
if [ "${{SLURM_NNODES:-1}}" -gt 1 ]; then
    for node in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do
        [ -e {STUBS}/slow/"$node" ] && exec cat {STUBS}/nccl-slow.txt
    done
fi
exec cat {STUBS}/nccl-good.txt
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


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SlurmTestCluster, Slurm, list[str]]]:
    with open_cluster(tmp_path_factory.mktemp("validate"), ROOT, REPO / "gpuforge") as test_cluster:
        stubs = test_cluster.root / STUBS.lstrip("/")
        for folder in ("slow", "hang", "fail"):
            (stubs / folder).mkdir(parents=True)
        good = (FIXTURES / "nccl-h100-2node-gcp-a3mega.txt").read_text(encoding="utf-8")
        (stubs / "nccl-good.txt").write_text(good, encoding="utf-8")
        (stubs / "nccl-slow.txt").write_text(_scaled(good, 0.1), encoding="utf-8")
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
            test_cluster.wait_for(
                f"{node} idle", lambda node=node: "IDLE" in test_cluster.node(node).get("State", ""), 30
            )
        progress: list[str] = []
        prefix = ("nsenter", f"--net=/var/run/netns/{test_cluster.tag}-ctl", "chroot", str(test_cluster.root))
        yield test_cluster, Slurm(prefix=prefix, step_timeout_s=60, progress=progress.append), progress


def _plan(test_cluster: SlurmTestCluster, nodes: tuple[str, ...]) -> Plan:
    return Plan(nodes, _this_machine(test_cluster), FLOORS, diag_level=1, minutes=2)


def test_a_healthy_cluster_passes_every_step(cluster: tuple[SlurmTestCluster, Slurm, list[str]]) -> None:
    test_cluster, slurm, progress = cluster
    nodes = idle_nodes(slurm, "gpu")
    assert nodes == tuple(_name(test_cluster, number) for number in range(1, NODES + 1))
    report = run_acceptance(slurm, _plan(test_cluster, nodes))
    assert report.passed, report.to_json()
    document = report.to_json()
    assert [item["file"] for item in document["diag"]] == [f"diag:{node}" for node in nodes]
    assert [item["file"] for item in document["nccl"]] == [
        *(f"nvlink:{node}" for node in nodes),
        "fabric:4 nodes",
    ]
    assert document["nccl"][-1]["busbw_large"] == 298.82  # in place, at 1 GiB
    assert f"validate: all_reduce_perf on {NODES} nodes: 1/1 done" in progress


def test_a_slow_node_is_found_in_two_rounds_and_drained(
    cluster: tuple[SlurmTestCluster, Slurm, list[str]],
) -> None:
    test_cluster, slurm, progress = cluster
    nodes = idle_nodes(slurm, "gpu")
    slow = _name(test_cluster, 3)
    (test_cluster.root / STUBS.lstrip("/") / "slow" / slow).touch()
    progress.clear()
    report = run_acceptance(slurm, _plan(test_cluster, nodes))
    assert not report.passed
    assert report.nccl[-1].busbw_large == pytest.approx(29.88)
    assert report.slow_nodes == (slow,) and report.unresolved_nodes == ()
    assert (
        progress.count("validate: slow-node round: 2/2 done") == 2
    )  # round 1: two pairs; round 2: two pairs
    assert drain_failed(slurm, report) == [slow]
    reasons = slurm.run(["sinfo", "-R", "-h", "-o", "%N|%E"])
    assert re.search(rf"^{slow}\|{REASON_PREFIX} validate: all-reduce below 41 GB/s", reasons, re.M), reasons
    assert slow not in idle_nodes(slurm, "gpu")
    slurm.run(["scontrol", "update", f"NodeName={slow}", "State=RESUME"])
    (test_cluster.root / STUBS.lstrip("/") / "slow" / slow).unlink()


def test_a_failed_and_a_hung_diag_fail_the_run_and_name_their_nodes(
    cluster: tuple[SlurmTestCluster, Slurm, list[str]],
) -> None:
    test_cluster, slurm, _ = cluster
    failing, hung = _name(test_cluster, 1), _name(test_cluster, 2)
    (test_cluster.root / STUBS.lstrip("/") / "fail" / failing).touch()
    (test_cluster.root / STUBS.lstrip("/") / "hang" / hung).touch()
    quick = Slurm(prefix=slurm.prefix, step_timeout_s=8, progress=slurm.progress)
    report = run_acceptance(quick, _plan(test_cluster, (failing, hung)))
    verdicts = {item.file: item for item in report.diag}
    assert not verdicts[f"diag:{failing}"].passed
    assert any("Fail" in problem for problem in verdicts[f"diag:{failing}"].run.problems)
    assert verdicts[f"diag:{hung}"].run.problems[0] == f"the diag step on {hung} failed: timed out after 8 s"
    assert not report.passed
    test_cluster.wait_for(
        "the hung step's job to end", lambda: hung not in slurm.run(["squeue", "-h", "-o", "%N"]), 30
    )
