"""The cluster's network topology as AWS reports it, turned into Slurm's switch tree.

EC2 `DescribeInstanceTopology` gives, per running instance, the network nodes above it
from the top of the hierarchy down (3 layers on most types, 4 on p6-b200 and p6-b300);
`DescribeCapacityReservationTopology` gives the same for a reservation before anything
is launched (1 to 3 nodes, depending on the reservation). Slurm's topology/tree plugin
places a job under the fewest switches when it knows that tree, so the layers become
switches: the bottom network node is a leaf switch, each upper one a switch over the
ones below it.
Source: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/how-ec2-instance-topology-works.html

A response is checked whole before any of it becomes a switch: its shape against
botocore's model of the call, then what the model cannot say (every page read, each
instance under one node set, the instance type's layer count, no topology for a type AWS
gives none), and every network node name by the switch-name rule of
`gpuforge.scheduler.slurm_values` (a name with a newline once wrote its own `SwitchName`
line into topology.conf and slurmctld died). topology.conf is checked again where it is
written, since a tree can also be built in code.

moto implements neither call; the tests check `fetch_instance_topology` with botocore's
Stubber, which validates every canned response against botocore's own model.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

from gpuforge import hardware
from gpuforge.display import cut
from gpuforge.errors import InputError
from gpuforge.scheduler import slurm_values

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client

# DescribeInstanceTopology accepts at most 100 instance ids in one request.
# Source: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeInstanceTopology.html
MAX_IDS_PER_CALL = 100
# Pages one call of at most 100 ids may take: AWS pages 20 instances by default (MaxResults
# cannot be combined with InstanceIds), so 100 ids are 5 pages; one page per id is the most a
# call that makes progress can need. An API that keeps answering NextToken past it is refused.
MAX_PAGES_PER_CALL = MAX_IDS_PER_CALL
# Which types have a topology, and how many network nodes each reports.
TYPES_DOC = (
    "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-topology-prerequisites.html"
    "#inst-net-topology-prereqs-instance-types"
)
HOW_DOC = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/how-ec2-instance-topology-works.html"
# The two responses: their list key, the id key of an entry, and the EC2 operation.
_KINDS = (
    ("Instances", "InstanceId", "DescribeInstanceTopology"),
    ("CapacityReservations", "CapacityReservationId", "DescribeCapacityReservationTopology"),
)
# How much of botocore's validation report an error quotes.
_REPORT_CHARS = 600
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
        """topology.conf for topology/tree: leaves first, then each switch over its children.

        Every switch name is checked here too, where the file is written: a tree merged in
        code (AWS's and Slurm's own) never went through `from_response`.
        """
        for switch in sorted({*self.children, *(s for below in self.children.values() for s in below)}):
            slurm_values.SWITCH_NAME.check(switch, field="topology.conf SwitchName")
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


@cache
def _output_shape(operation: str) -> Any:
    """botocore's model of `operation`'s response (the shape its Stubber checks canned responses against)."""
    from gpuforge.aws_session import offline_session

    return offline_session().get_service_model("ec2").operation_model(operation).output_shape


def _printable(text: str) -> str:
    """`text` on one line, control characters escaped and cut short, for an error message."""
    flat = "; ".join(line.strip() for line in text.splitlines() if line.strip())
    escaped = "".join(char if char.isprintable() else ascii(char)[1:-1] for char in flat)
    return escaped if len(escaped) <= _REPORT_CHARS else escaped[:_REPORT_CHARS] + "..."


def _check_shape(response: Mapping[str, Any], operation: str, where: str) -> None:
    """Refuse what botocore's model of the response refuses: a wrong type, a key the call never returns."""
    from botocore.validate import ParamValidator

    report = ParamValidator().validate(dict(response), _output_shape(operation))
    if report.has_errors():
        raise InputError(
            f"{where}: not a {operation} response as botocore's model of it describes one: "
            f"{_printable(report.generate_report())}. {_FIX}"
        )


def _layers(entry: Mapping[str, Any], label: str, where: str) -> int:
    """The number of network nodes AWS reports for the entry's instance type; refuses a type without topology."""
    name = entry.get("InstanceType")
    if not isinstance(name, str):
        raise InputError(
            f"{where}: {label} has no InstanceType; AWS names each entry's type, and gpuforge checks the "
            f"network nodes against it. {_FIX}"
        )
    instance_type = hardware.catalog().get(name)
    if instance_type is None:
        raise InputError(
            f"{where}: {label} is a {cut(name)}, which is not in gpuforge's hardware catalog "
            f"(gpuforge/data/instance_types.json): a cluster's topology holds its own instance type only. "
            f"Fix: describe the cluster's instances (`aws ec2 describe-instance-topology --instance-ids ...`)."
        )
    if instance_type.topology_layers == 0:
        raise InputError(
            f"{where}: {label}: AWS reports no network topology for {name} (it is not among the types "
            f"DescribeInstanceTopology supports, {TYPES_DOC}), so this entry did not come from AWS. {_FIX}"
        )
    return instance_type.topology_layers


