"""Parse nccl-tests (`all_reduce_perf`) output, and say what makes a run untrustworthy.

The format is nccl-tests' own (src/util.cu, tag v2.17.6): `# nccl-tests version ...`,
`# Collective test starting: <binary>`, a `# nThread ... minBytes A maxBytes B step: F(factor)`
header, one `#  Rank  r Group  g Pid  p on <host> device  d [...] <name>` line per rank, one data
row per message size (size, count, type, redop, root, then time, algbw, busbw, #wrong out of
place and again in place, and a timestamp with -Z), and the closing `# Avg bus bandwidth` line.
Older versions print no version or collective line. Rows may carry a launcher's prefix (`0: `
from `srun -l`, `[1,0]<stdout>:` from Open MPI).

One file may hold several runs (a job that ran the test twice): each is parsed on its own. A
run starts at a header after rows, or where a row's size does not grow (a sweep restarting).

A run is a failure, never a pass, when: a row cannot be read (the problem names its line); a
number is not finite or is negative; a row's `#wrong` is above 0, or N/A (not checked);
nccl-tests reports out-of-bounds values; a NCCL WARN line or a test failure is printed; a size
the header promises is missing; the closing line is absent (the output ends before it: the run died or the file was cut);
or the output is of another collective (its header names another binary, or its rows have a
root, no reduction, or a count that is not the size over the type's width, as all_gather and
reduce_scatter print).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

# A launcher's prefix on each line: `srun -l` writes "<task>: ", Open MPI "[job,rank]<stdout>:".
_PREFIX = re.compile(r"^(?:\s*\d+:(?=\s)|\[\d+,\d+\]<std(?:out|err)>:)")
_HEADER = re.compile(
    r"minBytes (?P<min>\d+) maxBytes (?P<max>\d+) step: (?P<step>\d+)\((?P<kind>factor|bytes)\)"
)
_COLLECTIVE = re.compile(r"^#\s*Collective test starting:\s*(?P<name>\S+)")
_RANK = re.compile(r"^#\s+Rank\s+(?P<rank>\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(?P<host>\S+)\s+device\s+\d+")
# The header lines above, by how they begin: one that begins so and does not read whole is unreadable.
_HEADER_START = re.compile(r"^#\s*(?:nThread\s|Rank\s|Collective test starting:)")
_OUT_OF_BOUNDS = re.compile(r"#\s*Out of bounds values\s*:\s*(?P<count>\d+)\s+(?P<verdict>OK|FAILED)")
_AVERAGE = re.compile(r"#\s*Avg bus bandwidth\s*:")
# A line whose first word is a whole number is a result row, or a row nccl-tests did not print whole.
_ROW_START = re.compile(r"^\s*\d+(?:\s|$)")
_INTEGER = re.compile(r"[0-9]+")
_TIMESTAMP = re.compile(r"[0-9][0-9:./T-]*")
# Lines that mean NCCL or the test itself gave up, whatever numbers follow.
_FAILURES = (
    re.compile(r"NCCL WARN .*"),
    re.compile(r"Test (?:NCCL|CUDA) failure.*"),
    re.compile(r"srun: error: .*"),
)
# Bytes per element of each type nccl-tests names (src/common.cu test_typenames, v2.17.6; "char"
# and "int" are its names before NCCL 2.x's types).
TYPE_BYTES = {
    "int8": 1,
    "uint8": 1,
    "char": 1,
    "int32": 4,
    "uint32": 4,
    "int": 4,
    "int64": 8,
    "uint64": 8,
    "half": 2,
    "float": 4,
    "double": 8,
    "bfloat16": 2,
    "f8e4m3": 1,
    "f8e5m2": 1,
}
# The reductions all_reduce_perf runs (src/common.cu test_opnames); all_gather prints "none".
REDUCTIONS = {"sum", "prod", "max", "min", "avg", "mulsum"}
ALL_REDUCE = "all_reduce_perf"  # nccl-tests' binary; built with MPI it is all_reduce_perf_mpi
# Sizes past this many are not a sweep nccl-tests would run: a header that promises more is garbled.
MAX_SWEEP_SIZES = 64
_COLUMNS = 13  # size count type redop root, then time algbw busbw #wrong twice
_QUOTED = 80  # characters of an unreadable line quoted in its problem


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
    """What one run in an output says: its rows, header, ranks, and every problem found."""

    line: int = 1  # the line of the file the run starts on
    rows: list[SizeRow] = field(default_factory=list)
    expected_sizes: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    collective: str | None = None  # the binary nccl-tests names ('# Collective test starting:')
    ranks: dict[int, str] = field(default_factory=dict)  # rank -> host, from '#  Rank r ... on host'
    header_seen: bool = False
    finished: bool = False
    last_line: int = 0  # the last line of the file read into this run (where a cut file ends)
    blank: bool = False  # nothing of nccl-tests in it at all (set when the run is closed)

    def busbw_at(self, size: int) -> float | None:
        """The in-place busbw at exactly `size` bytes, or None when the run has no such row."""
        return next((row.busbw for row in self.rows if row.bytes == size), None)

    @property
    def hosts(self) -> set[str]:
        return set(self.ranks.values())


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


def _quote(line: str) -> str:
    shown = line.strip()
    return repr(shown if len(shown) <= _QUOTED else shown[:_QUOTED] + "...")


def _measure(token: str, what: str) -> float | str:
    """A time or bandwidth figure, or why it is not one (not a number, not finite, negative)."""
    try:
        value = float(token)
    except ValueError:
        return f"{what} {token!r} is not a number"
    if not math.isfinite(value):
        return f"{what} {token!r} is not a finite number"
    if value < 0:
        return f"{what} {token!r} is negative"
    return value


def _wrong(token: str) -> int | str | None:
    """#wrong: a count (nccl-tests prints it with %g), None for N/A, or why it is unreadable."""
    if token == "N/A":
        return None
    value = _measure(token, "#wrong")
    if isinstance(value, str):
        return value
    if value != int(value):
        return f"#wrong {token!r} is not a whole number"
    return int(value)


