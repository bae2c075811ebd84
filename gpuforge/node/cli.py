"""`gpuforge node check`: run the node's health gate, print and store the report, act on it.

Exit codes: 0 healthy, 1 not healthy (or the node cannot identify itself, or
the Unhealthy report failed), 2 bad usage or an unreadable manifest.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpuforge import hardware
from gpuforge.node.asg import report_unhealthy
from gpuforge.node.checks import run_checks
from gpuforge.node.context import HostPaths, NodeContext
from gpuforge.node.imds import ImdsClient
from gpuforge.node.manifest import DEFAULT_MANIFEST, load_manifest
from gpuforge.node.report import dumps, write_report
from gpuforge.node.runner import CachedRunner, SubprocessRunner

EXIT_HEALTHY = 0
EXIT_UNHEALTHY = 1


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    node = subparsers.add_parser("node", help="the node agent that runs on GPU nodes")
    node_commands = node.add_subparsers(dest="node_command", required=True, metavar="NODE_COMMAND")
    check = node_commands.add_parser(
        "check",
        help="boot-time health gate: GPUs, driver, modules, services, EFA, Xid, topology, storage",
        description="Check this GPU node against its instance type and image manifest. "
        "Exit 0 healthy, 1 not healthy, 2 bad usage or unreadable manifest.",
    )
    check.add_argument("--json", action="store_true", help="print the machine-readable report")
    check.add_argument(
        "--manifest",
        type=Path,
        default=DEFAULT_MANIFEST,
        metavar="PATH",
        help=f"image manifest (default {DEFAULT_MANIFEST})",
    )
    check.add_argument(
        "--expect", metavar="INSTANCE_TYPE", help="the instance type to check against (default: ask IMDSv2)"
    )
    check.add_argument(
        "--report-asg",
        action="store_true",
        help="when not healthy, mark this instance Unhealthy in its Auto Scaling group",
    )
    check.add_argument(
        "--require-fsx", action="store_true", help="fail unless /fsx is mounted (FSx for Lustre)"
    )
    check.add_argument(
        "--report-dir",
        type=Path,
        metavar="DIR",
        help="also write DIR/node-check-<UTC timestamp>.json and DIR/latest.json",
    )
    check.set_defaults(handler=handle_check)


def handle_check(args: argparse.Namespace, paths: HostPaths | None = None) -> int:
    """Run the gate; `paths` moves the /proc and /sys reads below another root (tests)."""
    manifest = load_manifest(args.manifest)
    imds = ImdsClient()
    type_name = args.expect or imds.identity().instance_type
    instance = hardware.get(type_name)
    ctx = NodeContext(
        instance=instance,
        manifest=manifest,
        run=CachedRunner(SubprocessRunner()),
        paths=paths or HostPaths(),
        require_fsx=args.require_fsx,
    )
    report = run_checks(ctx)
    sys.stdout.write(dumps(report) if args.json else report.to_text() + "\n")
    if args.report_dir is not None:
        try:
            write_report(report, args.report_dir)
        except OSError as error:
            # The verdict above stands (and is in the journal); a missing file must not change it.
            print(
                f"gpuforge: warning: could not write the report to {args.report_dir}: {error}. "
                "Fix: make the directory writable by the check (the systemd unit runs it as root).",
                file=sys.stderr,
            )
    if report.healthy:
        return EXIT_HEALTHY
    if args.report_asg:
        identity = imds.identity()
        report_unhealthy(identity)
        print(
            f"gpuforge: marked {identity.instance_id} Unhealthy in its Auto Scaling group ({identity.region})",
            file=sys.stderr,
        )
    return EXIT_UNHEALTHY
