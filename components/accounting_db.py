"""AccountingDatabase: Aurora MySQL Serverless v2 for slurmdbd (`gpuforge:scheduler.accounting.database: aurora`).

The default (`local`) keeps Slurm's accounting in a MariaDB on the controller's encrypted state
volume (components.user_data); this component is the managed alternative. It is made inside the
SlurmController, after the controller's security group and before its instance, whose user data
names the cluster endpoint and the ARN of the secret RDS keeps the password in.

Every setting and its source:

- Serverless v2: an `aws.rds.Cluster` with `engine_mode="provisioned"` and a
  `serverlessv2_scaling_configuration`, and one `aws.rds.ClusterInstance` of class `db.serverless`
  (Amazon Aurora User Guide, "Using Aurora Serverless v2",
  https://docs.aws.amazon.com/AmazonRDS/latest/AuroraUserGuide/aurora-serverless-v2.html; pulumi-aws
  `rds.Cluster`, https://www.pulumi.com/registry/packages/aws/api-docs/rds/cluster/, "RDS Serverless v2
  Cluster" example). MIN_ACU/MAX_ACU below.
- private subnets only: a DB subnet group over the cluster's private subnet and one more private subnet
  in a second Availability Zone, which a DB subnet group needs ("Each DB subnet group should have subnets
  in at least two Availability Zones", https://docs.aws.amazon.com/AmazonRDS/latest/AuroraUserGuide/USER_VPC.WorkingWithRDSInstanceinaVPC.html).
  ClusterNetwork makes one subnet, so this component adds the second: DATABASE_SUBNET_SOURCE, in a new
  VPC only (an existing VPC's second subnet is not a config field yet: refused at plan time). The
  subnet has no route to the internet (the VPC's main table, local routes only), and the writer
  instance is placed in the cluster's own Availability Zone, beside the controller.
  `publicly_accessible=False` on the instance (pulumi-aws `rds.ClusterInstance`,
  https://www.pulumi.com/registry/packages/aws/api-docs/rds/clusterinstance/).
- reachable only from the controller: its own security group takes TCP 3306 from the controller's
  group and nothing else, and has no egress rule.
- encrypted: `storage_encrypted=True` (https://docs.aws.amazon.com/AmazonRDS/latest/AuroraUserGuide/Overview.Encryption.html).
- TLS required: a cluster parameter group (family aurora-mysql8.0) with `require_secure_transport=ON`
  ("Requiring a TLS connection to an Aurora MySQL DB cluster",
  https://docs.aws.amazon.com/AmazonRDS/latest/AuroraUserGuide/AuroraMySQL.Security.html#AuroraMySQL.Security.SSL.RequireSSL;
  pulumi-aws `rds.ClusterParameterGroup`, https://www.pulumi.com/registry/packages/aws/api-docs/rds/clusterparametergroup/).
- the master password managed by RDS in Secrets Manager: `manage_master_user_password=True` and no
  `master_password` (https://docs.aws.amazon.com/AmazonRDS/latest/AuroraUserGuide/rds-secrets-manager.html:
  RDS generates the password and stores it, with the user name, in a secret it rotates; pulumi-aws
  `rds.Cluster.manage_master_user_password`, "Cannot be set if master_password is provided"). The
  password is therefore never in Pulumi's state nor in the user data: the controller reads the secret
  (`master_user_secrets[0].secret_arn`) at boot with a grant on that one ARN (`grant`). RDS encrypts
  that secret with the AWS managed key aws/secretsmanager when no key is given (same page), whose key
  policy lets any principal of the account that may read the secret decrypt it through Secrets
  Manager, so no KMS statement is needed.
- deletion protection and backups: `deletion_protection=True`, `backup_retention_period` BACKUP_RETENTION_DAYS,
  a final snapshot on delete (`skip_final_snapshot=False` with a `final_snapshot_identifier`,
  https://docs.aws.amazon.com/AmazonRDS/latest/AuroraUserGuide/Aurora.Managing.Backups.html).
- the engine pinned exactly: ENGINE_VERSION, with automatic minor upgrades off on the instance (AWS's
  advice for an LTS release).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import pulumi
import pulumi_aws as aws

from gpuforge.components.input_errors import invalid
from gpuforge.components.network import SecondZoneNeed, second_private_subnet

TOKEN: Final = "gpuforge:scheduler:AccountingDatabase"
ENGINE: Final = "aurora-mysql"
# Aurora MySQL 3.10, compatible with MySQL 8.0.42, is a long-term support (LTS) line: 3.10.0 was released
# 2025-07-31 and designated LTS ("Aurora MySQL database engine updates 2025-07-31 (version 3.10.0, compatible
# with MySQL 8.0.42)", https://docs.aws.amazon.com/AmazonRDS/latest/AuroraMySQLReleaseNotes/AuroraMySQL.Updates.3100.html).
# Its patches since: 3.10.1 (2025-09-30), 3.10.2 (2025-11-20), 3.10.3 (2026-01-02), 3.10.4 (2026-03-30) and
# 3.10.5 (2026-07-30), the newest in "Database engine updates for Amazon Aurora MySQL version 3"
# (https://docs.aws.amazon.com/AmazonRDS/latest/AuroraMySQLReleaseNotes/AuroraMySQL.Updates.30Updates.html and
# its document history, read 2026-12-07 in AWS's stored copies). AWS: "We recommend that you always upgrade to
# the latest Aurora release to be protected against known vulnerabilities"
# (https://docs.aws.amazon.com/AmazonRDS/latest/AuroraMySQLReleaseNotes/AuroraMySQL.CVE_list.html), so the pin is
# the newest 3.10 patch. The version string's form "8.0.mysql_aurora.<3.x.y>" is
# https://docs.aws.amazon.com/AmazonRDS/latest/AuroraUserGuide/AuroraMySQL.Updates.Versions.html.
ENGINE_VERSION: Final = "8.0.mysql_aurora.3.10.5"
ENGINE_VERSION_SOURCE: Final = (
    "https://docs.aws.amazon.com/AmazonRDS/latest/AuroraMySQLReleaseNotes/AuroraMySQL.Updates.3105.html"
)
# The parameter group family of Aurora MySQL version 3 (MySQL 8.0 compatible).
PARAMETER_GROUP_FAMILY: Final = "aurora-mysql8.0"
# require_secure_transport is dynamic in Aurora MySQL 3: applied without a reboot.
REQUIRE_TLS: Final = {"name": "require_secure_transport", "value": "ON", "apply_method": "immediate"}
TLS_SOURCE: Final = (
    "https://docs.aws.amazon.com/AmazonRDS/latest/AuroraUserGuide/AuroraMySQL.Security.html"
    "#AuroraMySQL.Security.SSL.RequireSSL"
)
INSTANCE_CLASS: Final = "db.serverless"
PORT: Final = 3306
# Aurora Serverless v2 capacity in ACUs (about 2 GiB of memory each): 0.5 is the smallest the
# scaling configuration takes for Aurora MySQL 3.x, and slurmdbd's load (one insert per job, step and
# event, sreport rollups once an hour) is small; 4 ACUs is headroom for sacct/sreport over a year of
# jobs. Source: https://docs.aws.amazon.com/AmazonRDS/latest/AuroraUserGuide/aurora-serverless-v2.setting-capacity.html
MIN_ACU: Final = 0.5
MAX_ACU: Final = 4.0
# The policy pack's floor (policies/rules_accounting.py) is the same figure.
BACKUP_RETENTION_DAYS: Final = 7
# slurmdbd's database (StorageLoc's default, slurmdbd.conf(5)) and the master user it connects as;
# RDS keeps that user's password in the managed secret as {"username": ..., "password": ...}.
DATABASE_NAME: Final = "slurm_acct_db"
MASTER_USERNAME: Final = "slurmdbd"
DATABASE_SUBNET_SOURCE: Final = (
    "https://docs.aws.amazon.com/AmazonRDS/latest/AuroraUserGuide/USER_VPC.WorkingWithRDSInstanceinaVPC.html"
)


# Aurora's refusal when the region has a single available zone.
SECOND_ZONE: Final = SecondZoneNeed("Aurora", "use accounting.database: local", DATABASE_SUBNET_SOURCE)


@dataclass(frozen=True)
class AccountingDatabaseArgs:
    """Where the database lives and who may reach it.

    `vpc_cidr` is the block of the VPC ClusterNetwork made (the second subnet is carved from it);
    `subnet_id` the cluster's private subnet; `controller_security_group_id` the only group let in.
    """

    cluster_name: str
    vpc_id: pulumi.Input[str]
    vpc_cidr: str
    subnet_id: pulumi.Input[str]
    availability_zone: str
    controller_security_group_id: pulumi.Input[str]
    tags: Mapping[str, str] = field(default_factory=dict)


class AccountingDatabase(pulumi.ComponentResource):
    """The Aurora cluster, its writer, subnet group, parameter group and security group."""

    endpoint: pulumi.Output[str]
    port: pulumi.Output[int]
    secret_arn: pulumi.Output[str]
    cluster_arn: pulumi.Output[str]

    def __init__(
        self, name: str, args: AccountingDatabaseArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(TOKEN, name, None, opts)
        self._name = name
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)

        subnet = second_private_subnet(
            self,
            name,
            vpc_id=args.vpc_id,
            vpc_cidr=args.vpc_cidr,
            cluster_zone=args.availability_zone,
            need=SECOND_ZONE,
            tags=tags,
        )
        subnet_group = aws.rds.SubnetGroup(
            f"{name}-subnets",
            description=f"gpuforge {args.cluster_name}: Slurm accounting, private subnets in two zones",
            subnet_ids=[args.subnet_id, subnet.id],
            tags=tags,
            opts=child,
        )
        group = aws.ec2.SecurityGroup(
            f"{name}-sg",
            vpc_id=args.vpc_id,
            description="gpuforge Slurm accounting database: MySQL from the Slurm controller only",
            tags={**tags, "Name": f"{name}-sg"},
            opts=child,
        )
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-in-mysql",
            security_group_id=group.id,
            referenced_security_group_id=args.controller_security_group_id,
            ip_protocol="tcp",
            from_port=PORT,
            to_port=PORT,
            description="slurmdbd on the Slurm controller",
            opts=child,
        )
        parameters = aws.rds.ClusterParameterGroup(
            f"{name}-params",
            family=PARAMETER_GROUP_FAMILY,
            description=f"gpuforge {args.cluster_name}: Slurm accounting, TLS required",
            parameters=[aws.rds.ClusterParameterGroupParameterArgs(**REQUIRE_TLS)],
            tags=tags,
            opts=child,
        )
        cluster = aws.rds.Cluster(
            f"{name}-cluster",
            engine=ENGINE,
            engine_mode="provisioned",
            engine_version=ENGINE_VERSION,
            database_name=DATABASE_NAME,
            master_username=MASTER_USERNAME,
            manage_master_user_password=True,
            port=PORT,
            db_subnet_group_name=subnet_group.name,
            vpc_security_group_ids=[group.id],
            db_cluster_parameter_group_name=parameters.name,
            storage_encrypted=True,
            deletion_protection=True,
            backup_retention_period=BACKUP_RETENTION_DAYS,
            copy_tags_to_snapshot=True,
            skip_final_snapshot=False,
            final_snapshot_identifier=f"{args.cluster_name}-accounting-final",
            serverlessv2_scaling_configuration=aws.rds.ClusterServerlessv2ScalingConfigurationArgs(
                min_capacity=MIN_ACU, max_capacity=MAX_ACU
            ),
            tags=tags,
            opts=child,
        )
        aws.rds.ClusterInstance(
            f"{name}-writer",
            cluster_identifier=cluster.id,
            instance_class=INSTANCE_CLASS,
            engine=aws.rds.EngineType.AURORA_MYSQL,
            engine_version=ENGINE_VERSION,
            db_subnet_group_name=subnet_group.name,
            availability_zone=args.availability_zone,
            publicly_accessible=False,
            auto_minor_version_upgrade=False,
            tags=tags,
            opts=child,
        )
        self.endpoint = cluster.endpoint
        self.port = cluster.port
        self.cluster_arn = cluster.arn
        self.secret_arn = cluster.master_user_secrets.apply(_secret_arn)
        self.register_outputs({"endpoint": self.endpoint, "port": self.port, "secret_arn": self.secret_arn})

    def grant(self, role: pulumi.Input[str]) -> aws.iam.RolePolicy:
        """The controller's role (its name) may read the master user's secret, that one ARN and no other."""
        document = aws.iam.get_policy_document_output(
            statements=self.secret_arn.apply(
                lambda arn: [
                    aws.iam.GetPolicyDocumentStatementArgs(
                        sid="AccountingDatabaseSecret",
                        effect="Allow",
                        actions=["secretsmanager:GetSecretValue"],
                        resources=[arn],
                    )
                ]
            ),
            opts=pulumi.InvokeOutputOptions(parent=self),
        )
        return aws.iam.RolePolicy(
            f"{self._name}-secret", role=role, policy=document.json, opts=pulumi.ResourceOptions(parent=self)
        )


def _secret_arn(secrets: Sequence[aws.rds.outputs.ClusterMasterUserSecret] | None) -> str:
    """The ARN of the secret RDS made for the master user (one, with manage_master_user_password)."""
    if not secrets or not secrets[0].secret_arn:
        raise invalid(
            "master_user_secrets",
            secrets,
            "RDS reports no managed master user secret for the accounting cluster",
            "check that manage_master_user_password is set on the cluster",
        )
    return secrets[0].secret_arn
