"""Parse nccl-tests (`all_reduce_perf`) output, and say what makes a run untrustworthy.

The format is nccl-tests' own: an optional `# nThread ... minBytes A maxBytes B step: F(factor)`
header, one data row per message size (size, count, type, redop, root, then time, algbw,
busbw, #wrong out of place and again in place), and a closing `# Avg bus bandwidth` line.
Rows may carry a launcher's prefix (`0: ` from `srun -l`, `[1,0]<stdout>:` from Open MPI).

A run is a failure, never a pass, when: a row's `#wrong` is above 0, or N/A (not checked); nccl-tests reports
out-of-bounds values; a NCCL WARN line or a test failure is printed; a size the header
promises is missing; or the closing line is absent (the run died or the file was cut).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# A launcher's prefix on each line: `srun -l` writes "<task>: ", Open MPI "[job,rank]<stdout>:".
_PREFIX = re.compile(r"^(?:\s*\d+:(?=\s)|\[\d+,\d+\]<std(?:out|err)>:)")
_HEADER = re.compile(
    r"minBytes (?P<min>\d+) maxBytes (?P<max>\d+) step: (?P<step>\d+)\((?P<kind>factor|bytes)\)"
)
_NUMBER = r"[0-9.]+(?:e[+-]?\d+)?"
_ROW = re.compile(
    rf"^\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<type>\w+)\s+(?P<redop>\w+)\s+(?P<root>-?\d+)"
    rf"\s+(?P<time_o>{_NUMBER})\s+(?P<algbw_o>{_NUMBER})\s+(?P<busbw_o>{_NUMBER})\s+(?P<wrong_o>\d+|N/A)"
    rf"\s+(?P<time_i>{_NUMBER})\s+(?P<algbw_i>{_NUMBER})\s+(?P<busbw_i>{_NUMBER})\s+(?P<wrong_i>\d+|N/A)\s*$"
)
_OUT_OF_BOUNDS = re.compile(r"#\s*Out of bounds values\s*:\s*(?P<count>\d+)\s+(?P<verdict>OK|FAILED)")
_AVERAGE = re.compile(r"#\s*Avg bus bandwidth\s*:")
# Lines that mean NCCL or the test itself gave up, whatever numbers follow.
_FAILURES = (
    re.compile(r"NCCL WARN .*"),
    re.compile(r"Test (?:NCCL|CUDA) failure.*"),
    re.compile(r"srun: error: .*"),
)
# Sizes past this many are not a sweep nccl-tests would run: a header that promises more is garbled.
MAX_SWEEP_SIZES = 64


@dataclass(frozen=True)
class SizeRow:
    """One message size: the in-place algbw and busbw (GB/s), and #wrong of both passes."""

    bytes: int
    algbw: float
    busbw: float
    wrong: int

    def to_json(self) -> dict[str, float | int]:
        return {"bytes": self.bytes, "algbw": self.algbw, "busbw": self.busbw, "wrong": self.wrong}


@dataclass
class NcclRun:
    """What one output says: its rows, the sizes its header promised, and every problem found."""

    rows: list[SizeRow] = field(default_factory=list)
    expected_sizes: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def busbw_at(self, size: int) -> float | None:
        """The in-place busbw at exactly `size` bytes, or None when the run has no such row."""
        return next((row.busbw for row in self.rows if row.bytes == size), None)


def _sweep(minimum: int, maximum: int, step: int, kind: str) -> list[int] | None:
    """The sizes nccl-tests runs for -b/-e/-f (factor) or -i (bytes); None when not a sane sweep."""
    sizes: list[int] = []
    size = minimum
    while size <= maximum and len(sizes) <= MAX_SWEEP_SIZES:
        sizes.append(size)
        if kind == "factor":
            if step < 2 or size == 0:
                break
            size *= step
        else:
            if step < 1:
                break
            size += step
    return sizes if len(sizes) <= MAX_SWEEP_SIZES else None


def parse_nccl(text: str) -> NcclRun:
    """Parse one all_reduce_perf output; problems are collected, never raised."""
    run = NcclRun()
    finished = False
    for raw in text.splitlines():
        line = _PREFIX.sub("", raw, count=1)
        for failure in _FAILURES:
            found = failure.search(line)
            if found:
                run.problems.append(f"the run printed {found.group(0).strip()!r}")
        header = _HEADER.search(line)
        if header:
            sweep = _sweep(int(header["min"]), int(header["max"]), int(header["step"]), header["kind"])
            if sweep is None:
                run.problems.append(f"the header's sweep is not one nccl-tests runs: {line.strip()!r}")
            else:
                run.expected_sizes = sweep
            continue
        bounds = _OUT_OF_BOUNDS.search(line)
        if bounds and bounds["verdict"] == "FAILED":
            run.problems.append(f"nccl-tests found {bounds['count']} out-of-bounds values (data corrupted)")
        if _AVERAGE.search(line):
            finished = True
        row = _ROW.match(line)
        if row is None:
            continue
        size = int(row["size"])
        if "N/A" in (row["wrong_o"], row["wrong_i"]):
            # nccl-tests prints N/A when it ran with -c 0: the data was never compared, so nothing is known.
            run.problems.append(
                f"#wrong is N/A at {size} bytes: the run did not check its results (nccl-tests -c 0); "
                "run all_reduce_perf with -c 1, as gpuforge validate does"
            )
        wrong = sum(int(text) for text in (row["wrong_o"], row["wrong_i"]) if text != "N/A")
        if wrong > 0:
            run.problems.append(f"#wrong is {wrong} at {size} bytes: the all-reduce returned wrong data")
        run.rows.append(SizeRow(size, float(row["algbw_i"]), float(row["busbw_i"]), wrong))
    seen = {row.bytes for row in run.rows}
    missing = [size for size in run.expected_sizes if size not in seen]
    if missing:
        run.problems.append(
            f"{len(missing)} size(s) the header promises are missing, first {missing[0]} bytes: the run stopped early"
        )
    if not run.rows:
        run.problems.append(
            "no nccl-tests result row: this is not all_reduce_perf output, or the run died first"
        )
    elif not finished:
        run.problems.append(
            "no closing '# Avg bus bandwidth' line: the run died before the end, or the file is cut"
        )
    return run
