"""ClusterNetwork: one private subnet in one Availability Zone, and the EFA security group.

EFA's OS-bypass traffic does not route between subnets, so every node and the
file system share one subnet (EFA limitations, Amazon EC2 User Guide,
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html).

The EFA security group allows all traffic to and from itself, in and out, as EFA
requires (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html,
"Prepare an EFA-enabled security group"). It takes no ingress from anywhere else.
Its egress to 0.0.0.0/0 lets the nodes reach AWS APIs through the endpoints or
the NAT gateway and the file system through its own group.

Private nodes still need AWS APIs: SSM (ssm, ssmmessages, ec2messages), Auto
Scaling (the node agent marks an unhealthy node with SetInstanceHealth) and S3.
`api_access` picks interface endpoints (default), a NAT gateway, or nothing.
`extra_endpoint_services` adds interface endpoints a cluster needs beyond these
(a Slurm cluster: `secretsmanager`, where its nodes fetch the Slurm key).

`subnet_cidr` is the private subnet's block (read from EC2 for an existing subnet),
from which the Slurm controller takes its fixed address; `endpoint_security_group_id`
is the interface endpoints' group, so another component can let its own instances in.

The EKS control plane needs private subnets in two zones and gets the second one from `second_subnet`:
made in a VPC gpuforge makes, `network.second_subnet_id` in an existing VPC, checked against EC2 before
anything uses it (`check_second_subnet` refuses an existing VPC that names none). The Aurora accounting
database still calls `second_private_subnet` and is refused in an existing VPC (components.slurm_controller).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from gpuforge.components import cluster_rules
from gpuforge.components.cluster_rules import private_subnet_block
from gpuforge.components.input_errors import invalid
from gpuforge.components.specs import NetworkSpec

TOKEN = "gpuforge:network:ClusterNetwork"

# Interface endpoints a private node needs: Session Manager's three
# (https://docs.aws.amazon.com/systems-manager/latest/userguide/setup-create-vpc.html)
# and EC2 Auto Scaling's (https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-vpc-endpoints.html).
INTERFACE_ENDPOINT_SERVICES = ("ssm", "ssmmessages", "ec2messages", "autoscaling")
ALL_TRAFFIC = "-1"
HTTPS = 443


def second_subnet_block(vpc_cidr: str) -> ipaddress.IPv4Network:
    """The second private subnet of a new VPC: the last /24 of the block's top quarter.

    ClusterNetwork takes the first half for the cluster's subnet and, with a NAT gateway, the first
    /24 of the second half (the third quarter); the top quarter is free in every VPC NetworkSpec
    accepts (/16 to /22, where the quarter is a /24 itself). The Aurora accounting database (Slurm
    only) and the EKS control plane (Kubernetes only) both take it; no cluster has both.
    """
    quarter = list(ipaddress.IPv4Network(vpc_cidr).subnets(prefixlen_diff=2))[-1]
    return list(quarter.subnets(new_prefix=max(24, quarter.prefixlen)))[-1]


@dataclass(frozen=True)
class SecondZoneNeed:
    """Who needs a second zone, for the refusal: `who` needs two zones, `fix` is the way out, `source` says so."""

    who: str
    fix: str
    source: str


def second_zone(zones: list[str], cluster_zone: str, need: SecondZoneNeed) -> str:
    """The first available zone of the region other than the cluster's."""
    others = [zone for zone in zones if zone != cluster_zone]
    if not others:
        raise invalid(
            "availability_zone",
            cluster_zone,
            f"{need.who} needs subnets in two Availability Zones, and the region has no other available zone",
            need.fix,
            source=need.source,
        )
    return others[0]


def second_private_subnet(
    owner: pulumi.Resource,
    name: str,
    *,
    vpc_id: pulumi.Input[str],
    vpc_cidr: str,
    cluster_zone: str,
    need: SecondZoneNeed,
    tags: Mapping[str, str],
) -> aws.ec2.Subnet:
    """A private subnet (no public addresses) in `second_subnet_block`, in another zone than the cluster's."""
    zones = aws.get_availability_zones_output(
        state="available", opts=pulumi.InvokeOutputOptions(parent=owner)
    ).names
    return aws.ec2.Subnet(
        f"{name}-subnet",
        vpc_id=vpc_id,
        cidr_block=str(second_subnet_block(vpc_cidr)),
        availability_zone=zones.apply(lambda names: second_zone(list(names), cluster_zone, need)),
        map_public_ip_on_launch=False,
        tags={**tags, "Name": f"{name}-subnet"},
        opts=pulumi.ResourceOptions(parent=owner),
    )


