"""The nodes' IAM role: SSM core, the cluster's bucket, and SetInstanceHealth on their own group.

Nothing wider: S3 access is scoped to the one bucket (and its KMS key, if any),
and `autoscaling:SetInstanceHealth`, which the node agent calls to mark its node
unhealthy, is scoped to the node group's own Auto Scaling group ARN (the action
supports resource-level permissions on autoScalingGroup,
https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2autoscaling.html).

On a Slurm cluster the GPU nodes' role and the controller's role (the same kind of
role, from `node_role`, without a bucket) may read the shared Slurm key, and only
that secret: `secretsmanager:GetSecretValue` on its one ARN (the action takes a
secret ARN as its resource,
https://docs.aws.amazon.com/service-authorization/latest/reference/list_awssecretsmanager.html).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

# Systems Manager's managed policy for instances it manages.
# Source: https://docs.aws.amazon.com/systems-manager/latest/userguide/setup-instance-permissions.html
SSM_CORE_POLICY = "AmazonSSMManagedInstanceCore"

BUCKET_LEVEL_ACTIONS = ("s3:ListBucket", "s3:GetBucketLocation")
OBJECT_LEVEL_ACTIONS = (
    "s3:GetObject",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
    "s3:ListMultipartUploadParts",
)
KMS_ACTIONS = ("kms:Decrypt", "kms:GenerateDataKey")


@dataclass(frozen=True)
class NodeRole:
    role: aws.iam.Role
    instance_profile: aws.iam.InstanceProfile


def _statement(
    actions: tuple[str, ...], resources: list[str], sid: str
) -> aws.iam.GetPolicyDocumentStatementArgs:
    return aws.iam.GetPolicyDocumentStatementArgs(
        sid=sid, effect="Allow", actions=list(actions), resources=resources
    )


def assumable_role(
    owner: pulumi.Resource, name: str, service: str, description: str, tags: Mapping[str, str]
) -> tuple[aws.iam.Role, pulumi.Output[aws.GetPartitionResult]]:
    """A role `service` (e.g. ec2, eks) may assume, child of `owner`, and the partition its ARNs are in.

    The service principal's domain is the partition's (`ec2.amazonaws.com`, `ec2.amazonaws.com.cn`),
    so one definition serves every partition; the caller attaches the policies.
    """
    child = pulumi.ResourceOptions(parent=owner)
    invoke = pulumi.InvokeOutputOptions(parent=owner)
    partition = aws.get_partition_output(opts=invoke)
    assume = aws.iam.get_policy_document_output(
        statements=partition.dns_suffix.apply(
            lambda suffix: [
                aws.iam.GetPolicyDocumentStatementArgs(
                    effect="Allow",
                    actions=["sts:AssumeRole"],
                    principals=[
                        aws.iam.GetPolicyDocumentStatementPrincipalArgs(
                            type="Service", identifiers=[f"{service}.{suffix}"]
                        )
                    ],
                )
            ]
        ),
        opts=invoke,
    )
    role = aws.iam.Role(
        f"{name}-role",
        assume_role_policy=assume.json,
        description=description,
        tags=dict(tags),
        opts=child,
    )
    return role, partition


def node_role(
    owner: pulumi.Resource,
    name: str,
    *,
    bucket_arn: pulumi.Input[str] | None,
    bucket_kms_key_arn: str | None,
    tags: Mapping[str, str],
) -> NodeRole:
    """The role and instance profile of one node group, children of `owner`."""
    child = pulumi.ResourceOptions(parent=owner)
    invoke = pulumi.InvokeOutputOptions(parent=owner)
    role, partition = assumable_role(owner, name, "ec2", f"gpuforge nodes of {name}", tags)
    aws.iam.RolePolicyAttachment(
        f"{name}-ssm-core",
        role=role.name,
        policy_arn=partition.partition.apply(lambda p: f"arn:{p}:iam::aws:policy/{SSM_CORE_POLICY}"),
        opts=child,
    )
    if bucket_arn is not None:

        def bucket_statements(arn: str) -> list[aws.iam.GetPolicyDocumentStatementArgs]:
            statements = [
                _statement(BUCKET_LEVEL_ACTIONS, [arn], "ClusterBucket"),
                _statement(OBJECT_LEVEL_ACTIONS, [f"{arn}/*"], "ClusterBucketObjects"),
            ]
            if bucket_kms_key_arn is not None:
                statements.append(_statement(KMS_ACTIONS, [bucket_kms_key_arn], "ClusterBucketKey"))
            return statements

        aws.iam.RolePolicy(
            f"{name}-bucket",
            role=role.name,
            policy=aws.iam.get_policy_document_output(
                statements=pulumi.Output.from_input(bucket_arn).apply(bucket_statements), opts=invoke
            ).json,
            opts=child,
        )
    profile = aws.iam.InstanceProfile(f"{name}-profile", role=role.name, tags=dict(tags), opts=child)
    return NodeRole(role=role, instance_profile=profile)


def allow_set_instance_health(
    owner: pulumi.Resource, name: str, role: aws.iam.Role, group_arn: pulumi.Input[str]
) -> aws.iam.RolePolicy:
    """Let the nodes mark themselves unhealthy in their own Auto Scaling group, and no other."""
    invoke = pulumi.InvokeOutputOptions(parent=owner)
    document = aws.iam.get_policy_document_output(
        statements=pulumi.Output.from_input(group_arn).apply(
            lambda arn: [_statement(("autoscaling:SetInstanceHealth",), [arn], "OwnGroupHealth")]
        ),
        opts=invoke,
    )
    return aws.iam.RolePolicy(
        f"{name}-set-health",
        role=role.name,
        policy=document.json,
        opts=pulumi.ResourceOptions(parent=owner),
    )


def allow_read_secret(
    owner: pulumi.Resource, name: str, role: aws.iam.Role, secret_arn: pulumi.Input[str]
) -> aws.iam.RolePolicy:
    """Let `role` read the value of the one secret `secret_arn` (the Slurm key), and no other secret."""
    invoke = pulumi.InvokeOutputOptions(parent=owner)
    document = aws.iam.get_policy_document_output(
        statements=pulumi.Output.from_input(secret_arn).apply(
            lambda arn: [_statement(("secretsmanager:GetSecretValue",), [arn], "SlurmKey")]
        ),
        opts=invoke,
    )
    return aws.iam.RolePolicy(
        f"{name}-slurm-key",
        role=role.name,
        policy=document.json,
        opts=pulumi.ResourceOptions(parent=owner),
    )


# The calls of one topology round (gpuforge.scheduler.sync). Neither takes resource-level
# permissions, so the resource is "*". Source:
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-topology-prerequisites.html (IAM permissions)
TOPOLOGY_ACTIONS = ("ec2:DescribeInstances", "ec2:DescribeInstanceTopology")


def allow_describe_topology(owner: pulumi.Resource, name: str, role: aws.iam.Role) -> aws.iam.RolePolicy:
    """Let the Slurm controller's `role` read the cluster's instances and their network topology."""
    document = aws.iam.get_policy_document_output(
        statements=[_statement(TOPOLOGY_ACTIONS, ["*"], "SlurmTopology")],
        opts=pulumi.InvokeOutputOptions(parent=owner),
    )
    return aws.iam.RolePolicy(
        f"{name}-topology", role=role.name, policy=document.json, opts=pulumi.ResourceOptions(parent=owner)
    )


# Prometheus's EC2 service discovery calls DescribeInstances, which takes no resource-level
# permission. Source: https://prometheus.io/docs/prometheus/latest/configuration/configuration/#ec2_sd_config
# ("The IAM credentials used must have the ec2:DescribeInstances permission"). Remote write and SNS
# are granted by components.monitoring_resources.MonitoringResources.grant, on their one ARN each.
EC2_DISCOVERY_ACTIONS = ("ec2:DescribeInstances",)


def allow_discover_nodes(owner: pulumi.Resource, name: str, role: aws.iam.Role) -> aws.iam.RolePolicy:
    """Let the controller's Prometheus find the GPU nodes (EC2 service discovery on the cluster's tag)."""
    document = aws.iam.get_policy_document_output(
        statements=[_statement(EC2_DISCOVERY_ACTIONS, ["*"], "PrometheusEc2Discovery")],
        opts=pulumi.InvokeOutputOptions(parent=owner),
    )
    return aws.iam.RolePolicy(
        f"{name}-monitoring", role=role.name, policy=document.json, opts=pulumi.ResourceOptions(parent=owner)
    )
