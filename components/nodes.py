"""GpuNodeGroup: the launch template and the nodes (an Auto Scaling group or fixed instances).

Launch template:
- one network interface per EFA-capable card, in AWS's current multi-card layout
  (`efa_layout`), each in the cluster subnet and the EFA security group. A launch
  template with network interfaces can't also set top-level security group ids
  ("Launch templates where network interfaces are defined do not support setting
  security groups using the SecurityGroupIds parameter", AWS PCS User Guide,
  https://docs.aws.amazon.com/pcs/latest/userguide/working-with_networking_efa_create-lt.html),
  so the group is set on every interface and nowhere else. No public IP;
- IMDSv2 only (http_tokens required), hop limit 1 unless containers need 2;
- an encrypted gp3 root volume; the instance profile from `node_iam`;
- the AMI id of the image-catalog entry (`AmiPin`), never a lookup;
- capacity: nothing for on-demand, a targeted reservation for an ODCR, market
  type `capacity-block` plus the reservation for a Capacity Block
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-launch.html);
- user data from `user_data`; on a Slurm cluster it joins the node to the controller
  (`SlurmMembership`) once the node check passed, and the nodes' role may read the
  Slurm key's one secret.

Nodes: an Auto Scaling group in the one subnet and the placement group (the
default: it replaces unhealthy nodes), sized over time by `capacity.scale_plan`,
or `node_count` fixed instances from the same template.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import pulumi
import pulumi_aws as aws

from gpuforge import hardware
from gpuforge.components import cluster_rules, node_iam
from gpuforge.components.capacity import ScalePlan, scale_plan
from gpuforge.components.efa_layout import InterfaceSlot, interface_layout
from gpuforge.components.input_errors import invalid
from gpuforge.components.specs import AmiPin, CapacitySpec, NodeMode
from gpuforge.components.user_data import FsxMount, SlurmJoin, UserDataParams, render
from gpuforge.images.disk import ROOT_VOLUME_GIB as IMAGE_ROOT_VOLUME_GIB
from gpuforge.images.disk import SNAPSHOT_SOURCE as IMAGE_SNAPSHOT_SOURCE

TOKEN = "gpuforge:nodes:GpuNodeGroup"

# IMDSv2: tokens required. Hop limit 1 keeps the token on the host; containers
# behind a bridge need 2.
# Source: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/configuring-IMDS-existing-instances.html
HTTP_TOKENS = "required"
# Nodes run the health check, then the job; give them time before EC2 health counts.
HEALTH_CHECK_GRACE_SECONDS = 900
ROOT_VOLUME_TYPE = "gp3"
# Resource types the launch template tags at launch.
TAGGED_AT_LAUNCH = ("instance", "volume", "network-interface")


@dataclass(frozen=True)
class FileSystemMount:
    """Where the nodes mount FSx for Lustre from: the file system's DNS name and mount name."""

    dns_name: pulumi.Input[str]
    mount_name: pulumi.Input[str]


@dataclass(frozen=True)
class SlurmMembership:
    """How the nodes join Slurm (`SlurmController`'s outputs).

    `conf_server` is the controller's `address:port`, `registration` the node's
    `slurmd -Z --conf` string, `key_secret_arn` the secret that holds the Slurm key.
    """

    conf_server: pulumi.Input[str]
    registration: pulumi.Input[str]
    key_secret_arn: pulumi.Input[str]


@dataclass(frozen=True)
class GpuNodeGroupArgs:
    instance_type: str
    node_count: int
    ami: AmiPin
    subnet_id: pulumi.Input[str]
    security_group_id: pulumi.Input[str]
    capacity: CapacitySpec = field(default_factory=CapacitySpec)
    node_mode: NodeMode = "asg"
    placement_group: pulumi.Input[str | None] | None = None
    file_system: FileSystemMount | None = None
    bucket_arn: pulumi.Input[str] | None = None
    bucket_kms_key_arn: str | None = None
    imds_hop_limit: int = 1
    root_volume_gib: int = 200
    wait_for_capacity_timeout: str | None = None
    slurm: SlurmMembership | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    # The time the Capacity Block schedule is planned against; None means now.
    now: datetime | None = None


