"""EksGpuNodeGroup: gpuforge's GPU nodes as an EKS managed node group.

The launch template is the one gpuforge builds for Slurm and plain clusters (every EFA interface of
the type, IMDSv2, the encrypted gp3 root, the placement group, On-Demand / ODCR / Capacity Block
targeting, /scratch and /fsx in the user data), changed only where EKS's launch-template rules say
(EKS user guide, "Customize managed nodes with launch templates",
awsdocs/amazon-eks-user-guide latest/ug/nodes/launch-templates.adoc at f6004140):
- no subnet in the network interfaces and no instance profile: the node group carries the subnet and
  the node role;
- the security groups are on the interfaces, and include the cluster security group, because EKS does
  not add it when the template names groups;
- the AMI is the gpuforge catalog's, in the template. With a custom AMI in the template the node group
  gets no `amiType` (CreateNodegroup: "If you specify launchTemplate, and your launch template uses a
  custom AMI, then don't specify amiType, or the node group deployment will fail"; EKS then reports
  CUSTOM), and EKS neither picks another AMI nor merges its own user data: the node joins with the
  configuration gpuforge renders, or not at all.

A Capacity Block group has capacityType CAPACITY_BLOCK and the template's
InstanceMarketOptions.MarketType capacity-block with the reservation id (EKS user guide, "Create a
managed node group with Capacity Blocks for ML", latest/ug/ml/capacity-blocks-mng.adoc at f6004140).
Its desired size is the block's node count from the start: EKS keeps it and the instances launch once
the block is active. EKS adds its own scheduled action, "Amazon EKS Node Group Capacity Scaledown
Before Reservation End", 40 minutes before the block ends (same page); gpuforge adds none.

The node agent drains a failing node as an IAM role of its own (`{name}-agent`): only this group's node role
may assume it (its trust policy names that role, and the node role is allowed sts:AssumeRole on it), and
the cluster's STANDARD access entry for it (EksCluster.grant_node_agent) maps it to the Kubernetes group the
node agent's ClusterRoleBinding names. The kubelet's own identity cannot taint its node (NodeRestriction).

The join configuration is the files components.eks_join renders (kubeconfig, KubeletConfiguration, CA,
kubelet flags with the node labels and GPU taint), written by a cloud-config part of the user data; the
image's kubelet unit starts from them only after the node agent's boot gate has passed, as slurmd does.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pulumi
import pulumi_aws as aws
import yaml

from gpuforge.components import cluster_rules, node_iam
from gpuforge.components.efa_layout import interface_layout
from gpuforge.components.eks_cluster import NODE_POLICIES, SERVICE_CIDR, EksCluster, service_role
from gpuforge.components.eks_join import SECRET_FILES, JoinConfig, render_files
from gpuforge.components.nodes import (
    TAGGED_AT_LAUNCH,
    FileSystemMount,
    _capacity_settings,
    interface,
    metadata_options,
    root_volume,
)
from gpuforge.components.specs import AmiPin, CapacitySpec
from gpuforge.components.user_data import FsxMount, UserDataParams, render
from gpuforge.kubernetes.addons import node_labels, pins

TOKEN = "gpuforge:cluster:EksGpuNodeGroup"
# EKS scales a Capacity Block group to 0 this long before the block ends (capacity-blocks-mng.adoc, above).
EKS_SCALE_DOWN_BEFORE_END = timedelta(minutes=40)
CAPACITY_TYPES = {"on-demand": "ON_DEMAND", "reservation": "ON_DEMAND", "capacity-block": "CAPACITY_BLOCK"}
_BOUNDARY = "==GPUFORGE=="
# The periodic node check of a Kubernetes node (images/files/kubernetes/gpuforge-kubernetes-check.timer): the image
# carries it disabled, so only a node that joins EKS runs it. Started without waiting: cloud-init's final stage is
# itself a boot job.
PERIODIC_CHECK_TIMER = "gpuforge-kubernetes-check.timer"


def gpu_group_name(cluster: str) -> str:
    """The node-group label value of the cluster's GPU nodes; Kueue's ResourceFlavor selects it
    (gpuforge scheduler render names the group the same way)."""
    return f"{cluster}-gpu"


def user_data(params: UserDataParams, join: JoinConfig) -> str:
    """MIME multi-part user data (the format EKS asks of launch-template user data): the join files, then gpuforge's script."""
    cloud_config = {
        "write_files": [
            {
                "path": path,
                "permissions": "0600" if path in SECRET_FILES else "0644",
                "owner": "root:root",
                "content": text,
            }
            for path, text in render_files(join).items()
        ],
        "runcmd": [["systemctl", "enable", "--now", "--no-block", PERIODIC_CHECK_TIMER]],
    }
    parts = [
        ("text/cloud-config", "#cloud-config\n" + yaml.safe_dump(cloud_config, sort_keys=False)),
        ("text/x-shellscript", render(params)),
    ]
    lines = ["MIME-Version: 1.0", f'Content-Type: multipart/mixed; boundary="{_BOUNDARY}"', ""]
    for kind, body in parts:
        lines += [f"--{_BOUNDARY}", f'Content-Type: {kind}; charset="us-ascii"', "", body.rstrip("\n"), ""]
    lines.append(f"--{_BOUNDARY}--")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class EksGpuNodeGroupArgs:
    cluster_name: str
    instance_type: str
    node_count: int
    ami: AmiPin
    subnet_id: pulumi.Input[str]
    security_group_id: pulumi.Input[str]
    capacity: CapacitySpec = field(default_factory=CapacitySpec)
    placement_group: pulumi.Input[str | None] | None = None
    file_system: FileSystemMount | None = None
    imds_hop_limit: int = 1
    root_volume_gib: int = 200
    tags: Mapping[str, str] = field(default_factory=dict)


