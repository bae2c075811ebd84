"""`gpuforge validate` pauses DCGM profiling around `dcgmi diag` and resumes it however the diag ends.

Two layers. The first runs the real subprocess code with a stand-in `srun` on PATH (it runs the
command on this host with SLURMD_NODENAME set from --nodelist): passed, failed, timed out, a pause
that fails, and Ctrl-C (SIGINT to the process group, as a terminal sends it) and SIGTERM mid-diag.
The second runs Ctrl-C mid-diag against real slurmctld and slurmd (the namespace cluster of
tests/scheduler/slurm_cluster.py) with the real srun, which, unlike the stand-in, survives one
SIGINT: gpuforge must end the diag steps itself before it resumes.

`dcgmi` is a stand-in in both: it logs each call ("<node> pause", "<node> diag start", "<node> diag
stopped" when its trap runs, "<node> resume", or "<node> resume while the diag runs" when the
diag's process is still alive) and prints DCGM's published outputs
(tests/fixtures/validate/README.md) for the diag, and for `profile` what dcgmi/DcgmiProfile.cpp
prints (NVIDIA/DCGM commit 72fa3feaa67d716a75323a8f47c34ff3ee73f824: "Successfully paused profiling.").
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from waiting import WAIT_S, wait_until

from gpuforge import hardware
from gpuforge.validate.floors import floors_for
from gpuforge.validate.run import Plan, Slurm, run_acceptance

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests/fixtures/validate"
NODES = ("gpu-a", "gpu-b")

SRUN = """#!/bin/sh
# Stand-in for srun: drops the options, runs the command here as node --nodelist.
node=""
while [ $# -gt 0 ]; do
    case "$1" in
        --nodelist=*) node="${1#--nodelist=}" ;;
        --*) ;;
        *) break ;;
    esac
    shift
done
SLURMD_NODENAME="$node" exec "$@"
"""


def dcgmi_script(state: str) -> str:
    """The dcgmi stand-in; `state` is a folder holding the log, the outputs and the markers."""
    return f"""#!/bin/sh
log={state}/calls.log
case "$1" in
profile)
    action="${{2#--}}"
    pid="$(cat {state}/diag-"$SLURMD_NODENAME".pid 2>/dev/null)"
    if [ "$action" = resume ] && [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        action="resume while the diag runs"
    fi
    echo "$SLURMD_NODENAME $action" >>"$log"
    if [ -e {state}/profile-fail ]; then
        echo "Error: unable to $action profiling metrics: Host engine is not valid any longer."
        exit 1
    fi
    echo "Successfully ${{action}}d profiling."
    ;;
diag)
    echo $$ >{state}/diag-"$SLURMD_NODENAME".pid
    echo "$SLURMD_NODENAME diag start" >>"$log"
    if [ -e {state}/hang ]; then
        trap 'kill $child 2>/dev/null; echo "$SLURMD_NODENAME diag stopped" >>"$log"; exit 143' TERM INT
        sleep 600 &
        child=$!
        wait $child
    fi
    if [ -e {state}/fail ]; then
        cat {state}/dcgm-fail.txt
        exit 1
    fi
    cat {state}/dcgm-pass.txt
    ;;
