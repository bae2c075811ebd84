"""The one place that decides which values may reach a Slurm file or a Slurm command line.

Every value gpuforge writes into slurm.conf, topology.conf, gres.conf or the node's
registration line, or passes to `scontrol`, goes through one `Rule` here first. Slurm
reads its files as `Key=value` words split at spaces, ends a line at a newline and a
comment at `#`, and reads some words as keywords (`NodeName=ALL` is every node,
`PartitionName=DEFAULT` every partition's defaults), so a value with any of those in it
does not mean what it says once written. The rules are whole-value matches
(`re.fullmatch`) over ASCII classes: `$` under `re.match` lets a trailing newline
through and `\\d` takes any Unicode digit, and both would reach the file.

A broken rule is an `InputError` naming the field, the value (escaped and cut short, so a
hostile value cannot flood or steer a terminal), the rule, the fix and the source.

Sources (the man pages of Slurm 26.05.5, as Debian ships them, match these pages):
- https://slurm.schedmd.com/slurm.conf.html (NodeName "ALL" is an internally reserved
  word, "DEFAULT" sets defaults; ClusterName 40 characters or less; MaxTime forms)
- https://slurm.schedmd.com/topology.conf.html (SwitchName at most 64 characters)
- https://slurm.schedmd.com/scontrol.html (update NodeName: "ALL" alone is every node;
  a nodeset name stands for its nodes)
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from functools import cache

from gpuforge.display import cut
from gpuforge.errors import InputError

SLURM_CONF_DOC = "https://slurm.schedmd.com/slurm.conf.html"
TOPOLOGY_CONF_DOC = "https://slurm.schedmd.com/topology.conf.html"
SCONTROL_DOC = "https://slurm.schedmd.com/scontrol.html"
EC2_IDS_DOC = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/resource-ids.html"

# The nodeset every gpuforge partition draws its nodes from (dynamic nodes are matched by
# feature, their names are not known in advance). scontrol reads a nodeset's name as all
# of its nodes, so no node may be called by it. Source: https://slurm.schedmd.com/dynamic_nodes.html
NODESET = "gpunodes"


@dataclass(frozen=True)
class Rule:
    """One kind of value: the whole-value pattern, the words it may not be, and how to say it.

    `reserved` words are compared without regard to case: Slurm's pages do not say whether
    every version compares its keywords case-sensitively, so `all` and `Default` are kept out
    with `ALL` and `DEFAULT`.
    """

    what: str
    pattern: re.Pattern[str]
    rule: str
    fix: str
    source: str
    reserved: frozenset[str] = frozenset()

    def problem(self, value: object) -> str | None:
        """Why `value` may not be written, or None when it may."""
        if not isinstance(value, str):
            return f"{self.what} is text, not {type(value).__name__}"
        if self.pattern.fullmatch(value) is None:
            return self.rule
        if value.upper() in self.reserved:
            return f"{value} is a word Slurm reserves ({', '.join(sorted(self.reserved))})"
        return None

    def ok(self, value: object) -> bool:
        return self.problem(value) is None

    def check(self, value: object, *, field: str, fix: str | None = None) -> str:
        """`value` when it keeps to the rule; otherwise an InputError naming `field` (and `fix`, if given)."""
        problem = self.problem(value)
        if problem is None:
            assert isinstance(value, str)
            return value
        raise InputError(
            f"{field} = {cut(value)}: {problem}. Fix: {fix or self.fix}. (source: {self.source})"
        )


# --- Names Slurm reads as words ---

NODE_NAME = Rule(
    what="a Slurm node name",
    # A host name's characters (letters, digits, '-', '.', and '_' which Slurm takes too), at
    # most 63 (one DNS label): no space, ',', '[' or '=' that would make it a list, a range or a key.
    pattern=re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?"),
    rule="a Slurm node name is 1-63 letters, digits, '.', '_' and '-', starting and ending with a letter "
    "or digit (no space, ',', '[', '=', '#' or control character, which Slurm reads as a list, a range, "
    f"a key or a comment), and not ALL, DEFAULT or the nodeset {NODESET} (scontrol reads those as many nodes)",
    fix="give the node's own Slurm name: on a gpuforge node, its EC2 instance id (e.g. i-0123456789abcdef0)",
    source=f"{SLURM_CONF_DOC}#OPT_NodeName, {SCONTROL_DOC}#OPT_NodeName",
    reserved=frozenset({"ALL", "DEFAULT", NODESET.upper()}),
)

SWITCH_NAME = Rule(
    what="a Slurm switch name",
    pattern=re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,62}[A-Za-z0-9])?"),
    rule="a switch name in topology.conf is 1-64 letters, digits, '.', '_' and '-', starting and ending "
    "with a letter or digit (Slurm's limit is 64 characters; a space, ',', '[', ':', '=', '#' or newline "
    "would start another name, range, key or line)",
    fix="pass the network node ids AWS reported (e.g. nn-0123456789abcdef0) unchanged",
    source=f"{TOPOLOGY_CONF_DOC}#OPT_SwitchName",
    # slurmctld 26.05.5 reads SwitchName=DEFAULT as a plain switch (checked with
    # tests/scheduler/slurm_cluster.read_by_slurmctld), but DEFAULT is the defaults record of
    # slurm.conf's node and partition lines; AWS never names a network node so, and keeping it
    # out means no Slurm that treats it as a keyword can misread the tree.
    reserved=frozenset({"DEFAULT"}),
)

PARTITION_NAME = Rule(
    what="a Slurm partition name",
    # gpuforge keeps to what every Slurm command and sinfo column shows as written.
    pattern=re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}"),
    rule="a Slurm partition name is 1-64 letters, digits, '_' and '-', starting with a letter, and not DEFAULT "
    "(slurm.conf reads PartitionName=DEFAULT as every partition's defaults)",
    fix="rename the partition, e.g. gpu or batch",
    source=f"{SLURM_CONF_DOC}#SECTION_PARTITION-CONFIGURATION",
    reserved=frozenset({"DEFAULT"}),
)

# Accounts (teams) and QOS live in Slurm's database, which keeps names in lower case (sacctmgr(1): "The
# contents of Slurm's database are maintained in lower case"), so only lower case is taken: a name that
# sacctmgr would fold would not compare equal to the stack's on the next sync.
SACCTMGR_DOC = "https://slurm.schedmd.com/sacctmgr.html"

ACCOUNT_NAME = Rule(
    what="a team (Slurm account) name",
    # 64 is gpuforge's bound, the partition names' own: short enough for every sacct/sreport column.
    pattern=re.compile(r"[a-z][a-z0-9_-]{0,63}"),
    rule="a team name is 1-64 lowercase letters, digits, '_' and '-', starting with a letter, and not root "
    "(Slurm's database keeps names in lower case; root is the account every cluster has)",
    fix="rename the team, e.g. llm or vision",
    source=SACCTMGR_DOC,
    reserved=frozenset({"ROOT"}),
)

QOS_NAME = Rule(
    what="a QOS name",
    pattern=re.compile(r"[a-z][a-z0-9_-]{0,63}"),
    rule="a QOS name is 1-64 lowercase letters, digits, '_' and '-', starting with a letter "
    "(Slurm's database keeps names in lower case)",
    fix="rename the QOS, e.g. production or research",
    source=SACCTMGR_DOC,
)

CLUSTER_NAME = Rule(
    what="a cluster name",
    # Stricter than ClusterName (40 characters, lower case): the name also prefixes every AWS
    # resource, IAM and bucket name, so it keeps to what all of those accept (lower case for S3).
    pattern=re.compile(r"[a-z][a-z0-9-]{0,27}[a-z0-9]"),
    rule="a cluster name is 2-29 lowercase letters, digits and hyphens, starting with a letter and ending "
    "with a letter or digit (it is Slurm's ClusterName and prefixes AWS resource, IAM and bucket names)",
    fix="rename it (a gpuforge cluster is named after its stack: `pulumi stack init NAME` with such a name)",
    source=f"{SLURM_CONF_DOC}#OPT_ClusterName",
)

FEATURE = Rule(
    what="a Slurm node feature",
    # Slurm reads '&', '|', ',', '*', '[', ']', '(', ')' and '!' in a constraint as operators.
    pattern=re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"),
    rule="a node feature is 1-64 letters, digits, '.', '_' and '-', starting with a letter or digit "
    "(job constraints read '&', '|', ',', '*', brackets and '!' as operators)",
    fix="use the instance type, capacity type or GPU model as the catalog spells them",
    source=f"{SLURM_CONF_DOC}#OPT_Features",
)

GRES_TYPE = Rule(
    what="a GRES type",
    pattern=re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}"),
    rule="a GRES type is 1-64 lowercase letters, digits, '.', '_' and '-' (a ':' or ',' would split "
    "Gres=gpu:<type>:<count>)",
    fix="use the catalog's GPU model in lower case (h100, b200)",
    source="https://slurm.schedmd.com/gres.conf.html#OPT_Type",
)

# --- Times and versions ---

# slurm.conf's MaxTime forms: minutes, minutes:seconds, hours:minutes:seconds, days-hours,
# days-hours:minutes, days-hours:minutes:seconds, or UNLIMITED (INFINITE is read the same).
# slurmctld 26.05.5 refuses ("Bad value ... for MaxTime", then fatal) a limit of 35791394
# minutes or more (2^31 seconds; measured with tests/scheduler/slurm_cluster.read_by_slurmctld:
# 35791393 read, 35791394 and 24856-00 refused). The digit bounds keep every form below that
# (at most 9999999 minutes, 99999 hours or 9999 days, under 10001 days), and hours, minutes
# and seconds to their clock ranges (Slurm would carry 99:99 over; a typo is refused instead).
_MINUTES = r"[0-9]{1,7}"
_CLOCK = r"[0-5]?[0-9]"
_HOURS = r"(?:[01]?[0-9]|2[0-3])"
_DAYS = r"[0-9]{1,4}"
MAX_TIME = Rule(
    what="a MaxTime",
    pattern=re.compile(
        rf"UNLIMITED|INFINITE|{_MINUTES}|{_MINUTES}:{_CLOCK}|[0-9]{{1,5}}:{_CLOCK}:{_CLOCK}"
        rf"|{_DAYS}-{_HOURS}(?::{_CLOCK}){{0,2}}"
    ),
    rule="MaxTime is UNLIMITED, minutes (up to 7 digits), MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS "
    "(days up to 4 digits, hours up to 5 digits in HH:MM:SS and 0-23 after days, minutes and seconds 0-59, "
    "ASCII digits; slurmctld refuses 2^31 seconds or more)",
    fix="write it as e.g. 2-00:00:00 (two days) or 720 (minutes)",
    source=f"{SLURM_CONF_DOC}#OPT_MaxTime",
)

SLURM_VERSION = Rule(
    what="a Slurm version",
    pattern=re.compile(r"[0-9]{2}\.[0-9]{2}\.[0-9]{1,3}"),
    rule="a Slurm version is one exact release, YY.MM.MICRO in ASCII digits (e.g. 26.05.5), as SchedMD numbers them",
    fix="give the release number of a SchedMD release, as the matrix's slurm.version pins it",
    source="https://www.schedmd.com/download-slurm/ (release numbering)",
)

# --- AWS values that reach the controller, the nodes or Slurm ---

REGION = Rule(
    what="an AWS region",
    pattern=re.compile(r"[a-z]{2}(?:-gov|-iso[a-z]?)?-[a-z]+-[0-9]{1,2}"),
    rule="an AWS region name is lowercase letters and hyphens ending in a number (e.g. us-east-1), in ASCII",
    fix="set the region the cluster runs in, e.g. us-east-1",
    source="https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-regions-availability-zones.html",
)

AVAILABILITY_ZONE = Rule(
    what="an availability zone",
    pattern=re.compile(r"(?P<region>[a-z]{2}(?:-gov|-iso[a-z]?)?-[a-z]+-[0-9]{1,2})[a-z]"),
    rule="not an Availability Zone name: a zone is a region name and one letter (e.g. us-east-1a), in ASCII",
    fix="use a zone of the stack's region, e.g. us-east-1a",
    source="https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-regions-availability-zones.html",
)

RESERVATION_ID = Rule(
    what="a capacity reservation id",
    pattern=re.compile(r"cr-[0-9a-f]{17}"),
    rule="a Capacity Reservation id is 'cr-' followed by 17 lowercase hex digits (ODCRs and Capacity Blocks alike)",
    fix="copy the id from the EC2 console or `aws ec2 describe-capacity-reservations`",
    source="https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CapacityReservation.html",
)

INSTANCE_ID = Rule(
    what="an EC2 instance id",
    pattern=re.compile(r"i-(?:[0-9a-f]{8}|[0-9a-f]{17})"),
    rule="an EC2 instance id is 'i-' and 8 or 17 lowercase hex digits",
    fix="give the instance id as EC2 reports it (e.g. i-0123456789abcdef0)",
    source=EC2_IDS_DOC,
)

_INSTANCE_TYPE_SHAPE = re.compile(r"[a-z][a-z0-9-]*\.[a-z0-9]+")


@cache
def aws_instance_types() -> frozenset[str]:
    """Every instance type AWS lists: the InstanceType enum of botocore's EC2 model (1,400+ names)."""
    from gpuforge.aws_session import offline_session

    model = offline_session().get_service_model("ec2")
    shape = model.shape_for("InstanceType")
    # StringShape carries `enum`; botocore-stubs types shape_for as the base Shape.
    names: list[str] = getattr(shape, "enum", [])
    return frozenset(names)