class EksGpuNodeGroup(pulumi.ComponentResource):
    """The GPU launch template, the node role with its EC2_LINUX access entry, and the managed node group."""

    launch_template_id: pulumi.Output[str]
    node_group: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        args: EksGpuNodeGroupArgs,
        cluster: EksCluster,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        instance = cluster_rules.instance_type(args.instance_type)
        cluster_rules.check_node_mode("asg", args.capacity)
        interfaces = interface_layout(instance)
        super().__init__(TOKEN, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        group_label = gpu_group_name(args.cluster_name)
        taint = pins().gpu_taint

        role = service_role(self, name, "ec2", NODE_POLICIES, tags)
        entry = cluster.grant_nodes(name, role.arn)
        agent = _agent_role(self, name, role, tags)
        cluster.grant_node_agent(f"{name}-agent", agent.arn)
        market, reservation = _capacity_settings(args.capacity)
        join_values: dict[str, Any] = {
            "endpoint": cluster.endpoint,
            "ca": cluster.certificate_authority,
            "cluster_sg": cluster.cluster_security_group_id,
            "agent_role": agent.arn,
        }
        if args.file_system is not None:
            join_values |= {"dns_name": args.file_system.dns_name, "mount_name": args.file_system.mount_name}

        def encoded(values: dict[str, Any]) -> str:
            params = UserDataParams(
                cluster=name,
                instance_type=instance.name,
                scratch_disks=instance.instance_store_disks,
                fsx=FsxMount(values["dns_name"], values["mount_name"]) if args.file_system else None,
                report_to_asg=True,
            )
            join = JoinConfig(
                cluster=args.cluster_name,
                endpoint=values["endpoint"],
                certificate_authority=values["ca"],
                region=args.ami.region,
                service_cidr=SERVICE_CIDR,
                labels=node_labels(instance, group_label),
                taints=(taint.registration,),
                agent_role_arn=values["agent_role"],
            )
            return base64.b64encode(user_data(params, join).encode("utf-8")).decode("ascii")

        groups = [args.security_group_id, cluster.cluster_security_group_id]
        template = aws.ec2.LaunchTemplate(
            f"{name}-lt",
            image_id=args.ami.ami_id,
            instance_type=args.instance_type,
            network_interfaces=[interface(slot, groups) for slot in interfaces],
            metadata_options=metadata_options(args.imds_hop_limit),
            block_device_mappings=[root_volume(args.ami, args.root_volume_gib)],
            # The cluster placement group gpuforge made or the ODCR's; None on a Capacity Block.
            placement=aws.ec2.LaunchTemplatePlacementArgs(group_name=args.placement_group),
            instance_market_options=market,
            capacity_reservation_specification=reservation,
            user_data=pulumi.Output.all(**join_values).apply(encoded),
            update_default_version=True,
            tag_specifications=[
                aws.ec2.LaunchTemplateTagSpecificationArgs(
                    resource_type=kind, tags={**tags, "Name": f"{name}-node"}
                )
                for kind in TAGGED_AT_LAUNCH
            ],
            tags=tags,
            opts=child,
        )
        block = args.capacity.type == "capacity-block"
        group = aws.eks.NodeGroup(
            f"{name}-group",
            cluster_name=cluster.cluster_name,
            node_role_arn=role.arn,
            subnet_ids=[args.subnet_id],
            capacity_type=CAPACITY_TYPES[args.capacity.type],
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(
                id=template.id, version=template.latest_version.apply(str)
            ),
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                min_size=0 if block else args.node_count,
                max_size=args.node_count,
                desired_size=args.node_count,
            ),
            tags=tags,
            # EKS's scale-down action owns the size at a block's end; a later `pulumi up` must not undo it.
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[entry],
                ignore_changes=["scalingConfig.desiredSize"] if block else None,
            ),
        )
        # The node agent reports a failed node to its Auto Scaling group (user data --report-asg), the one
        # drain-and-replace path; EKS names that group, so the grant follows the node group's output.
        node_iam.allow_set_instance_health(self, name, role, _group_arn(self, group))
        self.launch_template_id = template.id
        self.node_group = group.node_group_name
        self.register_outputs({"launch_template_id": self.launch_template_id, "node_group": self.node_group})


