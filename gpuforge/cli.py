"""The `gpuforge` command line.

Each command group lives beside the code it drives and registers itself through
a `register(subparsers)` function; this module only wires them together and
turns `GpuforgeError` into a message and an exit code, so bad input never ends
in a traceback.

Only the module of the command being run is imported. `gpuforge node check`
runs on GPU nodes, where the image installs the standard library's needs and
boto3 but not Pulumi: importing `plan` there would break the health gate.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from gpuforge import __version__
from gpuforge.display import printable_lines
from gpuforge.errors import GpuforgeError

# Command name -> (module defining register(subparsers), one-line help for the top-level listing).
# A module's register() adds a parser of the same name and sets `handler` (args -> exit code).
COMMANDS: dict[str, tuple[str, str]] = {
    "matrix": ("gpuforge.images.matrix_cli", "check and show image matrices"),
    "image": ("gpuforge.images.image_cli", "render, build, list and verify pinned AMIs"),
    "plan": ("gpuforge.plan.cli", "plan a stack offline under the Pulumi SDK's mocks"),
    "policy": ("gpuforge.policycheck.cli", "check any Python Pulumi program offline"),
    "preflight": ("gpuforge.preflight.cli", "check an AWS account before `pulumi up`"),
    "node": ("gpuforge.node.cli", "health-check a GPU node (runs on the node)"),
    "scheduler": (
        "gpuforge.scheduler.cli",
        "render the scheduler config of a stack (Slurm, or Kubernetes objects)",
    ),
    "monitoring": (
        "gpuforge.monitoring.cli",
        "render the Prometheus, Alertmanager and dcgm-exporter config of a stack",
    ),
    "validate": ("gpuforge.validate.cli", "judge NCCL and DCGM acceptance runs against per-type floors"),
    "usage": ("gpuforge.usage.cli", "GPU-hours held, useful and idle, unused reserved hours and cost"),
    "capacity-ledger": (
        "gpuforge.usage.ledger_cli",
        "record the stack's current capacity in its capacity ledger",
    ),
}

Handler = Callable[[argparse.Namespace], int]
BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a command whose reader closed the pipe


def add_stack_arguments(parser: argparse.ArgumentParser) -> None:
    """STACK_DIR, --stack and --catalog: how every command that reads a stack's config names it."""
    parser.add_argument(
        "stack_dir", type=Path, metavar="STACK_DIR", help="the Pulumi project, e.g. stacks/training"
    )
    parser.add_argument("--stack", required=True, metavar="NAME", help="the stack: reads Pulumi.NAME.yaml")
    parser.add_argument(
        "--catalog",
        type=Path,
        metavar="PATH",
        help="image catalog to resolve the AMI from, in place of the stack's gpuforge:catalog",
    )


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser, with the full sub-parser of `command` and a one-line entry for the others."""
    parser = argparse.ArgumentParser(
        prog="gpuforge", description="Pinned GPU images and EFA-correct training clusters on AWS."
    )
    parser.add_argument("--version", action="version", version=f"gpuforge {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, summary) in COMMANDS.items():
        if name == command:
            importlib.import_module(module).register(subparsers)
        else:
            subparsers.add_parser(name, help=summary, add_help=False)
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The command word: the first argument that is not an option."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_command(args_list))
    args = parser.parse_args(args_list)
    handler: Handler = args.handler
    try:
        code = handler(args)
        sys.stdout.flush()  # a reader that went away is met here, not in the flush at exit
        return code
    except GpuforgeError as error:
        # Messages quote names from files and AWS: no escape sequence of theirs reaches the terminal.
        print(f"gpuforge: error: {printable_lines(error.message)}", file=sys.stderr)
        if getattr(args, "json", False):
            # A script that parses --json output gets an object on failure too, not empty stdout.
            print(json.dumps({"error": {"message": error.message, "exit_code": error.exit_code}}))
        return error.exit_code
    except KeyboardInterrupt:
        print("gpuforge: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of the output went away (`gpuforge ... --json | head`): stop quietly with a shell's code for
        # SIGPIPE, stdout pointed at /dev/null so the flush at exit cannot fail again
        # (https://docs.python.org/3/library/signal.html#note-on-sigpipe).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
