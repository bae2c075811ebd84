"""Parse `dcgmi diag -r N` table output into test verdicts per GPU.

dcgmi prints "Successfully ran diagnostic for group." and a two-column table: category
rows (`|-----  Deployment  ---`, `+-----  Hardware  ---`), one row per test whose result is
Pass, Fail, Warn, Skip or Not Run (DCGM 3.x: `Fail - GPU: 0`, `Pass - All`; DCGM 4.x: the
test's overall result, then `GPU0: Fail` rows), and `Warning`/`Error`/`Info` rows that
explain the row above, wrapped over continuation rows. Metadata rows (versions) are skipped.

A Fail on any test fails the node; Warn is reported but does not; an output without
the banner or the closing border (dcgmi died, or the file was cut) fails too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

BANNER = "Successfully ran diagnostic for group."
_CATEGORY = re.compile(r"^[|+]-{3,}\s+(?P<name>[A-Za-z][A-Za-z ]*?)\s+-+[+|]")
_ROW = re.compile(r"^\|\s?(?P<name>[^|]*?)\s*\|\s?(?P<value>.*?)\s*\|$")
_BORDER = re.compile(r"^\+-+\+-+\+$")
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


def describe(test: DiagTest) -> str:
    """'Hardware/GPU Memory: Fail on GPU 0 (<DCGM's first sentence>)'."""
    where = f" on GPU {','.join(map(str, sorted(test.failed_gpus)))}" if test.failed_gpus else ""
    detail = f" ({test.detail.split('. ')[0].strip()})" if test.detail else ""
    return f"{test.category}/{test.name}: {test.result}{where}{detail}"


def parse_diag(text: str) -> DiagRun:
    """Parse one `dcgmi diag` table; problems are collected, never raised."""
    run = DiagRun()
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    category = ""
    current: DiagTest | None = None
    noting = False
    closed = False
    for line in lines:
        if line.startswith("Error:"):
            run.problems.append(f"dcgmi reported {line.strip()!r}")
        heading = _CATEGORY.match(line)
        if heading:
            category, current, noting, closed = heading["name"].strip(), None, False, False
            continue
        if _BORDER.match(line):
            closed = True
            continue
        row = _ROW.match(line)
        if row is None or category in SKIPPED_CATEGORIES or not category:
            continue
        closed = False
        name, value = row["name"].strip(), row["value"].strip()
        if name in _NOTES and current is not None:
            current.detail = (current.detail + " " + value).strip() if noting else value
            noting = True
            continue
        if name:
            noting = False
            result = _RESULT.match(value)
            if result is None:
                current = None
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
