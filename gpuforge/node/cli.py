"""`gpuforge node check`: run the node's health gate, print and store the report, act on it.

Two modes. The boot gate (default) runs every check; a pass writes
/run/gpuforge/node-check.passed, which slurmd's drop-in requires, so a node
that fails at boot never joins Slurm. `--slurm` is Slurm's HealthCheckProgram:
the periodic checks within slurmd's 60 s, then drain, and replace once idle
(`gpuforge.node.slurm`).

Exit codes: 0 healthy, 1 not healthy (or the node cannot identify itself, or
Slurm or the Unhealthy report failed), 2 bad usage or an unreadable manifest.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from gpuforge import hardware
from gpuforge.atomic import write_text_atomic
from gpuforge.display import cut
from gpuforge.errors import InputError
from gpuforge.node import efa_metrics, job_mapping, kubernetes, slurm
from gpuforge.node.asg import report_unhealthy
from gpuforge.node.checks import CHECKS, PERIODIC_CHECKS, run_checks
from gpuforge.node.context import EFA_ATTEMPTS, HostPaths, NodeContext
from gpuforge.node.imds import TIMEOUT_S, Identity, ImdsClient
from gpuforge.node.manifest import DEFAULT_MANIFEST, load_manifest
from gpuforge.node.report import NodeReport, dumps, write_report
from gpuforge.node.runner import CachedRunner, SubprocessRunner
from gpuforge.scheduler import slurm_values

EXIT_HEALTHY = 0
EXIT_UNHEALTHY = 1


def _slurm_node_name(value: str) -> str:
    """--node-name, checked whole before anything runs (`ALL` would drain every node): exit 2 otherwise."""
    problem = slurm_values.NODE_NAME.problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{cut(value)}: {problem}. Fix: {slurm_values.NODE_NAME.fix}")
    return value


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
        help="when not healthy, mark this instance Unhealthy in its Auto Scaling group "
        "(with --slurm: once Slurm shows it drained by gpuforge and idle)",
    )
    check.add_argument(
        "--slurm",
        action="store_true",
        help="Slurm's HealthCheckProgram: the periodic checks; when not healthy, drain the node "
        "with a 'gpuforge: ...' reason",
    )
    check.add_argument(
        "--node-name",
        metavar="NAME",
        type=_slurm_node_name,
        help="the node's Slurm name for --slurm (default: $SLURMD_NODENAME, else the short hostname); "
        "its Kubernetes node name for --kubernetes (required there)",
    )
    check.add_argument(
        "--kubernetes",
        action="store_true",
        help="the periodic check on a Kubernetes node: when not healthy, cordon and taint the node, state "
        "the 'gpuforge: ...' reason in its GpuforgeHealthy condition, evict its pods within their "
        "disruption budgets (gpuforge.node.kubernetes)",
    )
    check.add_argument(
        "--kubeconfig",
        type=Path,
        default=kubernetes.DEFAULT_KUBECONFIG,
        metavar="PATH",
        help=f"the node agent's own kubeconfig for --kubernetes (default {kubernetes.DEFAULT_KUBECONFIG})",
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
    _register_job_mapping(node_commands)
    efa = node_commands.add_parser(
        "efa-metrics",
        help="write the EFA hardware counters, labelled with GPUs and job, for node_exporter's textfile collector",
        description="Read /sys/class/infiniband/*/ports/*/hw_counters and write gpuforge_efa_<counter>_total "
        "series (labels device, port, gpus, hpc_job) to --out, atomically. Exit 0 written, 2 --out not writable.",
    )
    efa.add_argument(
        "--out",
        type=Path,
        default=efa_metrics.DEFAULT_OUT,
        metavar="FILE",
        help=f"default {efa_metrics.DEFAULT_OUT}",
    )
    efa.add_argument(
        "--mapping-dir",
        type=Path,
        default=job_mapping.DEFAULT_MAPPING_DIR,
        metavar="DIR",
        help=f"dcgm-exporter's job mapping folder (default {job_mapping.DEFAULT_MAPPING_DIR})",
    )
    efa.add_argument(
        "--layout-cache",
        type=Path,
        default=efa_metrics.DEFAULT_LAYOUT_CACHE,
        metavar="FILE",
        help=f"the device-to-GPU layout cache (default {efa_metrics.DEFAULT_LAYOUT_CACHE})",
    )
    efa.add_argument(
        "--infiniband",
        type=Path,
        default=HostPaths().infiniband,
        metavar="DIR",
        help=f"the RDMA devices' sysfs folder (default {HostPaths().infiniband})",
    )
    efa.set_defaults(handler=handle_efa_metrics)


def _register_job_mapping(node_commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`node prolog` and `node epilog`: Slurm's Prolog and Epilog (they always exit 0)."""
    for name, what in (
        ("prolog", "write dcgm-exporter's job mapping files for $SLURM_JOB_GPUS"),
        ("epilog", "remove the job mapping files that hold $SLURM_JOB_ID"),
    ):
        command = node_commands.add_parser(
            name,
            help=f"Slurm {name.capitalize()}: {what}",
            description=f"Slurm's {name.capitalize()}: {what}. Always exits 0: a failing {name} drains the node; "
            "problems are logged to stderr.",
        )
        command.add_argument(
            "--mapping-dir",
            type=Path,
            default=job_mapping.DEFAULT_MAPPING_DIR,
            metavar="DIR",
            help=f"dcgm-exporter's --hpc-job-mapping-dir (default {job_mapping.DEFAULT_MAPPING_DIR})",
        )
        command.set_defaults(handler=handle_prolog if name == "prolog" else handle_epilog)


