"""`gpuforge validate STACK_DIR --stack NAME ...` and `gpuforge validate report ... FILE...`.

`validate STACK_DIR` runs the acceptance on a deployed cluster through Slurm
(gpuforge.validate.run), or on a Kubernetes stack as workloads admitted through Kueue
(gpuforge.validate.kubernetes_jobs); `validate report` parses saved nccl-tests (`all_reduce_perf`) and
`dcgmi diag` outputs and judges them against the instance type's floors
(`gpuforge/data/instance_types.json`, `allreduce_floors`), reading each file as dcgmi output
when it holds dcgmi's table, else as nccl-tests output. Both exit 0 when every floor holds,
1 when one fails, 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpuforge.errors import GpuforgeError, InputError
from gpuforge.flag_types import plain

# nccl-tests and dcgmi outputs are text of a few hundred KiB at most, even with NCCL_DEBUG=INFO.
MAX_OUTPUT_BYTES = 64 * 1024 * 1024
# --timeout bounds, seconds per step. Below a second no srun step can even start. Above a day is a
# slip (minutes or milliseconds typed as seconds): the longest step, `dcgmi diag -r 4`, is meant to
# run for hours at most, and each step holds its nodes for the whole timeout when it hangs.
TIMEOUT_RANGE_S = (1.0, 86400.0)


USAGE = """\
gpuforge validate STACK_DIR --stack NAME [--diag-level N] [--drain] [--json] [--plot FILE] [--timeout S]
gpuforge validate STACK_DIR --stack NAME [--image REPOSITORY@sha256:DIGEST] [--team NAME] ... (Kubernetes stacks)
gpuforge validate report --instance-type TYPE --nodes N FILE... [--json] [--plot FILE]"""
DESCRIPTION = (
    "The acceptance run after `pulumi up`. Floors: the expected in-place all-reduce busbw at the type's "
    "message size (1 GiB; 16 GiB on p6-b300) per instance type (one node over NVLink, each pair of nodes "
    "over EFA, a looser figure for 3+ nodes), each with its source; a run below 90% of the figure (or a "
    "published pass line) fails, as does any #wrong above 0, a NCCL WARN, a missing size, a truncated "
    "output, a multi-node run whose NCCL network is not EFA through aws-ofi-nccl or lacks GPUDirect RDMA "
    "where the type has it, or a failed dcgmi test. Exit 0 when every floor holds, 1 when one fails, 2 for bad input."
)


def register(subparsers: Any) -> None:
    # The run takes STACK_DIR where `report` takes its own arguments, so this command parses its
    # argument list itself (`_dispatch`); '+' as the prefix lets --help through to it.
    parser = subparsers.add_parser(
        "validate",
        help="run or judge the NCCL/DCGM acceptance against per-type floors",
        add_help=False,
        prefix_chars="+",
    )
    parser.add_argument("argv", nargs="...")
    parser.set_defaults(handler=_dispatch)


def _run_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuforge validate", usage=USAGE, description=DESCRIPTION)
    parser.add_argument(
        "stack_dir", type=Path, metavar="STACK_DIR", help="the Pulumi project, e.g. stacks/training"
    )
    parser.add_argument(
        "--stack", required=True, metavar="NAME", help="the deployed stack: reads Pulumi.NAME.yaml"
    )
    parser.add_argument(
        "--diag-level",
        type=plain(int),
        choices=(1, 2, 3, 4),
        default=1,
        metavar="N",
        help="dcgmi diag -r level on every node: 1 quick (default) to 4 longest",
    )
    parser.add_argument(
        "--drain",
        action="store_true",
        help="drain the slow nodes and those whose diag failed (reason 'gpuforge: validate: ...'), so Auto Scaling "
        "replaces them (on Kubernetes as the node agent does: cordon, taint, evict within disruption budgets, report)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON (README: Acceptance)")
    parser.add_argument("--plot", type=Path, metavar="FILE", help="write busbw against message size as SVG")
    parser.add_argument(
        "--timeout",
        type=plain(float),
        default=900.0,
        metavar="S",
        help="seconds each step may take (default: %(default)s)",
    )
    parser.add_argument(
        "--image",
        metavar="REPOSITORY@sha256:DIGEST",
        help="Kubernetes stacks: the acceptance image, by digest (nccl-tests with MPI, sshd, aws-ofi-nccl, dcgmi); "
        "default: the stack's gpuforge:scheduler.acceptanceImage",
    )
    parser.add_argument(
        "--team",
        metavar="NAME",
        help="Kubernetes stacks: the team whose LocalQueue admits the runs (default: the first team)",
    )
    parser.set_defaults(handler=_run)
    return parser


def _report_parser() -> argparse.ArgumentParser:
    report = argparse.ArgumentParser(
        prog="gpuforge validate report",
        description="Parses saved outputs and judges them against the type's floors. Exit 0 pass, 1 fail, 2 bad input.",
    )
    report.add_argument(
        "files", nargs="+", type=Path, metavar="FILE", help="all_reduce_perf or dcgmi diag output"
    )
    report.add_argument("--instance-type", required=True, metavar="TYPE", help="e.g. p5.48xlarge")
    report.add_argument(
        "--nodes",
        required=True,
        type=plain(int),
        metavar="N",
        help="nodes the all_reduce_perf runs spanned (1: NVLink only)",
    )
    report.add_argument("--json", action="store_true", help="print the report as JSON (README: Acceptance)")
    report.add_argument("--plot", type=Path, metavar="FILE", help="write busbw against message size as SVG")
    report.set_defaults(handler=_report)
    return report


def _dispatch(args: argparse.Namespace) -> int:
    argv = list(args.argv)
    parser = _report_parser() if argv[:1] == ["report"] else _run_parser()
    parsed = parser.parse_args(argv[1:] if argv[:1] == ["report"] else argv)
    # gpuforge.cli reads --json from the namespace it parsed, to answer an error with a JSON object.
    args.json = parsed.json
    handler: Any = parsed.handler
    return int(handler(parsed))


def _emit(report: Any, args: argparse.Namespace) -> int:
    from gpuforge.svg import write_plot
    from gpuforge.validate.report import render_svg, render_text

    if args.plot is not None:
        write_plot(args.plot, render_svg(report))
    print(
        json.dumps(report.to_json(), indent=2) if args.json else render_text(report),
        end="\n" if args.json else "",
    )
    return 0 if report.passed else 1


def _run(args: argparse.Namespace) -> int:
    import math

    from gpuforge import hardware
    from gpuforge.stack_config import load_stack_config
    from gpuforge.validate.floors import floors_for
    from gpuforge.validate.run import Plan, Slurm, drain_failed, idle_nodes, run_acceptance

    low, high = TIMEOUT_RANGE_S
    if not (math.isfinite(args.timeout) and low <= args.timeout <= high):
        raise InputError(
            f"--timeout {args.timeout}: each step's timeout must be a finite number of seconds from {low:g} "
            f"(no step starts in less) to {high:g} (a day: a step that may hang holds its nodes that long, and "
            "longer is a unit slip). Fix: pass seconds, e.g. 900 (the default)."
        )
    config = load_stack_config(args.stack_dir, args.stack)
    if config.scheduler.type == "kubernetes":
        return _run_kubernetes(args, config)
    if config.scheduler.type != "slurm":
        raise InputError(
            f"{config.source}: gpuforge:scheduler: stack {config.stack} runs no scheduler, and the acceptance is "
            "submitted through one. Fix: deploy the stack with `gpuforge:scheduler: {type: slurm, ...}` or "
            "`{type: kubernetes, ...}`."
        )
    floors = floors_for(config.instance_type)
    slurm = Slurm(step_timeout_s=args.timeout)
    partition = next(p.name for p in config.scheduler.effective_partitions if p.default)
    nodes = idle_nodes(slurm, partition)
    if not nodes:
        raise InputError(
            f"partition {partition} of stack {config.stack} has no idle node to validate. "
            "Fix: wait until the nodes joined (`sinfo`), or run from the cluster's controller."
        )
    minutes = max(1, math.ceil(args.timeout / 60))
    plan = Plan(nodes, hardware.get(config.instance_type), floors, args.diag_level, minutes)
    report = run_acceptance(slurm, plan)
    if args.drain:
        drained = drain_failed(slurm, report)
        slurm.progress(f"validate: drained {', '.join(drained) or 'no node'}")
    return _emit(report, args)


def _run_kubernetes(args: argparse.Namespace, config: Any) -> int:
    """The same acceptance (run_acceptance) with its runs as Kueue-admitted workloads (gpuforge.validate.kubernetes_jobs)."""
    from gpuforge import hardware
    from gpuforge.kubernetes.kubeconfig import api_client as kube_api_client
    from gpuforge.kubernetes.kubeconfig import read_kubeconfig
    from gpuforge.validate.kubernetes_jobs import image_from_reference

    # --image, else the stack's gpuforge:scheduler.acceptanceImage (checked by digest when the stack was read).
    reference = args.image or config.acceptance_image
    if reference is None:
        raise InputError(
            f"stack {config.stack} schedules with Kubernetes: --image is required (the acceptance's container, "
            "REPOSITORY@sha256:<64 hex>, with nccl-tests built with MPI, sshd, aws-ofi-nccl and dcgmi). Fix: pass it, "
            f"or set gpuforge:scheduler.acceptanceImage in {config.source} (README: 'Acceptance on Kubernetes' "
            "says how `gpuforge image acceptance-container` and CI build and push it)."
        )
    teams = [team.name for team in config.scheduler.teams]
    team = args.team or (teams[0] if teams else None)
    if team is None or team not in teams:
        raise InputError(
            f"--team {team}: stack {config.stack}'s LocalQueues are {', '.join(teams) or 'none'} "
            "(one per gpuforge:scheduler.teams entry). Fix: pass one of them."
        )
    image = image_from_reference(reference)
    instance = hardware.get(config.instance_type)
    # $KUBECONFIG (it may list several files) or ~/.kube/config, read and checked as apply reads it; every
    # request is made once and bounded (gpuforge.kubernetes.kubeconfig), the runs' waits by --timeout.
    api_client = kube_api_client(read_kubeconfig(None, None), deadline=None)
    with _api_failures():
        return _run_on_kubernetes(args, config, api_client, team, image, instance)


def _run_on_kubernetes(
    args: argparse.Namespace, config: Any, api_client: Any, team: str, image: Any, instance: Any
) -> int:
    import math
    import time

    from gpuforge.validate.floors import floors_for
    from gpuforge.validate.kubernetes_jobs import launcher_for
    from gpuforge.validate.run import Plan, run_acceptance

    launcher, nodes = launcher_for(
        api_client,
        config.stack,
        instance,
        team,
        image,
        args.timeout,
        time.strftime("%Y%m%d%H%M%S", time.gmtime()),
    )
    if not nodes:
        raise InputError(
            f"stack {config.stack} has no Ready, schedulable GPU node to validate. "
            "Fix: wait until the nodes joined (`kubectl get nodes`), and check the current kubeconfig context."
        )
    minutes = max(1, math.ceil(args.timeout / 60))
    plan = Plan(nodes, instance, floors_for(config.instance_type), args.diag_level, minutes)
    report = run_acceptance(launcher, plan)
    if args.drain:
        from kubernetes import client

        from gpuforge.validate.kubernetes_drain import drain_failed_nodes

        drained = drain_failed_nodes(
            client.CoreV1Api(api_client),
            report,
            region=config.region,
            instance_type=config.instance_type,
            progress=launcher.progress,
        )
        launcher.progress(f"validate: drained {', '.join(drained) or 'no node'}")
    return _emit(report, args)


@contextmanager
def _api_failures() -> Iterator[None]:
    """The API server's failures during a Kubernetes run as gpuforge's error (exit 1: run again), not a traceback:
    an answer it refused, one no API server sends, or none at all."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    from gpuforge.display import printable
    from gpuforge.kubernetes.kubeconfig import UnexpectedAnswer, connection_problem

    try:
        yield
    except ApiException as error:
        if error.status == 0:  # the client's word for a failed TLS handshake
            raise GpuforgeError(
                f"the TLS connection to the Kubernetes API server failed ({connection_problem(error)}); the acceptance "
                "stopped. Fix: check the kubeconfig's certificate-authority and server URL, then run again.",
                exit_code=1,
            ) from None
        raise GpuforgeError(
            f"the Kubernetes API server answered HTTP {error.status} {printable(str(error.reason))[:200]}; the "
            "acceptance stopped. Fix: check the identity may create Jobs in the team's namespace and read nodes and "
            "pod logs, then run again.",
            exit_code=1,
        ) from None
    except UnexpectedAnswer as error:
        raise GpuforgeError(
            f"the server answered what no Kubernetes API server sends ({printable(str(error))[:300]}); the "
            "acceptance stopped. Fix: point the kubeconfig's cluster server at the API server's URL, then run again.",
            exit_code=1,
        ) from None
    except HTTPError as error:  # urllib3's: refused, timed out, closed (each request is made once)
        raise GpuforgeError(
            f"the Kubernetes API server did not answer ({connection_problem(error)}); the acceptance stopped. "
            "Fix: run again from a host that reaches the cluster's endpoint.",
            exit_code=1,
        ) from None


