"""The `gpuforge` command line.

Each command group lives beside the code it drives and registers itself through
a `register(subparsers)` function; this module only wires them together and
turns `GpuforgeError` into a message and an exit code, so bad input never ends
in a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from gpuforge import __version__
from gpuforge.errors import GpuforgeError

# Modules that add command groups. Each defines register(subparsers) and sets
# `handler` (a function of the parsed args returning the exit code).
COMMAND_MODULES: tuple[str, ...] = ("gpuforge.images.matrix_cli", "gpuforge.node.cli")

Handler = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuforge", description="Pinned GPU images and EFA-correct training clusters on AWS."
    )
    parser.add_argument("--version", action="version", version=f"gpuforge {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except GpuforgeError as error:
        print(f"gpuforge: error: {error.message}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("gpuforge: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
