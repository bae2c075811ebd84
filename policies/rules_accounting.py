"""Accounting database rules: an RDS/Aurora database in a gpuforge stack is encrypted, private, protected and TLS-only.

Slurm's accounting holds every job, user and team of the cluster, and its password opens all of it. The
settings AccountingDatabase (components/accounting_db.py) makes are required of any RDS cluster or instance
in the stack, so a transformation or a hand-written database cannot drop one:

- `rds-database-hardened` (resource policy, mandatory), on `aws:rds/cluster:Cluster`: storage encrypted
  (https://docs.aws.amazon.com/AmazonRDS/latest/AuroraUserGuide/Overview.Encryption.html), deletion protection
  on, automated backups kept at least MIN_BACKUP_RETENTION_DAYS days (AWS's default is 1:
  https://docs.aws.amazon.com/AmazonRDS/latest/AuroraUserGuide/Aurora.Managing.Backups.html), and the master
  password managed by RDS in Secrets Manager (`manageMasterUserPassword`, no `masterPassword`, which would be
  in Pulumi's state: https://docs.aws.amazon.com/AmazonRDS/latest/AuroraUserGuide/rds-secrets-manager.html).
- `rds-not-public` (resource policy, mandatory), on `aws:rds/clusterInstance:ClusterInstance` and
  `aws:rds/instance:Instance`: `publiclyAccessible` is not true (pulumi-aws defaults it to false).
- `rds-tls-required` (stack policy, mandatory): an Aurora MySQL cluster names a cluster parameter group of the
  stack that sets `require_secure_transport` to ON (the default group leaves it OFF:
  https://docs.aws.amazon.com/AmazonRDS/latest/AuroraUserGuide/AuroraMySQL.Security.html#AuroraMySQL.Security.SSL.RequireSSL).
  The group is a name the stack makes, unknown during preview, so the rule follows property dependencies.
"""

from __future__ import annotations

from typing import Final

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from gpuforge.policies.engine_adapter import Sentinel, Unknown, unknown_during_preview
from gpuforge.policies.props import UNKNOWN, at, flag, integer, is_set, items, show, text
from gpuforge.policies.stack_graph import StackGraph, describe

RDS_CLUSTER: Final = "aws:rds/cluster:Cluster"
RDS_CLUSTER_INSTANCE: Final = "aws:rds/clusterInstance:ClusterInstance"
RDS_INSTANCE: Final = "aws:rds/instance:Instance"
CLUSTER_PARAMETER_GROUP: Final = "aws:rds/clusterParameterGroup:ClusterParameterGroup"
# A week of point-in-time recovery: the figure components.accounting_db.BACKUP_RETENTION_DAYS uses.
MIN_BACKUP_RETENTION_DAYS: Final = 7
# RDS keeps one day of backups when the retention is not given.
# Source: https://docs.aws.amazon.com/AmazonRDS/latest/APIReference/API_CreateDBCluster.html (BackupRetentionPeriod)
DEFAULT_BACKUP_RETENTION_DAYS: Final = 1
MYSQL_ENGINES: Final = ("aurora-mysql", "mysql")
TLS_PARAMETER: Final = "require_secure_transport"
TLS_SOURCE: Final = (
    "https://docs.aws.amazon.com/AmazonRDS/latest/AuroraUserGuide/AuroraMySQL.Security.html"
    "#AuroraMySQL.Security.SSL.RequireSSL"
)