class GpuNodeGroup(pulumi.ComponentResource):
    """The launch template and the nodes built from it."""

    launch_template_id: pulumi.Output[str]
    role_arn: pulumi.Output[str]
    autoscaling_group_name: pulumi.Output[str] | None
    instance_ids: pulumi.Output[list[str]] | None
    node_group: pulumi.Output[str | list[str]]
    interfaces: tuple[InterfaceSlot, ...]
    plan: ScalePlan

    def __init__(self, name: str, args: GpuNodeGroupArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        instance = cluster_rules.instance_type(args.instance_type)
        _check_args(args)
        self.interfaces = interface_layout(instance)
        self.plan = scale_plan(args.capacity, args.node_count, args.now)
        super().__init__(TOKEN, name, None, opts)
        self._name = name
        self._child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)

        role = node_iam.node_role(
            self, name, bucket_arn=args.bucket_arn, bucket_kms_key_arn=args.bucket_kms_key_arn, tags=tags
        )
        if args.slurm is not None:
            node_iam.allow_read_secret(self, name, role.role, args.slurm.key_secret_arn)
        template = self._launch_template(args, instance, role.instance_profile, tags)
        self.launch_template_id = template.id
        self.role_arn = role.role.arn
        version = template.latest_version.apply(str)

        if args.node_mode == "asg":
            group = self._auto_scaling_group(args, template.id, version, tags)
            node_iam.allow_set_instance_health(self, name, role.role, group.arn)
            self.autoscaling_group_name = group.name
            self.instance_ids = None
            self.node_group = group.name
        else:
            ids = self._instances(args, template.id, version, tags)
            self.autoscaling_group_name = None
            self.instance_ids = ids
            self.node_group = ids

        self.register_outputs(
            {
                "launch_template_id": self.launch_template_id,
                "role_arn": self.role_arn,
                "node_group": self.node_group,
                "efa_interfaces": sum(1 for slot in self.interfaces if slot.carries_efa),
            }
        )

    def _launch_template(
        self,
        args: GpuNodeGroupArgs,
        instance: hardware.InstanceType,
        profile: aws.iam.InstanceProfile,
        tags: dict[str, str],
    ) -> aws.ec2.LaunchTemplate:
        market, reservation = _capacity_settings(args.capacity)
        return aws.ec2.LaunchTemplate(
            f"{self._name}-lt",
            image_id=args.ami.ami_id,
            instance_type=args.instance_type,
            iam_instance_profile=aws.ec2.LaunchTemplateIamInstanceProfileArgs(arn=profile.arn),
            network_interfaces=[
                interface(slot, [args.security_group_id], args.subnet_id) for slot in self.interfaces
            ],
            metadata_options=metadata_options(args.imds_hop_limit),
            block_device_mappings=[root_volume(args.ami, args.root_volume_gib)],
            instance_market_options=market,
            capacity_reservation_specification=reservation,
            user_data=_user_data(self._name, instance, args),
            update_default_version=True,
            tag_specifications=[
                aws.ec2.LaunchTemplateTagSpecificationArgs(
                    resource_type=kind, tags={**tags, "Name": f"{self._name}-node"}
                )
                for kind in TAGGED_AT_LAUNCH
            ],
            tags=tags,
            opts=self._child,
        )

    def _auto_scaling_group(
        self,
        args: GpuNodeGroupArgs,
        template_id: pulumi.Output[str],
        version: pulumi.Output[str],
        tags: dict[str, str],
    ) -> aws.autoscaling.Group:
        timeout = args.wait_for_capacity_timeout or cluster_rules.wait_for_capacity_timeout(args.capacity)
        scheduled = bool(self.plan.schedule)
        group = aws.autoscaling.Group(
            f"{self._name}-asg",
            vpc_zone_identifiers=[args.subnet_id],
            placement_group=args.placement_group,
            launch_template=aws.autoscaling.GroupLaunchTemplateArgs(id=template_id, version=version),
            min_size=self.plan.initial_size,
            max_size=self.plan.max_size,
            desired_capacity=self.plan.initial_size,
            health_check_type="EC2",
            health_check_grace_period=HEALTH_CHECK_GRACE_SECONDS,
            wait_for_capacity_timeout=timeout,
            tags=[
                aws.autoscaling.GroupTagArgs(key=key, value=value, propagate_at_launch=True)
                for key, value in sorted(tags.items())
            ],
            # On a Capacity Block the scheduled actions own the size; a later `pulumi up`
            # must not undo them.
            opts=pulumi.ResourceOptions(
                parent=self, ignore_changes=["min_size", "desired_capacity"] if scheduled else None
            ),
        )
        for action in self.plan.schedule:
            aws.autoscaling.Schedule(
                f"{self._name}-{action.label}",
                autoscaling_group_name=group.name,
                scheduled_action_name=f"{self._name}-{action.label}",
                start_time=action.start_time,
                min_size=action.size,
                max_size=self.plan.max_size,
                desired_capacity=action.size,
                opts=self._child,
            )
        return group

    def _instances(
        self,
        args: GpuNodeGroupArgs,
        template_id: pulumi.Output[str],
        version: pulumi.Output[str],
        tags: dict[str, str],
    ) -> pulumi.Output[list[str]]:
        nodes = [
            aws.ec2.Instance(
                f"{self._name}-node-{index}",
                launch_template=aws.ec2.InstanceLaunchTemplateArgs(id=template_id, version=version),
                placement_group=args.placement_group,
                tags={**tags, "Name": f"{self._name}-node-{index}"},
                opts=self._child,
            )
            for index in range(args.node_count)
        ]
        return pulumi.Output.all(*(node.id for node in nodes)).apply(list)


