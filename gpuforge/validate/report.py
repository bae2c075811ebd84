"""Judge parsed outputs against the floors, and render the verdict as a table, JSON or SVG.

The JSON shape is a contract (README, "Acceptance"): `{"floors", "nccl": [{"file",
"sizes": [{"bytes", "algbw", "busbw", "wrong"}], "busbw_large", "floor", "verdict",
"problems"}], "diag": [{"file", "verdict", "problems", "tests"}], "slow_nodes",
"unresolved_nodes", "verdict"}`; verdicts are "pass" or "fail".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape
from typing import TYPE_CHECKING, Any

from gpuforge.svg import document
from gpuforge.validate.dcgm import BANNER, DiagRun, parse_diag
from gpuforge.validate.floors import Floors
from gpuforge.validate.nccl import NcclRun, parse_nccl

if TYPE_CHECKING:
    from gpuforge.validate.transport import TransportVerdict


@dataclass
class NcclVerdict:
    file: str
    run: NcclRun
    busbw_large: float | None
    floor: float
    problems: list[str]
    nodes: int  # the nodes the run spanned (1: NVLink only)
    transport: TransportVerdict | None = None  # NCCL's network, from its INFO lines (validate.transport)
    line: int = 1  # the line of the file the run starts on (a file may hold several runs)

    @property
    def passed(self) -> bool:
        return not self.problems


@dataclass
class DiagVerdict:
    file: str
    run: DiagRun

    @property
    def passed(self) -> bool:
        return not self.run.problems


@dataclass
class Report:
    floors: Floors
    nodes: int
    nccl: list[NcclVerdict] = field(default_factory=list)
    diag: list[DiagVerdict] = field(default_factory=list)
    slow_nodes: tuple[str, ...] = ()
    unresolved_nodes: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        verdicts = [item.passed for item in self.nccl] + [item.passed for item in self.diag]
        return all(verdicts) and not self.slow_nodes

    def to_json(self) -> dict[str, Any]:
        return {
            "floors": self.floors.to_json(),
            "nccl": [
                {
                    "file": item.file,
                    "line": item.line,
                    "sizes": [row.to_json() for row in item.run.rows],
                    "busbw_large": item.busbw_large,
                    "floor": item.floor,
                    "verdict": _verdict(item.passed),
                    "problems": item.problems,
                    **({} if item.transport is None else {"transport": item.transport.to_json()}),
                }
                for item in self.nccl
            ],
            "diag": [
                {
                    "file": item.file,
                    "verdict": _verdict(item.passed),
                    "problems": item.run.problems,
                    "tests": [
                        {
                            "category": t.category,
                            "name": t.name,
                            "result": t.result,
                            "failed_gpus": sorted(t.failed_gpus),
                        }
                        for t in item.run.tests
                    ],
                }
                for item in self.diag
            ],
            "slow_nodes": list(self.slow_nodes),
            "unresolved_nodes": list(self.unresolved_nodes),
            "verdict": _verdict(self.passed),
        }


def _verdict(passed: bool) -> str:
    return "pass" if passed else "fail"


def is_diag(text: str) -> bool:
    """dcgmi's table (its banner, or a `| name | result |` row, whole or cut), which nccl-tests never prints."""
    return BANNER in text or any(line.lstrip().startswith("|") for line in text.splitlines())


def has_nccl(text: str) -> bool:
    """Whether any line of `text` is nccl-tests' (a header, a rank, a row, a failure line)."""
    return any(not run.blank for run in parse_nccl(text))


def judge_runs(
    file: str, text: str, floors: Floors, nodes: int, *, gpus_per_node: int | None = None
) -> list[NcclVerdict]:
    """Every all_reduce_perf run in one output on `nodes` nodes against the type's floor.

    `gpus_per_node`: the type's GPUs, when the ranks the output lists must match `nodes` of them
    (`validate report`, which is told the node count rather than choosing it).
    """
    verdicts: list[NcclVerdict] = []
    for run in parse_nccl(text):
        problems = list(run.problems)
        if gpus_per_node is not None:
            problems.extend(_placement(run, nodes, gpus_per_node))
        floor = floors.floor(nodes)
        busbw = run.busbw_at(floors.message_bytes)
        if run.rows and busbw is None:
            problems.append(
                f"no row at {floors.message_bytes} bytes, the size the floor is set at: run the sweep up to at least "
                f"that size (all_reduce_perf -e {floors.message_bytes})"
            )
        elif busbw is not None and busbw < floor:
            problems.append(
                f"busbw {busbw:.2f} GB/s at {floors.message_bytes} bytes is below the floor of {floor:.2f} GB/s "
                f"({floors.basis(nodes)})"
            )
        verdicts.append(NcclVerdict(file, run, busbw, floor, problems, nodes, line=run.line))
    return verdicts


