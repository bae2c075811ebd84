"""LustreStorage: FSx for Lustre in the nodes' subnet, linked to S3, with its security group.

Security group (Amazon FSx for Lustre User Guide, "File system access control with
Amazon VPC", https://docs.aws.amazon.com/fsx/latest/LustreGuide/limit-access-security-groups.html):
- the file system's group takes TCP 988 and 1018-1023 from the node group *and
  from itself*, because the file servers talk to each other, and may send the same
  back (the provider removes a new group's default allow-all egress);
- the clients' group takes TCP 988 and 1021-1023 from the file system's group;
- an EFA-enabled file system needs all traffic to and from itself and the clients
  ("Cannot create an EFA-enabled file system because of misconfigured security
  group", https://docs.aws.amazon.com/fsx/latest/LustreGuide/cannot-create-fs.html).

FSx checks these rules when it creates the file system, so the file system waits
for them. Encryption at rest is always on (FSx encrypts every Lustre file system);
a customer KMS key is only accepted for PERSISTENT types. The S3 link is a data
repository association where one is possible, else the legacy import/export
paths; `lustre_rules` holds every rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from gpuforge.components import lustre_rules
from gpuforge.components.input_errors import invalid
from gpuforge.components.specs import LustreSpec

TOKEN = "gpuforge:storage:LustreStorage"

STORAGE_TYPE = "SSD"
# LNet ports: the file system's group opens 988 and 1018-1023; the clients' group 988 and 1021-1023.
FILE_SERVER_PORTS = ((988, 988), (1018, 1023))
CLIENT_PORTS = ((988, 988), (1021, 1023))
ALL_TRAFFIC = "-1"


@dataclass(frozen=True)
class LustreStorageArgs:
    spec: LustreSpec
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    client_security_group_id: pulumi.Input[str]
    # The DRA's S3 path when it is not `spec.s3_path` (e.g. the cluster's bucket, an Output).
    data_repository_path: pulumi.Input[str] | None = None
    tags: Mapping[str, str] = field(default_factory=dict)


class LustreStorage(pulumi.ComponentResource):
    file_system_id: pulumi.Output[str]
    dns_name: pulumi.Output[str]
    mount_name: pulumi.Output[str]
    security_group_id: pulumi.Output[str]
    data_repository_path: pulumi.Output[str] | None
    s3_link: str | None

    def __init__(
        self, name: str, args: LustreStorageArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        spec = args.spec
        if args.data_repository_path is not None and spec.s3_path is not None:
            raise invalid(
                "lustre.s3_path",
                spec.s3_path,
                "the data repository path is given twice (in the spec and as an argument)",
                "give it in one place",
            )
        path = args.data_repository_path if args.data_repository_path is not None else spec.s3_path
        lustre_rules.check(spec, data_repository_association=path is not None)
        super().__init__(TOKEN, name, None, opts)
        self._name = name
        self._child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)

        group = aws.ec2.SecurityGroup(
            f"{name}-sg",
            vpc_id=args.vpc_id,
            description="gpuforge FSx for Lustre: LNet from the nodes and between file servers",
            tags={**tags, "Name": f"{name}-sg"},
            opts=self._child,
        )
        rules = self._security_rules(group.id, args.client_security_group_id, spec.efa_enabled)
        file_system = aws.fsx.LustreFileSystem(
            f"{name}-fs",
            storage_capacity=spec.storage_capacity_gib,
            storage_type=STORAGE_TYPE,
            deployment_type=spec.deployment_type,
            per_unit_storage_throughput=spec.throughput_per_tib,
            file_system_type_version=spec.lustre_version,
            data_compression_type=spec.data_compression,
            # One subnet, the nodes' (pulumi-aws 7 takes it as a single id).
            subnet_ids=args.subnet_id,
            security_group_ids=[group.id],
            efa_enabled=True if spec.efa_enabled else None,
            metadata_configuration=(
                aws.fsx.LustreFileSystemMetadataConfigurationArgs(
                    mode=spec.metadata_mode, iops=spec.metadata_iops
                )
                if spec.metadata_mode is not None
                else None
            ),
            kms_key_id=spec.kms_key_arn,
            import_path=spec.import_path,
            export_path=spec.export_path,
            auto_import_policy=spec.auto_import_policy,
            tags={**tags, "Name": f"{name}-fs"},
            opts=pulumi.ResourceOptions(parent=self, depends_on=rules),
        )
        self.file_system_id = file_system.id
        self.dns_name = file_system.dns_name
        self.mount_name = file_system.mount_name
        self.security_group_id = group.id
        self.data_repository_path = None
        self.s3_link = "import_path" if spec.import_path is not None else None
        if path is not None:
            self.data_repository_path = pulumi.Output.from_input(path)
            self.s3_link = "dra"
            self._data_repository_association(file_system.id, path, spec, tags)

        self.register_outputs(
            {
                "file_system_id": self.file_system_id,
                "dns_name": self.dns_name,
                "mount_name": self.mount_name,
                "security_group_id": self.security_group_id,
                "s3_link": self.s3_link,
            }
        )

    def _security_rules(
        self, group_id: pulumi.Output[str], clients: pulumi.Input[str], efa: bool
    ) -> list[pulumi.Resource]:
        rules: list[pulumi.Resource] = []
        peers: tuple[tuple[str, pulumi.Input[str]], ...] = (("self", group_id), ("nodes", clients))
        for label, peer in peers:
            if efa:
                rules += [
                    aws.vpc.SecurityGroupIngressRule(
                        f"{self._name}-in-{label}-all",
                        security_group_id=group_id,
                        referenced_security_group_id=peer,
                        ip_protocol=ALL_TRAFFIC,
                        description=f"EFA-enabled FSx: all traffic from {label}",
                        opts=self._child,
                    ),
                    aws.vpc.SecurityGroupEgressRule(
                        f"{self._name}-out-{label}-all",
                        security_group_id=group_id,
                        referenced_security_group_id=peer,
                        ip_protocol=ALL_TRAFFIC,
                        description=f"EFA-enabled FSx: all traffic to {label}",
                        opts=self._child,
                    ),
                ]
                continue
            for low, high in FILE_SERVER_PORTS:
                ports = f"{low}" if low == high else f"{low}-{high}"
                rules += [
                    aws.vpc.SecurityGroupIngressRule(
                        f"{self._name}-in-{label}-{ports}",
                        security_group_id=group_id,
                        referenced_security_group_id=peer,
                        ip_protocol="tcp",
                        from_port=low,
                        to_port=high,
                        description=f"Lustre LNet from {label}",
                        opts=self._child,
                    ),
                    aws.vpc.SecurityGroupEgressRule(
                        f"{self._name}-out-{label}-{ports}",
                        security_group_id=group_id,
                        referenced_security_group_id=peer,
                        ip_protocol="tcp",
                        from_port=low,
                        to_port=high,
                        description=f"Lustre LNet to {label}",
                        opts=self._child,
                    ),
                ]
        if efa:
            rules.append(
                aws.vpc.SecurityGroupIngressRule(
                    f"{self._name}-clients-in-fsx-all",
                    security_group_id=clients,
                    referenced_security_group_id=group_id,
                    ip_protocol=ALL_TRAFFIC,
                    description="EFA-enabled FSx: all traffic from the file system",
                    opts=self._child,
                )
            )
            return rules
        for low, high in CLIENT_PORTS:
            ports = f"{low}" if low == high else f"{low}-{high}"
            rules.append(
                aws.vpc.SecurityGroupIngressRule(
                    f"{self._name}-clients-in-fsx-{ports}",
                    security_group_id=clients,
                    referenced_security_group_id=group_id,
                    ip_protocol="tcp",
                    from_port=low,
                    to_port=high,
                    description="Lustre LNet from the file system",
                    opts=self._child,
                )
            )
        return rules

    def _data_repository_association(
        self,
        file_system_id: pulumi.Output[str],
        path: pulumi.Input[str],
        spec: LustreSpec,
        tags: dict[str, str],
    ) -> None:
        aws.fsx.DataRepositoryAssociation(
            f"{self._name}-dra",
            file_system_id=file_system_id,
            data_repository_path=path,
            file_system_path=spec.file_system_path,
            # List what is already in S3 when the link is made, not only later changes.
            batch_import_meta_data_on_create=True,
            s3=aws.fsx.DataRepositoryAssociationS3Args(
                auto_import_policy=(
                    aws.fsx.DataRepositoryAssociationS3AutoImportPolicyArgs(
                        events=list(spec.auto_import_events)
                    )
                    if spec.auto_import_events
                    else None
                ),
                auto_export_policy=(
                    aws.fsx.DataRepositoryAssociationS3AutoExportPolicyArgs(
                        events=list(spec.auto_export_events)
                    )
                    if spec.auto_export_events
                    else None
                ),
            ),
            tags={**tags, "Name": f"{self._name}-dra"},
            opts=self._child,
        )
