"""GpuCluster: the whole training cluster from one GpuClusterSpec.

network -> placement -> data bucket -> FSx for Lustre -> Slurm controller -> node
group, each a child named `<name>-<part>`. Every check runs before the first child is
registered, so a refused spec leaves nothing behind.

With `spec.scheduler.type == "slurm"` the cluster gets a `SlurmController`
(`<name>-slurm`) and its nodes join it. Its config is rendered for `slurm_version`,
the Slurm the AMI carries (the image matrix's `slurm.version`; the AMI pin does not
hold it, so the stack passes it). The network then also gets a Secrets Manager
interface endpoint (with `api_access: endpoints`), where the nodes fetch the key.
`slurm_config` holds the rendered files by name ({} without Slurm) and the summary's
`scheduler` says what runs: type, Slurm version, controller type, host and address,
partitions.

Where the Lustre spec has no S3 link of its own and a DRA is possible, the file
system is linked to the cluster's bucket (s3://<bucket>/) by a DRA; the summary's
`lustre.s3_link` says which link was made.

Tags: the spec's tags and `gpuforge:cluster` on everything; the nodes also carry
the matrix pin (`gpuforge:matrix`, `gpuforge:matrix-version`, `gpuforge:matrix-digest`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import pulumi

from gpuforge.components import accounting_db, cluster_rules, lustre_rules, slurm_controller
from gpuforge.components.bucket import DataBucket, DataBucketArgs
from gpuforge.components.capacity import ScalePlan, scale_plan
from gpuforge.components.controller_monitoring import ControllerMonitoring
from gpuforge.components.efa_layout import interface_layout
from gpuforge.components.eks_cluster import SYSTEM_NODES, EksCluster, EksClusterArgs
from gpuforge.components.eks_cluster import check as check_eks
from gpuforge.components.eks_network import check_image_pulls
from gpuforge.components.eks_nodes import EksGpuNodeGroup, EksGpuNodeGroupArgs, capacity_block_summary
from gpuforge.components.input_errors import invalid
from gpuforge.components.lustre import LustreStorage, LustreStorageArgs
from gpuforge.components.monitoring_resources import MonitoringResources, MonitoringResourcesArgs
from gpuforge.components.network import ClusterNetwork, ClusterNetworkArgs
from gpuforge.components.nodes import FileSystemMount, GpuNodeGroup, GpuNodeGroupArgs, SlurmMembership
from gpuforge.components.placement import Placement, PlacementArgs
from gpuforge.components.slurm_controller import SlurmController, SlurmControllerArgs
from gpuforge.components.specs import GpuClusterSpec, team_quota_advice
from gpuforge.components.summary import cluster_summary
from gpuforge.components.user_data import SLURMDBD_CONF_NAME
from gpuforge.errors import InputError

TOKEN = "gpuforge:cluster:GpuCluster"
CLUSTER_TAG = "gpuforge:cluster"
# Where the nodes fetch the Slurm key when the VPC reaches AWS APIs through interface endpoints.
SECRETS_ENDPOINT = "secretsmanager"
# What private EKS nodes reach through interface endpoints (EKS user guide, "Deploy private clusters with
# limited internet access": ec2, ecr.api, ecr.dkr, sts, logs; S3 is the gateway endpoint ClusterNetwork makes).
# https://docs.aws.amazon.com/eks/latest/userguide/private-clusters.html
# Used only while every add-on image is in the region's private ECR (components.eks_network.check_image_pulls).
EKS_ENDPOINTS = ("ec2", "ecr.api", "ecr.dkr", "sts", "logs")


class GpuCluster(pulumi.ComponentResource):
    placement_group: pulumi.Output[str | None]
    subnet_id: pulumi.Output[str]
    security_group_id: pulumi.Output[str]
    launch_template_id: pulumi.Output[str]
    node_group: pulumi.Output[str | list[str]]
    file_system_dns_name: pulumi.Output[str | None]
    file_system_mount_name: pulumi.Output[str | None]
    bucket: pulumi.Output[str | None]
    slurm_config: pulumi.Output[dict[str, str]]
    summary: pulumi.Output[dict[str, Any]]

    def __init__(
        self,
        name: str,
        spec: GpuClusterSpec,
        opts: pulumi.ResourceOptions | None = None,
        *,
        now: datetime | None = None,
        slurm_version: str | None = None,
        monitoring: ControllerMonitoring | None = None,
    ) -> None:
        if not isinstance(spec, GpuClusterSpec):
            raise InputError(
                f"GpuCluster {name!r}: spec is a {type(spec).__name__}, not a GpuClusterSpec. "
                "Fix: build it with GpuClusterSpec.from_config(config) or GpuClusterSpec(...)."
            )
        # Everything that can refuse the spec runs here, before any child exists.
        instance = cluster_rules.instance_type(spec.instance_type)
        interfaces = interface_layout(instance)
        plan = scale_plan(spec.capacity, spec.node_count, now)
        link_bucket = _links_cluster_bucket(spec)
        if spec.lustre is not None:
            lustre_rules.check_cluster_link(spec.lustre, has_bucket=spec.bucket is not None)
            lustre_rules.check(
                spec.lustre, data_repository_association=link_bucket or spec.lustre.s3_path is not None
            )
        slurm = spec.scheduler.type == "slurm"
        kubernetes = spec.scheduler.type == "kubernetes"
        if kubernetes:
            check_eks(spec.scheduler, spec.network)
            check_image_pulls(spec.network, spec.ami.region)
        elif spec.network.second_subnet_id is not None:
            raise invalid(
                "network.second_subnet_id",
                spec.network.second_subnet_id,
                f"only the EKS control plane uses a second subnet, and the scheduler type is {spec.scheduler.type!r}",
                "remove it, or set scheduler type kubernetes",
            )
        if slurm:
            slurm_controller.check(spec.name, spec.scheduler, slurm_version)
            slurm_controller.check_accounting(
                _accounting_database(spec), None if spec.network.existing else spec.network.vpc_cidr
            )
        elif monitoring is not None:
            raise InputError(
                f"GpuCluster {name!r}: monitoring runs Prometheus and Alertmanager on the Slurm controller, and "
                f"the spec's scheduler type is {spec.scheduler.type!r}. Fix: use a Slurm scheduler, or pass "
                "monitoring=None (gpuforge:monitoring.enabled: false)."
            )

        super().__init__(TOKEN, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = {**spec.tags, CLUSTER_TAG: spec.name}

        network = ClusterNetwork(
            f"{name}-network",
            ClusterNetworkArgs(
                spec.availability_zone,
                spec.network,
                tags,
                extra_endpoint_services=(SECRETS_ENDPOINT,) if slurm else EKS_ENDPOINTS if kubernetes else (),
            ),
            opts=child,
        )
        placement = Placement(
            f"{name}-placement",
            PlacementArgs(
                spec.instance_type, spec.capacity, spec.placement_strategy, spec.partition_count, tags
            ),
            opts=child,
        )
        bucket = (
            DataBucket(f"{name}-data", DataBucketArgs(spec.bucket, tags), opts=child) if spec.bucket else None
        )

        lustre = None
        if spec.lustre is not None:
            bucket_path = (
                bucket.bucket_name.apply(lambda value: f"s3://{value}/") if link_bucket and bucket else None
            )
            lustre = LustreStorage(
                f"{name}-lustre",
                LustreStorageArgs(
                    spec=spec.lustre,
                    vpc_id=network.vpc_id,
                    subnet_id=network.subnet_id,
                    client_security_group_id=network.security_group_id,
                    data_repository_path=bucket_path,
                    tags=tags,
                ),
                opts=child,
            )

        controller = None
        resources = None
        if slurm:
            assert slurm_version is not None  # slurm_controller.check refused None above
            if monitoring is not None:
                # The workspace and topic Prometheus and Alertmanager write to, and the email subscriptions:
                # made before the controller, whose files name a made workspace's and topic's ARNs.
                resources = MonitoringResources(
                    f"{name}-monitoring",
                    MonitoringResourcesArgs(
                        spec.name,
                        monitoring.config,
                        kms_key_arn=spec.bucket.kms_key_arn if spec.bucket else None,
                        tags=tags,
                    ),
                    opts=child,
                )
            controller = SlurmController(
                f"{name}-slurm",
                SlurmControllerArgs(
                    cluster_name=spec.name,
                    scheduler=spec.scheduler,
                    slurm_version=slurm_version,
                    node_instance_type=spec.instance_type,
                    capacity_type=spec.capacity.type,
                    max_nodes=plan.max_size,
                    ami=spec.ami,
                    availability_zone=spec.availability_zone,
                    vpc_id=network.vpc_id,
                    subnet_id=network.subnet_id,
                    subnet_cidr=network.subnet_cidr,
                    nodes_security_group_id=network.security_group_id,
                    endpoints_security_group_id=network.endpoint_security_group_id,
                    tags=tags,
                    monitoring=monitoring,
                    made_workspace_arn=_made(monitoring, resources, "workspace"),
                    made_topic_arn=_made(monitoring, resources, "topic"),
                    accounting_database=_accounting_database(spec),
                    # The block of the VPC gpuforge makes; None in an existing VPC (Aurora is refused there).
                    vpc_cidr=None if spec.network.existing else spec.network.vpc_cidr,
                ),
                opts=child,
            )
            if resources is not None:
                # The controller role's grant on exactly those ARNs.
                resources.grant(controller.role_name)

        node_tags = {
            **tags,
            "gpuforge:matrix": spec.ami.matrix_name,
            "gpuforge:matrix-version": spec.ami.matrix_version,
            "gpuforge:matrix-digest": spec.ami.matrix_digest,
        }
        if kubernetes:
            eks = EksCluster(
                f"{name}-eks",
                EksClusterArgs(
                    cluster_name=spec.name,
                    scheduler=spec.scheduler,
                    vpc_id=network.vpc_id,
                    network=spec.network,
                    subnet_id=network.subnet_id,
                    availability_zone=spec.availability_zone,
                    nodes_security_group_id=network.security_group_id,
                    tags=tags,
                ),
                opts=child,
            )
            eks_nodes = EksGpuNodeGroup(
                f"{name}-nodes",
                EksGpuNodeGroupArgs(
                    cluster_name=spec.name,
                    instance_type=spec.instance_type,
                    node_count=spec.node_count,
                    ami=spec.ami,
                    subnet_id=network.subnet_id,
                    security_group_id=network.security_group_id,
                    capacity=spec.capacity,
                    placement_group=placement.group_name,
                    file_system=FileSystemMount(lustre.dns_name, lustre.mount_name) if lustre else None,
                    imds_hop_limit=spec.imds_hop_limit,
                    root_volume_gib=spec.root_volume_gib,
                    tags=node_tags,
                ),
                eks,
                opts=child,
            )
        nodes = (
            None
            if kubernetes
            else GpuNodeGroup(
                f"{name}-nodes",
                GpuNodeGroupArgs(
                    instance_type=spec.instance_type,
                    node_count=spec.node_count,
                    ami=spec.ami,
                    subnet_id=network.subnet_id,
                    security_group_id=network.security_group_id,
                    capacity=spec.capacity,
                    node_mode=spec.node_mode,
                    placement_group=placement.group_name,
                    file_system=FileSystemMount(lustre.dns_name, lustre.mount_name) if lustre else None,
                    bucket_arn=bucket.arn if bucket else None,
                    bucket_kms_key_arn=spec.bucket.kms_key_arn if spec.bucket else None,
                    imds_hop_limit=spec.imds_hop_limit,
                    root_volume_gib=spec.root_volume_gib,
                    wait_for_capacity_timeout=spec.wait_for_capacity_timeout,
                    slurm=(
                        SlurmMembership(
                            controller.conf_server, controller.registration, controller.key_secret_arn
                        )
                        if controller
                        else None
                    ),
                    tags=node_tags,
                    now=now,
                ),
                opts=child,
            )
        )

        none: pulumi.Output[str | None] = pulumi.Output.from_input(None)
        self.placement_group = placement.group_name
        self.subnet_id = network.subnet_id
        self.security_group_id = network.security_group_id
        self.launch_template_id = nodes.launch_template_id if nodes else eks_nodes.launch_template_id
        self.node_group = nodes.node_group if nodes else eks_nodes.node_group
        self.file_system_dns_name = lustre.dns_name if lustre else none
        self.file_system_mount_name = lustre.mount_name if lustre else none
        self.bucket = bucket.bucket_name if bucket else none
        s3_link = lustre.s3_link if lustre else None
        self.slurm_config = controller.files if controller else pulumi.Output.from_input({})
        address = controller.address if controller else none
        workspace = resources.workspace_arn if resources else None
        topic = resources.topic_arn if resources else None
        monitoring_files = controller.monitoring_files if controller else pulumi.Output.from_input({})
        database_endpoint = controller.database_endpoint if controller else none
        self.summary = pulumi.Output.all(
            placement.group_name,
            address,
            monitoring_files,
            workspace,
            topic,
            database_endpoint,
            self.slurm_config,
        ).apply(
            lambda values: {
                **cluster_summary(
                    spec,
                    instance=instance,
                    interfaces=interfaces,
                    # EKS sizes a managed group itself (desired = node count; its own scale-down at a block's end).
                    plan=ScalePlan(spec.node_count, spec.node_count, ()) if kubernetes else plan,
                    placement_group=values[0],
                    placement_source=placement.source,
                    placement_strategy=placement.strategy,
                    lustre_s3_link=s3_link,
                ),
                "scheduler": _scheduler_summary(spec, slurm_version, controller, values[1]),
                "kubernetes": _kubernetes_summary(spec) if kubernetes else None,
                "monitoring": _monitoring_summary(
                    monitoring if controller else None, values[2], workspace=values[3], topic=values[4]
                ),
                "accounting": _accounting_summary(spec, controller, values[5], values[6]),
                # What is allowed but likely not meant: said, never refused (components.specs.team_quota_advice).
                "advice": team_quota_advice(
                    spec.scheduler, node_count=spec.node_count, gpus_per_node=instance.gpu_count
                ),
            }
        )
        self.register_outputs(
            {
                "placement_group": self.placement_group,
                "subnet_id": self.subnet_id,
                "security_group_id": self.security_group_id,
                "launch_template_id": self.launch_template_id,
                "node_group": self.node_group,
                "file_system_dns_name": self.file_system_dns_name,
                "file_system_mount_name": self.file_system_mount_name,
                "bucket": self.bucket,
                "slurm_config": self.slurm_config,
                "summary": self.summary,
            }
        )


def _scheduler_summary(
    spec: GpuClusterSpec, slurm_version: str | None, controller: SlurmController | None, address: str | None
) -> dict[str, Any]:
    """The summary's `scheduler`: the same keys with or without Slurm (None and [] without)."""
    scheduler = spec.scheduler
    return {
        "type": scheduler.type,
        "slurm_version": slurm_version if controller else None,
        "controller_instance_type": scheduler.controller_instance_type,
        "controller_host": controller.host if controller else None,
        "controller_address": address,
        "partitions": [
            {"name": partition.name, "max_time": partition.max_time, "default": partition.default}
            for partition in (scheduler.effective_partitions if controller else ())
        ],
    }