def judge_nccl(file: str, text: str, floors: Floors, nodes: int) -> NcclVerdict:
    """One step's all_reduce_perf output as one verdict: its first run, failing for any later run's problems."""
    first, *others = judge_runs(file, text, floors, nodes)
    for other in others:
        first.problems.extend(f"the run at line {other.line}: {problem}" for problem in other.problems)
    return first


def _placement(run: NcclRun, nodes: int, gpus_per_node: int) -> list[str]:
    """The ranks and hosts nccl-tests lists ('#  Rank r ... on HOST') against `nodes` x `gpus_per_node`."""
    if not run.ranks:
        return [
            f"the run lists no ranks ('#  Rank 0 Group 0 Pid ... on HOST device ...'), so nothing shows it spanned "
            f"{nodes} node(s): judge the whole output, its header included"
        ]
    problems: list[str] = []
    hosts = sorted(run.hosts)
    if len(hosts) != nodes:
        problems.append(
            f"the run's ranks are on {len(hosts)} host(s) ({', '.join(hosts[:4])}{', ...' if len(hosts) > 4 else ''}), "
            f"not the {nodes} of --nodes: pass the node count it ran on"
        )
    if len(run.ranks) != nodes * gpus_per_node:
        problems.append(
            f"the run has {len(run.ranks)} rank(s), not {nodes * gpus_per_node} ({nodes} node(s) x {gpus_per_node} GPUs "
            "of the type): a floor holds for every GPU of every node (all_reduce_perf -g 1 with one task per GPU)"
        )
    return problems


def judge_files(
    paths_and_texts: list[tuple[str, str]], floors: Floors, nodes: int, *, gpus_per_node: int | None = None
) -> Report:
    """Parse and judge saved outputs: dcgmi's table where a file has one, nccl-tests' runs where it has
    them (a file with both is judged as both), and a file with neither as nccl-tests output (a failure)."""
    report = Report(floors=floors, nodes=nodes)
    for file, text in paths_and_texts:
        diag = is_diag(text)
        if diag:
            report.diag.append(DiagVerdict(file, parse_diag(text)))
        if not diag or has_nccl(text):
            report.nccl.extend(judge_runs(file, text, floors, nodes, gpus_per_node=gpus_per_node))
    return report


def verdict_parts(item: NcclVerdict) -> tuple[str, str | None]:
    """The figure judged with its verdict, and what failed when the figure itself met the floor: a cut file
    that reads "440.96 GB/s: FAIL" says nothing of why."""
    if item.busbw_large is None:
        return f"none: {_verdict(item.passed).upper()}", None
    figure = f"{item.busbw_large:.2f} GB/s"
    if item.passed:
        return f"{figure} (floor {item.floor:.2f}): PASS", None
    if item.busbw_large < item.floor:
        return f"{figure}, below the floor of {item.floor:.2f}: FAIL", None
    more = len(item.problems) - 1
    return (
        f"{figure} meets the floor of {item.floor:.2f}, but FAIL",
        item.problems[0] + (f" (and {more} more)" if more else ""),
    )


def headline(item: NcclVerdict) -> str:
    """`verdict_parts` on one line: the terminal's verdict line."""
    verdict, why = verdict_parts(item)
    return verdict if why is None else f"{verdict}: {why}"


def render_text(report: Report) -> str:
    """The terminal view: per size algbw and busbw, the large-message verdict, per node the diag."""
    lines: list[str] = []
    for item in report.nccl:
        lines.append(
            f"nccl-tests {item.file}{f' line {item.line}' if item.line > 1 else ''} ({item.nodes} node(s), floor {item.floor:.2f} GB/s at {report.floors.message_bytes} B)"
        )
        lines.append(f"  {'bytes':>12} {'algbw GB/s':>11} {'busbw GB/s':>11} {'#wrong':>7}")
        for row in item.run.rows:
            lines.append(f"  {row.bytes:>12} {row.algbw:>11.2f} {row.busbw:>11.2f} {row.wrong:>7}")
        lines.append(f"  busbw at {report.floors.message_bytes} B: {headline(item)}")
        if item.transport is not None:
            lines.append(f"  transport: {item.transport.summary()}")
        lines.extend(f"  - {problem}" for problem in item.problems)
    for diag in report.diag:
        lines.append(f"dcgmi diag {diag.file}: {_verdict(diag.passed).upper()} ({len(diag.run.tests)} tests)")
        lines.extend(f"  - {problem}" for problem in diag.run.problems)
    if report.slow_nodes:
        lines.append(f"slow nodes: {', '.join(report.slow_nodes)}")
    if report.unresolved_nodes:
        lines.append(
            f"unresolved: every pair fell short, so no node is known good: {', '.join(report.unresolved_nodes)}"
        )
    lines.append(f"verdict: {_verdict(report.passed).upper()}")
    return "\n".join(lines) + "\n"


