"""`gpuforge policy check DIR [--stack NAME] [--config-file FILE] [--catalog FILE] [--mock-answers FILE] [--json]`.

Exit codes, as `gpuforge plan` has them: 0 when no mandatory policy fails, 1 when one
does, 2 for bad input (the project, config or answers file, a program that raises,
a config key it needs and does not get, a lookup with no answer), through gpuforge.cli.

The Pulumi SDK is imported only when the command runs, not when its parser is built.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_POLICY_FAILED = 0, 1


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "policy",
        help="run the policy pack on any Python Pulumi program, offline",
        description="The gpuforge policy pack, on programs other than gpuforge's own stacks.",
    )
    commands = parser.add_subparsers(dest="policy_command", required=True, metavar="COMMAND")
    check = commands.add_parser(
        "check",
        help="run a Python Pulumi program under the SDK's mocks, then the policy pack on what it registered",
        description="Runs the program of the Pulumi project in DIR (its Pulumi.yaml, its own config "
        "namespace) with a stack's config under the Pulumi SDK's mocks, then the policy pack on the "
        "resources it registered. An AMI lookup resolves only to AMIs of the image catalog. Exit 0 when "
        "no mandatory policy fails, 1 when one does, 2 for bad input.",
    )
    check.add_argument("directory", type=Path, metavar="DIR", help="the Pulumi project (holds Pulumi.yaml)")
    check.add_argument(
        "--stack",
        metavar="NAME",
        help="the stack: reads Pulumi.NAME.yaml (default: the project's only stack file)",
    )
    check.add_argument(
        "--config-file",
        type=Path,
        metavar="FILE",
        help="use this stack config file instead of Pulumi.NAME.yaml (as the Pulumi CLI's flag)",
    )
    check.add_argument(
        "--catalog",
        type=Path,
        metavar="FILE",
        help="the image catalog that AMIs are checked against and lookups resolve from "
        "(default: the catalog shipped beside gpuforge.images)",
    )
    check.add_argument(
        "--mock-answers",
        type=Path,
        metavar="FILE",
        help="results for provider functions the mocks do not answer (YAML or JSON: invokes: {token: result})",
    )
    check.add_argument("--json", action="store_true", help="print the check as one JSON document")
    check.set_defaults(handler=_check)
    from gpuforge.kubernetes.check import register as register_kubernetes

    register_kubernetes(commands)


def _check(args: argparse.Namespace) -> int:
    from gpuforge.policycheck.check import check
    from gpuforge.policycheck.render import check_document, render_text

    result = check(
        args.directory,
        stack=args.stack,
        config_file=args.config_file,
        catalog=args.catalog,
        mock_answers=args.mock_answers,
    )
    if args.json:
        print(json.dumps(check_document(result), indent=2))
    else:
        print(render_text(result))
    return EXIT_POLICY_FAILED if result.mandatory_failures else EXIT_OK