def check_second_subnet(network: NetworkSpec, need: SecondZoneNeed) -> None:
    """Refuse, before anything exists, an existing VPC that names no second subnet for `need.who`."""
    if network.existing and network.second_subnet_id is None:
        raise invalid(
            "network.second_subnet_id",
            None,
            f"{need.who} needs subnets in two Availability Zones, and in an existing VPC "
            f"({network.vpc_id}) gpuforge makes no subnet",
            f"give network.second_subnet_id, a private subnet of {network.vpc_id} in another zone than "
            f"network.subnet_id {network.subnet_id}",
            source=need.source,
        )


def checked_second_subnet(
    subnet_id: str, second_subnet_id: str, vpc_id: str, *, first: tuple[str, str], second: tuple[str, str]
) -> str:
    """`second_subnet_id` once EC2's (VPC, zone) of both subnets show it in `vpc_id` and in another zone."""
    second_vpc, second_zone_name = second
    if second_vpc != vpc_id:
        raise invalid(
            "network.second_subnet_id",
            second_subnet_id,
            f"the subnet is in VPC {second_vpc}, not the cluster's VPC {vpc_id} (network.vpc_id)",
            f"give a private subnet of {vpc_id} in another zone than network.subnet_id {subnet_id}",
        )
    if second_zone_name == first[1]:
        raise invalid(
            "network.second_subnet_id",
            second_subnet_id,
            f"the subnet is in the same Availability Zone ({first[1]}) as network.subnet_id {subnet_id}, and "
            "the second subnet is there for a second zone",
            f"give a private subnet of {vpc_id} in another zone than {first[1]}",
        )
    return second_subnet_id


def second_subnet(
    owner: pulumi.Resource,
    name: str,
    *,
    network: NetworkSpec,
    vpc_id: pulumi.Input[str],
    subnet_id: pulumi.Input[str],
    cluster_zone: str,
    need: SecondZoneNeed,
    tags: Mapping[str, str],
) -> pulumi.Output[str]:
    """The id of the private subnet in a second zone: made in a VPC gpuforge makes, the given one in an existing VPC.

    A given subnet is looked up in EC2 with the cluster's subnet (`getSubnet`, during `pulumi preview` already) and
    refused unless it is in the cluster's VPC and in another zone; what consumes the id waits for that check.
    `check_second_subnet` must have passed.
    """
    if not network.existing:
        return second_private_subnet(
            owner,
            name,
            vpc_id=vpc_id,
            vpc_cidr=network.vpc_cidr,
            cluster_zone=cluster_zone,
            need=need,
            tags=tags,
        ).id
    assert (
        network.vpc_id and network.subnet_id and network.second_subnet_id
    )  # NetworkSpec, check_second_subnet
    given_vpc, first_id, second_id = network.vpc_id, network.subnet_id, network.second_subnet_id
    invoke = pulumi.InvokeOutputOptions(parent=owner)
    first = aws.ec2.get_subnet_output(id=first_id, opts=invoke)
    second = aws.ec2.get_subnet_output(id=second_id, opts=invoke)
    return pulumi.Output.all(
        first.vpc_id, first.availability_zone, second.vpc_id, second.availability_zone
    ).apply(
        lambda facts: checked_second_subnet(
            first_id, second_id, given_vpc, first=(facts[0], facts[1]), second=(facts[2], facts[3])
        )
    )


@dataclass(frozen=True)
class ClusterNetworkArgs:
    availability_zone: str
    network: NetworkSpec = field(default_factory=NetworkSpec)
    tags: Mapping[str, str] = field(default_factory=dict)
    extra_endpoint_services: tuple[str, ...] = ()