def render_svg(report: Report, *, width: int = 720, height: int = 420) -> str:
    """busbw against message size (log2 axis) for every nccl-tests run, with the floor marked where it is
    judged (one message size, not a line across every size), and each run's verdict, and what failed, in its
    legend."""
    margin = 60
    rows = [row for item in report.nccl for row in item.run.rows if row.bytes > 0]
    floor = report.floors.floor(report.nodes)
    judged = report.floors.message_bytes
    if not rows:
        return document(
            width, height, [f'<text x="{margin}" y="{height // 2}">no nccl-tests rows to plot</text>']
        )
    lows = [row.bytes.bit_length() - 1 for row in rows] + [judged.bit_length() - 1]
    x_min, x_max = min(lows), max(max(lows), min(lows) + 1)
    y_max = max(max(row.busbw for row in rows), floor) * 1.1

    def x(size: int) -> float:
        return margin + (size.bit_length() - 1 - x_min) / (x_max - x_min) * (width - 2 * margin)

    def y(busbw: float) -> float:
        return height - margin - busbw / y_max * (height - 2 * margin)

    at, level = x(judged), y(floor)
    parts = [
        f'<line x1="{margin}" y1="{height - margin}" x2="{width - margin}" y2="{height - margin}" stroke="black"/>',
        f'<line x1="{margin}" y1="{margin}" x2="{margin}" y2="{height - margin}" stroke="black"/>',
        # The floor holds at one size: a mark there, and a faint guide down to that size on the axis.
        f'<line class="floor" x1="{at - 12:.1f}" y1="{level:.1f}" x2="{at + 12:.1f}" y2="{level:.1f}" stroke="red" stroke-width="3"/>',
        f'<line x1="{at:.1f}" y1="{level:.1f}" x2="{at:.1f}" y2="{height - margin}" stroke="red" stroke-dasharray="2,4"/>',
        f'<text x="{at - 16:.1f}" y="{level - 6:.1f}" text-anchor="end" fill="red">floor {floor:.1f} GB/s at {judged} B</text>',
        f'<text x="{width / 2}" y="{height - 15}" text-anchor="middle">message size (bytes, log2)</text>',
        f'<text x="15" y="{height / 2}" transform="rotate(-90 15 {height / 2})" text-anchor="middle">busbw GB/s (in place)</text>',
    ]
    for exponent in range(x_min, x_max + 1, max(1, (x_max - x_min) // 8)):
        parts.append(
            f'<text x="{x(1 << exponent):.1f}" y="{height - margin + 15}" text-anchor="middle" font-size="10">2^{exponent}</text>'
        )
    colours = ["#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    row = 0  # legend lines drawn so far
    for index, item in enumerate(report.nccl):
        points = " ".join(f"{x(row.bytes):.1f},{y(row.busbw):.1f}" for row in item.run.rows if row.bytes > 0)
        colour = colours[index % len(colours)]
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{points}"/>')
        if item.busbw_large is not None:
            parts.append(f'<circle cx="{at:.1f}" cy="{y(item.busbw_large):.1f}" r="4" fill="{colour}"/>')
        where = f"{item.file}{f' line {item.line}' if item.line > 1 else ''}"
        verdict, why = verdict_parts(item)
        legend = [f"{where}: {verdict}", *([] if why is None else [f"  {why}"])]
        for text in legend:
            row += 1
            parts.append(
                f'<text x="{margin + 10}" y="{margin + 15 * row}" fill="{colour}" xml:space="preserve">'
                f"{escape(_short(text, _LEGEND_CHARS))}</text>"
            )
    return document(width, height, parts)


# A legend line's characters at 12 px sans-serif within the 600 px of the plot area.
_LEGEND_CHARS = 100


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
