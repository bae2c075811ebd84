"""EksCluster: the EKS control plane of a `gpuforge:scheduler.type: kubernetes` cluster.

What it makes, and why each setting:
- the control plane at the stack's exact Kubernetes version, reachable only inside the VPC
  (endpointPrivateAccess true, endpointPublicAccess false): the nodes are private, and so is the API;
- authentication mode API: access entries, never the aws-auth ConfigMap, with no implicit admin for
  whoever ran `pulumi up` (bootstrapClusterCreatorAdminPermissions false). The admin is the role the
  stack names (`adminRoleArn`), given AmazonEKSClusterAdminPolicy on the whole cluster; each node
  role gets an EC2_LINUX entry (`grant_nodes`), and each node group's node-agent role a STANDARD entry
  in the Kubernetes group the rendered ClusterRoleBinding names (`grant_node_agent`);
- Kubernetes secrets encrypted with a KMS key made here, rotation on;
- every control-plane log type sent to CloudWatch Logs;
- a second private subnet in another zone: EKS needs subnets in two Availability Zones for the
  control plane's interfaces (EKS user guide, "View Amazon EKS networking requirements for VPC and
  subnets"), and ClusterNetwork makes one. In a VPC gpuforge makes it is carved from the VPC's top quarter,
  the block the Aurora accounting database uses on Slurm clusters, which never have EKS; in an existing VPC
  it is `network.second_subnet_id`, checked against EC2 (same VPC, another zone) before the control plane;
- a small CPU managed node group (`systemNodeType`, EKS's own AMI) for the system add-ons;
- the cluster's own add-ons (VPC CNI, kube-proxy, CoreDNS) as EKS managed add-ons at the versions
  `gpuforge/data/eks_addons.yaml` pins for the Kubernetes minor, and no self-managed copy of them
  (bootstrapSelfManagedAddons false): `components.eks_addons` says why and in which order.

The GPU nodes are `components.eks_nodes.EksGpuNodeGroup`, built on gpuforge's launch template.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from gpuforge.components import eks_addons
from gpuforge.components.input_errors import invalid
from gpuforge.components.network import SecondZoneNeed, check_second_subnet, second_subnet
from gpuforge.components.node_iam import assumable_role
from gpuforge.components.specs import NetworkSpec, SchedulerSpec
from gpuforge.kubernetes import node_agent

TOKEN = "gpuforge:cluster:EksCluster"
# Every control-plane log type EKS has (EKS user guide, "Send control plane logs to CloudWatch Logs"):
# https://docs.aws.amazon.com/eks/latest/userguide/control-plane-logs.html
LOG_TYPES = ("api", "audit", "authenticator", "controllerManager", "scheduler")
AUTHENTICATION_MODE = "API"
ACCESS_ENTRIES_DOC = "https://docs.aws.amazon.com/eks/latest/userguide/access-entries.html"
# A STANDARD access entry with kubernetesGroups: Kubernetes RBAC authorizes the principal through the
# bindings whose subject is `kind: Group` with that name; EKS does not check that the binding exists
# (EKS user guide, "Create an access entry using Kubernetes groups with the AWS CLI"; CreateAccessEntry,
# kubernetesGroups).
GROUP_ACCESS_ENTRY_DOC = "https://docs.aws.amazon.com/eks/latest/userguide/create-k8s-group-access-entry.html"
ADMIN_POLICY = "AmazonEKSClusterAdminPolicy"
# The block Kubernetes Services take addresses from; it must not overlap the VPC (EKS API reference,
# KubernetesNetworkConfigRequest.serviceIpv4Cidr). Set here so the nodes' join configuration can name it.
SERVICE_CIDR = "172.20.0.0/16"
SUBNETS_DOC = "https://docs.aws.amazon.com/eks/latest/userguide/network-reqs.html"
SECOND_ZONE = SecondZoneNeed("EKS", "use a region with two or more zones", SUBNETS_DOC)
SYSTEM_NODES = 2
# AWS managed policies of an EKS cluster role and of an EKS node role (EKS user guide, "Amazon EKS cluster
# IAM role" and "Amazon EKS node IAM role").
CLUSTER_POLICIES = ("AmazonEKSClusterPolicy",)
NODE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryPullOnly", "AmazonEKS_CNI_Policy")


def check(scheduler: SchedulerSpec, network: NetworkSpec) -> None:
    """What refuses an EKS cluster before anything exists: an existing VPC without its second subnet, or a
    Service block inside the VPC gpuforge makes (an existing VPC's block is known only to EC2)."""
    check_second_subnet(network, SECOND_ZONE)
    if not network.existing and ipaddress.IPv4Network(network.vpc_cidr).overlaps(
        ipaddress.IPv4Network(SERVICE_CIDR)
    ):
        raise invalid(
            "network.vpc_cidr",
            network.vpc_cidr,
            f"the VPC overlaps the Kubernetes Service block {SERVICE_CIDR}, which EKS refuses",
            "use a VPC block outside 172.20.0.0/16, such as 10.0.0.0/16",
            source="https://docs.aws.amazon.com/eks/latest/APIReference/API_KubernetesNetworkConfigRequest.html",
        )
    if scheduler.type != "kubernetes":
        raise invalid(
            "scheduler.type", scheduler.type, "EksCluster is the kubernetes scheduler", "set kubernetes"
        )
    # The add-ons are pinned per Kubernetes minor: a minor without pins is refused before anything is made.
    eks_addons.for_version(str(scheduler.kubernetes_version))


@dataclass(frozen=True)
class EksClusterArgs:
    cluster_name: str
    scheduler: SchedulerSpec
    vpc_id: pulumi.Input[str]
    network: NetworkSpec
    subnet_id: pulumi.Input[str]
    availability_zone: str
    nodes_security_group_id: pulumi.Input[str]
    tags: Mapping[str, str] = field(default_factory=dict)


def service_role(
    owner: pulumi.Resource, name: str, service: str, policies: tuple[str, ...], tags: Mapping[str, str]
) -> aws.iam.Role:
    """A role `service` (e.g. eks, ec2) may assume, with AWS managed `policies` attached."""
    child = pulumi.ResourceOptions(parent=owner)
    role, partition = assumable_role(owner, name, service, f"gpuforge {name}", tags)
    for policy in policies:
        aws.iam.RolePolicyAttachment(
            f"{name}-{policy}",
            role=role.name,
            policy_arn=pulumi.Output.format("arn:{0}:iam::aws:policy/{1}", partition.partition, policy),
            opts=child,
        )
    return role


class EksCluster(pulumi.ComponentResource):
    """The control plane, its key, roles, second subnet, admin access entry and system node group."""

    cluster_name: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    certificate_authority: pulumi.Output[str]
    cluster_security_group_id: pulumi.Output[str]
    kms_key_arn: pulumi.Output[str]
    subnet_ids: list[pulumi.Output[str]]

    def __init__(self, name: str, args: EksClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        check(args.scheduler, args.network)
        scheduler = args.scheduler
        assert scheduler.kubernetes_version and scheduler.system_node_type and scheduler.admin_role_arn
        super().__init__(TOKEN, name, None, opts)
        self._name = name
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)

        second = second_subnet(
            self,
            name,
            network=args.network,
            vpc_id=args.vpc_id,
            subnet_id=args.subnet_id,
            cluster_zone=args.availability_zone,
            need=SECOND_ZONE,
            tags=tags,
        )
        key = aws.kms.Key(
            f"{name}-secrets",
            description=f"gpuforge {args.cluster_name}: EKS secrets envelope encryption",
            enable_key_rotation=True,
            tags=tags,
            opts=child,
        )
        role = service_role(self, f"{name}-control-plane", "eks", CLUSTER_POLICIES, tags)
        self.subnet_ids = [pulumi.Output.from_input(args.subnet_id), second]
        cluster = aws.eks.Cluster(
            name,
            name=args.cluster_name,
            version=scheduler.kubernetes_version,
            role_arn=role.arn,
            vpc_config=aws.eks.ClusterVpcConfigArgs(
                subnet_ids=self.subnet_ids,
                endpoint_private_access=True,
                endpoint_public_access=False,
                security_group_ids=[args.nodes_security_group_id],
            ),
            access_config=aws.eks.ClusterAccessConfigArgs(
                authentication_mode=AUTHENTICATION_MODE,
                bootstrap_cluster_creator_admin_permissions=False,
            ),
            encryption_config=aws.eks.ClusterEncryptionConfigArgs(
                provider=aws.eks.ClusterEncryptionConfigProviderArgs(key_arn=key.arn),
                resources=["secrets"],
            ),
            enabled_cluster_log_types=list(LOG_TYPES),
            # VPC CNI, kube-proxy and CoreDNS come as pinned EKS add-ons below, not as EKS's unpinned
            # self-managed copies (EKS API reference, CreateCluster, bootstrapSelfManagedAddons; the
            # pulumi-aws v7 eks.Cluster argument bootstrap_self_managed_addons, which replaces the cluster).
            bootstrap_self_managed_addons=False,
            kubernetes_network_config=aws.eks.ClusterKubernetesNetworkConfigArgs(
                service_ipv4_cidr=SERVICE_CIDR
            ),
            tags=tags,
            opts=child,
        )
        self._cluster = cluster
        # Before any node: every node group's access entry waits for these (grant_nodes).
        self.addons = eks_addons.make(
            self, name, cluster_name=cluster.name, kubernetes_version=scheduler.kubernetes_version, tags=tags
        )
        self._network_addons: list[pulumi.Resource] = list(self.addons.values())
        self.cluster_name = cluster.name
        self.endpoint = cluster.endpoint
        self.certificate_authority = cluster.certificate_authority.apply(lambda ca: str(ca.data))
        self.cluster_security_group_id = cluster.vpc_config.apply(
            lambda vpc: str(vpc.cluster_security_group_id)
        )
        self.kms_key_arn = key.arn

        admin = aws.eks.AccessEntry(
            f"{name}-admin",
            cluster_name=cluster.name,
            principal_arn=scheduler.admin_role_arn,
            type="STANDARD",
            tags=tags,
            opts=child,
        )
        partition = aws.get_partition_output(opts=pulumi.InvokeOutputOptions(parent=self)).partition
        aws.eks.AccessPolicyAssociation(
            f"{name}-admin-policy",
            cluster_name=cluster.name,
            principal_arn=admin.principal_arn,
            policy_arn=partition.apply(lambda p: f"arn:{p}:eks::aws:cluster-access-policy/{ADMIN_POLICY}"),
            access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(type="cluster"),
            opts=child,
        )

        system_role = service_role(self, f"{name}-system-nodes", "ec2", NODE_POLICIES, tags)
        system_entry = self.grant_nodes(f"{name}-system-nodes", system_role.arn)
        self.system_node_group = aws.eks.NodeGroup(
            f"{name}-system",
            cluster_name=cluster.name,
            node_role_arn=system_role.arn,
            subnet_ids=[args.subnet_id],
            instance_types=[scheduler.system_node_type],
            capacity_type="ON_DEMAND",
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                min_size=SYSTEM_NODES, max_size=SYSTEM_NODES, desired_size=SYSTEM_NODES
            ),
            labels={"gpuforge.dev/role": "system"},
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[system_entry]),
        )
        self.addons.update(
            eks_addons.make_after_nodes(
                self,
                name,
                cluster_name=cluster.name,
                kubernetes_version=scheduler.kubernetes_version,
                nodes=self.system_node_group,
                tags=tags,
            )
        )
        self.register_outputs(
            {
                "cluster_name": self.cluster_name,
                "endpoint": self.endpoint,
                "kms_key_arn": self.kms_key_arn,
                "system_node_group": self.system_node_group.node_group_name,
            }
        )

    def grant_nodes(self, name: str, role_arn: pulumi.Input[str]) -> aws.eks.AccessEntry:
        """An EC2_LINUX access entry for a node role (authentication mode API has no aws-auth map to list it in).

        Made before the node group (its dependency): EKS creates one itself for a managed group's role, but a
        group whose launch template names a custom AMI needs it made by code (terraform-aws-eks#2994). It waits
        for the VPC CNI and kube-proxy add-ons, so that no node group is made before a node could turn Ready.
        """
        return aws.eks.AccessEntry(
            f"{name}-access",
            cluster_name=self._cluster.name,
            principal_arn=role_arn,
            type="EC2_LINUX",
            opts=pulumi.ResourceOptions(parent=self, depends_on=self._network_addons),
        )

    def grant_node_agent(self, name: str, role_arn: pulumi.Input[str]) -> aws.eks.AccessEntry:
        """A STANDARD access entry putting the node agent's role in node_agent.GROUP (GROUP_ACCESS_ENTRY_DOC).

        No access policy is associated: what the group may do is the ClusterRole `gpuforge scheduler render`
        writes from gpuforge.node.kubernetes.RBAC_RULES, and nothing more.
        """
        return aws.eks.AccessEntry(
            f"{name}-access",
            cluster_name=self._cluster.name,
            principal_arn=role_arn,
            type="STANDARD",
            kubernetes_groups=[node_agent.GROUP],
            opts=pulumi.ResourceOptions(parent=self),
        )
