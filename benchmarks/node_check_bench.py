"""Wall time of `gpuforge node check --slurm` (Slurm's HealthCheckProgram) over the node fixtures.

slurmd kills its HealthCheckProgram after 60 s, so the periodic mode must end
well inside that. Each case is a whole node from tests/node/node_scenarios.py:
its commands are executables on PATH that print the recorded outputs, so the
agent's real subprocess runner starts every one of them, and `scontrol` is a
stub answering with the real Slurm 26.05.5 capture of an idle node. The boot
gate (all checks) is timed beside it for comparison. The figures leave out
what only a GPU node has: nvidia-smi's own run time (seconds for `-q` on 8
GPUs without persistence mode) and a real slurmctld round trip.

Run: .venv/bin/python -P benchmarks/node_check_bench.py [--repeat N]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests/node"))

from node_scenarios import (  # noqa: E402 (the scenarios live with the tests)
    FIXTURES,
    MANIFESTS,
    Scenario,
    fixture,
    g5_xlarge_healthy,
    install_commands,
    p4d_healthy,
    p5_healthy,
)

from gpuforge.cli import build_parser  # noqa: E402
from gpuforge.node import cli  # noqa: E402
from gpuforge.node.context import HostPaths  # noqa: E402
from gpuforge.node.nvidia_smi import GPU_QUERY  # noqa: E402
from gpuforge.node.xid import DMESG  # noqa: E402

CASES: list[tuple[str, str, Callable[[], Scenario]]] = [
    ("p5 healthy", "p5.48xlarge", p5_healthy),
    ("p4d healthy", "p4d.24xlarge", p4d_healthy),
    ("g5.xlarge healthy", "g5.xlarge", g5_xlarge_healthy),
    ("p5 Xid 79 (drains)", "p5.48xlarge", lambda: p5_healthy().set(DMESG, fixture("dmesg/xid79.txt"))),
    (
        "p5 7 of 8 GPUs (drains)",
        "p5.48xlarge",
        lambda: p5_healthy().set(GPU_QUERY, fixture("nvidia-smi/query-p5-h100-7of8.csv")),
    ),
]

SCONTROL = """#!/bin/sh
case "$1" in
  show) /bin/cat '{show}' ;;
  update) exit 0 ;;
  *) exit 64 ;;
esac
"""


def run_once(scenario: Scenario, instance_type: str, work: Path, slurm: bool) -> float:
    """One check in a fresh root (so no drain record carries over), timed from parse to exit code."""
    root = scenario.write_root(work / "root")
    bin_dir = install_commands(scenario, work / "bin")
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(SCONTROL.format(show=FIXTURES / "slurm/show-node-idle.txt"))
    scontrol.chmod(0o755)
    os.environ["PATH"] = str(bin_dir)
    args = [
        "node",
        "check",
        "--expect",
        instance_type,
        "--manifest",
        str(FIXTURES / MANIFESTS[instance_type]),
    ]
    if slurm:
        args += ["--slurm", "--node-name", "gpu-a"]
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        cli.handle_check(build_parser("node").parse_args(args), paths=HostPaths(root))
    return time.perf_counter() - started


def startup_s() -> float:
    """What slurmd pays before the checks start: a fresh interpreter importing the agent."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-P", "-c", "import gpuforge.cli, gpuforge.node.cli"], check=True)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per case (default 5)")
    options = parser.parse_args()
    path = os.environ.get("PATH", "")
    print(f"{'case':<26} {'--slurm median s':>16} {'max s':>7} {'boot gate median s':>19}")
    try:
        for name, instance_type, make in CASES:
            times: dict[bool, list[float]] = {True: [], False: []}
            for slurm in (True, False):
                for _ in range(options.repeat):
                    with tempfile.TemporaryDirectory() as work:
                        times[slurm].append(run_once(make(), instance_type, Path(work), slurm))
            print(
                f"{name:<26} {statistics.median(times[True]):>16.3f} {max(times[True]):>7.3f} "
                f"{statistics.median(times[False]):>19.3f}"
            )
    finally:
        os.environ["PATH"] = path
    print(f"interpreter start + import of the agent: {startup_s():.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