def handle_prolog(args: argparse.Namespace) -> int:
    return job_mapping.run_prolog(args.mapping_dir)


def handle_epilog(args: argparse.Namespace) -> int:
    return job_mapping.run_epilog(args.mapping_dir)


def handle_efa_metrics(args: argparse.Namespace) -> int:
    """One collection, written atomically to --out (exit 2 when it cannot be written)."""
    text = efa_metrics.collect(
        args.infiniband,
        args.mapping_dir,
        args.layout_cache,
        SubprocessRunner(timeout_s=efa_metrics.TOPOLOGY_TIMEOUT_S),
    )
    efa_metrics.write(args.out, text)
    return 0


def handle_check(args: argparse.Namespace, paths: HostPaths | None = None) -> int:
    """Run the gate; `paths` moves the /proc, /sys and state-file paths below another root (tests)."""
    started = time.monotonic()
    host = paths or HostPaths()
    periodic = args.slurm or args.kubernetes
    if args.slurm and args.kubernetes:
        raise InputError("--slurm and --kubernetes name two schedulers. Fix: give the node's one scheduler.")
    if args.kubernetes and not args.node_name:
        raise InputError(
            "--kubernetes needs --node-name, the node's Kubernetes name (`kubectl get nodes`). "
            "Fix: pass --node-name NAME, as the gpuforge unit on the node does."
        )
    expected = _expected_type(args.expect)
    manifest = load_manifest(args.manifest)
    imds = ImdsClient(timeout_s=slurm.IMDS_TIMEOUT_S if periodic else TIMEOUT_S)
    type_name = expected if expected is not None else imds.identity().instance_type
    instance = hardware.get(type_name)
    if periodic:
        runner = SubprocessRunner(
            timeout_s=slurm.CHECK_COMMAND_TIMEOUT_S, deadline=started + slurm.CHECKS_BUDGET_S
        )
    else:
        runner = SubprocessRunner()
    ctx = NodeContext(
        instance=instance,
        manifest=manifest,
        run=CachedRunner(runner),
        paths=host,
        require_fsx=args.require_fsx,
        # The EFA retry waits for devices that come up late in boot; a running node has them or not.
        efa_attempts=1 if periodic else EFA_ATTEMPTS,
    )
    report = run_checks(ctx, PERIODIC_CHECKS if periodic else CHECKS)
    sys.stdout.write(dumps(report) if args.json else report.to_text() + "\n")
    if args.report_dir is not None:
        try:
            write_report(report, args.report_dir)
        except InputError as error:
            # The verdict above stands (and is in the journal); a missing file must not change it.
            print(
                f"gpuforge: warning: could not write the report to {args.report_dir}: {error}. "
                "Fix: make the directory writable by the check (the systemd unit runs it as root).",
                file=sys.stderr,
            )
    if args.slurm:
        agent = slurm.SlurmAgent(
            node=args.node_name or slurm.default_node_name(),
            run=SubprocessRunner(
                timeout_s=slurm.SLURM_COMMAND_TIMEOUT_S, deadline=started + slurm.SLURM_BUDGET_S
            ),
            state_file=host.slurm_drain_record,
            report_asg=(lambda: _report_asg(imds).instance_id) if args.report_asg else None,
        )
        agent.act(report, ctx)
        return EXIT_HEALTHY if report.healthy else EXIT_UNHEALTHY
    if args.kubernetes:
        kubernetes.KubernetesAgent(
            node=args.node_name,
            api=kubernetes.core_api(args.kubeconfig),
            report_asg=(lambda: _report_asg(imds).instance_id) if args.report_asg else None,
        ).act(report, ctx)
        return EXIT_HEALTHY if report.healthy else EXIT_UNHEALTHY
    _mark_boot(report, host.boot_pass_marker)
    if report.healthy:
        return EXIT_HEALTHY
    if args.report_asg:
        identity = _report_asg(imds)
        print(
            f"gpuforge: marked {identity.instance_id} Unhealthy in its Auto Scaling group ({identity.region})",
            file=sys.stderr,
        )
    return EXIT_UNHEALTHY


def _expected_type(expect: str | None) -> str | None:
    """--expect's instance type; None (ask IMDSv2) only when the flag is absent.

    An empty or blank --expect is refused rather than read as "ask IMDS": it is what a unit
    or script passes when its variable is unset, and on a host without IMDS (or another
    instance's) the check would then judge the wrong type.
    """
    if expect is not None and not expect.strip():
        raise InputError(
            f"--expect {expect!r} names no instance type. Fix: give the type the node must be "
            "(e.g. --expect p5.48xlarge), or leave --expect out to ask IMDSv2."
        )
    return expect


def _report_asg(imds: ImdsClient) -> Identity:
    """Mark this instance Unhealthy in its Auto Scaling group; returns whom it marked."""
    identity = imds.identity()
    report_unhealthy(identity)
    return identity


def _mark_boot(report: NodeReport, marker: Path) -> None:
    """Write the boot pass marker on a pass and remove it on a failure, so that slurmd starts only after a pass.

    Written atomically (gpuforge.atomic): a FIFO at the path is refused instead of blocking the boot
    gate until someone reads it, and a link is not followed to write elsewhere.
    """
    try:
        if report.healthy:
            write_text_atomic(marker, "healthy\n")
        else:
            marker.unlink(missing_ok=True)
    except (OSError, InputError) as error:
        print(
            f"gpuforge: warning: could not {'write' if report.healthy else 'remove'} {marker}: {error}. "
            "slurmd's gpuforge drop-in starts slurmd only when it exists; run the check as root.",
            file=sys.stderr,
        )
