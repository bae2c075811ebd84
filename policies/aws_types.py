"""Type tokens of the AWS resources the rules read (pulumi-aws 7.x)."""

from __future__ import annotations

from typing import Final

LAUNCH_TEMPLATE: Final = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE: Final = "aws:ec2/instance:Instance"
SPOT_INSTANCE_REQUEST: Final = "aws:ec2/spotInstanceRequest:SpotInstanceRequest"
LAUNCH_CONFIGURATION: Final = "aws:ec2/launchConfiguration:LaunchConfiguration"
SPOT_FLEET_REQUEST: Final = "aws:ec2/spotFleetRequest:SpotFleetRequest"
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

INSTANCES: Final = (INSTANCE, SPOT_INSTANCE_REQUEST)
"""Resources that launch one instance with an instance's own settings, field for field (pulumi-aws 7.x
`ec2.SpotInstanceRequestArgs` repeats `ec2.InstanceArgs`, plus the spot request's own fields)."""

NODES: Final = (LAUNCH_TEMPLATE, *INSTANCES, LAUNCH_CONFIGURATION)
"""The resources that say how a node is launched: its AMI, type, interfaces, metadata and disks.

A launch configuration (an Auto Scaling group's older launch source) has the instance's
top-level settings (`associate_public_ip_address`, `key_name`, `metadata_options`,
`root_block_device`, `ebs_block_devices`) with the AMI under `image_id`. An EC2 Fleet
launches from launch templates only (checked as such); a Spot Fleet request launches
from launch templates or from its `launch_specifications`, each of which the node rules
read as a node of its own (`NodeSettings.each`).
"""

BUCKET_POLICY: Final = "aws:s3/bucketPolicy:BucketPolicy"
IAM_ROLE: Final = "aws:iam/role:Role"
IAM_POLICY_DOCUMENTS: Final = (
    "aws:iam/policy:Policy",
    "aws:iam/rolePolicy:RolePolicy",
    "aws:iam/userPolicy:UserPolicy",
    "aws:iam/groupPolicy:GroupPolicy",
)
"""The IAM resources whose `policy` property is an identity policy document (roles also carry inline ones)."""