class _InstanceTypeRule(Rule):
    def problem(self, value: object) -> str | None:
        found = super().problem(value)
        if found is not None:
            return found
        assert isinstance(value, str)
        if value not in aws_instance_types():
            return "AWS lists no such instance type (botocore's EC2 model names every type EC2 sells)"
        return None


INSTANCE_TYPE = _InstanceTypeRule(
    what="an EC2 instance type",
    pattern=_INSTANCE_TYPE_SHAPE,
    rule="an EC2 instance type is family.size in lowercase letters, digits and '-' (e.g. m7i.2xlarge)",
    fix="give an instance type AWS sells, e.g. m7i.2xlarge (see `aws ec2 describe-instance-types`)",
    source="https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeInstanceTypes.html",
)

# --- The site: hosts, users and paths in slurm.conf ---

HOST_NAME = Rule(
    what="a host name",
    pattern=re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"),
    rule="a host name is one DNS label: 1-63 letters, digits and '-', not starting or ending with '-'",
    fix="use the cluster's name followed by -slurmctld",
    source="https://www.rfc-editor.org/rfc/rfc1123#section-2.1",
)

DNS_NAME = Rule(
    what="a DNS name",
    pattern=re.compile(
        r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.){0,126}[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    ),
    rule="a DNS name is dot-separated labels of 1-63 letters, digits and '-', not starting or ending with '-'",
    fix="give the database's host name, e.g. localhost or the Aurora cluster's endpoint",
    source="https://www.rfc-editor.org/rfc/rfc1123#section-2.1",
)

