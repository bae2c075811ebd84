"""Parse time of `validate report`'s readers on 300 KB outputs, published and hostile.

dcgmi's table reader once used regular expressions with lazy and greedy runs side by side: a
40 KB line took 18 s and a 300 KB file never ended. The readers now split lines, so the time
grows with the size, not its square. Each case is built from a published output
(tests/fixtures/validate, sources in its README.md): the outputs repeated to 300 KB, and the
same size as long lines without a closing '|' (the shape that backtracked) or of numbers.
The figures are printed, never asserted.

Run: .venv/bin/python -P benchmarks/validate_parse_bench.py [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from gpuforge.validate.dcgm import parse_diag
from gpuforge.validate.nccl import parse_nccl
from gpuforge.validate.report import is_diag

FIXTURES = Path(__file__).resolve().parents[1] / "tests/fixtures/validate"
SIZE = 300 * 1024


def _to_size(unit: str) -> str:
    return (unit * (SIZE // len(unit) + 1))[:SIZE]


def cases() -> dict[str, tuple[Callable[[str], object], str]]:
    diag = (FIXTURES / "dcgm-4.4.2-r2-pass.txt").read_text(encoding="utf-8")
    nccl = (FIXTURES / "nccl-h100-2node-gcp-a3mega.txt").read_text(encoding="utf-8")
    open_row = "| a" + " " * 20_000 + "| b" + " " * 20_000 + "\n"  # 40 KB, no closing '|'
    return {
        "dcgmi: published table repeated": (parse_diag, _to_size(diag)),
        "dcgmi: 40 KB rows without a closing '|'": (parse_diag, diag + _to_size(open_row)),
        "dcgmi: one 300 KB row without a closing '|'": (
            parse_diag,
            diag + "| a" + " " * (SIZE // 2) + "| b" + " " * (SIZE // 2),
        ),
        "nccl-tests: published run repeated": (parse_nccl, _to_size(nccl)),
        "nccl-tests: one 300 KB row": (parse_nccl, nccl + "8" + " 1" * (SIZE // 2)),
        "dcgmi or nccl-tests (is_diag): 300 KB": (is_diag, _to_size(nccl)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per case; the median is printed")
    args = parser.parse_args()
    for name, (parse, text) in cases().items():
        times = []
        for _ in range(max(1, args.repeat)):
            started = time.perf_counter()
            parse(text)
            times.append(time.perf_counter() - started)
        print(f"{name:45} {len(text) / 1024:7.0f} KB  {statistics.median(times) * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