esac
"""


def write_stubs(bin_dir: Path, state: Path, *, srun: bool) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    state.mkdir(parents=True, exist_ok=True)
    (state / "dcgm-pass.txt").write_bytes((FIXTURES / "dcgm-4.4.2-r2-pass.txt").read_bytes())
    (state / "dcgm-fail.txt").write_bytes((FIXTURES / "dcgm-3.3.1-r2-fail-excerpt.txt").read_bytes())
    scripts = {"dcgmi": dcgmi_script(str(state))} | ({"srun": SRUN} if srun else {})
    for name, text in scripts.items():
        path = bin_dir / name
        path.write_text(text, encoding="utf-8")
        path.chmod(0o755)


def calls(state: Path, node: str) -> list[str]:
    log = state / "calls.log"
    lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    return [line.split(" ", 1)[1] for line in lines if line.split(" ", 1)[0] == node]


def plan(nodes: tuple[str, ...] = NODES, instance: hardware.InstanceType | None = None) -> Plan:
    return Plan(nodes, instance or hardware.get("p4d.24xlarge"), floors_for("p4d.24xlarge"), minutes=2)


@pytest.fixture
def local(tmp_path: Path) -> tuple[Slurm, Path, list[str]]:
    """A Slurm whose srun is the stand-in; (slurm, state folder, progress lines)."""
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    write_stubs(bin_dir, state, srun=True)
    progress: list[str] = []
    prefix = ("env", f"PATH={bin_dir}:/usr/bin:/bin")
    return Slurm(prefix=prefix, step_timeout_s=30, progress=progress.append), state, progress


def test_a_passing_diag_runs_between_pause_and_resume(local: tuple[Slurm, Path, list[str]]) -> None:
    slurm, state, progress = local
    report = run_acceptance(slurm, plan())
    assert all(item.passed for item in report.diag), [item.run.problems for item in report.diag]
    for node in NODES:
        assert calls(state, node) == ["pause", "diag start", "resume"]
    assert "validate: dcgmi profile --resume: 2/2 done" in progress
    assert not any("warning" in line for line in progress)


def test_a_failing_diag_still_resumes(local: tuple[Slurm, Path, list[str]]) -> None:
    slurm, state, _ = local
    (state / "fail").touch()
    report = run_acceptance(slurm, plan())
    assert not any(item.passed for item in report.diag)
    for node in NODES:
        assert calls(state, node) == ["pause", "diag start", "resume"]


def test_a_timed_out_diag_is_stopped_then_resumed(local: tuple[Slurm, Path, list[str]]) -> None:
    slurm, state, _ = local
    (state / "hang").touch()
    quick = Slurm(prefix=slurm.prefix, step_timeout_s=3, progress=slurm.progress)
    report = run_acceptance(quick, plan())
    assert [item.run.problems[0] for item in report.diag] == [
        f"the diag step on {node} failed: timed out after 3 s" for node in NODES
    ]
    for node in NODES:
        assert calls(state, node) == ["pause", "diag start", "diag stopped", "resume"]


def test_a_pause_or_resume_that_fails_is_a_warning_with_the_fix(local: tuple[Slurm, Path, list[str]]) -> None:
    slurm, state, progress = local
    (state / "profile-fail").touch()
    report = run_acceptance(slurm, plan())
    assert all(item.passed for item in report.diag)  # the diag judges the node, not the pause
    for node in NODES:
        assert calls(state, node) == ["pause", "diag start", "resume"]
    warnings = [line for line in progress if "warning" in line]
    assert len(warnings) == 4
    assert f"Fix: run `dcgmi profile --resume` on {NODES[0]}" in "\n".join(warnings)


CHILD = """
import dataclasses
import sys
from gpuforge import hardware
from gpuforge.validate.floors import floors_for
from gpuforge.validate.run import Plan, Slurm, diag_with_profiling_paused

prefix, nodes, gpus = sys.argv[1].split(), tuple(sys.argv[2].split(",")), int(sys.argv[3])
instance = dataclasses.replace(hardware.get("p4d.24xlarge"), gpu_count=gpus)
plan = Plan(nodes, instance, floors_for("p4d.24xlarge"), minutes=2)
try:
    diag_with_profiling_paused(Slurm(prefix=tuple(prefix), step_timeout_s=120), plan)
except KeyboardInterrupt:
    sys.exit(130)
