"""SlurmController: slurmctld on a CPU instance, its state, the cluster's Slurm key and Slurm's network rules.

The controller serves Slurm's files to the GPU nodes (configless mode), and each node
joins by itself as a dynamic node (`slurmd -Z`, see `user_data`). It is made of:

- an `aws.ec2.Instance` of the scheduler's `controller_instance_type` in the cluster's
  private subnet, at a fixed private address: the subnet's network address plus
  `CONTROLLER_HOST_OFFSET` (10.0.0.10 in the default 10.0.0.0/17 subnet). The address
  is the `SlurmctldHost` of the rendered slurm.conf, so it must be known before the
  instance exists; AWS reserves only the first four and the last address of a subnet,
  so +10 is an ordinary host address in any subnet, the smallest (/28) included. It
  boots the cluster's own catalogued AMI, which carries the pinned Slurm, and runs no
  GPU check (it is a CPU instance). IMDSv2 only, no public IP, an encrypted gp3 root.
- slurmctld's state (`StateSaveLocation`, /var/spool/slurmctld) on an encrypted gp3
  EBS volume of its own, attached and mounted by the user data. EBS and not /fsx: the
  controller's state then needs no file system, survives a replaced controller (a
  changed config replaces the instance, `user_data_replace_on_change`; the volume is
  attached to the new one), and a cluster without Lustre can run Slurm.
- the shared Slurm key (`AuthType=auth/slurm` reads /etc/slurm/slurm.key): 1024 random
  bytes from `pulumi_random.RandomBytes`, made once and kept secret in the stack's
  state, stored base64-encoded in a Secrets Manager secret. Only the GPU nodes' role
  and the controller's role may read it (`node_iam.allow_read_secret`, on that one
  ARN); each instance fetches it at boot, so it is never in user data.
- security groups: the controller's group takes slurmctld's port only from the GPU
  nodes' group; the nodes' group takes slurmd's port and srun's port range from the
  controller's group and from itself (srun runs on the nodes; the EFA all-traffic rule
  already lets node talk to node, these rules state what Slurm itself needs). Every
  port is `SlurmSite`'s, and no rule names a CIDR. The controller reaches AWS APIs as
  the nodes do (egress to 0.0.0.0/0, through the endpoints, which also take it in).

With `monitoring` (components.controller_monitoring), the user data also writes the rendered
Prometheus and Alertmanager files and enables both (and the drain receiver with drainOnAlert),
the role may describe instances (Prometheus's EC2 discovery), and the nodes' group takes
dcgm-exporter's and node_exporter's ports from the controller's group, and nothing else new.

Accounting (`accounting_database`): slurmdbd runs on the controller and starts before slurmctld. With `local`
(the default) its MariaDB keeps its data and its password on the state volume (components.user_data.Accounting);
with `aurora` an AccountingDatabase (components.accounting_db) is made after the controller's group, which alone
may reach it on 3306, and the role may read the one secret RDS keeps its password in. Neither password is ever
in Pulumi's state or the user data. STATE_VOLUME_GIB is sized for slurmctld plus a year of local accounting.

The instance is tagged `gpuforge:role = slurm-controller`, which the policy pack reads
(`slurm-controller-cpu`).
"""

from __future__ import annotations

import base64
import gzip
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pulumi
import pulumi_aws as aws
import pulumi_random as random

from gpuforge import hardware
from gpuforge.components import cluster_rules, node_iam
from gpuforge.components.accounting_db import (
    DATABASE_SUBNET_SOURCE,
    AccountingDatabase,
    AccountingDatabaseArgs,
)
from gpuforge.components.controller_monitoring import ControllerMonitoring
from gpuforge.components.input_errors import invalid
from gpuforge.components.specs import AmiPin, CapacityType, SchedulerSpec
from gpuforge.components.user_data import SLURMDBD_CONF_NAME, Accounting, ControllerParams, render_controller
from gpuforge.images.disk import ROOT_VOLUME_GIB as IMAGE_ROOT_VOLUME_GIB
from gpuforge.scheduler import versions
from gpuforge.scheduler.render import ConfigFile, SlurmCluster, SlurmSite, node_registration, render_files
from gpuforge.scheduler.topology import NetworkTopology