def validate_database_hardened(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != RDS_CLUSTER:
        return
    props = args.props
    name = repr(args.name)
    if flag(at(props, "storageEncrypted")) is not True and at(props, "storageEncrypted") is not UNKNOWN:
        report(
            f"database cluster {name} has storageEncrypted {show(at(props, 'storageEncrypted'))}: its job, user "
            "and account records would sit unencrypted. Fix: set storage_encrypted=True (AccountingDatabase does).",
            None,
        )
    if flag(at(props, "deletionProtection")) is not True and at(props, "deletionProtection") is not UNKNOWN:
        report(
            f"database cluster {name} has deletionProtection {show(at(props, 'deletionProtection'))}: one "
            "`pulumi destroy` or replacement deletes the cluster's history. Fix: set deletion_protection=True.",
            None,
        )
    retention = integer(at(props, "backupRetentionPeriod"))
    if retention is not UNKNOWN:
        days = DEFAULT_BACKUP_RETENTION_DAYS if retention is None else retention
        if days < MIN_BACKUP_RETENTION_DAYS:
            report(
                f"database cluster {name} keeps backups {days} day(s) (backupRetentionPeriod "
                f"{show(at(props, 'backupRetentionPeriod'))}); at least {MIN_BACKUP_RETENTION_DAYS} are required. "
                f"Fix: set backup_retention_period={MIN_BACKUP_RETENTION_DAYS} or more.",
                None,
            )
    managed = flag(at(props, "manageMasterUserPassword"))
    if is_set(at(props, "masterPassword")) or (managed is not True and managed is not UNKNOWN):
        report(
            f"database cluster {name} has a master password set by the program (masterPassword "
            f"{'set' if is_set(at(props, 'masterPassword')) else 'unset'}, manageMasterUserPassword "
            f"{show(at(props, 'manageMasterUserPassword'))}): a password Pulumi sets is kept in its state. Fix: "
            "set manage_master_user_password=True and no master_password, so RDS keeps it in Secrets Manager.",
            None,
        )


def validate_not_public(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type not in (RDS_CLUSTER_INSTANCE, RDS_INSTANCE):
        return
    if flag(at(args.props, "publiclyAccessible")) is True:
        report(
            f"database instance {args.name!r} is publicly accessible: it gets an address reachable from the "
            "internet. Fix: set publicly_accessible=False; the controller reaches it inside the VPC.",
            None,
        )


def validate_tls_required(args: StackValidationArgs, report: ReportViolation) -> None:
    graph = StackGraph(args.resources)
    for cluster in graph.of_type(RDS_CLUSTER):
        engine = text(at(cluster.props, "engine"))
        if engine is UNKNOWN:
            unknown_during_preview([cluster.name, "engine"])
        if engine not in MYSQL_ENGINES:
            continue
        value = text(at(cluster.props, "dbClusterParameterGroupName"))
        refs = graph.refs(
            cluster,
            "dbClusterParameterGroupName",
            [value] if value is not None else [],
            (CLUSTER_PARAMETER_GROUP,),
            ("name",),
        )
        if refs.unresolved:
            unknown_during_preview([cluster.name, "dbClusterParameterGroupName"])
        settings = [_tls_setting(group.props) for group in refs.internal]
        if refs.internal and not refs.external and all(setting == "ON" for setting in settings):
            continue
        if any(setting is UNKNOWN for setting in settings):
            unknown_during_preview([cluster.name, TLS_PARAMETER])
        found = ", ".join(
            f"{describe(group)} sets {TLS_PARAMETER}={setting or 'unset'}"
            for group, setting in zip(refs.internal, settings, strict=True)
        ) or (
            "the parameter group " + refs.describe() + " is not made by this stack"
            if refs.external
            else "it names no cluster parameter group (the default leaves it OFF)"
        )
        report(
            f"database cluster {describe(cluster)} does not require TLS: {found}. Fix: give it a cluster parameter "
            f"group of this stack with {TLS_PARAMETER}=ON (source: {TLS_SOURCE}).",
            cluster.urn,
        )


def _tls_setting(props: object) -> str | Unknown | None:
    """require_secure_transport as the group sets it ("ON", "OFF", "1"...), upper-cased; None when unset."""
    for parameter in items(at(props, "parameters")):
        if parameter is UNKNOWN:
            return Sentinel.UNKNOWN
        if text(at(parameter, "name")) == TLS_PARAMETER:
            value = text(at(parameter, "value"))
            if value is UNKNOWN:
                return Sentinel.UNKNOWN
            return {"1": "ON", "0": "OFF"}.get(str(value), str(value).upper()) if value is not None else None
    return None


RDS_DATABASE_HARDENED = ResourceValidationPolicy(
    name="rds-database-hardened",
    description=(
        "An RDS/Aurora cluster is encrypted, has deletion protection, keeps backups at least "
        f"{MIN_BACKUP_RETENTION_DAYS} days, and lets RDS manage its master password in Secrets Manager."
    ),
    validate=validate_database_hardened,
    enforcement_level=EnforcementLevel.MANDATORY,
)
RDS_NOT_PUBLIC = ResourceValidationPolicy(
    name="rds-not-public",
    description=(
        "An RDS/Aurora database instance is not publicly accessible: the Slurm controller reaches it in the VPC."
    ),
    validate=validate_not_public,
    enforcement_level=EnforcementLevel.MANDATORY,
)
RDS_TLS_REQUIRED = StackValidationPolicy(
    name="rds-tls-required",
    description=(
        "An Aurora MySQL cluster uses a cluster parameter group of the stack with require_secure_transport=ON."
    ),
    validate=validate_tls_required,
    enforcement_level=EnforcementLevel.MANDATORY,
)