def _row(line: str) -> tuple[SizeRow, list[str]] | str:
    """One result row and the problems it states, or why it is not a row all_reduce_perf prints."""
    words = line.split()
    if len(words) < _COLUMNS or not all(_TIMESTAMP.fullmatch(word) for word in words[_COLUMNS:]):
        return f"{len(words)} columns where all_reduce_perf prints {_COLUMNS} (and a timestamp with -Z)"
    size_text, count_text, type_name, redop, root = words[:5]
    if not (_INTEGER.fullmatch(size_text) and _INTEGER.fullmatch(count_text)):
        return f"size {size_text!r} and count {count_text!r} must be whole numbers"
    size, count = int(size_text), int(count_text)
    width = TYPE_BYTES.get(type_name)
    if width is None:
        return f"type {type_name!r} is not one nccl-tests prints ({', '.join(TYPE_BYTES)})"
    if redop not in REDUCTIONS or root != "-1" or count * width != size:
        return (
            f"not an all-reduce row (redop {redop!r}, root {root}, {count} x {width}-byte {type_name} "
            f"for {size} bytes): all_reduce_perf prints a reduction, root -1 and a count of the size over "
            "the type's width; all_gather, reduce_scatter and the rooted tests print otherwise"
        )
    figures: list[float] = []
    for token, what in zip(
        words[5:8] + words[9:12],
        ("time", "algbw", "busbw", "in-place time", "in-place algbw", "in-place busbw"),
        strict=True,
    ):
        value = _measure(token, what)
        if isinstance(value, str):
            return value
        figures.append(value)
    wrongs = [_wrong(words[8]), _wrong(words[12])]
    for wrong in wrongs:
        if isinstance(wrong, str):
            return wrong
    problems: list[str] = []
    if None in wrongs:
        # nccl-tests prints N/A when it ran with -c 0: the data was never compared, so nothing is known.
        problems.append(
            f"#wrong is N/A at {size} bytes: the run did not check its results (nccl-tests -c 0); "
            "run all_reduce_perf with -c 1, as gpuforge validate does"
        )
    wrong = sum(value for value in wrongs if isinstance(value, int))
    if wrong > 0:
        problems.append(f"#wrong is {wrong} at {size} bytes: the all-reduce returned wrong data")
    return SizeRow(size, figures[4], figures[5], wrong), problems


def _close(run: NcclRun) -> None:
    """The problems only the whole run shows: missing sizes, no rows, no closing line."""
    run.blank = not (run.rows or run.problems or run.header_seen or run.collective or run.ranks)
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
    elif not run.finished:
        run.problems.append(
            f"output ends before the summary line ('# Avg bus bandwidth'), after line {run.last_line}: the run "
            "died before the end, or the file is cut"
        )


def parse_nccl(text: str) -> list[NcclRun]:
    """Parse every all_reduce_perf run in an output (at least one); problems are collected, never raised."""
    runs = [NcclRun()]
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _PREFIX.sub("", raw, count=1)
        run = runs[-1]
        collective = _COLLECTIVE.match(line)
        header = _HEADER.search(line)
        if (collective and (run.collective or run.rows)) or (header and (run.header_seen or run.rows)):
            run = NcclRun(line=number)
            runs.append(run)
        run.last_line = number
        for failure in _FAILURES:
            found = failure.search(line)
            if found:
                run.problems.append(f"line {number}: the run printed {found.group(0).strip()!r}")
        if collective:
            run.collective = collective["name"]
            if not run.collective.startswith(ALL_REDUCE):
                run.problems.append(
                    f"line {number}: the output is of {run.collective}, not {ALL_REDUCE}: the all-reduce "
                    f"floor does not apply to it. Fix: judge an {ALL_REDUCE} output"
                )
            continue
        if header:
            run.header_seen = True
            sweep = _sweep(int(header["min"]), int(header["max"]), int(header["step"]), header["kind"])
            if sweep is None:
                run.problems.append(
                    f"line {number}: the header's sweep is not one nccl-tests runs: {_quote(line)}"
                )
            else:
                run.expected_sizes = sweep
            continue
        rank = _RANK.match(line)
        if rank:
            if int(rank["rank"]) in run.ranks:
                run.problems.append(f"line {number}: rank {rank['rank']} is listed twice")
            run.ranks[int(rank["rank"])] = rank["host"]
            continue
        if _HEADER_START.match(line):
            # A header line nccl-tests prints, but not whole: its sweep or rank cannot be known.
            run.problems.append(f"line {number}: unreadable header line: {_quote(line)}")
            continue
        bounds = _OUT_OF_BOUNDS.search(line)
        if bounds and bounds["verdict"] == "FAILED":
            run.problems.append(f"nccl-tests found {bounds['count']} out-of-bounds values (data corrupted)")
        if _AVERAGE.search(line):
            run.finished = True
            continue
        if not _ROW_START.match(line):
            continue
        parsed = _row(line)
        if isinstance(parsed, str):
            run.problems.append(f"line {number}: unreadable row, {parsed}: {_quote(line)}")
            continue
        row, problems = parsed
        if run.finished or (run.rows and row.bytes <= run.rows[-1].bytes):
            # A size that does not grow, or a row after the closing line: a second sweep begins.
            run.last_line = number - 1
            run = NcclRun(line=number, last_line=number)
            runs.append(run)
        run.problems.extend(f"line {number}: {problem}" for problem in problems)
        run.rows.append(row)
    for run in runs:
        _close(run)
    return runs