def _kubernetes_summary(spec: GpuClusterSpec) -> dict[str, Any]:
    """The summary's `kubernetes` on an EKS cluster: version, system nodes, and a Capacity Block's EKS scale-down."""
    scheduler = spec.scheduler
    return {
        "version": scheduler.kubernetes_version,
        "endpoint_access": "private",
        "authentication_mode": "API",
        "system_node_type": scheduler.system_node_type,
        "system_nodes": SYSTEM_NODES,
        "admin_role_arn": scheduler.admin_role_arn,
        "gpu_node_group": "managed, custom AMI (launch template)",
        "capacity_block_scale_down": capacity_block_summary(spec.capacity),
    }


def _accounting_database(spec: GpuClusterSpec) -> Literal["local", "aurora"]:
    """The stack's gpuforge:scheduler.accounting.database (local unless the stack says aurora)."""
    return spec.scheduler.accounting.database


def _accounting_summary(
    spec: GpuClusterSpec, controller: SlurmController | None, endpoint: str | None, files: dict[str, str]
) -> dict[str, Any]:
    """The summary's `accounting`: where slurmdbd keeps Slurm's accounting (the same keys without Slurm).

    None where the controller runs no slurmdbd: no Slurm, or rendered files without slurmdbd.conf.
    """
    if controller is None or SLURMDBD_CONF_NAME not in files:
        return {"database": None, "engine_version": None, "endpoint": None, "state_volume_gib": None}
    aurora = _accounting_database(spec) == "aurora"
    return {
        "database": "aurora" if aurora else "local",
        "engine_version": accounting_db.ENGINE_VERSION if aurora else None,
        "endpoint": endpoint if aurora else None,
        "state_volume_gib": slurm_controller.STATE_VOLUME_GIB,
    }