class ClusterNetwork(pulumi.ComponentResource):
    """The subnet, the EFA security group and the nodes' path to AWS APIs."""

    vpc_id: pulumi.Output[str]
    subnet_id: pulumi.Output[str]
    subnet_cidr: pulumi.Output[str]
    security_group_id: pulumi.Output[str]
    endpoint_security_group_id: pulumi.Output[str] | None
    availability_zone: str

    def __init__(
        self, name: str, args: ClusterNetworkArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        cluster_rules.region_of_zone(args.availability_zone)
        super().__init__(TOKEN, name, None, opts)
        self._name = name
        self._tags = dict(args.tags)
        self._child = pulumi.ResourceOptions(parent=self)
        self.availability_zone = args.availability_zone
        spec = args.network

        route_table_ids: list[pulumi.Input[str]]
        if spec.existing:
            assert spec.vpc_id is not None and spec.subnet_id is not None  # NetworkSpec checks both
            self.vpc_id = pulumi.Output.from_input(spec.vpc_id)
            self.subnet_id = pulumi.Output.from_input(spec.subnet_id)
            self.subnet_cidr = aws.ec2.get_subnet_output(
                id=spec.subnet_id, opts=pulumi.InvokeOutputOptions(parent=self)
            ).cidr_block
            route_table_ids = list(spec.route_table_ids)
        else:
            route_table_ids = [self._create_vpc(spec)]

        self.security_group_id = self._efa_security_group()
        self.endpoint_security_group_id = None
        if spec.api_access == "endpoints":
            self.endpoint_security_group_id = self._interface_endpoints(
                (*INTERFACE_ENDPOINT_SERVICES, *args.extra_endpoint_services)
            )
        if spec.api_access == "nat":
            self._nat_gateway(spec, route_table_ids[0])
        if spec.api_access != "existing":
            self._s3_gateway_endpoint(route_table_ids)

        self.register_outputs(
            {
                "vpc_id": self.vpc_id,
                "subnet_id": self.subnet_id,
                "subnet_cidr": self.subnet_cidr,
                "security_group_id": self.security_group_id,
                "availability_zone": self.availability_zone,
            }
        )

    def _tags_named(self, suffix: str) -> dict[str, str]:
        return {**self._tags, "Name": f"{self._name}-{suffix}"}

    def _create_vpc(self, spec: NetworkSpec) -> pulumi.Output[str]:
        """A VPC with one private subnet (the first half of the block); returns its route table id."""
        private_block = private_subnet_block(spec.vpc_cidr)
        vpc = aws.ec2.Vpc(
            f"{self._name}-vpc",
            cidr_block=spec.vpc_cidr,
            # Interface endpoints with private DNS need both.
            enable_dns_support=True,
            enable_dns_hostnames=True,
            tags=self._tags_named("vpc"),
            opts=self._child,
        )
        subnet = aws.ec2.Subnet(
            f"{self._name}-private",
            vpc_id=vpc.id,
            cidr_block=str(private_block),
            availability_zone=self.availability_zone,
            map_public_ip_on_launch=False,
            tags=self._tags_named("private"),
            opts=self._child,
        )
        route_table = aws.ec2.RouteTable(
            f"{self._name}-private-rt", vpc_id=vpc.id, tags=self._tags_named("private"), opts=self._child
        )
        aws.ec2.RouteTableAssociation(
            f"{self._name}-private-rta", subnet_id=subnet.id, route_table_id=route_table.id, opts=self._child
        )
        self.vpc_id = vpc.id
        self.subnet_id = subnet.id
        self.subnet_cidr = pulumi.Output.from_input(str(private_block))
        return route_table.id

    def _efa_security_group(self) -> pulumi.Output[str]:
        group = aws.ec2.SecurityGroup(
            f"{self._name}-efa",
            vpc_id=self.vpc_id,
            description="gpuforge EFA: all traffic to and from this group; no other ingress",
            tags=self._tags_named("efa"),
            opts=self._child,
        )
        aws.vpc.SecurityGroupIngressRule(
            f"{self._name}-efa-in-self",
            security_group_id=group.id,
            referenced_security_group_id=group.id,
            ip_protocol=ALL_TRAFFIC,
            description="EFA: all traffic from this group",
            opts=self._child,
        )
        aws.vpc.SecurityGroupEgressRule(
            f"{self._name}-efa-out-self",
            security_group_id=group.id,
            referenced_security_group_id=group.id,
            ip_protocol=ALL_TRAFFIC,
            description="EFA: all traffic to this group",
            opts=self._child,
        )
        aws.vpc.SecurityGroupEgressRule(
            f"{self._name}-efa-out-any",
            security_group_id=group.id,
            cidr_ipv4="0.0.0.0/0",
            ip_protocol=ALL_TRAFFIC,
            description="AWS APIs (endpoints, NAT, S3) and FSx for Lustre",
            opts=self._child,
        )
        return group.id

    def _service_name(self, service: str) -> pulumi.Output[str]:
        """com.amazonaws.<region>.<service>, with the partition's prefix (cn.com.amazonaws in China)."""
        invoke = pulumi.InvokeOutputOptions(parent=self)
        region = aws.get_region_output(opts=invoke).region
        prefix = aws.get_partition_output(opts=invoke).reverse_dns_prefix
        return pulumi.Output.concat(prefix, ".", region, ".", service)

    def _interface_endpoints(self, services: tuple[str, ...]) -> pulumi.Output[str]:
        group = aws.ec2.SecurityGroup(
            f"{self._name}-endpoints",
            vpc_id=self.vpc_id,
            description="gpuforge interface endpoints: HTTPS from the nodes",
            tags=self._tags_named("endpoints"),
            opts=self._child,
        )
        aws.vpc.SecurityGroupIngressRule(
            f"{self._name}-endpoints-in-https",
            security_group_id=group.id,
            referenced_security_group_id=self.security_group_id,
            ip_protocol="tcp",
            from_port=HTTPS,
            to_port=HTTPS,
            description="HTTPS from the nodes",
            opts=self._child,
        )
        for service in dict.fromkeys(services):
            aws.ec2.VpcEndpoint(
                f"{self._name}-{service}",
                vpc_id=self.vpc_id,
                service_name=self._service_name(service),
                vpc_endpoint_type="Interface",
                subnet_ids=[self.subnet_id],
                security_group_ids=[group.id],
                private_dns_enabled=True,
                tags=self._tags_named(service),
                opts=self._child,
            )
        return group.id

    def _s3_gateway_endpoint(self, route_table_ids: list[pulumi.Input[str]]) -> None:
        aws.ec2.VpcEndpoint(
            f"{self._name}-s3",
            vpc_id=self.vpc_id,
            service_name=self._service_name("s3"),
            vpc_endpoint_type="Gateway",
            route_table_ids=route_table_ids,
            tags=self._tags_named("s3"),
            opts=self._child,
        )

    def _nat_gateway(self, spec: NetworkSpec, private_route_table_id: pulumi.Input[str]) -> None:
        """A public /24 from the second half of the block, an internet gateway and a NAT gateway."""
        block = ipaddress.IPv4Network(spec.vpc_cidr)
        upper_half = list(block.subnets(prefixlen_diff=1))[1]
        public_block = next(upper_half.subnets(new_prefix=24))
        gateway = aws.ec2.InternetGateway(
            f"{self._name}-igw", vpc_id=self.vpc_id, tags=self._tags_named("igw"), opts=self._child
        )
        public = aws.ec2.Subnet(
            f"{self._name}-public",
            vpc_id=self.vpc_id,
            cidr_block=str(public_block),
            availability_zone=self.availability_zone,
            map_public_ip_on_launch=False,
            tags=self._tags_named("public"),
            opts=self._child,
        )
        public_routes = aws.ec2.RouteTable(
            f"{self._name}-public-rt", vpc_id=self.vpc_id, tags=self._tags_named("public"), opts=self._child
        )
        aws.ec2.Route(
            f"{self._name}-public-default",
            route_table_id=public_routes.id,
            destination_cidr_block="0.0.0.0/0",
            gateway_id=gateway.id,
            opts=self._child,
        )
        aws.ec2.RouteTableAssociation(
            f"{self._name}-public-rta", subnet_id=public.id, route_table_id=public_routes.id, opts=self._child
        )
        address = aws.ec2.Eip(
            f"{self._name}-nat-ip", domain="vpc", tags=self._tags_named("nat"), opts=self._child
        )
        nat = aws.ec2.NatGateway(
            f"{self._name}-nat",
            subnet_id=public.id,
            allocation_id=address.id,
            connectivity_type="public",
            tags=self._tags_named("nat"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[gateway]),
        )
        aws.ec2.Route(
            f"{self._name}-private-default",
            route_table_id=private_route_table_id,
            destination_cidr_block="0.0.0.0/0",
            nat_gateway_id=nat.id,
            opts=self._child,
        )
