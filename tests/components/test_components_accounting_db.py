"""AccountingDatabase: Aurora MySQL Serverless v2 for slurmdbd, under the Pulumi SDK's mocks (preview=False)."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pulumi
import pytest
from components_helpers import INGRESS, ROLE_POLICY, SECURITY_GROUP, one, run

from gpuforge.components import accounting_db, network
from gpuforge.components.accounting_db import AccountingDatabase, AccountingDatabaseArgs
from gpuforge.errors import InputError
from gpuforge.pulumi_mocks import GpuforgeMocks

CLUSTER = "aws:rds/cluster:Cluster"
INSTANCE = "aws:rds/clusterInstance:ClusterInstance"
SUBNET_GROUP = "aws:rds/subnetGroup:SubnetGroup"
PARAMETERS = "aws:rds/clusterParameterGroup:ClusterParameterGroup"
SUBNET = "aws:ec2/subnet:Subnet"
CONTROLLER_SG = "sg-0c0c0c0c0c0c0c0c0"
CLUSTER_SUBNET = "subnet-0a0a0a0a0a0a0a0a0"
TAGS = {"gpuforge:cluster": "demo"}


def deploy(vpc_cidr: str = "10.0.0.0/16") -> dict[str, Any]:
    def build() -> pulumi.Output[Any]:
        database = AccountingDatabase(
            "demo-slurm-accounting",
            AccountingDatabaseArgs(
                cluster_name="demo",
                vpc_id="vpc-0b0b0b0b0b0b0b0b0",
                vpc_cidr=vpc_cidr,
                subnet_id=CLUSTER_SUBNET,
                availability_zone="us-east-1a",
                controller_security_group_id=CONTROLLER_SG,
                tags=TAGS,
            ),
        )
        database.grant("demo-slurm-role")
        return pulumi.Output.all(database.endpoint, database.port, database.secret_arn)

    endpoint, port, secret_arn = run(build)
    return {"endpoint": endpoint, "port": port, "secret_arn": secret_arn}


def test_aurora_serverless_v2_with_every_setting_the_issue_asks(mocks: GpuforgeMocks) -> None:
    outputs = deploy()
    cluster = one(mocks, CLUSTER).inputs
    assert cluster["engine"] == "aurora-mysql" and cluster["engineMode"] == "provisioned"
    assert cluster["engineVersion"] == "8.0.mysql_aurora.3.10.5"
    assert cluster["serverlessv2ScalingConfiguration"] == {"minCapacity": 0.5, "maxCapacity": 4.0}
    assert cluster["storageEncrypted"] is True
    assert cluster["deletionProtection"] is True
    assert cluster["backupRetentionPeriod"] >= 7
    assert cluster["skipFinalSnapshot"] is False and cluster["finalSnapshotIdentifier"]
    # RDS keeps the password: gpuforge never sets one, so none is in Pulumi's state.
    assert cluster["manageMasterUserPassword"] is True and "masterPassword" not in cluster
    writer = one(mocks, INSTANCE).inputs
    assert writer["instanceClass"] == "db.serverless" and writer["publiclyAccessible"] is False
    assert writer["clusterIdentifier"] == one(mocks, CLUSTER).id
    assert writer["availabilityZone"] == "us-east-1a"
    # The controller reads the RDS-managed secret and connects to the cluster endpoint.
    assert outputs["secret_arn"] == one(mocks, CLUSTER).outputs["masterUserSecrets"][0]["secretArn"]
    assert outputs["endpoint"].endswith(".us-east-1.rds.amazonaws.com") and outputs["port"] == 3306


def test_tls_is_required_by_the_cluster_parameter_group(mocks: GpuforgeMocks) -> None:
    deploy()
    group = one(mocks, PARAMETERS)
    assert group.inputs["family"] == "aurora-mysql8.0"
    assert group.inputs["parameters"] == [
        {"name": "require_secure_transport", "value": "ON", "applyMethod": "immediate"}
    ]
    assert one(mocks, CLUSTER).inputs["dbClusterParameterGroupName"] == group.outputs["name"]


def test_private_subnets_in_two_zones_and_reachable_from_the_controller_only(mocks: GpuforgeMocks) -> None:
    deploy()
    (subnet,) = mocks.of_type(SUBNET)
    assert subnet.inputs["mapPublicIpOnLaunch"] is False
    assert subnet.inputs["availabilityZone"] == "us-east-1b"  # a second zone, as a DB subnet group needs
    assert subnet.inputs["cidrBlock"] == "10.0.255.0/24"
    group = one(mocks, SUBNET_GROUP)
    assert group.inputs["subnetIds"] == [CLUSTER_SUBNET, subnet.id]
    assert one(mocks, CLUSTER).inputs["dbSubnetGroupName"] == group.outputs["name"]
    (database_sg,) = mocks.of_type(SECURITY_GROUP)
    assert one(mocks, CLUSTER).inputs["vpcSecurityGroupIds"] == [database_sg.id]
    rules = [rule.inputs for rule in mocks.of_type(INGRESS)]
    assert rules == [
        {
            "securityGroupId": database_sg.id,
            "referencedSecurityGroupId": CONTROLLER_SG,
            "ipProtocol": "tcp",
            "fromPort": 3306.0,
            "toPort": 3306.0,
            "description": "slurmdbd on the Slurm controller",
        }
    ]
    assert mocks.of_type("aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule") == []


def test_the_grant_is_getsecretvalue_on_the_one_managed_secret(mocks: GpuforgeMocks) -> None:
    outputs = deploy()
    policy = one(mocks, ROLE_POLICY)
    assert policy.inputs["role"] == "demo-slurm-role"
    assert json.loads(policy.inputs["policy"])["Statement"] == [
        {
            "Sid": "AccountingDatabaseSecret",
            "Effect": "Allow",
            "Action": "secretsmanager:GetSecretValue",
            "Resource": outputs["secret_arn"],
        }
    ]


@pytest.mark.parametrize("vpc_cidr", ["10.0.0.0/16", "172.16.0.0/20", "10.1.4.0/22"])
def test_the_database_subnet_never_overlaps_the_cluster_s_or_the_nat_subnet(vpc_cidr: str) -> None:
    from gpuforge.components.cluster_rules import private_subnet_block

    block = ipaddress.IPv4Network(vpc_cidr)
    nat = next(list(block.subnets(prefixlen_diff=1))[1].subnets(new_prefix=24))
    database = network.second_subnet_block(vpc_cidr)
    assert database.subnet_of(block)  # type: ignore[arg-type]
    assert not database.overlaps(private_subnet_block(vpc_cidr)) and not database.overlaps(nat)


def test_a_region_with_one_zone_is_refused_with_the_fix() -> None:
    with pytest.raises(InputError) as caught:
        network.second_zone(["us-east-1a"], "us-east-1a", accounting_db.SECOND_ZONE)
    assert (
        "two Availability Zones" in caught.value.message
        and "accounting.database: local" in caught.value.message
    )