TOKEN = "gpuforge:scheduler:SlurmController"
ROLE_TAG = "gpuforge:role"
CONTROLLER_ROLE = "slurm-controller"
CONTROLLER_HOST_OFFSET = 10
# Source: https://docs.aws.amazon.com/vpc/latest/userguide/subnet-sizing.html (reserved addresses)
SUBNET_SOURCE = "https://docs.aws.amazon.com/vpc/latest/userguide/subnet-sizing.html"
# "dd if=/dev/random of=/etc/slurm/slurm.key bs=1024 count=1".
# Source: https://slurm.schedmd.com/authentication.html#slurm
KEY_BYTES = 1024
STATE_DEVICE = "/dev/sdf"
# The state volume holds slurmctld's state and, with `accounting.database: local`, MariaDB's data. Its size is
# checked against a year of accounting on a busy cluster (`state_volume_needed_gib`, tests/components):
# - accounting: 2075 bytes a job in the job and step tables (data + index), measured by
#   scripts/bench_accounting_size.py with Slurm 26.05.5 and MariaDB 11.8 (the forky test root), 300 jobs of one
#   GPU with the batch, extern and one srun step each: 601 bytes in job_table and 1475 in step_table a job;
# - SIZING_JOBS_PER_DAY a day for SIZING_DAYS days: 14.1 GiB;
# - slurmctld's own state: the jobs it still tracks (at most MaxJobCount, 10000 by default, slurm.conf(5)), each
#   a few KiB of state and batch script: well under SLURMCTLD_STATE_GIB;
# - MariaDB's own files before any job (system tables, InnoDB's redo log of innodb_log_file_size, 96 MiB by
#   default in 10.6, undo tablespaces): MARIADB_BASE_GIB.
# The volume can be grown in place (EBS ModifyVolume; the user data grows the file system at boot, xfs_growfs).
STATE_VOLUME_GIB = 20
ACCOUNTING_BYTES_PER_JOB = 2075
SIZING_JOBS_PER_DAY = 20_000
SIZING_DAYS = 365
SLURMCTLD_STATE_GIB = 1.0
MARIADB_BASE_GIB = 1.0


def state_volume_needed_gib(jobs_per_day: int = SIZING_JOBS_PER_DAY, days: int = SIZING_DAYS) -> float:
    """GiB the state volume needs for slurmctld's state and `days` of local accounting at `jobs_per_day`."""
    return SLURMCTLD_STATE_GIB + MARIADB_BASE_GIB + ACCOUNTING_BYTES_PER_JOB * jobs_per_day * days / 1024**3


# The controller boots the cluster's GPU image, whose root snapshot is images/disk.ROOT_VOLUME_GIB:
# a smaller root volume fails to launch (EBS: a volume from a snapshot is at least the snapshot's size).
ROOT_VOLUME_GIB = IMAGE_ROOT_VOLUME_GIB
# Prometheus keeps its data on the root volume (images/files/gpuforge-prometheus.service,
# --storage.tsdb.path=/var/lib/gpuforge/prometheus), beside the image's own software: "CUDA toolkit,
# cuDNN, NCCL, DCGM and the driver take roughly 20 GiB installed" (images/disk.py).
IMAGE_INSTALLED_GIB = 20
PROMETHEUS_DISK_GIB = ROOT_VOLUME_GIB - IMAGE_INSTALLED_GIB
VOLUME_TYPE = "gp3"
HTTPS = 443
ALL_TRAFFIC = "-1"
# Slurm counts every node record towards MaxNodeCount, and a node that died without
# shutting down keeps its record (DOWN) until it is deleted; twice the group's size lets
# the Auto Scaling group's replacements register meanwhile.
# Source: https://slurm.schedmd.com/slurm.conf.html#OPT_MaxNodeCount
MAX_NODES_PER_NODE = 2
# "User data is limited to 16 KB, in raw form, before it is base64-encoded."
# Source: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/user-data.html
USER_DATA_LIMIT_BYTES = 16 * 1024
USER_DATA_SOURCE = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/user-data.html"


def controller_address(subnet_cidr: str) -> str:
    """The controller's fixed address in `subnet_cidr`: the network address plus CONTROLLER_HOST_OFFSET."""
    try:
        network = ipaddress.IPv4Network(subnet_cidr)
    except ValueError:
        raise invalid(
            "subnet_cidr", subnet_cidr, "not an IPv4 network", "give the subnet's block, e.g. 10.0.0.0/17"
        ) from None
    if network.num_addresses < 16:
        raise invalid(
            "subnet_cidr",
            subnet_cidr,
            "AWS subnets are /28 or larger, and the controller takes the subnet's address +10",
            "use the cluster's subnet, /28 or larger",
            source=SUBNET_SOURCE,
        )
    return str(network.network_address + CONTROLLER_HOST_OFFSET)


