"""`gpuforge scheduler render STACK_DIR --stack NAME --out DIR [--slurm-version X.Y.Z] [--topology FILE]`.

Writes the Slurm files a stack's controller serves: slurm.conf, gres.conf, cgroup.conf,
and topology.conf when the cluster has a network topology (FILE: a saved
DescribeInstanceTopology or DescribeCapacityReservationTopology response), and
slurmd-register.conf, the line each GPU node passes to `slurmd -Z --conf`. DIR is
checked whole first and holds one cluster's set only (`gpuforge.rendered_set`). The cluster is the one the
stack's Pulumi program builds: the same name, instance type, node bound, controller
host and address (`gpuforge.components.slurm_controller`), so what is written here is
what `pulumi up` puts on the controller. For a `type: kubernetes` stack it writes instead the
Kubernetes objects gpuforge applies (`gpuforge.kubernetes.manifests.stack_addons`: the device
plugins, Kueue's values, Topology, ResourceFlavor, queues and priority classes), through the same
`rendered_set`. Exit 0, or 2 with the field and the fix.

`gpuforge scheduler apply STACK_DIR --stack NAME [--kubeconfig PATH] [--context NAME] [--dry-run] [--no-prune]
[--timeout S]` puts a Kubernetes stack's rendered objects on its cluster by server-side apply, and prunes what the
stack dropped (`gpuforge.kubernetes.apply`), all within one deadline of S seconds. Exit 0 applied or nothing to
do, 1 the API server failed or the deadline passed (run again), 2 bad input, Kueue missing or not as pinned, or
a cluster it cannot reach.

`gpuforge scheduler sync-accounts [--accounts FILE] [--dry-run]` (on the controller) makes Slurm's
teams, users and QOS equal to the rendered gpuforge-accounts.json with sacctmgr
(`gpuforge.scheduler.accounts`). Exit 0 when nothing changed or all applied, 1 when sacctmgr
failed (run again), 2 for a bad file or a name gpuforge did not make.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuforge.deadline import add_timeout_argument
from gpuforge.errors import InputError

# Saved topology responses are small (100 instances a page, a few hundred bytes each): the data cap fits.
from gpuforge.loading import MAX_DATA_BYTES, load_json
from gpuforge.scheduler.accounts import DEFAULT_ACCOUNTS_PATH

if TYPE_CHECKING:
    from gpuforge.stack_config import StackConfig


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "scheduler",
        help="render the scheduler config of a stack (Slurm files, or Kubernetes objects)",
        description="The scheduler of a gpuforge cluster: Slurm, or Kubernetes (EKS with Kueue).",
    )
    commands = parser.add_subparsers(dest="scheduler_command", required=True, metavar="COMMAND")
    render = commands.add_parser(
        "render",
        help="write slurm.conf, gres.conf, cgroup.conf (and topology.conf) and slurmd-register.conf; "
        "for a Kubernetes stack its add-ons, Kueue objects and priority classes",
        description="Renders the files the stack's Slurm controller serves to its nodes (configless mode), or, "
        "for a `type: kubernetes` stack, the Kubernetes objects gpuforge applies as YAML, one object a file, and "
        "index.yaml (each add-on's pins and sources, and what was not rendered and why). "
        "Exit 0 when written; 2 for bad config, a --slurm-version other than the matrix's pin (or any Slurm "
        "flag for a Kubernetes stack), a team, QOS or stack name that is not a Kubernetes name, or a folder "
        "that cannot be written or holds files gpuforge did not render for this cluster (nothing is written then).",
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
        help="folder to write the files into: new, empty, or holding this cluster's earlier render (replaced)",
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
    apply = commands.add_parser(
        "apply",
        help="for a Kubernetes stack: apply its rendered objects to the cluster (server-side apply) and prune",
        description="Applies the objects `scheduler render` writes for a `type: kubernetes` stack to its cluster "
        "with server-side apply (field manager gpuforge), after checking that Kueue is installed at its pinned "
        "image, and deletes this cluster's gpuforge objects the stack no longer has (namespaces are kept). Run it "
        "from a host that reaches the private EKS endpoint, with AWS credentials: the EFA device plugin's digest is "
        "read from ECR in the stack's region first. The whole command, ECR and the credential plugin included, ends "
        "within --timeout seconds. Exit 0 when applied or nothing changed; 1 when the API server failed, answered "
        "what no API server sends, or the deadline passed (run again: apply is idempotent); 2 for bad config, a "
        "stack that is not Kubernetes, a kubeconfig or context that cannot be used, Kueue missing or not as pinned "
        "(the helm command is printed), an unreachable server or a refused identity.",
    )
    apply.add_argument(
        "stack_dir", type=Path, metavar="STACK_DIR", help="the Pulumi project, e.g. stacks/training"
    )
    apply.add_argument("--stack", required=True, metavar="NAME", help="the stack: reads Pulumi.NAME.yaml")
    apply.add_argument(
        "--kubeconfig",
        type=Path,
        metavar="PATH",
        help="the cluster's kubeconfig (default: $KUBECONFIG, ~/.kube/config)",
    )
    apply.add_argument("--context", metavar="NAME", help="the kubeconfig context (default: its current one)")
    apply.add_argument(
        "--dry-run",
        action="store_true",
        help="server-side dry run of the same (dryRun=All): report, store nothing",
    )
    apply.add_argument(
        "--no-prune", dest="prune", action="store_false", help="delete nothing the stack no longer has"
    )
    add_timeout_argument(apply, "the whole command's deadline in seconds, every request and wait included")
    apply.set_defaults(handler=_apply)
    sync = commands.add_parser(
        "sync-topology",
        help="on the controller: add the switches AWS reports to topology.conf and place each node under its leaf",
        description="One round of keeping Slurm's topology/tree equal to DescribeInstanceTopology for the "
        "cluster's running GPU nodes (the controller's timer runs it every minute). Exit 0 when the round "
        "completed, 1 when AWS or slurmctld did not answer, 2 for bad flags.",
    )
    sync.add_argument(
        "--cluster", required=True, metavar="NAME", help="the cluster (its gpuforge:cluster tag)"
    )
    sync.add_argument("--instance-type", required=True, metavar="TYPE", help="the GPU nodes' instance type")
    sync.add_argument("--region", required=True, metavar="REGION", help="the cluster's AWS region")
    sync.add_argument(
        "--topology-conf",
        type=Path,
        default=Path("/etc/slurm/topology.conf"),
        metavar="FILE",
        help="the topology.conf slurmctld reads (default: %(default)s)",
    )
    sync.set_defaults(handler=_sync)
    accounts = commands.add_parser(
        "sync-accounts",
        help="on the controller: apply the stack's teams, users and QOS to Slurm's database with sacctmgr",
        description="Makes Slurm's accounts (teams, with GrpTRES=gres/gpu quotas), users and QOS equal to the "
        "rendered gpuforge-accounts.json, idempotently; removes only accounts and QOS gpuforge made. Exit 0 when "
        "nothing changed or all applied; 1 when sacctmgr failed (run again); 2 for a bad file or a team/QOS name "
        "that Slurm already has and gpuforge did not make.",
    )
    accounts.add_argument(
        "--accounts",
        type=Path,
        default=Path(DEFAULT_ACCOUNTS_PATH),
        metavar="FILE",
        help="the rendered desired state (default: %(default)s, where the controller installs it)",
    )
    accounts.add_argument(
        "--dry-run", action="store_true", help="print the sacctmgr commands without running them"
    )
    accounts.set_defaults(handler=_sync_accounts)


def _read_topology(path: Path) -> object:
    return load_json(
        path,
        what="topology response",
        max_bytes=MAX_DATA_BYTES,
        fix="save the output of `aws ec2 describe-instance-topology --output json` to the file and pass it",
    )


def _render(args: argparse.Namespace) -> int:
    from gpuforge.rendered_set import write_set
    from gpuforge.scheduler.render import REGISTRATION_FILE, registration_file, render_files, rendered_for
    from gpuforge.scheduler.stack import stack_cluster
    from gpuforge.scheduler.topology import from_response
    from gpuforge.stack_config import load_stack_config

    config = load_stack_config(args.stack_dir, args.stack)
    if config.scheduler.type == "kubernetes":
        return _render_kubernetes(args, config)
    topology = None
    if args.topology is not None:
        topology = from_response(_read_topology(args.topology), where=str(args.topology))
    cluster = stack_cluster(config, slurm_version=args.slurm_version, topology=topology)
    # Every file is rendered in memory and --out checked whole before the first file is written.
    files: dict[str, str] = {str(name): text for name, text in render_files(cluster).items()}
    files[REGISTRATION_FILE] = registration_file(cluster)
    written, removed = write_set(args.out, files, cluster.name, rendered_for(cluster.name))
    _report(written, removed)
    return 0


def _render_kubernetes(args: argparse.Namespace, config: StackConfig) -> int:
    from gpuforge.kubernetes.manifests import rendered_for, stack_addons
    from gpuforge.rendered_set import write_set
    from gpuforge.stack_config import NAMESPACE

    for flag, value in (("--slurm-version", args.slurm_version), ("--topology", args.topology)):
        if value is not None:
            raise InputError(
                f"{flag}: stack {config.stack} ({config.source}) is scheduled by Kubernetes "
                f"({NAMESPACE}:scheduler.type = 'kubernetes'); {flag} is for Slurm stacks. Fix: leave it out "
                "(Kueue's Topology comes from the instance type's network layers)."
            )
    files = stack_addons(config)
    written, removed = write_set(args.out, files, config.stack, rendered_for(config.stack))
    _report(written, removed)
    return 0


def _apply(args: argparse.Namespace) -> int:
    from botocore.config import Config

    from gpuforge.aws_session import client, open_session
    from gpuforge.deadline import Deadline
    from gpuforge.kubernetes.apply import apply_stack
    from gpuforge.kubernetes.kubeconfig import CONNECT_TIMEOUT_S, READ_TIMEOUT_S, read_kubeconfig
    from gpuforge.stack_config import NAMESPACE, load_stack_config

    config = load_stack_config(args.stack_dir, args.stack)
    if config.scheduler.type != "kubernetes":
        raise InputError(
            f"stack {config.stack} ({config.source}): {NAMESPACE}:scheduler.type = '{config.scheduler.type}'; "
            "`scheduler apply` applies a Kubernetes stack's objects. Fix: pass a `type: kubernetes` stack (a Slurm "
            "stack's controller takes its files from `pulumi up`)."
        )
    kube = read_kubeconfig(args.kubeconfig, args.context)  # offline, so a bad kubeconfig is told first
    # The deadline bounds every wait from here: AWS, ECR, the credential plugin, every API request.
    deadline = Deadline(args.timeout, "--timeout")
    with deadline.enforced():
        command = "gpuforge scheduler apply"
        deadline.doing = f"read the AWS credentials for ECR in {config.region}"
        session = open_session(config.region, command=command)
        # ECR's one call, bounded like every other wait: timeouts cut from the deadline, tried once more at most.
        bounded = Config(
            connect_timeout=deadline.timeout(CONNECT_TIMEOUT_S),
            read_timeout=deadline.timeout(READ_TIMEOUT_S),
            retries={"mode": "standard", "total_max_attempts": 2},
        )
        apply_stack(
            config,
            stack_dir=str(args.stack_dir),
            kubeconfig=args.kubeconfig,
            context=args.context,
            kube=kube,
            dry_run=args.dry_run,
            prune=args.prune,
            report=print,
            ecr=client(session, "ecr", command=command, config=bounded),
            deadline=deadline,
        )
    return 0


def _report(written: list[Path], removed: list[Path]) -> None:
    for target in written:
        print(f"wrote {target}")
    for stale in removed:
        print(f"removed {stale} (the previous render's; this cluster has none now)")


def _sync(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    from gpuforge.aws_session import client, open_session
    from gpuforge.scheduler.sync import SyncError, run_scontrol, sync_topology

    command = "gpuforge scheduler sync-topology"
    ec2 = client(open_session(args.region, command=command), "ec2", command=command)
    try:
        result = sync_topology(
            ec2,
            run_scontrol,
            cluster=args.cluster,
            instance_type=args.instance_type,
            topology_conf=args.topology_conf,
        )
    except (BotoCoreError, ClientError) as error:
        raise SyncError(
            f"AWS did not answer the topology round: {error}. Fix: give the controller's role "
            "ec2:DescribeInstances and ec2:DescribeInstanceTopology, and check the region."
        ) from None
    print(
        f"{result.nodes_seen} running node(s); switches added: {', '.join(result.switches_added) or 'none'}; "
        f"placed: {', '.join(f'{node} under {leaf}' for node, leaf in result.placed.items()) or 'none'}"
    )
    return 0


def _sync_accounts(args: argparse.Namespace) -> int:
    from gpuforge.scheduler.accounts import read_accounts_file, run_sacctmgr, sync

    desired = read_accounts_file(args.accounts)
    sync(desired, run_sacctmgr, dry_run=args.dry_run, report=print)
    return 0
