"""`gpuforge scheduler render STACK_DIR --stack NAME --out DIR [--slurm-version X.Y.Z] [--topology FILE]`.

Writes the Slurm files a stack's controller serves: slurm.conf, gres.conf, cgroup.conf,
and topology.conf when FILE (a saved DescribeInstanceTopology or
DescribeCapacityReservationTopology response) is given. The cluster is the one the
stack's Pulumi program builds: the same name, instance type, node bound, controller
host and address (`gpuforge.components.slurm_controller`), so what is written here is
what `pulumi up` puts on the controller. Exit 0, or 2 with the field and the fix.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from gpuforge.errors import InputError

# Saved topology responses are small: 100 instances a page, a few hundred bytes each.
MAX_TOPOLOGY_BYTES = 16 * 1024 * 1024


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "scheduler",
        help="render the Slurm config of a stack",
        description="The Slurm scheduler of a gpuforge cluster.",
    )
    commands = parser.add_subparsers(dest="scheduler_command", required=True, metavar="COMMAND")
    render = commands.add_parser(
        "render",
        help="write slurm.conf, gres.conf, cgroup.conf (and topology.conf) for a stack",
        description="Renders the files the stack's Slurm controller serves to its nodes (configless mode).",
    )
    render.add_argument(
        "stack_dir", type=Path, metavar="STACK_DIR", help="the Pulumi project, e.g. stacks/training"
    )
    render.add_argument("--stack", required=True, metavar="NAME", help="the stack: reads Pulumi.NAME.yaml")
    render.add_argument(
        "--out", required=True, type=Path, metavar="DIR", help="folder to write the files into"
    )
    render.add_argument(
        "--slurm-version",
        metavar="X.Y.Z",
        help="the Slurm to render for; must be the stack matrix's slurm.version (the Slurm its image has)",
    )
    render.add_argument(
        "--topology",
        type=Path,
        metavar="FILE",
        help="a saved DescribeInstanceTopology or DescribeCapacityReservationTopology response (JSON)",
    )
    render.set_defaults(handler=_render)


def _read_topology(path: Path) -> object:
    try:
        if not path.is_file():
            raise InputError(
                f"{path}: no such file. Fix: pass the JSON file the topology call's output was saved to."
            )
        if path.stat().st_size > MAX_TOPOLOGY_BYTES:
            raise InputError(
                f"{path}: {path.stat().st_size} bytes is more than a topology response can be "
                f"({MAX_TOPOLOGY_BYTES} bytes). Fix: pass the saved response itself."
            )
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(
            f"{path}: cannot read a JSON topology response ({error}). "
            "Fix: save the output of `aws ec2 describe-instance-topology --output json` to the file."
        ) from None


def _render(args: argparse.Namespace) -> int:
    from gpuforge.atomic import write_text_atomic
    from gpuforge.scheduler.render import render_files
    from gpuforge.scheduler.stack import stack_cluster
    from gpuforge.scheduler.topology import from_response
    from gpuforge.stack_config import load_stack_config

    config = load_stack_config(args.stack_dir, args.stack)
    topology = None
    if args.topology is not None:
        topology = from_response(_read_topology(args.topology), where=str(args.topology))
    cluster = stack_cluster(config, slurm_version=args.slurm_version, topology=topology)
    files = render_files(cluster)  # every check runs before the first file is written
    for name, text in files.items():
        target = args.out / name
        try:
            write_text_atomic(target, text)
        except OSError as error:
            raise InputError(
                f"{target}: cannot write the file ({error.strerror}). Fix: pass an --out folder you can write to."
            ) from None
        print(f"wrote {target}")
    return 0
