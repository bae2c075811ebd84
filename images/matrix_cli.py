"""`gpuforge matrix check` and `gpuforge matrix show`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from gpuforge.display import printable
from gpuforge.errors import Finding, InputError, Severity
from gpuforge.images.matrix import MatrixReport, check_file, load_valid

EXIT_OK, EXIT_FINDINGS, EXIT_UNREADABLE = 0, 1, 2


def register(subparsers: Any) -> None:
    matrix = subparsers.add_parser("matrix", help="check and show image matrices")
    commands = matrix.add_subparsers(dest="matrix_command", required=True, metavar="SUBCOMMAND")

    check = commands.add_parser(
        "check",
        help="check matrices: exact pins and compatibility rules",
        description="Checks each matrix: its shape, exact pins, checksums and their sources, and every "
        "compatibility rule with the source of its fact (README: Rules). Exit 0 when every file passes "
        "(warnings allowed), 1 when one has an error, 2 when one cannot be read.",
    )
    check.add_argument("files", nargs="+", type=Path, metavar="FILE", help="matrix YAML files")
    check.add_argument(
        "--json",
        action="store_true",
        help="print one JSON report: {files: [{path, digest, findings: [{rule, severity, field, message, source}]}]}",
    )
    check.set_defaults(handler=_check)

    show = commands.add_parser(
        "show",
        help="print the normalized matrix and its digest",
        description="Prints the matrix as its digest hashes it. Exit 0; 1 when it fails its check (the "
        "findings are printed); 2 when it cannot be read.",
    )
    show.add_argument("file", type=Path, metavar="FILE", help="a matrix YAML file")
    show.add_argument("--json", action="store_true", help="print {path, digest, matrix} as JSON")
    show.set_defaults(handler=_show)


def _unreadable(path: Path, error: InputError) -> MatrixReport:
    finding = Finding("file.unreadable", Severity.ERROR, "(file)", error.message, "gpuforge matrix check")
    return MatrixReport(path, None, None, (finding,))


def _check(args: argparse.Namespace) -> int:
    reports: list[MatrixReport] = []
    code = EXIT_OK
    for path in args.files:
        try:
            report = check_file(path)
        except InputError as error:
            reports.append(_unreadable(path, error))
            code = EXIT_UNREADABLE
            continue
        reports.append(report)
        if not report.ok and code == EXIT_OK:
            code = EXIT_FINDINGS
    if args.json:
        print(json.dumps({"files": [report.to_json() for report in reports]}, indent=2))
        return code
    for report in reports:
        errors = sum(f.severity is Severity.ERROR for f in report.findings)
        warnings = len(report.findings) - errors
        verdict = "ok" if report.ok else "FAIL"
        digest = f" digest {report.digest[:12]}" if report.digest else ""
        print(printable(f"{verdict:4} {report.path}{digest} ({errors} errors, {warnings} warnings)"))
        for finding in report.findings:
            print(f"     {printable(finding.render())}")
    return code


def _show(args: argparse.Namespace) -> int:
    matrix, digest = load_valid(args.file)
    if args.json:
        print(json.dumps({"path": str(args.file), "digest": digest, "matrix": matrix.normalized()}, indent=2))
        return EXIT_OK
    print(f"# {printable(str(args.file))}\n# digest: {digest}")
    for key, value in matrix.normalized().items():
        print(f"{key}: {json.dumps(value)}")
    return EXIT_OK