sys.exit(0)
"""


def interrupt_mid_diag(
    prefix: str, nodes: tuple[str, ...], state: Path, signum: int, *, group: bool, gpus: int = 8
) -> int:
    """Run the paused diag in a child of its own session; once every node's diag started, send
    `signum` (to the whole process group, as a terminal's Ctrl-C, when `group`); its exit status."""
    child = subprocess.Popen(
        [sys.executable, "-P", "-c", CHILD, prefix, ",".join(nodes), str(gpus)],
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(
            "every node's diag to start",
            lambda: {node: calls(state, node) for node in nodes},
            lambda seen: all("diag start" in lines for lines in seen.values()),
            stopped=lambda: None if child.poll() is None else f"the run exited {child.returncode}",
            context=lambda: child.communicate()[0] if child.poll() is not None else "",
        )
        if group:
            os.killpg(child.pid, signum)
        else:
            child.send_signal(signum)
        out, _ = child.communicate(timeout=WAIT_S)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=WAIT_S)
    assert "resuming" in out or "dcgmi profile --resume" in out, out
    return child.returncode


@pytest.mark.parametrize(("signum", "group"), [(signal.SIGINT, True), (signal.SIGTERM, False)])
def test_ctrl_c_or_sigterm_mid_diag_stops_the_diag_then_resumes(
    tmp_path: Path, signum: int, group: bool
) -> None:
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    write_stubs(bin_dir, state, srun=True)
    (state / "hang").touch()
    code = interrupt_mid_diag(f"env PATH={bin_dir}:/usr/bin:/bin", NODES, state, signum, group=group)
    assert code == 130
    for node in NODES:
        assert calls(state, node) == ["pause", "diag start", "diag stopped", "resume"]


# --- real slurmctld, slurmd and srun ------------------------------------------------------------


def _slurm_cluster() -> object:
    """tests/scheduler's cluster helpers (a test folder, not a package: imported by path)."""
    sys.path.insert(0, str(REPO / "tests/scheduler"))
    try:
        import slurm_cluster
        import test_slurm_daemons
    finally:
        sys.path.remove(str(REPO / "tests/scheduler"))
    return slurm_cluster, test_slurm_daemons


@pytest.fixture(scope="module")
def real_cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[object, tuple[str, ...], Path, str]]:
    slurm_cluster, daemons = _slurm_cluster()  # type: ignore[misc]
    root = Path(os.environ.get("GPUFORGE_SLURM_ROOT", slurm_cluster.DEFAULT_ROOT))
    skip = slurm_cluster.unavailable_reason(root)
    if skip is not None:
        pytest.skip(skip)
    from gpuforge.scheduler.render import node_registration

    with slurm_cluster.open_cluster(tmp_path_factory.mktemp("pause"), root, REPO / "gpuforge") as cluster:
        state_inside = "/var/lib/gpuforge-test/pause"
        write_stubs(cluster.root / "usr/local/bin", cluster.root / state_inside.lstrip("/"), srun=False)
        # The stub inside the chroot names paths as the chroot sees them.
        (cluster.root / "usr/local/bin/dcgmi").write_text(dcgmi_script(state_inside), encoding="utf-8")
        spec = daemons.start_small_cluster(cluster, "gfpause", max_nodes=2)
        nodes = tuple(daemons._name(cluster, number) for number in (1, 2))
        for number, node in enumerate(nodes, start=1):
            cluster.start_node(node, 10 + number, node_registration(spec))
        for node in nodes:
            cluster.wait_node(node, "registered", daemons._registered)
        prefix = f"nsenter --net=/var/run/netns/{cluster.tag}-ctl chroot {cluster.root}"
        yield cluster, nodes, cluster.root / state_inside.lstrip("/"), prefix


@pytest.mark.slow
def test_ctrl_c_mid_diag_with_real_srun_cancels_the_diag_then_resumes(
    real_cluster: tuple[object, tuple[str, ...], Path, str],
) -> None:
    cluster, nodes, state, prefix = real_cluster
    (state / "hang").touch()
    code = interrupt_mid_diag(prefix, nodes, state, signal.SIGINT, group=True, gpus=2)
    assert code == 130
    for node in nodes:
        # srun kills the diag's step (SIGKILL: its trap never runs); the resume step asks for the
        # node's GPUs, so Slurm starts it only once the diag's step is gone, which the stub checks.
        assert calls(state, node) == ["pause", "diag start", "resume"]
    # No step of the run is left behind (the last ones complete once their epilog ends).
    cluster.wait_for(  # type: ignore[attr-defined]
        "an empty queue",
        lambda: cluster.client(["squeue", "-h"]).stdout.strip(),  # type: ignore[attr-defined]
        lambda queue: queue == "",
    )