def shown_names(paths: Sequence[Path]) -> list[str]:
    """How the report (text, JSON, plot) names each file: relative to the working directory when it is under
    it, as a CI job names its files; else its name, with as many parent folders as tell it from the others.

    Never absolute: the JSON travels beyond the machine that ran it (CI artifacts, tickets), where
    /home/<user>/... or /builds/<runner>/... means nothing and says who ran it where."""
    here = Path.cwd()
    absolute = [Path(os.path.normpath(path.absolute())) for path in paths]  # ".." folded, links kept
    names: list[str] = []
    for path in absolute:
        if path.is_relative_to(here) and path != here:
            names.append(str(path.relative_to(here)))
            continue
        others = {other for other in absolute if other != path and not other.is_relative_to(here)}
        depth = 1
        while depth < len(path.parts) - 1 and any(
            other.parts[-depth:] == path.parts[-depth:] for other in others
        ):
            depth += 1
        names.append(str(Path(*path.parts[-depth:])))
    return names


def read_output(path: Path) -> str:
    """A saved output's text, or an error naming the file and the fix."""
    from gpuforge.loading import read_text

    return read_text(
        path,
        what="nccl-tests or dcgmi diag output",
        max_bytes=MAX_OUTPUT_BYTES,
        fix="pass the file the job's stdout was saved to",
    )


def _report(args: argparse.Namespace) -> int:
    from gpuforge import hardware
    from gpuforge.subnet_limits import MAX_NODE_COUNT
    from gpuforge.validate.floors import floors_for
    from gpuforge.validate.report import judge_files
    from gpuforge.validate.transport import apply_transport

    if not 1 <= args.nodes <= MAX_NODE_COUNT:
        raise InputError(
            f"--nodes {args.nodes}: a run spans 1 to {MAX_NODE_COUNT} nodes (the most one subnet can address). "
            "Fix: pass the number of nodes it ran on."
        )
    floors = floors_for(args.instance_type)
    instance = hardware.get(args.instance_type)
    texts = [
        (name, read_output(path)) for name, path in zip(shown_names(args.files), args.files, strict=True)
    ]
    report = judge_files(texts, floors, args.nodes, gpus_per_node=instance.gpu_count)
    # NCCL's transport, from its INFO lines where the saved output has them (gpuforge.validate.transport).
    for name, text in dict(texts).items():
        runs = [verdict for verdict in report.nccl if verdict.file == name]
        apply_transport(runs, text, instance, required=False)
    return _emit(report, args)
