"""`gpuforge validate report --instance-type TYPE --nodes N FILE... [--json] [--plot FILE]`.

Parses saved nccl-tests (`all_reduce_perf`) and `dcgmi diag` outputs and judges them
against the instance type's floors (`gpuforge/data/instance_types.json`,
`allreduce_floors`). Exit 0 when every file passes, 1 when one fails, 2 for bad input.
Each file is read as dcgmi output when it holds dcgmi's table, else as nccl-tests output.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from gpuforge.errors import InputError

# nccl-tests and dcgmi outputs are text of a few hundred KiB at most, even with NCCL_DEBUG=INFO.
MAX_OUTPUT_BYTES = 64 * 1024 * 1024


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="judge NCCL all-reduce and DCGM diagnostics against per-type floors",
        description=(
            "The acceptance run after `pulumi up`. Floors: the expected in-place all-reduce busbw at 1 GiB "
            "per instance type (single node over NVLink, 2+ nodes over EFA), each with its source; a run "
            "below 90%% of the figure fails, as does any #wrong above 0, a NCCL WARN, a missing size, a "
            "truncated output or a failed dcgmi test."
        ),
    )
    commands = parser.add_subparsers(dest="validate_command", required=True, metavar="COMMAND")
    report = commands.add_parser(
        "report",
        help="judge saved nccl-tests and dcgmi diag outputs offline",
        description="Parses saved outputs and judges them against the type's floors. Exit 0 pass, 1 fail, 2 bad input.",
    )
    report.add_argument(
        "files", nargs="+", type=Path, metavar="FILE", help="all_reduce_perf or dcgmi diag output"
    )
    report.add_argument("--instance-type", required=True, metavar="TYPE", help="e.g. p5.48xlarge")
    report.add_argument(
        "--nodes",
        required=True,
        type=int,
        metavar="N",
        help="nodes the all_reduce_perf runs spanned (1: NVLink only)",
    )
    report.add_argument("--json", action="store_true", help="print the report as JSON (README: Acceptance)")
    report.add_argument("--plot", type=Path, metavar="FILE", help="write busbw against message size as SVG")
    report.set_defaults(handler=_report)


def read_output(path: Path) -> str:
    """A saved output's text, or an error naming the file and the fix."""
    from gpuforge.loading import read_text

    return read_text(
        path,
        what="nccl-tests or dcgmi diag output",
        max_bytes=MAX_OUTPUT_BYTES,
        fix="pass the file the job's stdout was saved to",
    )


def write_plot(path: Path, svg: str) -> None:
    from gpuforge.atomic import write_text_atomic

    try:
        write_text_atomic(path, svg)
    except OSError as error:
        raise InputError(
            f"--plot {path}: cannot write the file ({error.strerror}). Fix: pass a path in a folder you can write to."
        ) from None


def _report(args: argparse.Namespace) -> int:
    from gpuforge.validate.floors import floors_for
    from gpuforge.validate.report import judge_files, render_svg, render_text

    if args.nodes < 1:
        raise InputError(
            f"--nodes {args.nodes}: a run spans at least one node. Fix: pass the number of nodes it ran on."
        )
    floors = floors_for(args.instance_type)
    report = judge_files([(str(path), read_output(path)) for path in args.files], floors, args.nodes)
    if args.plot is not None:
        write_plot(args.plot, render_svg(report))
    print(
        json.dumps(report.to_json(), indent=2) if args.json else render_text(report),
        end="\n" if args.json else "",
    )
    return 0 if report.passed else 1