def controller_host(cluster_name: str) -> str:
    """The controller's hostname, the name in SlurmctldHost: `<cluster>-slurmctld`."""
    return f"{cluster_name}-slurmctld"


def uses_topology(node_instance_type: hardware.InstanceType, slurm_version: str) -> bool:
    """Whether the cluster gets topology/tree: AWS reports the type's topology and the Slurm can place nodes."""
    version = versions.parse_version(slurm_version, where="slurm_version")
    return node_instance_type.topology_layers > 0 and not versions.missing_features(
        versions.TOPOLOGY_FEATURES, version
    )


def slurm_cluster(
    cluster_name: str,
    *,
    node_instance_type: hardware.InstanceType,
    capacity_type: CapacityType,
    max_nodes: int,
    scheduler: SchedulerSpec,
    slurm_version: str,
    address: str,
    topology: NetworkTopology | None = None,
) -> SlurmCluster:
    """The cluster as Slurm sees it, as the controller renders it: one definition for every renderer.

    `max_nodes` is the node group's largest size; Slurm is allowed MAX_NODES_PER_NODE times as many.
    With no `topology`, a cluster whose type and Slurm can use one (`uses_topology`) starts
    from the pending tree, which the controller's sync fills from AWS.
    """
    if topology is None and uses_topology(node_instance_type, slurm_version):
        topology = NetworkTopology.pending(cluster_name)
    return SlurmCluster(
        name=cluster_name,
        instance_type=node_instance_type,
        capacity_type=capacity_type,
        max_nodes=max_nodes * MAX_NODES_PER_NODE,
        scheduler=scheduler,
        slurm_version=slurm_version,
        site=SlurmSite(controller_host=controller_host(cluster_name), controller_addr=address),
        topology=topology,
    )


def check(name: str, scheduler: SchedulerSpec, slurm_version: str | None) -> None:
    """Refuse a controller that cannot be rendered, before any resource exists.

    The features are those `render_files` asks of a cluster without a network topology
    (`versions.RENDERED_FEATURES`), so a version that lacks one stops here, not at boot.
    """
    if scheduler.type != "slurm":
        raise invalid(
            "scheduler.type",
            scheduler.type,
            "a Slurm controller is made for a Slurm scheduler only",
            "set type: slurm, or build no SlurmController",
        )
    if slurm_version is None:
        raise invalid(
            "slurm_version",
            None,
            "a Slurm cluster's config is rendered for the Slurm its AMI carries",
            "pass the image matrix's slurm.version (gpuforge.stack_config reads it as StackConfig.slurm_version)",
        )
    version = versions.parse_version(slurm_version, where="slurm_version")
    versions.require(versions.RENDERED_FEATURES, version, what=f"the config of cluster {name}")


@dataclass(frozen=True)
class SlurmControllerArgs:
    """What the controller is built from: the scheduler block, the nodes it serves, and where it lives.

    `node_instance_type` is the GPU nodes' type (its catalog row is what Slurm is told
    about each node); `max_nodes` the most nodes the node group may hold at once.
    """

    cluster_name: str
    scheduler: SchedulerSpec
    slurm_version: str
    node_instance_type: str
    capacity_type: CapacityType
    max_nodes: int
    ami: AmiPin
    availability_zone: str
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    subnet_cidr: pulumi.Input[str]
    nodes_security_group_id: pulumi.Input[str]
    endpoints_security_group_id: pulumi.Input[str] | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    # Prometheus, Alertmanager and the drain receiver on the controller (components.controller_monitoring);
    # None: none of them.
    monitoring: ControllerMonitoring | None = None
    # The workspace and topic MonitoringResources made for `remoteWrite: amp` / `alerts.sns: create`
    # (None where none was made): the controller's prometheus.yml and alertmanager.yml name them.
    made_workspace_arn: pulumi.Input[str] | None = None
    made_topic_arn: pulumi.Input[str] | None = None
    # Where slurmdbd keeps Slurm's accounting (gpuforge:scheduler.accounting.database): `local`, MariaDB on the
    # state volume; `aurora`, an AccountingDatabase in the VPC gpuforge made, whose block is `vpc_cidr`.
    accounting_database: Literal["local", "aurora"] = "local"
    vpc_cidr: str | None = None


