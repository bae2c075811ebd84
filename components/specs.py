"""Typed, validated inputs of the cluster components.

These are the shapes a stack builds from its Pulumi config (`GpuClusterSpec.from_config`)
or from Python. Each model is frozen and rejects unknown fields; every rule a
value breaks raises `gpuforge.errors.InputError` naming the field, the value,
the rule and the fix, at construction, before any resource exists.

Rules that need the hardware catalog or join several fields live in
`cluster_rules` and `lustre_rules`; the models and the components call the same
functions, so a rule is written once.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from gpuforge.components import cluster_rules, lustre_rules
from gpuforge.components.input_errors import from_validation_error, invalid
from gpuforge.scheduler import reserved, slurm_values
from gpuforge.subnet_limits import MAX_NODE_COUNT

CapacityType = Literal["on-demand", "reservation", "capacity-block"]
NodeMode = Literal["asg", "instances"]
PlacementStrategy = Literal["cluster", "partition"]
ApiAccess = Literal["endpoints", "nat", "existing"]
LustreDeploymentType = Literal["PERSISTENT_2", "SCRATCH_2", "SCRATCH_1"]
LustreVersion = Literal["2.10", "2.12", "2.15"]
S3EventType = Literal["NEW", "CHANGED", "DELETED"]
LegacyAutoImportPolicy = Literal["NONE", "NEW", "NEW_CHANGED", "NEW_CHANGED_DELETED"]
MetadataMode = Literal["AUTOMATIC", "USER_PROVISIONED"]

# Matched whole (fullmatch), in ASCII classes: `$` under re.match lets a trailing newline through.
# EC2 resource ids: a prefix and 8 (older) or 17 hex digits.
# Source: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/resource-ids.html
_AMI_ID = re.compile(r"ami-(?:[0-9a-f]{8}|[0-9a-f]{17})")
_VPC_ID = re.compile(r"vpc-(?:[0-9a-f]{8}|[0-9a-f]{17})")
_SUBNET_ID = re.compile(r"subnet-(?:[0-9a-f]{8}|[0-9a-f]{17})")
_ROUTE_TABLE_ID = re.compile(r"rtb-(?:[0-9a-f]{8}|[0-9a-f]{17})")
_REGION = re.compile(r"[a-z]{2}(?:-gov|-iso[a-z]?)?-[a-z]+-[0-9]+")
# A matrix digest is the sha256 hex of the normalized matrix (gpuforge.images.matrix.digest).
_DIGEST = re.compile(r"[0-9a-f]{64}")
# S3 bucket naming rules: 3-63 characters, lowercase letters, digits, dots and hyphens,
# beginning and ending with a letter or digit.
# Source: https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_S3_PATH = re.compile(r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](?:/.*)?")
_KMS_KEY_ARN = re.compile(r"arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:(?:key|alias)/.+")


class _Spec(BaseModel):
    """Frozen, strict, and every failure an InputError."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="wrap")
    @classmethod
    def _errors_as_input_error(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        try:
            return handler(data)
        except ValidationError as error:
            raise from_validation_error(cls.__name__, error) from None


class AmiPin(_Spec):
    """An AMI taken from gpuforge's image catalog: the entry for one matrix in one region.

    `root_device_name` is where the encrypted gp3 root volume is attached; the default
    is the root device of Ubuntu AMIs (Amazon Linux uses /dev/xvda).
    """

    ami_id: str
    region: str
    matrix_name: str = Field(min_length=1)
    matrix_version: str = Field(min_length=1)
    matrix_digest: str
    root_device_name: str = "/dev/sda1"

    @field_validator("ami_id")
    @classmethod
    def _ami_id(cls, value: str) -> str:
        if not _AMI_ID.fullmatch(value):
            raise invalid(
                "ami.ami_id",
                value,
                "an AMI id is 'ami-' followed by 8 or 17 lowercase hex digits",
                "take the id from the image catalog entry for the stack's matrix and region",
                source="https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/resource-ids.html",
            )
        return value

    @field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        if not _REGION.fullmatch(value):
            raise invalid("ami.region", value, "not an AWS region name", "use a region such as us-east-1")
        return value

    @field_validator("matrix_digest")
    @classmethod
    def _digest(cls, value: str) -> str:
        if not _DIGEST.fullmatch(value):
            raise invalid(
                "ami.matrix_digest",
                value,
                "a matrix digest is 64 lowercase hex digits (sha256)",
                "copy the digest from the image catalog entry (`gpuforge matrix show` prints it)",
            )
        return value


class CapacitySpec(_Spec):
    """Where the nodes' capacity comes from.

    - `on-demand`: plain On-Demand; gpuforge creates a cluster placement group.
    - `reservation`: a targeted On-Demand Capacity Reservation (`reservation_id`). If the
      reservation was made in a placement group, name it in `placement_group`; preflight
      checks it against the reservation. No new group is made beside an ODCR.
    - `capacity-block`: an EC2 Capacity Block for ML (`reservation_id`, `start`, `end`).
      No placement group: AWS places block instances close together. The node group
      holds zero nodes until `start` and scales to zero `scale_in_minutes_before_end`
      minutes before `end` (AWS begins terminating 30 minutes before the end).
      `upfront_fee_usd`, optional, is the fee paid for the block: AWS returns no fee for a
      purchased block, and `gpuforge usage` prices its GPU-hours from it. It builds nothing.
    """

    type: CapacityType = "on-demand"
    reservation_id: str | None = None
    placement_group: str | None = None
    start: datetime | None = None
    end: datetime | None = None
    scale_in_minutes_before_end: int = 45
    upfront_fee_usd: float | None = None

    @model_validator(mode="after")
    def _rules(self) -> Self:
        cluster_rules.check_capacity(self)
        return self


class NetworkSpec(_Spec):
    """The VPC: a new one (`vpc_cidr`) or an existing VPC and subnet.

    `api_access` is how private nodes reach AWS APIs (SSM, Auto Scaling, S3):
    `endpoints` (interface endpoints plus an S3 gateway endpoint, the default), `nat`
    (a NAT gateway in a public subnet, new VPCs only) or `existing` (the VPC already
    provides a path; nothing is created). In an existing VPC that already has these
    interface endpoints with private DNS, a second set would conflict: use `existing`.

    `second_subnet_id` is a private subnet of the existing VPC in another Availability Zone than
    `subnet_id`, for what needs subnets in two zones (the EKS control plane); in a VPC gpuforge
    makes, gpuforge makes that subnet itself (`components.network.second_subnet`).
    """

    vpc_cidr: str = "10.0.0.0/16"
    vpc_id: str | None = None
    subnet_id: str | None = None
    second_subnet_id: str | None = None
    route_table_ids: tuple[str, ...] = ()
    api_access: ApiAccess = "endpoints"

    @property
    def existing(self) -> bool:
        return self.vpc_id is not None

    @model_validator(mode="after")
    def _rules(self) -> Self:
        if (self.vpc_id is None) != (self.subnet_id is None):
            raise invalid(
                "network.vpc_id/subnet_id",
                (self.vpc_id, self.subnet_id),
                "an existing network needs both the VPC id and the subnet id",
                "give both, or neither to let gpuforge create the VPC",
            )
        for field, value, pattern in (
            ("network.vpc_id", self.vpc_id, _VPC_ID),
            ("network.subnet_id", self.subnet_id, _SUBNET_ID),
            ("network.second_subnet_id", self.second_subnet_id, _SUBNET_ID),
        ):
            if value is not None and not pattern.fullmatch(value):
                raise invalid(field, value, "not an EC2 resource id of that kind", "copy the id from EC2")
        for table in self.route_table_ids:
            if not _ROUTE_TABLE_ID.fullmatch(table):
                raise invalid(
                    "network.route_table_ids", table, "not a route table id (rtb-...)", "copy it from EC2"
                )
        if self.existing:
            self._existing_rules()
        else:
            self._new_vpc_rules()
        return self

    def _existing_rules(self) -> None:
        if self.second_subnet_id is not None and self.second_subnet_id == self.subnet_id:
            raise invalid(
                "network.second_subnet_id",
                self.second_subnet_id,
                "the second subnet must be another subnet than network.subnet_id, in another Availability Zone",
                "give a private subnet of the same VPC in another zone",
            )
        if self.api_access == "nat":
            raise invalid(
                "network.api_access",
                self.api_access,
                "gpuforge creates a NAT gateway only in a VPC it creates",
                "use 'endpoints', or 'existing' if the VPC already routes to AWS APIs",
            )
        if self.api_access == "endpoints" and not self.route_table_ids:
            raise invalid(
                "network.route_table_ids",
                self.route_table_ids,
                "the S3 gateway endpoint attaches to the subnet's route tables",
                "list the subnet's route table ids, or set api_access: existing",
            )

    def _new_vpc_rules(self) -> None:
        if self.second_subnet_id is not None:
            raise invalid(
                "network.second_subnet_id",
                self.second_subnet_id,
                "a second subnet is given only with an existing VPC (network.vpc_id and subnet_id)",
                "remove it; gpuforge makes the second subnet in the VPC it makes",
            )
        if self.route_table_ids:
            raise invalid(
                "network.route_table_ids",
                self.route_table_ids,
                "route tables are only given with an existing VPC",
                "remove them; gpuforge makes the route table of the VPC it creates",
            )
        try:
            network = ipaddress.IPv4Network(self.vpc_cidr)
        except ValueError:
            raise invalid(
                "network.vpc_cidr", self.vpc_cidr, "not an IPv4 network", "use a block such as 10.0.0.0/16"
            ) from None
        # The private subnet takes the first half and the NAT subnet a /24 of the second,
        # so the VPC must leave room for both. AWS allows VPC blocks from /16 to /28.
        # Source: https://docs.aws.amazon.com/vpc/latest/userguide/vpc-cidr-blocks.html
        if not 16 <= network.prefixlen <= 22:
            raise invalid(
                "network.vpc_cidr",
                self.vpc_cidr,
                "the VPC block must be from /16 to /22",
                "use a block such as 10.0.0.0/16",
            )


class LustreSpec(_Spec):
    """FSx for Lustre: SSD storage, Lustre 2.15 and LZ4 compression by default.

    The S3 link is a data repository association to `s3_path` (on a cluster, the
    cluster's bucket when `s3_path` is empty). `import_path`/`export_path` are the legacy
    link, only where a DRA cannot be used (SCRATCH_1 or Lustre 2.10). `efa_enabled`
    needs PERSISTENT_2 with a metadata configuration. See `lustre_rules` for each rule
    and its source.
    """

    deployment_type: LustreDeploymentType
    storage_capacity_gib: int
    throughput_per_tib: int | None = None
    s3_path: str | None = None
    file_system_path: str = "/"
    auto_import_events: tuple[S3EventType, ...] = ("NEW", "CHANGED", "DELETED")
    auto_export_events: tuple[S3EventType, ...] = ("NEW", "CHANGED", "DELETED")
    import_path: str | None = None
    export_path: str | None = None
    auto_import_policy: LegacyAutoImportPolicy | None = None
    efa_enabled: bool = False
    metadata_mode: MetadataMode | None = None
    metadata_iops: int | None = None
    lustre_version: LustreVersion = "2.15"
    data_compression: Literal["LZ4", "NONE"] = "LZ4"
    kms_key_arn: str | None = None

    @model_validator(mode="after")
    def _rules(self) -> Self:
        for field, path in (
            ("lustre.s3_path", self.s3_path),
            ("lustre.import_path", self.import_path),
            ("lustre.export_path", self.export_path),
        ):
            if path is not None and not _S3_PATH.fullmatch(path):
                raise invalid(field, path, "not an S3 URL", "use s3://bucket/ or s3://bucket/prefix/")
        if self.kms_key_arn is not None and not _KMS_KEY_ARN.fullmatch(self.kms_key_arn):
            raise invalid("lustre.kms_key_arn", self.kms_key_arn, "not a KMS key ARN", "give the key's ARN")
        lustre_rules.check(self, data_repository_association=self.s3_path is not None)
        return self


class BucketSpec(_Spec):
    """The data bucket for datasets and checkpoints.

    Always versioned, encrypted and closed to the public. With `kms_key_arn`, the key's
    policy must also let FSx for Lustre (its service-linked role) use the key, or a data
    repository association to this bucket cannot read or write objects. `checkpoint_retention_days`
    adds a lifecycle rule that expires objects (and their old versions) under
    `checkpoint_prefix` after that many days.
    """

    bucket_name: str | None = None
    kms_key_arn: str | None = None
    force_destroy: bool = False
    checkpoint_prefix: str = "checkpoints/"
    checkpoint_retention_days: int | None = None

    @model_validator(mode="after")
    def _rules(self) -> Self:
        if self.bucket_name is not None and (
            not _BUCKET_NAME.fullmatch(self.bucket_name) or ".." in self.bucket_name
        ):
            raise invalid(
                "bucket.bucket_name",
                self.bucket_name,
                "S3 bucket names are 3-63 lowercase letters, digits, dots and hyphens",
                "pick a name that follows the rule, or leave it empty to let Pulumi name the bucket",
                source="https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html",
            )
        if self.kms_key_arn is not None and not _KMS_KEY_ARN.fullmatch(self.kms_key_arn):
            raise invalid("bucket.kms_key_arn", self.kms_key_arn, "not a KMS key ARN", "give the key's ARN")
        if self.checkpoint_retention_days is not None and self.checkpoint_retention_days < 1:
            raise invalid(
                "bucket.checkpoint_retention_days",
                self.checkpoint_retention_days,
                "S3 lifecycle expiration takes a positive number of days",
                "use 1 or more, or leave it empty to keep checkpoints",
            )
        if self.checkpoint_retention_days is not None and not self.checkpoint_prefix:
            raise invalid(
                "bucket.checkpoint_prefix",
                self.checkpoint_prefix,
                "an empty prefix would expire every object in the bucket, datasets included",
                "name the checkpoint folder, e.g. checkpoints/",
            )
        return self


class GpuClusterSpec(_Spec):
    """Everything a GpuCluster is built from.

    `node_mode` is `asg` (an Auto Scaling group, the default: it replaces unhealthy
    nodes) or `instances` (a fixed set). `imds_hop_limit` is 1 unless containers on the
    node need IMDS (then 2). `wait_for_capacity_timeout` overrides the per-capacity
    default chosen in `cluster_rules.wait_for_capacity_timeout`. `scheduler` is the
    `gpuforge:scheduler` block; with `type: slurm` the cluster gets a Slurm controller.
    """

    name: str
    instance_type: str
    node_count: int = Field(ge=1, le=MAX_NODE_COUNT)
    node_mode: NodeMode = "asg"
    availability_zone: str
    ami: AmiPin
    capacity: CapacitySpec = CapacitySpec()
    lustre: LustreSpec | None = None
    bucket: BucketSpec | None = BucketSpec()
    tags: dict[str, str] = Field(default_factory=dict)
    network: NetworkSpec = NetworkSpec()
    placement_strategy: PlacementStrategy = "cluster"
    partition_count: int | None = None
    imds_hop_limit: Literal[1, 2] = 1
    root_volume_gib: int = Field(default=200, ge=8, le=16384)
    wait_for_capacity_timeout: str | None = None
    # No scheduler unless the stack asks for one (`gpuforge:scheduler`); SchedulerSpec is defined below.
    scheduler: SchedulerSpec = Field(default_factory=lambda: SchedulerSpec(type="none"))

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        # The rule `gpuforge scheduler render` applies too: the name is also Slurm's ClusterName.
        return slurm_values.CLUSTER_NAME.check(value, field="name")

    @model_validator(mode="after")
    def _rules(self) -> Self:
        instance = cluster_rules.instance_type(self.instance_type)
        cluster_rules.check_availability_zone(self.availability_zone, self.ami.region)
        cluster_rules.check_node_mode(self.node_mode, self.capacity)
        cluster_rules.check_capacity_block_type(instance, self.capacity)
        cluster_rules.check_placement(instance, self.placement_strategy, self.partition_count, self.capacity)
        cluster_rules.check_user_tags(self.tags)
        if not self.network.existing:  # an existing subnet's size is known only to EC2
            cluster_rules.check_subnet_addresses(
                instance,
                self.node_count,
                cluster_rules.private_subnet_block(self.network.vpc_cidr),
                controllers=1 if self.scheduler.type == "slurm" else 0,
            )
        if self.wait_for_capacity_timeout is not None:
            cluster_rules.check_wait_timeout(self.wait_for_capacity_timeout)
        check_team_quotas(self.scheduler, node_count=self.node_count, gpus_per_node=instance.gpu_count)
        return self

    @classmethod
    def from_config(cls, data: Mapping[str, Any]) -> GpuClusterSpec:
        """The spec from plain config data (e.g. a stack's Pulumi config object)."""
        return cls.model_validate(dict(data))


SchedulerType = Literal["slurm", "kubernetes", "none"]
AccountingDatabase = Literal["local", "aurora"]
# Partition names, MaxTime and the controller's instance type are checked by the rules in
# gpuforge.scheduler.slurm_values, which the renderer applies again to every value it writes.
_SLURM_DOC = "https://slurm.schedmd.com/slurm.conf.html#SECTION_PARTITION-CONFIGURATION"


class PartitionSpec(_Spec):
    """One Slurm partition; every GPU node of the cluster is in every partition.

    `max_time` is slurm.conf's MaxTime (e.g. `2-00:00:00`, `UNLIMITED`); `default`
    marks the partition a job lands in when it names none.
    """

    name: str
    max_time: str | None = None
    default: bool = False

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return slurm_values.PARTITION_NAME.check(value, field="partitions.name")

    @field_validator("max_time")
    @classmethod
    def _max_time(cls, value: str | None) -> str | None:
        return None if value is None else slurm_values.MAX_TIME.check(value, field="partitions.maxTime")


# Sources of the accounting rules below (Slurm 26.05's pages, as the forky test root's man pages):
_SACCTMGR_DOC = "https://slurm.schedmd.com/sacctmgr.html"
_QOS_DOC = "https://slurm.schedmd.com/qos.html"
_PREEMPT_DOC = "https://slurm.schedmd.com/preempt.html"
# slurmdb_qos_rec_t.priority is a uint32_t whose two top values mean INFINITE and NO_VAL
# (slurm/slurm.h of SchedMD/slurm), so a QOS priority is below 2^32 - 2.
_QOS_PRIORITY_MAX = 2**32 - 3
# A preempted QOS's `gracePeriod`, in whole seconds: what its jobs get between SIGTERM and the requeue (Slurm's QOS
# GraceTime, the pods' terminationGracePeriodSeconds on Kubernetes). Zero is no grace, which leaving the key out
# says. At most an hour, gpuforge's bound: the preempting job waits the whole grace for its GPUs, so a longer grace
# undoes the preemption it belongs to; a checkpoint that takes longer to write is to be made smaller or faster (the
# checkpoint advisor's fix), not waited for, and a larger number is more likely a unit slip (minutes or ms).
GRACE_PERIOD_RANGE_S = (1, 3600)


class AccountingSpec(_Spec):
    """`scheduler.accounting`: where slurmdbd keeps Slurm's accounting.

    `local` (the default) is MariaDB on the controller's encrypted state volume; `aurora` is an
    Aurora MySQL Serverless v2 cluster the component makes (components.accounting_db).
    """

    database: AccountingDatabase = "local"


class QosSpec(_Spec):
    """One Slurm quality of service: its `priority` (added to a job's priority through
    PriorityWeightQOS), the QOS it `preempts` (their jobs are requeued, PreemptMode=REQUEUE) and, on a QOS
    another preempts, the `grace_period` its preempted jobs get: SIGTERM first, then that many seconds to save
    their state before they are requeued (Slurm's QOS GraceTime; terminationGracePeriodSeconds on Kubernetes).
    None: requeued at once."""

    name: str
    priority: int = Field(ge=0, le=_QOS_PRIORITY_MAX)
    preempts: tuple[str, ...] = ()
    grace_period: StrictInt | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return slurm_values.QOS_NAME.check(value, field="qos.name")

    @field_validator("preempts", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return (value,) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _grace_period(self) -> Self:
        low, high = GRACE_PERIOD_RANGE_S
        value = self.grace_period
        if value is not None and not low <= value <= high:
            raise invalid(
                f"scheduler.qos[{self.name}].gracePeriod",
                value,
                f"a grace period is whole seconds from {low} to {high} (an hour): the time a preempted job gets "
                "between SIGTERM and its requeue, which the preempting job waits for its GPUs",
                "give the seconds a job of this QOS needs to write its checkpoint (`gpuforge plan` shows the "
                "checkpoint write time), or leave gracePeriod out to requeue at once",
                source=_PREEMPT_DOC,
            )
        return self


class TeamUser(_Spec):
    """A user of a team; `default` marks the team (Slurm account) their jobs are charged to
    when they name none, which a user of several teams must have in exactly one."""

    name: str
    default: bool = False

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return slurm_values.USER_NAME.check(
            value, field="teams.users.name", fix="give the user's login name, as `id -un` prints it"
        )


class TeamSpec(_Spec):
    """One team: a Slurm account with its users, a GPU quota (GrpTRES=gres/gpu=N: at the quota the
    team's further jobs pend with Slurm's reason) and the QOS its jobs may use (the first is the default)."""

    name: str
    users: tuple[TeamUser, ...] = Field(min_length=1)
    gpu_quota: int = Field(ge=1)
    qos: tuple[str, ...] = ()

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return slurm_values.ACCOUNT_NAME.check(value, field="teams.name")

    @field_validator("users", mode="before")
    @classmethod
    def _users(cls, value: object) -> object:
        """A user is a name or {name, default}."""
        if isinstance(value, (list, tuple)):
            return tuple(TeamUser(name=user) if isinstance(user, str) else user for user in value)
        return value

    @field_validator("qos", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return (value,) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _unique_users(self) -> Self:
        names = [user.name for user in self.users]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise invalid(
                f"scheduler.teams[{self.name}].users",
                names,
                f"{', '.join(repeated)} is listed more than once",
                "list each user once in a team",
            )
        return self


def _check_accounts(qos: tuple[QosSpec, ...], teams: tuple[TeamSpec, ...]) -> None:
    """The rules that join QOS and teams: unique names, known QOS, no preemption loop, one default team a user."""
    for field, names in (
        ("scheduler.qos", [q.name for q in qos]),
        ("scheduler.teams", [t.name for t in teams]),
    ):
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise invalid(
                field,
                names,
                f"names must be unique; {', '.join(repeated)} appears more than once",
                "give each its own name",
                source=_SACCTMGR_DOC,
            )
    # A name listed twice reaches sacctmgr twice, and Slurm keeps it once: every sync-accounts would then find
    # the lists different and change them again (accounts.plan_changes compares them whole).
    for field, listed in (
        *((f"scheduler.qos[{level.name}].preempts", level.preempts) for level in qos),
        *((f"scheduler.teams[{team.name}].qos", team.qos) for team in teams),
    ):
        repeated = sorted({name for name in listed if listed.count(name) > 1})
        if repeated:
            raise invalid(
                field,
                list(listed),
                f"{', '.join(repeated)} is listed more than once",
                "list each QOS once",
                source=_QOS_DOC,
            )
    known = {q.name for q in qos}
    for level in qos:
        if level.name in level.preempts:
            raise invalid(
                f"scheduler.qos[{level.name}].preempts",
                list(level.preempts),
                "a QOS cannot preempt itself (its jobs would requeue one another)",
                f"remove {level.name} from its own preempts",
                source=_PREEMPT_DOC,
            )
        unknown = sorted(set(level.preempts) - known)
        if unknown:
            raise invalid(
                f"scheduler.qos[{level.name}].preempts",
                list(level.preempts),
                f"{', '.join(unknown)} is not a QOS of scheduler.qos (known: {', '.join(sorted(known))})",
                "name a QOS defined under scheduler.qos, or define it there",
                source=_QOS_DOC,
            )
    preempted = {name for level in qos for name in level.preempts}
    for level in qos:
        if level.grace_period is not None and level.name not in preempted:
            raise invalid(
                f"scheduler.qos[{level.name}].gracePeriod",
                level.grace_period,
                f"no QOS preempts {level.name}, so its jobs are never preempted and the grace period never applies "
                "(it is the preempted QOS's setting, Slurm's QOS GraceTime, not the preempting one's)",
                "put gracePeriod on the QOS named in another QOS's preempts (e.g. research, which production "
                f"preempts), or remove it from {level.name}",
                source=_PREEMPT_DOC,
            )
    cycle = _preemption_cycle({level.name: level.preempts for level in qos})
    if cycle:
        raise invalid(
            "scheduler.qos.preempts",
            " -> ".join(cycle),
            "preemption forms a cycle: each QOS of it would requeue the jobs of the next, so no job of them is safe",
            "make preemption go one way (e.g. production preempts research, research preempts nothing)",
            source=_PREEMPT_DOC,
        )
    for team in teams:
        unknown = [name for name in team.qos if name not in known]
        if unknown:
            raise invalid(
                f"scheduler.teams[{team.name}].qos",
                list(team.qos),
                f"{', '.join(unknown)} is not a QOS of scheduler.qos"
                + (f" (known: {', '.join(sorted(known))})" if known else " (it defines none)"),
                "name a QOS defined under scheduler.qos, or define it there",
                source=_QOS_DOC,
            )
    memberships: dict[str, list[tuple[str, bool]]] = {}
    for team in teams:
        for user in team.users:
            memberships.setdefault(user.name, []).append((team.name, user.default))
    for name, where in sorted(memberships.items()):
        defaults = [team for team, default in where if default]
        if len(where) > 1 and len(defaults) != 1:
            raise invalid(
                f"scheduler.teams.users[{name}]",
                {team: default for team, default in where},
                f"{name} is in {len(where)} teams ({', '.join(team for team, _ in where)}) and marked default in "
                f"{len(defaults)}; Slurm charges a job that names no account to the user's one DefaultAccount",
                f"write {{name: {name}, default: true}} in exactly one of those teams",
                source=_SACCTMGR_DOC,
            )


def _preemption_cycle(preempts: Mapping[str, tuple[str, ...]]) -> list[str]:
    """A preemption cycle as its QOS names (the first repeated at the end), or [] when there is none.

    Depth-first; the depth is bounded by the number of QOS, which a stack writes by hand.
    """
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str]:
        if name in path:
            return [*path[path.index(name) :], name]
        if name in done:
            return []
        for target in sorted(preempts.get(name, ())):
            cycle = visit(target, [*path, name])
            if cycle:
                return cycle
        done.add(name)
        return []

    for start in sorted(preempts):
        cycle = visit(start, [])
        if cycle:
            return cycle
    return []


def check_team_quotas(scheduler: SchedulerSpec, *, node_count: int, gpus_per_node: int) -> None:
    """A team's GPU quota above the GPUs of the largest node group of this type a stack can have is refused:
    nodeCount is at most MAX_NODE_COUNT (one subnet's addresses), so such a quota can never bind, and is a typo.

    A quota above today's GPUs only is a budget for a node group that grows: `team_quota_advice` says so."""
    most = MAX_NODE_COUNT * gpus_per_node
    for team in scheduler.teams:
        if team.gpu_quota > most:
            raise invalid(
                f"scheduler.teams[{team.name}].gpuQuota",
                team.gpu_quota,
                f"the quota is above the {most} GPUs of the largest node group a stack can have ({MAX_NODE_COUNT} "
                f"nodes, the addresses of one subnet, x {gpus_per_node} GPUs per node), so it can never limit the team",
                f"give a quota of at most {most}; a quota of the cluster's {node_count * gpus_per_node} GPUs lets the "
                "team use every GPU",
                source="https://slurm.schedmd.com/resource_limits.html",
            )


def team_quota_advice(scheduler: SchedulerSpec, *, node_count: int, gpus_per_node: int) -> list[str]:
    """Advice, never a refusal: each team whose GPU quota is above the cluster's GPUs today.

    Such a quota does not limit the team until the node group grows to it; quotas are budgets, and scaling a
    stack down must not mean editing every team, so it is said (the cluster summary's `advice`, shown by
    `gpuforge plan` and exported by `pulumi up`), not refused."""
    cluster_gpus = node_count * gpus_per_node
    return [
        f"team {team.name}: gpuQuota {team.gpu_quota} is above the cluster's {cluster_gpus} GPUs today (nodeCount "
        f"{node_count} x {gpus_per_node} GPUs per node), so it does not limit the team until nodeCount reaches "
        f"{-(-team.gpu_quota // gpus_per_node)}; kept as written (a quota is a budget)"
        for team in scheduler.teams
        if gpus_per_node > 0 and team.gpu_quota > cluster_gpus
    ]


class SchedulerSpec(_Spec):
    """The `gpuforge:scheduler` block: which scheduler runs the cluster, and its partitions.

    `type: none` leaves the nodes without a scheduler. With `slurm`, a controller of
    `controller_instance_type` (a CPU type: the controller runs no jobs) serves the config
    to every node; with no partitions given, one `gpu` partition holds every node and is
    the default.
    """

    type: SchedulerType
    controller_instance_type: str | None = None
    partitions: tuple[PartitionSpec, ...] = ()
    accounting: AccountingSpec = AccountingSpec()
    qos: tuple[QosSpec, ...] = ()
    teams: tuple[TeamSpec, ...] = ()
    # type: kubernetes (EKS): the control plane's exact version, the CPU type of the system node group,
    # and the IAM role given cluster-admin through an EKS access entry (components.eks_cluster).
    kubernetes_version: str | None = None
    system_node_type: str | None = None
    admin_role_arn: str | None = None

    @model_validator(mode="after")
    def _rules(self) -> Self:
        if self.type == "kubernetes":
            check_kubernetes(self)
            _check_accounts(self.qos, self.teams)
            reserved.check(self)
            return self
        _refuse_given(self, _KUBERNETES_KEYS, "slurm or none", "they configure EKS; set type: kubernetes")
        if self.type == "none":
            given = _given(
                self,
                (
                    ("controllerInstanceType", "controller_instance_type"),
                    ("partitions", "partitions"),
                    ("accounting", "accounting"),
                    ("qos", "qos"),
                    ("teams", "teams"),
                ),
            )
            if given:
                raise invalid(
                    "scheduler",
                    {"type": "none", "given": given},
                    "a cluster with no scheduler has no controller, partitions, accounting, QOS or teams",
                    f"remove {', '.join(given)}, or set type: slurm",
                )
            return self
        if self.controller_instance_type is None:
            raise invalid(
                "scheduler.controllerInstanceType",
                None,
                "a Slurm cluster needs a controller instance type",
                "set controllerInstanceType, e.g. m7i.2xlarge",
            )
        slurm_values.INSTANCE_TYPE.check(
            self.controller_instance_type,
            field="scheduler.controllerInstanceType",
            fix="give a CPU instance type AWS sells, such as m7i.2xlarge",
        )
        names = [partition.name for partition in self.partitions]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise invalid(
                "scheduler.partitions",
                names,
                f"partition names must be unique; {', '.join(repeated)} appears more than once",
                "give each partition its own name",
                source=_SLURM_DOC,
            )
        defaults = [partition.name for partition in self.partitions if partition.default]
        if len(defaults) > 1:
            raise invalid(
                "scheduler.partitions",
                defaults,
                "at most one partition can be the default",
                "set default: true on one partition only",
                source=_SLURM_DOC,
            )
        _check_accounts(self.qos, self.teams)
        reserved.check(self)
        return self

    @property
    def effective_partitions(self) -> tuple[PartitionSpec, ...]:
        """The partitions to render: as given (the first is the default if none is marked), or one `gpu`."""
        if not self.partitions:
            return (PartitionSpec(name="gpu", default=True),)
        if any(partition.default for partition in self.partitions):
            return self.partitions
        first, *rest = self.partitions
        return (first.model_copy(update={"default": True}), *rest)


# The keys of one scheduler type that another refuses: (config key, field).
_KUBERNETES_KEYS = (
    ("kubernetesVersion", "kubernetes_version"),
    ("systemNodeType", "system_node_type"),
    ("adminRoleArn", "admin_role_arn"),
)
_SLURM_ONLY_KEYS = (
    ("controllerInstanceType", "controller_instance_type"),
    ("partitions", "partitions"),
    ("accounting", "accounting"),
)
# EKS takes a Kubernetes minor version ("1.33"), never a patch: https://docs.aws.amazon.com/eks/latest/APIReference/API_CreateCluster.html
_KUBERNETES_VERSION = re.compile(r"1\.[0-9]{1,2}")
_ROLE_ARN = re.compile(r"arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]{1,512}")


def _given(scheduler: SchedulerSpec, keys: tuple[tuple[str, str], ...]) -> list[str]:
    """The keys (as written) whose fields were set to something other than their default.

    A field at its default configures nothing, so it is not refused: a spec written out whole
    (`model_dump_json`, as the policy check's child process and the plan's caches do) carries
    every default, e.g. `accounting: {database: local}` on a `type: none` scheduler, and must
    read back as the same spec."""
    fields = type(scheduler).model_fields
    return [
        key
        for key, field in keys
        if field in scheduler.model_fields_set and getattr(scheduler, field) != fields[field].default
    ]


def _refuse_given(
    scheduler: SchedulerSpec, keys: tuple[tuple[str, str], ...], type_name: str, why: str
) -> None:
    given = _given(scheduler, keys)
    if given:
        raise invalid(
            "scheduler",
            {"type": scheduler.type, "given": given},
            f"{', '.join(given)} is not a key of a {type_name} scheduler ({why})",
            f"remove {', '.join(given)}",
        )


def check_kubernetes(scheduler: SchedulerSpec) -> None:
    """The rules of `type: kubernetes`: exact version, a system node type, an admin role; no Slurm-only key.

    Teams and QOS stay: the Kueue queues and priority classes are rendered from them (gpuforge.kubernetes).
    """
    _refuse_given(
        scheduler, _SLURM_ONLY_KEYS, "kubernetes", "Slurm's controller, partitions and slurmdbd; EKS has none"
    )
    version = scheduler.kubernetes_version
    if version is None or not _KUBERNETES_VERSION.fullmatch(version):
        raise invalid(
            "scheduler.kubernetesVersion",
            version,
            "an EKS cluster is created at an exact Kubernetes minor version, written like 1.33",
            "set kubernetesVersion to a version EKS supports, e.g. 1.33",
            source="https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html",
        )
    if scheduler.system_node_type is None:
        raise invalid(
            "scheduler.systemNodeType",
            None,
            "the system add-ons (Kueue, CoreDNS, the device plugins' controllers) run on a CPU node group",
            "set systemNodeType, e.g. m7i.xlarge",
        )
    slurm_values.INSTANCE_TYPE.check(
        scheduler.system_node_type,
        field="scheduler.systemNodeType",
        fix="give a CPU instance type AWS sells, such as m7i.xlarge",
    )
    if scheduler.admin_role_arn is None or not _ROLE_ARN.fullmatch(scheduler.admin_role_arn):
        raise invalid(
            "scheduler.adminRoleArn",
            scheduler.admin_role_arn,
            "the cluster's only admin is the IAM role of an EKS access entry (authentication mode API, no "
            "aws-auth ConfigMap), given as a role ARN",
            "set adminRoleArn to arn:aws:iam::<account>:role/<name>",
            source="https://docs.aws.amazon.com/eks/latest/userguide/access-entries.html",
        )


# GpuClusterSpec names SchedulerSpec, which is defined after it.
GpuClusterSpec.model_rebuild()
