"""Type tokens of the AWS resources the rules read (pulumi-aws 7.x)."""

from __future__ import annotations

from typing import Final

LAUNCH_TEMPLATE: Final = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE: Final = "aws:ec2/instance:Instance"
AUTOSCALING_GROUP: Final = "aws:autoscaling/group:Group"
PLACEMENT_GROUP: Final = "aws:ec2/placementGroup:PlacementGroup"
CAPACITY_RESERVATION: Final = "aws:ec2/capacityReservation:CapacityReservation"
SUBNET: Final = "aws:ec2/subnet:Subnet"
SECURITY_GROUP: Final = "aws:ec2/securityGroup:SecurityGroup"
SECURITY_GROUP_RULE: Final = "aws:ec2/securityGroupRule:SecurityGroupRule"
INGRESS_RULE: Final = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EGRESS_RULE: Final = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
LUSTRE_FILE_SYSTEM: Final = "aws:fsx/lustreFileSystem:LustreFileSystem"
DATA_REPOSITORY_ASSOCIATION: Final = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
BUCKETS: Final = ("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2")
PUBLIC_ACCESS_BLOCK: Final = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
BUCKET_ENCRYPTION: Final = (
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "aws:s3/bucketServerSideEncryptionConfigurationV2:BucketServerSideEncryptionConfigurationV2",
)

NODES: Final = (LAUNCH_TEMPLATE, INSTANCE)
"""The resources that say how a node is launched: its AMI, type, interfaces, metadata and disks."""

BUCKET_POLICY: Final = "aws:s3/bucketPolicy:BucketPolicy"
IAM_ROLE: Final = "aws:iam/role:Role"
IAM_POLICY_DOCUMENTS: Final = (
    "aws:iam/policy:Policy",
    "aws:iam/rolePolicy:RolePolicy",
    "aws:iam/userPolicy:UserPolicy",
    "aws:iam/groupPolicy:GroupPolicy",
)
"""The IAM resources whose `policy` property is an identity policy document (roles also carry inline ones)."""
