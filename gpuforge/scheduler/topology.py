"""The cluster's network topology as AWS reports it, turned into Slurm's switch tree.

EC2 `DescribeInstanceTopology` gives, per running instance, the network nodes above it
from the top of the hierarchy down (3 layers on most types, 4 on p6-b200 and p6-b300);
`DescribeCapacityReservationTopology` gives the same for a reservation before anything
is launched. Slurm's topology/tree plugin places a job under the fewest switches when it
knows that tree, so the layers become switches: the bottom network node is a leaf
switch, each upper one a switch over the ones below it.
Source: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/how-ec2-instance-topology-works.html

moto implements neither call; the tests check `fetch_instance_topology` with botocore's
Stubber, which validates every canned response against botocore's own model.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuforge.errors import InputError

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client

# DescribeInstanceTopology accepts at most 100 instance ids in one request.
# Source: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeInstanceTopology.html
MAX_IDS_PER_CALL = 100
_FIX = (
    "Fix: pass the JSON that `aws ec2 describe-instance-topology` (or "
    "describe-capacity-reservation-topology) printed, unchanged."
)


@dataclass(frozen=True)
class NetworkTopology:
    """A tree of network nodes: each switch's child switches, and the members under each leaf.

    `members` are instance ids (or reservation ids, for a topology read before launch);
    gpuforge names dynamic nodes by host, so members are kept for reports, not written
    into topology.conf: a node joins its leaf by itself.
    """

    children: Mapping[str, frozenset[str]]
    members: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def pending(cls, cluster: str) -> NetworkTopology:
        """The tree a cluster starts with before any node runs: one switch, `<cluster>-unplaced`.

        topology/tree refuses to start without a switch; `sync_topology` adds the real
        switches once AWS reports them, and keeps this one so a reconfigure never drops to none.
        """
        return cls(children={unplaced_switch(cluster): frozenset()})

    def merged(self, other: NetworkTopology) -> NetworkTopology:
        """This tree and `other` together (their switches and members)."""
        children = {
            switch: self.children.get(switch, frozenset()) | other.children.get(switch, frozenset())
            for switch in {*self.children, *other.children}
        }
        members = {
            leaf: self.members.get(leaf, frozenset()) | other.members.get(leaf, frozenset())
            for leaf in {*self.members, *other.members}
        }
        return NetworkTopology(children=children, members=members)

    @property
    def leaves(self) -> frozenset[str]:
        return frozenset(switch for switch, below in self.children.items() if not below)

    def leaf_of(self, member: str) -> str | None:
        """The leaf switch `member` sits under, if the topology knows it."""
        return next((leaf for leaf, ids in self.members.items() if member in ids), None)

    def topology_conf(self) -> str:
        """topology.conf for topology/tree: leaves first, then each switch over its children."""
        lines = [f"SwitchName={leaf}\n" for leaf in sorted(self.leaves)]
        lines += [
            f"SwitchName={switch} Switches={','.join(sorted(below))}\n"
            for switch, below in sorted(self.children.items())
            if below
        ]
        return "".join(lines)


def unplaced_switch(cluster: str) -> str:
    """The switch a cluster's topology.conf always holds, so that it is never empty."""
    return f"{cluster}-unplaced"


def _paths(response: Mapping[str, Any], where: str) -> Iterable[tuple[str, Sequence[str]]]:
    """(member id, network nodes top-down) for each entry of either topology response."""
    for key, id_key in (("Instances", "InstanceId"), ("CapacityReservations", "CapacityReservationId")):
        entries = response.get(key)
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise InputError(f"{where}: {key} = {entries!r}: expected a list of entries. {_FIX}")
        for position, entry in enumerate(entries):
            nodes = entry.get("NetworkNodes") if isinstance(entry, Mapping) else None
            member = entry.get(id_key) if isinstance(entry, Mapping) else None
            if (
                not isinstance(member, str)
                or not isinstance(nodes, list)
                or not nodes
                or not all(isinstance(node, str) and node for node in nodes)
            ):
                raise InputError(
                    f"{where}: {key}[{position}]: each entry needs {id_key} (a string) and NetworkNodes "
                    f"(a non-empty list of network node ids); found {entry!r}. {_FIX}"
                )
            yield member, nodes


def from_response(response: object, *, where: str) -> NetworkTopology:
    """The switch tree of a DescribeInstanceTopology or DescribeCapacityReservationTopology response.

    Refused, naming the network node: an empty response, and a network node seen at two
    layers or under two parents (the tree Slurm needs would be ambiguous).
    """
    if not isinstance(response, Mapping) or not ({"Instances", "CapacityReservations"} & set(response)):
        raise InputError(
            f"{where}: not a topology response: expected a JSON object with `Instances` "
            f"(DescribeInstanceTopology) or `CapacityReservations` (DescribeCapacityReservationTopology). {_FIX}"
        )
    children: dict[str, set[str]] = {}
    parent: dict[str, str | None] = {}
    members: dict[str, set[str]] = {}
    for member, nodes in _paths(response, where):
        for depth, node in enumerate(nodes):
            above = nodes[depth - 1] if depth else None
            if parent.setdefault(node, above) != above:
                raise InputError(
                    f"{where}: network node {node} sits under {parent[node]} for one entry and under "
                    f"{above} for {member}: a tree has one parent per node. {_FIX}"
                )
            children.setdefault(node, set())
            if above is not None:
                children[above].add(node)
        members.setdefault(nodes[-1], set()).add(member)
    if not members:
        raise InputError(f"{where}: the response lists no instances or reservations. {_FIX}")
    for leaf in members:
        if children[leaf]:
            raise InputError(
                f"{where}: network node {leaf} is the bottom layer of one entry and above "
                f"{', '.join(sorted(children[leaf]))} in another: the layers disagree. {_FIX}"
            )
    return NetworkTopology(
        children={node: frozenset(below) for node, below in children.items()},
        members={leaf: frozenset(ids) for leaf, ids in members.items()},
    )


def fetch_instance_topology(ec2: EC2Client, instance_ids: Sequence[str]) -> dict[str, Any]:
    """One DescribeInstanceTopology response for `instance_ids`, however many: 100 ids a call, every page."""
    instances: list[Any] = []
    for start in range(0, len(instance_ids), MAX_IDS_PER_CALL):
        chunk = list(instance_ids[start : start + MAX_IDS_PER_CALL])
        paginator = ec2.get_paginator("describe_instance_topology")
        for page in paginator.paginate(InstanceIds=chunk):
            instances.extend(page.get("Instances", []))
    return {"Instances": instances}