def check_accounting(database: str, vpc_cidr: str | None) -> None:
    """Refuse an Aurora database the network cannot hold, before any resource exists.

    Aurora's DB subnet group needs private subnets in two Availability Zones; gpuforge adds the second one to a
    VPC it made (components.accounting_db). An existing VPC's second subnet is not a config field yet.
    """
    if database == "aurora" and vpc_cidr is None:
        raise invalid(
            "scheduler.accounting.database",
            "aurora",
            "Aurora needs private subnets in two Availability Zones, and gpuforge adds the second one only to a "
            "VPC it makes; this cluster uses an existing VPC",
            "use accounting.database: local (MariaDB on the controller's state volume), or let gpuforge make the VPC",
            source=DATABASE_SUBNET_SOURCE,
        )


class SlurmController(pulumi.ComponentResource):
    """slurmctld's instance, state volume, key secret, IAM role and security group rules."""

    address: pulumi.Output[str]
    conf_server: pulumi.Output[str]
    key_secret_arn: pulumi.Output[str]
    registration: pulumi.Output[str]
    files: pulumi.Output[dict[str, str]]
    monitoring_files: pulumi.Output[dict[str, str]]
    security_group_id: pulumi.Output[str]
    role_arn: pulumi.Output[str]
    role_name: pulumi.Output[str]
    instance_id: pulumi.Output[str]
    host: str

    def __init__(
        self, name: str, args: SlurmControllerArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        check(args.cluster_name, args.scheduler, args.slurm_version)
        node_type = cluster_rules.instance_type(args.node_instance_type)
        if args.max_nodes < 1:
            raise invalid("max_nodes", args.max_nodes, "a cluster has at least one node", "use 1 or more")
        controller_type = args.scheduler.controller_instance_type
        assert controller_type is not None  # SchedulerSpec requires it with type slurm
        cluster_rules.check_tags(args.tags)
        check_accounting(args.accounting_database, args.vpc_cidr)
        super().__init__(TOKEN, name, None, opts)
        self._name = name
        self._child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        self.host = controller_host(args.cluster_name)

        def cluster(address: str) -> SlurmCluster:
            return slurm_cluster(
                args.cluster_name,
                node_instance_type=node_type,
                capacity_type=args.capacity_type,
                max_nodes=args.max_nodes,
                scheduler=args.scheduler,
                slurm_version=args.slurm_version,
                address=address,
            )

        planned = pulumi.Output.from_input(args.subnet_cidr).apply(controller_address)
        self.files = planned.apply(lambda address: _as_text(render_files(cluster(address))))
        self.registration = planned.apply(lambda address: node_registration(cluster(address)))

        self.security_group_id = self._security_groups(args, tags)
        secret = self._key(tags)
        self.key_secret_arn = secret.arn
        role = node_iam.node_role(self, name, bucket_arn=None, bucket_kms_key_arn=None, tags=tags)
        node_iam.allow_read_secret(self, name, role.role, secret.arn)
        topology_sync = None
        if uses_topology(node_type, args.slurm_version):
            node_iam.allow_describe_topology(self, name, role.role)
            topology_sync = (node_type.name, args.ami.region)
        monitoring = args.monitoring
        if monitoring is not None:
            node_iam.allow_discover_nodes(self, name, role.role)
        self.role_arn = role.role.arn
        self.role_name = role.role.name
        database = None
        if args.accounting_database == "aurora":
            assert args.vpc_cidr is not None  # check_accounting refused None above
            database = AccountingDatabase(
                f"{name}-accounting",
                AccountingDatabaseArgs(
                    cluster_name=args.cluster_name,
                    vpc_id=args.vpc_id,
                    vpc_cidr=args.vpc_cidr,
                    subnet_id=args.subnet_id,
                    availability_zone=args.availability_zone,
                    controller_security_group_id=self.security_group_id,
                    tags=tags,
                ),
                opts=self._child,
            )
            # The controller reads the RDS-managed secret at boot: that one ARN and no other.
            database.grant(role.role.name)
        self.database_endpoint: pulumi.Output[str | None] = (
            database.endpoint if database else pulumi.Output.from_input(None)
        )

        volume = aws.ebs.Volume(
            f"{name}-state",
            availability_zone=args.availability_zone,
            size=STATE_VOLUME_GIB,
            type=VOLUME_TYPE,
            encrypted=True,
            tags={**tags, "Name": f"{name}-state"},
            opts=self._child,
        )
        # Rendered once the made workspace's and topic's ARNs are known (components.controller_monitoring).
        self.monitoring_files = pulumi.Output.all(args.made_workspace_arn, args.made_topic_arn).apply(
            lambda arns: dict(monitoring.files_for(arns[0], arns[1])) if monitoring is not None else {}
        )
        connection = (
            pulumi.Output.all(database.endpoint, database.port, database.secret_arn)
            if database
            else pulumi.Output.from_input([None, None, None])
        )
        user_data = pulumi.Output.all(
            planned, volume.id, secret.arn, self.files, self.monitoring_files, connection
        ).apply(
            lambda values: _encoded(
                render_controller(
                    ControllerParams(
                        cluster=args.cluster_name,
                        host=self.host,
                        address=str(values[0]),
                        state_volume_id=str(values[1]),
                        state_dir=SlurmSite.state_dir,
                        key_secret_arn=str(values[2]),
                        files=values[3],
                        topology_sync=topology_sync,
                        alert_receiver=monitoring is not None and monitoring.config.drain_on_alert,
                        monitoring_files=values[4],
                        accounting=_accounting(args.accounting_database, values[3], values[5]),
                    )
                )
            )
        )
        instance = aws.ec2.Instance(
            f"{name}-instance",
            ami=args.ami.ami_id,
            instance_type=controller_type,
            subnet_id=args.subnet_id,
            private_ip=planned,
            vpc_security_group_ids=[self.security_group_id],
            associate_public_ip_address=False,
            iam_instance_profile=role.instance_profile.name,
            metadata_options=aws.ec2.InstanceMetadataOptionsArgs(
                http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=1
            ),
            root_block_device=aws.ec2.InstanceRootBlockDeviceArgs(
                volume_type=VOLUME_TYPE,
                volume_size=ROOT_VOLUME_GIB,
                encrypted=True,
                delete_on_termination=True,
            ),
            user_data_base64=user_data,
            # The files are read at boot: a changed config is a new controller on the same state volume.
            user_data_replace_on_change=True,
            tags={**tags, "Name": self.host, ROLE_TAG: CONTROLLER_ROLE},
            volume_tags={**tags, "Name": f"{name}-root"},
            # The replacement takes the same fixed address, so the old instance must go first.
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),
        )
        aws.ec2.VolumeAttachment(
            f"{name}-state-attachment",
            device_name=STATE_DEVICE,
            volume_id=volume.id,
            instance_id=instance.id,
            # slurmctld is stopped with the instance before its state is detached.
            stop_instance_before_detaching=True,
            opts=self._child,
        )
        self.instance_id = instance.id
        # The instance's own address: nodes that read it wait for the controller to exist.
        self.address = instance.private_ip
        self.conf_server = self.address.apply(lambda address: f"{address}:{SlurmSite.slurmctld_port}")
        self.register_outputs(
            {
                "address": self.address,
                "host": self.host,
                "instance_id": self.instance_id,
                "key_secret_arn": self.key_secret_arn,
                "security_group_id": self.security_group_id,
                "role_arn": self.role_arn,
            }
        )

    def _security_groups(self, args: SlurmControllerArgs, tags: dict[str, str]) -> pulumi.Output[str]:
        """The controller's group and Slurm's rules on it, on the nodes' group and on the endpoints' group."""
        group = aws.ec2.SecurityGroup(
            f"{self._name}-sg",
            vpc_id=args.vpc_id,
            description="gpuforge Slurm controller: slurmctld from the GPU nodes only",
            tags={**tags, "Name": f"{self._name}-sg"},
            opts=self._child,
        )
        slurmctld = (SlurmSite.slurmctld_port, SlurmSite.slurmctld_port)
        slurmd = (SlurmSite.slurmd_port, SlurmSite.slurmd_port)
        nodes = args.nodes_security_group_id
        self._ingress("in-slurmctld", group.id, nodes, slurmctld, "slurmctld from the GPU nodes")
        self._ingress("nodes-in-slurmd", nodes, group.id, slurmd, "slurmd from the Slurm controller")
        self._ingress("nodes-in-slurmd-self", nodes, nodes, slurmd, "slurmd from the other GPU nodes")
        srun = SlurmSite.srun_port_range
        self._ingress("nodes-in-srun", nodes, group.id, srun, "srun's ports from the Slurm controller")
        self._ingress("nodes-in-srun-self", nodes, nodes, srun, "srun's ports from the other GPU nodes")
        if args.monitoring is not None:
            # Prometheus on the controller scrapes the exporters on the GPU nodes, and nothing else new.
            from gpuforge.monitoring.prometheus import DCGM_EXPORTER_PORT, NODE_EXPORTER_PORT

            for exporter, port in (
                ("dcgm-exporter", DCGM_EXPORTER_PORT),
                ("node-exporter", NODE_EXPORTER_PORT),
            ):
                self._ingress(
                    f"nodes-in-{exporter}",
                    nodes,
                    group.id,
                    (port, port),
                    f"{exporter} from the controller's Prometheus",
                )
        if args.endpoints_security_group_id is not None:
            self._ingress(
                "endpoints-in-https",
                args.endpoints_security_group_id,
                group.id,
                (HTTPS, HTTPS),
                "HTTPS from the Slurm controller",
            )
        aws.vpc.SecurityGroupEgressRule(
            f"{self._name}-out-any",
            security_group_id=group.id,
            cidr_ipv4="0.0.0.0/0",
            ip_protocol=ALL_TRAFFIC,
            description="slurmd and srun on the GPU nodes; AWS APIs (endpoints, NAT, S3)",
            opts=self._child,
        )
        return group.id

    def _ingress(
        self,
        suffix: str,
        target: pulumi.Input[str],
        source: pulumi.Input[str],
        ports: tuple[int, int],
        description: str,
    ) -> None:
        """TCP `ports` (first, last) into group `target` from group `source`: never from an address range."""
        aws.vpc.SecurityGroupIngressRule(
            f"{self._name}-{suffix}",
            security_group_id=target,
            referenced_security_group_id=source,
            ip_protocol="tcp",
            from_port=ports[0],
            to_port=ports[1],
            description=description,
            opts=self._child,
        )

    def _key(self, tags: dict[str, str]) -> aws.secretsmanager.Secret:
        """The shared Slurm key: random bytes, made once, in one secret (base64, as SecretString)."""
        key = random.RandomBytes(f"{self._name}-key", length=KEY_BYTES, opts=self._child)
        secret = aws.secretsmanager.Secret(
            f"{self._name}-key-secret",
            description="gpuforge: the Slurm key (auth/slurm) of this cluster, base64; read at boot by its nodes",
            tags=tags,
            opts=self._child,
        )
        aws.secretsmanager.SecretVersion(
            f"{self._name}-key-version", secret_id=secret.id, secret_string=key.base64, opts=self._child
        )
        return secret


