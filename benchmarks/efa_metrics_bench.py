"""Time of one EFA counter collection on a p5.48xlarge-shaped node: 32 EFA devices (issue 21: under 50 ms).

The sysfs tree is a fake built in a temporary folder (no EFA here): the 32 p5 device names of
tests/fixtures/node/efa-devices-p5.txt, each with port 1 and the Linux efa driver's 22 port
counters (gpuforge.node.efa_metrics.KERNEL_PORT_COUNTERS) and `lifespan`, and a job mapping
folder with jobs on 4 of the 8 GPUs. Three figures, each over --repeat runs:

- collect: reading every counter file, the mapping files and the cached layout, and rendering;
- collect + write: the same plus the atomic write of the textfile (what the timer's run does
  after Python has started);
- first run: with no layout cache, so `nvidia-smi topo -m` is parsed (its output is the p5
  fixture, tests/fixtures/node/topo/p5-h100.txt; nvidia-smi's own run time is not included).

A real node differs in one way: reading a hw_counters file makes the efa driver ask the
device for fresh statistics when the RDMA core's cached copy is older than `lifespan`
milliseconds, which this benchmark cannot measure. The `gpuforge` process start (Python and
imports) is printed apart, as the timer pays it once a run.

Run: .venv/bin/python -P benchmarks/efa_metrics_bench.py [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests/fixtures/node"

from gpuforge.node.efa_metrics import KERNEL_PORT_COUNTERS, collect, write  # noqa: E402
from gpuforge.node.runner import CommandResult  # noqa: E402

TARGET_MS = 50.0


def _build(root: Path) -> tuple[Path, Path]:
    devices = (FIXTURES / "efa-devices-p5.txt").read_text().split()
    infiniband = root / "sys/class/infiniband"
    for number, device in enumerate(devices):
        folder = infiniband / device / "ports/1/hw_counters"
        folder.mkdir(parents=True)
        (folder / "lifespan").write_text("10\n")
        for index, counter in enumerate(KERNEL_PORT_COUNTERS):
            (folder / counter).write_text(f"{number * 1_000_000 + index}\n")
    mapping = root / "run/gpuforge/dcgm-job-map"
    mapping.mkdir(parents=True)
    for gpu, job in ((0, 101), (1, 101), (2, 102), (5, 103)):
        (mapping / str(gpu)).write_text(f"{job}\n")
    return infiniband, mapping


def _topology(argv: Sequence[str]) -> CommandResult:
    return CommandResult(tuple(argv), 0, (FIXTURES / "topo/p5-h100.txt").read_text())


def _time(action: Callable[[], object], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append((time.perf_counter() - start) * 1000)
    return times


def _line(name: str, times: list[float]) -> str:
    return (
        f"{name:<16} median {statistics.median(times):7.2f} ms   max {max(times):7.2f} ms   "
        f"({len(times)} runs; target {TARGET_MS:.0f} ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        infiniband, mapping = _build(root)
        cache = root / "run/gpuforge/efa-layout.json"
        out = root / "run/gpuforge/node-exporter/gpuforge-efa.prom"

        def quiet(_: str) -> None:
            return None

        def first() -> None:
            cache.unlink(missing_ok=True)
            collect(infiniband, mapping, cache, _topology, quiet)

        text = collect(infiniband, mapping, cache, _topology, quiet)
        samples = sum(1 for line in text.splitlines() if not line.startswith("#"))
        print(
            f"32 EFA devices, {len(KERNEL_PORT_COUNTERS)} counters each: {samples} samples, {len(text)} bytes"
        )
        print(
            _line(
                "collect", _time(lambda: collect(infiniband, mapping, cache, _topology, quiet), args.repeat)
            )
        )
        print(
            _line(
                "collect + write",
                _time(lambda: write(out, collect(infiniband, mapping, cache, _topology, quiet)), args.repeat),
            )
        )
        print(_line("first run", _time(first, args.repeat)))
    start = time.perf_counter()
    subprocess.run(
        [str(Path(sys.executable).with_name("gpuforge")), "node", "efa-metrics", "--help"],
        capture_output=True,
        check=True,
        timeout=60,
    )
    print(f"gpuforge process start (node efa-metrics --help): {(time.perf_counter() - start) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
