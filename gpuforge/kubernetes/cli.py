"""`gpuforge kubernetes render STACK_DIR --stack NAME --out DIR`.

Writes the Kubernetes objects gpuforge applies for a stack's cluster: the device plugins (by image
digest, or not at all with the reason in index.yaml), Kueue's chart values, its Topology from the
GPU type's network layers, the GPU node group's ResourceFlavor, and per team and QOS of
`gpuforge:scheduler` the queues and priority classes. DIR is checked whole before anything is
written (`gpuforge.rendered_set`). Exit 0, or 2 with the field and the fix.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "kubernetes",
        help="render the Kubernetes add-ons and Kueue objects of a stack",
        description="The Kubernetes (EKS) side of a gpuforge cluster.",
    )
    commands = parser.add_subparsers(dest="kubernetes_command", required=True, metavar="COMMAND")
    render = commands.add_parser(
        "render",
        help="write the device plugins, Kueue values, Topology, ResourceFlavor, queues and priority classes",
        description="Renders the Kubernetes objects of the stack's cluster as YAML, one object a file, and "
        "index.yaml (each add-on's pins and sources, and what was not rendered and why). Exit 0 when written; "
        "2 for bad config or a folder that cannot be written or holds files gpuforge did not render for this "
        "cluster (nothing is written then).",
    )
    render.add_argument(
        "stack_dir", type=Path, metavar="STACK_DIR", help="the Pulumi project, e.g. stacks/training"
    )
    render.add_argument("--stack", required=True, metavar="NAME", help="the stack: reads Pulumi.NAME.yaml")
    render.add_argument(
        "--out",
        required=True,
        type=Path,
        metavar="DIR",
        help="folder to write into: new, empty, or holding this cluster's earlier render (replaced)",
    )
    render.set_defaults(handler=_render)


def _render(args: argparse.Namespace) -> int:
    from gpuforge import hardware
    from gpuforge.kubernetes.kueue import GpuNodeGroup
    from gpuforge.kubernetes.manifests import render_addons, rendered_for
    from gpuforge.rendered_set import write_set
    from gpuforge.stack_config import load_stack_config

    config = load_stack_config(args.stack_dir, args.stack)
    group = GpuNodeGroup(
        name=f"{config.stack}-gpu",
        instance_type=hardware.get(config.instance_type),
        node_count=config.node_count,
    )
    # The teams and QOS blocks the Slurm accounts are made from (components.specs TeamSpec, QosSpec).
    teams = getattr(config.scheduler, "teams", ())
    qos = getattr(config.scheduler, "qos", ())
    files = render_addons(config.stack, [group], teams, qos)
    written, removed = write_set(args.out, files, config.stack, rendered_for(config.stack))
    for target in written:
        print(f"wrote {target}")
    for stale in removed:
        print(f"removed {stale} (the previous render's; this cluster has none now)")
    return 0