def _accounting(database: str, files: Mapping[str, str], connection: list[Any]) -> Accounting | None:
    """How the controller's slurmdbd reaches its database: MariaDB on the state volume, or Aurora's endpoint and
    the ARN of the secret RDS keeps its password in (`connection`: endpoint, port, secret ARN).

    None where the rendered files hold no slurmdbd.conf (a renderer without accounting), which Aurora refuses.
    """
    if SLURMDBD_CONF_NAME not in files:
        if database == "aurora":
            raise invalid(
                "scheduler.accounting.database",
                database,
                f"the rendered Slurm files hold no {SLURMDBD_CONF_NAME}, so slurmdbd cannot use the database",
                "render the scheduler with accounting (gpuforge.scheduler.render)",
            )
        return None
    if database == "local":
        return Accounting("local")
    endpoint, port, secret_arn = connection
    # The engine hands numbers over as floats.
    return Accounting("aurora", host=str(endpoint), port=int(port), secret_arn=str(secret_arn))


def _encoded(script: str) -> str:
    """The script gzip-compressed and base64-encoded; an error past EC2's 16 KB limit.

    The monitoring files make the controller's script larger than EC2 takes raw; cloud-init
    uncompresses gzip user data and runs the script as if it had not been compressed
    (https://cloudinit.readthedocs.io/en/latest/explanation/format.html, "Gzip compressed content").
    mtime=0 keeps the bytes the same for the same script, so an unchanged config never replaces the instance.
    """
    compressed = gzip.compress(script.encode("utf-8"), mtime=0)
    if len(compressed) > USER_DATA_LIMIT_BYTES:
        raise invalid(
            "user_data",
            f"{len(compressed)} bytes gzip-compressed",
            f"EC2 takes at most {USER_DATA_LIMIT_BYTES} bytes of user data",
            "render fewer or smaller files into the controller's user data",
            source=USER_DATA_SOURCE,
        )
    return base64.b64encode(compressed).decode("ascii")


def _as_text(files: Mapping[ConfigFile, str]) -> dict[str, str]:
    """The rendered files keyed by plain file name, as stack outputs and user data take them."""
    return {str(name): text for name, text in files.items()}
