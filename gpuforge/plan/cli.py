"""`gpuforge plan STACK_DIR --stack NAME [--catalog PATH] [--json | --slurm-conf]`.

Exit codes: 0 when no mandatory policy fails, 1 when one does, 2 for bad config
(an InputError from the config, the catalog or the program, through gpuforge.cli).

The Pulumi SDK is imported only when the command runs, not when its parser is
built (`gpuforge plan --help` stays quick).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from gpuforge.cli import add_stack_arguments

EXIT_OK, EXIT_POLICY_FAILED = 0, 1


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="run a stack's Pulumi program offline (SDK mocks) and show its resources, summary and policy verdicts",
        description="Runs STACK_DIR/__main__.py with the config of STACK_DIR/Pulumi.<stack>.yaml under the "
        "Pulumi SDK's mocks: no AWS account, Pulumi CLI or provider plugin. Exit 0 when no mandatory "
        "policy fails, 1 when one does, 2 for bad config (the message names the file and the key).",
    )
    add_stack_arguments(parser)
    output = parser.add_mutually_exclusive_group()
    output.add_argument(
        "--json",
        action="store_true",
        help="print the plan as one JSON document (the rendered Slurm files are under scheduler.files)",
    )
    output.add_argument(
        "--slurm-conf",
        action="store_true",
        help="after the plan, print the slurm.conf the Slurm controller is given",
    )
    parser.set_defaults(handler=_plan)


def _plan(args: argparse.Namespace) -> int:
    from gpuforge.plan.render import plan_document, render_text
    from gpuforge.plan.stack_plan import plan

    result = plan(args.stack_dir, args.stack, catalog=args.catalog, isolated=True)
    if args.json:
        print(json.dumps(plan_document(result), indent=2))
    else:
        print(render_text(result, slurm_conf=args.slurm_conf))
    return EXIT_POLICY_FAILED if result.mandatory_failures else EXIT_OK
