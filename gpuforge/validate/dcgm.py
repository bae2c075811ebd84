"""Parse `dcgmi diag -r N` table output into test verdicts per GPU.

dcgmi prints "Successfully ran diagnostic for group." and a two-column table: category
rows (`|-----  Deployment  ---`, `+-----  Hardware  ---`), one row per test whose result is
Pass, Fail, Warn, Skip or Not Run (DCGM 3.x: `Fail - GPU: 0`, `Pass - All`; DCGM 4.x: the
test's overall result, then `GPU0: Fail` rows), and `Warning`/`Error`/`Info` rows that
explain the row above, wrapped over continuation rows. Metadata rows (versions) are skipped.

A Fail on any test fails the node; Warn is reported but does not; an output without
the banner or the closing border (dcgmi died, or the file was cut) fails too, as does a line of
the table it cannot read (named by its line). A file with several diagnostics (each after its
banner) is judged whole: every table must close, and a failure in any fails it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

BANNER = "Successfully ran diagnostic for group."
# The table's lines are read by splitting at '|' and '+', never by a regular expression with
# lazy and greedy runs side by side: those backtracked quadratically on a long line (a 40 KB line
# took 18 s). Every function below is linear in its line (benchmarks/validate_parse_bench.py).
_CATEGORY_NAME = re.compile(r"[A-Za-z][A-Za-z ]*")
_RESULT = re.compile(r"^(?P<result>Pass|Fail|Warn|Skip|Not Run)\b(?:\s*-\s*(?P<scope>.*))?$")
_GPU_RESULT = re.compile(r"^GPU\s*(?P<gpu>\d+)\s*:\s*(?P<result>Pass|Fail|Warn|Skip|Not Run)\b")
_SCOPE_GPU = re.compile(r"GPU:?\s*(?P<gpu>\d+)")
_NOTES = {"Warning", "Error", "Info"}
SKIPPED_CATEGORIES = {"Metadata"}


@dataclass
class DiagTest:
    """One test's verdict, the GPUs it failed on (None: all or unknown), and DCGM's words."""

    category: str
    name: str
    result: str
    failed_gpus: set[int] = field(default_factory=set)
    detail: str = ""

    def add_result(self, result: str, scope: str | None) -> None:
        if result == "Fail":
            self.result = "Fail"
            if scope:
                self.failed_gpus.update(int(gpu) for gpu in _SCOPE_GPU.findall(scope))


@dataclass
class DiagRun:
    """One node's diagnostic: its tests and every problem that fails it."""

    tests: list[DiagTest] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def failures(self) -> list[DiagTest]:
        return [test for test in self.tests if test.result == "Fail"]

    @property
    def warnings(self) -> list[DiagTest]:
        return [test for test in self.tests if test.result == "Warn"]


def _shown(text: str) -> str:
    """A line of the output as a problem quotes it: cut to 80 characters."""
    return repr(text if len(text) <= 80 else text[:80] + "...")


def describe(test: DiagTest) -> str:
    """'Hardware/GPU Memory: Fail on GPU 0 (<DCGM's first sentence>)'."""
    where = f" on GPU {','.join(map(str, sorted(test.failed_gpus)))}" if test.failed_gpus else ""
    detail = f" ({test.detail.split('. ')[0].strip()})" if test.detail else ""
    return f"{test.category}/{test.name}: {test.result}{where}{detail}"


def _category(line: str) -> str | None:
    """'Deployment' from `|-----  Deployment  ---+---|` (or `+-----  Hardware  ---+---+`), else None."""
    if line[:4] not in ("|---", "+---") or line[-1] not in "|+":
        return None
    cells = re.split(r"[|+]", line[1:-1])
    if len(cells) != 2 or cells[1].strip("-") or not cells[0].endswith("-"):
        return None
    name = cells[0].strip("-").strip()
    return name if _CATEGORY_NAME.fullmatch(name) else None


def _border(line: str, fill: str) -> bool:
    """`+----+----+` (fill '-') or dcgmi's header rule `+====+====+` (fill '=')."""
    if len(line) < 5 or line[0] != "+" or line[-1] != "+":
        return False
    cells = line[1:-1].split("+")
    return len(cells) == 2 and all(cell and not cell.strip(fill) for cell in cells)


def _row(line: str) -> tuple[str, str] | None:
    """(name, value) of a `| name | value |` row, stripped; None when the line is not one."""
    if len(line) < 3 or line[0] != "|" or line[-1] != "|":
        return None
    cells = line[1:-1].split("|")
    return (cells[0].strip(), cells[1].strip()) if len(cells) == 2 else None


def parse_diag(text: str) -> DiagRun:
    """Parse one `dcgmi diag` table; problems are collected, never raised."""
    run = DiagRun()
    category = ""
    current: DiagTest | None = None
    noting = False
    closed = False
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("Error:"):
            run.problems.append(f"line {number}: dcgmi reported {_shown(line)}")
        if line == BANNER:
            # Another diagnostic in the same file: each one's table must be whole.
            if category and not closed:
                run.problems.append(
                    f"line {number}: a diagnostic begins before the table above it closed: that dcgmi died or was cut"
                )
            category, current, noting, closed = "", None, False, False
            continue
        heading = _category(line)
        if heading:
            category, current, noting, closed = heading, None, False, False
            continue
        if _border(line, "-"):
            closed = True
            continue
        if _border(line, "="):
            continue
        row = _row(line)
        if row is None:
            if line[0] in "|+":
                run.problems.append(
                    f"line {number}: not a row of dcgmi's table (two columns): {_shown(line)}"
                )
            continue
        if category in SKIPPED_CATEGORIES or not category:
            continue
        closed = False
        name, value = row
        if name in _NOTES and current is not None:
            current.detail = (current.detail + " " + value).strip() if noting else value
            noting = True
            continue
        if name:
            noting = False
            result = _RESULT.match(value)
            if result is None:
                current = None
                run.problems.append(
                    f"line {number}: test {name!r} has no result dcgmi prints (Pass, Fail, Warn, Skip, Not Run): "
                    f"{_shown(value)}"
                )
                continue
            current = DiagTest(category, name, result["result"])
            current.add_result(result["result"], result["scope"])
            run.tests.append(current)
            continue
        if current is None:
            continue
        per_gpu = _GPU_RESULT.match(value)
        scoped = _RESULT.match(value)
        if per_gpu:
            if per_gpu["result"] == "Fail":
                current.add_result("Fail", f"GPU {per_gpu['gpu']}")
        elif scoped and not noting:
            current.add_result(scoped["result"], scoped["scope"])
        elif noting:
            # dcgmi wraps at a fixed width, mid-word too; a space at each joint keeps the words apart.
            current.detail = f"{current.detail} {value}"
    for test in run.failures:
        run.problems.append(describe(test))
    if BANNER not in text:
        run.problems.append(f"no {BANNER!r} banner: dcgmi did not run the diagnostic, or the file is cut")
    if not closed:
        run.problems.append("the table has no closing border: dcgmi died before the end, or the file is cut")
    if not run.tests:
        run.problems.append("no test result in the table: this is not `dcgmi diag` output")
    return run