def _check_depth(nodes: Sequence[str], layers: int, key: str, label: str, name: str, where: str) -> None:
    """An instance reports exactly its type's layers; a reservation 1 up to them (AWS's topology pages)."""
    if key == "Instances" and len(nodes) != layers:
        raise InputError(
            f"{where}: {label}: {name} instances have {layers} network nodes in DescribeInstanceTopology "
            f"({TYPES_DOC}); this one has {len(nodes)}: {cut(list(nodes))}. {_FIX}"
        )
    if key == "CapacityReservations" and not 1 <= len(nodes) <= layers:
        raise InputError(
            f"{where}: {label}: a Capacity Reservation of {name} shows 1 to {layers} network nodes "
            f"({HOW_DOC}); this one has {len(nodes)}: {cut(list(nodes))}. {_FIX}"
        )


def _paths(response: Mapping[str, Any], where: str) -> Iterable[tuple[str, Sequence[str]]]:
    """(member id, network nodes top-down) for each entry, each checked (see the module docstring)."""
    placed: dict[str, tuple[str, ...]] = {}
    for key, id_key, _ in _KINDS:
        entries = response.get(key)
        if entries is None:
            continue
        for position, entry in enumerate(entries):
            label = f"{key}[{position}]"
            nodes = entry.get("NetworkNodes")
            member = entry.get(id_key)
            if not isinstance(member, str) or not nodes:
                raise InputError(
                    f"{where}: {label}: each entry needs {id_key} (a string) and NetworkNodes "
                    f"(a non-empty list of network node ids); found {_printable(repr(entry))}. {_FIX}"
                )
            named = f"{label} ({cut(member)})"
            _check_depth(nodes, _layers(entry, named, where), key, named, entry["InstanceType"], where)
            for depth, node in enumerate(nodes):
                slurm_values.SWITCH_NAME.check(node, field=f"{where}: {label}.NetworkNodes[{depth}]")
            if placed.setdefault(member, tuple(nodes)) != tuple(nodes):
                raise InputError(
                    f"{where}: {named}: it is listed under {' > '.join(placed[member])} and under "
                    f"{' > '.join(nodes)}; an instance sits under one leaf (one network node set). {_FIX}"
                )
            yield member, nodes


def from_response(response: object, *, where: str) -> NetworkTopology:
    """The switch tree of a DescribeInstanceTopology or DescribeCapacityReservationTopology response.

    Refused, naming the entry: a shape botocore's model refuses, a page whose NextToken was
    not followed, an entry that breaks `_paths`' checks, an empty response, and a network node
    seen at two layers or under two parents (the tree Slurm needs would be ambiguous).
    """
    if not isinstance(response, Mapping) or not ({"Instances", "CapacityReservations"} & set(response)):
        raise InputError(
            f"{where}: not a topology response: expected a JSON object with `Instances` "
            f"(DescribeInstanceTopology) or `CapacityReservations` (DescribeCapacityReservationTopology). {_FIX}"
        )
    _check_shape(response, next(op for key, _, op in _KINDS if key in response), where)
    if response.get("NextToken"):
        raise InputError(
            f"{where}: the response is one page of several: its NextToken "
            f"({cut(response['NextToken'])}) was not followed, so the instances on later pages "
            "would be missing from the tree. Fix: save the whole answer (the AWS CLI follows NextToken itself "
            "unless --max-items or --no-paginate is given), or let `gpuforge scheduler sync-topology` ask AWS."
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
                    f"{above} for {cut(member)}: a tree has one parent per node. {_FIX}"
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
    """One DescribeInstanceTopology response for `instance_ids`, however many: 100 ids a call, every page.

    Each call follows NextToken to its end, and at most MAX_PAGES_PER_CALL pages: a token
    that comes back twice, or pages past the bound, are refused rather than looped on.
    """
    instances: list[Any] = []
    for start in range(0, len(instance_ids), MAX_IDS_PER_CALL):
        chunk = list(instance_ids[start : start + MAX_IDS_PER_CALL])
        instances.extend(_every_page(ec2, chunk))
    return {"Instances": instances}


def _every_page(ec2: EC2Client, chunk: list[str]) -> list[Any]:
    found: list[Any] = []
    seen: set[str] = set()
    token: str | None = None
    for _ in range(MAX_PAGES_PER_CALL):
        request: dict[str, Any] = {"InstanceIds": chunk}
        if token is not None:
            request["NextToken"] = token
        page = ec2.describe_instance_topology(**request)
        found.extend(page.get("Instances", []))
        token = page.get("NextToken") or None
        if token is None:
            return found
        if token in seen:
            raise InputError(
                f"DescribeInstanceTopology for {len(chunk)} instances answered the same NextToken twice "
                f"({cut(token)}): reading on would loop. Fix: run the sync again; if it "
                "recurs, report it to AWS Support with the instance ids."
            )
        seen.add(token)
    raise InputError(
        f"DescribeInstanceTopology for {len(chunk)} instances still had a NextToken after "
        f"{MAX_PAGES_PER_CALL} pages, more than {len(chunk)} instances can fill: stopped reading. Fix: run the "
        "sync again; if it recurs, report it to AWS Support with the instance ids."
    )