def _check_args(args: GpuNodeGroupArgs) -> None:
    if args.node_count < 1:
        raise invalid("node_count", args.node_count, "a node group has at least one node", "use 1 or more")
    cluster_rules.check_node_mode(args.node_mode, args.capacity)
    if args.imds_hop_limit not in (1, 2):
        raise invalid(
            "imds_hop_limit",
            args.imds_hop_limit,
            "1 keeps IMDS tokens on the host; 2 is for containers that call IMDS",
            "use 1, or 2 for containers",
            source="https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/configuring-IMDS-existing-instances.html",
        )
    if not IMAGE_ROOT_VOLUME_GIB <= args.root_volume_gib <= 16384:
        raise invalid(
            "root_volume_gib",
            args.root_volume_gib,
            f"a gp3 volume is at most 16384 GiB, and a root volume cannot be smaller than the AMI's root "
            f"snapshot: gpuforge images are built with {IMAGE_ROOT_VOLUME_GIB} GiB (images/disk.py), so a "
            "smaller root fails to launch",
            f"use {IMAGE_ROOT_VOLUME_GIB} to 16384",
            source=IMAGE_SNAPSHOT_SOURCE,
        )
    if args.wait_for_capacity_timeout is not None:
        cluster_rules.check_wait_timeout(args.wait_for_capacity_timeout)
    cluster_rules.check_tags(args.tags)


def interface(
    slot: InterfaceSlot,
    security_groups: Sequence[pulumi.Input[str]],
    subnet_id: pulumi.Input[str] | None = None,
) -> aws.ec2.LaunchTemplateNetworkInterfaceArgs:
    """One launch-template interface of `slot` (an EKS managed node group's template names no subnet)."""
    primary = slot.network_card_index == 0 and slot.device_index == 0
    return aws.ec2.LaunchTemplateNetworkInterfaceArgs(
        network_card_index=slot.network_card_index,
        device_index=slot.device_index,
        interface_type=slot.interface_type,
        subnet_id=subnet_id,
        security_groups=list(security_groups),
        delete_on_termination="true",
        # Only the primary interface could carry a public IP; EFA-only interfaces take no IP.
        associate_public_ip_address="false" if primary else None,
    )


def metadata_options(hop_limit: int) -> aws.ec2.LaunchTemplateMetadataOptionsArgs:
    """IMDS on, session tokens required (HTTP_TOKENS), `hop_limit` hops for the tokens' responses."""
    return aws.ec2.LaunchTemplateMetadataOptionsArgs(
        http_endpoint="enabled", http_tokens=HTTP_TOKENS, http_put_response_hop_limit=hop_limit
    )


def root_volume(ami: AmiPin, size_gib: int) -> aws.ec2.LaunchTemplateBlockDeviceMappingArgs:
    """The encrypted root volume on the AMI's root device, deleted with the instance."""
    return aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
        device_name=ami.root_device_name,
        ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
            volume_size=size_gib, volume_type=ROOT_VOLUME_TYPE, encrypted="true", delete_on_termination="true"
        ),
    )


def _capacity_settings(
    capacity: CapacitySpec,
) -> tuple[
    aws.ec2.LaunchTemplateInstanceMarketOptionsArgs | None,
    aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs | None,
]:
    if capacity.type == "on-demand":
        return None, None
    target = aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
        capacity_reservation_target=aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
            capacity_reservation_id=capacity.reservation_id
        )
    )
    if capacity.type == "reservation":
        return None, target
    return aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(market_type="capacity-block"), target


def _user_data(name: str, instance: hardware.InstanceType, args: GpuNodeGroupArgs) -> pulumi.Output[str]:
    """The script, base64-encoded, once the file system's and the controller's values are known."""
    file_system, slurm = args.file_system, args.slurm
    values: dict[str, pulumi.Input[str]] = {}
    if file_system is not None:
        values |= {"dns_name": file_system.dns_name, "mount_name": file_system.mount_name}
    if slurm is not None:
        values |= {
            "conf_server": slurm.conf_server,
            "registration": slurm.registration,
            "key_secret_arn": slurm.key_secret_arn,
        }

    def encoded(resolved: dict[str, str]) -> str:
        script = render(
            UserDataParams(
                cluster=name,
                instance_type=instance.name,
                scratch_disks=instance.instance_store_disks,
                fsx=FsxMount(resolved["dns_name"], resolved["mount_name"]) if file_system else None,
                report_to_asg=args.node_mode == "asg",
                slurm=(
                    SlurmJoin(resolved["conf_server"], resolved["registration"], resolved["key_secret_arn"])
                    if slurm
                    else None
                ),
            )
        )
        return base64.b64encode(script.encode("utf-8")).decode("ascii")

    if not values:
        return pulumi.Output.from_input(encoded({}))
    return pulumi.Output.all(**values).apply(
        lambda resolved: encoded({key: str(value) for key, value in resolved.items()})
    )
