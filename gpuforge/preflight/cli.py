"""`gpuforge preflight STACK_DIR --stack NAME [--catalog PATH] [--json]`.

Exit codes: 0 when no check fails (warnings allowed), 1 when one fails, 2 for bad
config or no AWS credentials (a GpuforgeError, printed by gpuforge.cli without a
traceback). boto3 is imported only when the command runs, so other commands do
not pay for it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpuforge.cli import add_stack_arguments
from gpuforge.deadline import add_timeout_argument
from gpuforge.display import printable

if TYPE_CHECKING:
    from gpuforge.preflight.report import Check
    from gpuforge.stack_config import StackConfig


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "preflight",
        help="check the AWS account before `pulumi up`: offering, quota, reservation or Capacity Block, "
        "AMI, subnet and bucket",
        description="Reads STACK_DIR/Pulumi.<stack>.yaml and checks the account with boto3 (standard "
        "credential chain: AWS_PROFILE, AWS_ENDPOINT_URL and the rest are honoured). Read-only calls only. "
        "Exit 0: no check failed; 1: a check failed; 2: bad config or no credentials.",
    )
    add_stack_arguments(parser)
    parser.add_argument("--json", action="store_true", help='print {"checks": [{"id", "status", "message"}]}')
    add_timeout_argument(
        parser,
        "the deadline of every AWS call together, in seconds: a check still waiting then fails, as do those after it",
    )
    parser.set_defaults(handler=_preflight)


def _preflight(args: argparse.Namespace) -> int:
    from gpuforge.preflight.run import preflight

    config, checks = preflight(args.stack_dir, args.stack, catalog=args.catalog, timeout_s=args.timeout)
    return emit(config, checks, as_json=args.json)


def emit(config: StackConfig, checks: Sequence[Check], *, as_json: bool) -> int:
    """Print the report and return the exit code."""
    from gpuforge.preflight.report import exit_code, render_text, to_json

    if as_json:
        print(json.dumps(to_json(checks), indent=2))
    else:
        print(printable(f"preflight of stack {config.stack} ({config.source}) in {config.region}"))
        print(render_text(checks))
    return exit_code(checks)
