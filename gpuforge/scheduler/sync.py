"""Keep Slurm's switch tree equal to what AWS reports for the cluster's running GPU nodes.

Runs on the controller (`gpuforge scheduler sync-topology`, from a systemd timer). Each
round: list the cluster's running nodes (tag `gpuforge:cluster`, the GPU instance type),
ask `DescribeInstanceTopology` for their network nodes, add any switch Slurm lacks to
topology.conf (written atomically, then `scontrol reconfigure`), and put every node under
its leaf with `scontrol update NodeName=<instance id> Topology=default:<leaf>`.

Why the controller and not the node: a dynamic node may only name a leaf switch that the
controller already has (slurmctld 26.05.5 sets a node that names an unknown or non-leaf
switch INVAL), and under topology/tree a node under no switch cannot take a multi-node job
(srun: "Requested node configuration is not available"), both seen with real daemons in
tests/scheduler. So the controller learns the switches first and places the nodes itself;
switches are only ever added, so a reconfigure never takes one from under a running job.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpuforge.atomic import write_text_atomic
from gpuforge.errors import GpuforgeError
from gpuforge.scheduler import slurm_values
from gpuforge.scheduler.render import topology_argument
from gpuforge.scheduler.topology import NetworkTopology, fetch_instance_topology, from_response

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client

CLUSTER_TAG = "gpuforge:cluster"  # the tag every resource of a cluster carries (components/cluster.py)
SCONTROL_TIMEOUT_S = 30
# What the file starts with, so a reader knows who writes it.
HEADER = "# topology.conf for cluster {cluster}, kept by `gpuforge scheduler sync-topology` from AWS.\n"

Scontrol = Callable[[Sequence[str]], str]


class SyncError(GpuforgeError):
    """Slurm or AWS did not answer as a round needs; the next round tries again (exit 1)."""

    exit_code = 1


def run_scontrol(args: Sequence[str]) -> str:
    """`scontrol ARGS` on this host; its stdout, or a SyncError with its own message."""
    try:
        done = subprocess.run(
            ["scontrol", *args], capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SyncError(
            f"`scontrol {' '.join(args)}` did not run: {error}. Fix: run on the Slurm controller."
        ) from None
    if done.returncode != 0:
        raise SyncError(
            f"`scontrol {' '.join(args)}` exited {done.returncode}: {done.stderr.strip()}. "
            "Fix: check that slurmctld runs (`scontrol ping`)."
        )
    return done.stdout


@dataclass(frozen=True)
class SyncResult:
    """What one round changed: switches added to topology.conf, and nodes placed under a leaf."""

    nodes_seen: int
    switches_added: tuple[str, ...]
    placed: dict[str, str]


def running_nodes(ec2: EC2Client, cluster: str, instance_type: str) -> list[str]:
    """The instance ids of the cluster's running GPU nodes (the controller is another type)."""
    paginator = ec2.get_paginator("describe_instances")
    filters = [
        {"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster]},
        {"Name": "instance-type", "Values": [instance_type]},
        {"Name": "instance-state-name", "Values": ["running"]},
    ]
    return sorted(
        instance["InstanceId"]
        for page in paginator.paginate(Filters=filters)  # type: ignore[arg-type]
        for reservation in page.get("Reservations", [])
        for instance in reservation.get("Instances", [])
    )


def _expand(scontrol: Scontrol, hostlist: str) -> list[str]:
    return scontrol(["show", "hostnames", hostlist]).split() if hostlist else []


def slurm_tree(scontrol: Scontrol) -> tuple[NetworkTopology, dict[str, str]]:
    """Slurm's current switch tree (`scontrol show topology`) and each placed node's leaf."""
    children: dict[str, frozenset[str]] = {}
    leaf_of: dict[str, str] = {}
    for line in scontrol(["show", "topology"]).splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        switch = fields.get("SwitchName")
        if not switch:
            continue
        below = _expand(scontrol, fields.get("Switches", ""))
        children[switch] = frozenset(below)
        if not below:
            for node in _expand(scontrol, fields.get("Nodes", "")):
                leaf_of[node] = switch
    return NetworkTopology(children=children), leaf_of


def slurm_nodes(scontrol: Scontrol) -> set[str]:
    return set(re.findall(r"^NodeName=(\S+)", scontrol(["show", "nodes", "--oneliner"]), re.M))


def sync_topology(
    ec2: EC2Client, scontrol: Scontrol, *, cluster: str, instance_type: str, topology_conf: Path
) -> SyncResult:
    """One round; see the module docstring. Idempotent: a second round with no change does nothing."""
    # The cluster's name is written into topology.conf (its pending switch) before AWS is asked.
    slurm_values.CLUSTER_NAME.check(cluster, field="--cluster")
    slurm_values.INSTANCE_TYPE.check(instance_type, field="--instance-type")
    ids = running_nodes(ec2, cluster, instance_type)
    if not ids:
        return SyncResult(nodes_seen=0, switches_added=(), placed={})
    aws = from_response(fetch_instance_topology(ec2, ids), where="DescribeInstanceTopology")
    current, leaf_of = slurm_tree(scontrol)
    wanted = NetworkTopology.pending(cluster).merged(current).merged(NetworkTopology(children=aws.children))
    added = tuple(sorted(set(wanted.children) - set(current.children)))
    if added:
        try:
            write_text_atomic(topology_conf, HEADER.format(cluster=cluster) + wanted.topology_conf())
        except OSError as error:
            raise SyncError(
                f"{topology_conf}: cannot write ({error.strerror}). Fix: run as root on the controller."
            ) from None
        scontrol(["reconfigure"])
    known = slurm_nodes(scontrol)
    placed: dict[str, str] = {}
    for node in sorted(known):
        leaf = aws.leaf_of(node)
        if leaf is not None and leaf_of.get(node) != leaf:
            name = slurm_values.NODE_NAME.check(node, field="Slurm node name")
            scontrol(["update", f"NodeName={name}", topology_argument(leaf)])
            placed[node] = leaf
    return SyncResult(nodes_seen=len(ids), switches_added=added, placed=placed)