DATABASE_NAME = Rule(
    what="a MySQL database or user name",
    # Unquoted identifiers of MariaDB/MySQL, kept to ASCII letters, digits and '_' (no quoting needed
    # in slurmdbd.conf or in SQL), at most 32 characters (MariaDB's user name bound).
    pattern=re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}"),
    rule="a database or database user name is 1-32 letters, digits and '_', not starting with a digit",
    fix="use slurmdbd's defaults: database slurm_acct_db, user slurm",
    source="https://mariadb.com/kb/en/identifier-names/",
)

USER_NAME = Rule(
    what="a user name",
    pattern=re.compile(r"[a-z_][a-z0-9_-]{0,31}"),
    rule="a user name is 1-32 lowercase letters, digits, '_' and '-', starting with a letter or '_'",
    fix="use the image's Slurm user, slurm",
    source="https://man7.org/linux/man-pages/man8/useradd.8.html (CAVEATS)",
)

PATH = Rule(
    what="a path",
    # '%' stays: slurm.conf expands %n (node name) and %h in paths.
    pattern=re.compile(r"/[A-Za-z0-9_./%-]{0,1023}"),
    rule="a path in slurm.conf is absolute and holds letters, digits, '_', '.', '/', '%' and '-' only "
    "(a space, '#' or newline would end the value)",
    fix="use a path without spaces or special characters",
    source=SLURM_CONF_DOC,
)


def check_address(value: object, *, field: str) -> str:
    """An IPv4 address written as Python prints it (no leading zeros, no spaces), else an InputError."""
    try:
        text = str(ipaddress.IPv4Address(value)) if isinstance(value, str) else None
    except ValueError:
        text = None
    if text is None or text != value:
        raise InputError(
            f"{field} = {cut(value)}: not an IPv4 address in dotted form. Fix: give an address such as "
            "10.0.0.10. (source: https://docs.python.org/3/library/ipaddress.html)"
        )
    return text


def check_port(value: object, *, field: str) -> int:
    """A TCP port, 1-65535 (a bool is not a port), else an InputError."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise InputError(
            f"{field} = {cut(value)}: a TCP port is a whole number from 1 to 65535. Fix: give such a port "
            "(Slurm's defaults are 6817 for slurmctld, 6818 for slurmd)."
        )
    return value


def availability_zone_region(zone: str) -> str:
    """The region part of a zone that `AVAILABILITY_ZONE` accepted (us-east-1 for us-east-1a)."""
    match = AVAILABILITY_ZONE.pattern.fullmatch(zone)
    assert match is not None, "check the zone with AVAILABILITY_ZONE first"
    return match.group("region")