def _agent_role(
    owner: pulumi.Resource, name: str, node_role: aws.iam.Role, tags: Mapping[str, str]
) -> aws.iam.Role:
    """The node agent's IAM role `{name}-agent-role`: assumable by `node_role` only, with no AWS permissions of its own (it is only
    an identity for the cluster), and the node role's permission to assume it."""
    invoke = pulumi.InvokeOutputOptions(parent=owner)
    child = pulumi.ResourceOptions(parent=owner)

    def statement(**fields: Any) -> list[aws.iam.GetPolicyDocumentStatementArgs]:
        return [aws.iam.GetPolicyDocumentStatementArgs(effect="Allow", actions=["sts:AssumeRole"], **fields)]

    trust = aws.iam.get_policy_document_output(
        statements=node_role.arn.apply(
            lambda arn: statement(
                principals=[aws.iam.GetPolicyDocumentStatementPrincipalArgs(type="AWS", identifiers=[arn])]
            )
        ),
        opts=invoke,
    )
    agent = aws.iam.Role(
        f"{name}-agent-role",
        assume_role_policy=trust.json,
        description=f"gpuforge {name}: the node agent's Kubernetes identity",
        tags=dict(tags),
        opts=child,
    )
    may_assume = aws.iam.get_policy_document_output(
        statements=agent.arn.apply(lambda arn: statement(resources=[arn])), opts=invoke
    )
    aws.iam.RolePolicy(f"{name}-assume-agent", role=node_role.name, policy=may_assume.json, opts=child)
    return agent


def _group_arn(owner: pulumi.Resource, group: aws.eks.NodeGroup) -> pulumi.Output[str]:
    """The ARN of the Auto Scaling group EKS made for `group`; its id part (a UUID) is not reported, so `*`.

    Format: arn:<partition>:autoscaling:<region>:<account>:autoScalingGroup:<uuid>:autoScalingGroupName/<name>
    (https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2autoscaling.html).
    """
    invoke = pulumi.InvokeOutputOptions(parent=owner)
    partition = aws.get_partition_output(opts=invoke).partition
    region = aws.get_region_output(opts=invoke).region
    account = aws.get_caller_identity_output(opts=invoke).account_id
    name = group.resources.apply(_autoscaling_group_name)
    return pulumi.Output.format(
        "arn:{0}:autoscaling:{1}:{2}:autoScalingGroup:*:autoScalingGroupName/{3}",
        partition,
        region,
        account,
        name,
    )


def _autoscaling_group_name(resources: Sequence[aws.eks.outputs.NodeGroupResource]) -> str:
    groups = resources[0].autoscaling_groups if resources else None
    if not groups:
        raise ValueError("EKS reported no Auto Scaling group for the node group")
    return str(groups[0].name)


def capacity_block_summary(capacity: CapacitySpec) -> str | None:
    """The plan's line for a Capacity Block group: when EKS scales it to 0 (None for other capacity)."""
    if capacity.type != "capacity-block" or capacity.end is None:
        return None
    at = capacity.end - EKS_SCALE_DOWN_BEFORE_END
    return (
        f"EKS scales the GPU node group to 0 at {at.isoformat()} (40 minutes before the Capacity Block ends at "
        f"{capacity.end.isoformat()}: 'Amazon EKS Node Group Capacity Scaledown Before Reservation End'; EC2 "
        "terminates the block's instances 30 minutes before its end)"
    )