def _monitoring_summary(
    monitoring: ControllerMonitoring | None,
    files: dict[str, str],
    *,
    workspace: str | None,
    topic: str | None,
) -> dict[str, Any]:
    """The summary's `monitoring`: what runs on the controller (the same keys when disabled).

    `workspace` and `topic` are MonitoringResources' (made or given; None: none)."""
    return {
        "enabled": monitoring is not None,
        "files": sorted(files) if monitoring else [],
        "drain_receiver": bool(monitoring and monitoring.config.drain_on_alert),
        "remote_write_workspace": workspace if monitoring else None,
        "sns_topic": topic if monitoring else None,
    }


def _made(
    monitoring: ControllerMonitoring | None, resources: MonitoringResources | None, what: str
) -> pulumi.Output[str] | None:
    """The ARN of the workspace (`remoteWrite: amp`) or topic (`alerts.sns: create`) `resources` made; None else."""
    if monitoring is None or resources is None:
        return None
    if what == "workspace":
        return resources.workspace_arn if monitoring.config.remote_write == "amp" else None
    alerts = monitoring.config.alerts
    return resources.topic_arn if alerts is not None and alerts.sns == "create" else None


def _links_cluster_bucket(spec: GpuClusterSpec) -> bool:
    """Whether the file system gets a DRA to the cluster's bucket (it has no S3 link of its own)."""
    lustre = spec.lustre
    return (
        lustre is not None
        and spec.bucket is not None
        and lustre.s3_path is None
        and lustre.import_path is None
        and lustre_rules.data_repository_association_supported(lustre)
    )
