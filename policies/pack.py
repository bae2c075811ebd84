"""The policy pack's metadata and its policies, importable without starting the analyzer.

`PolicyPack(...)` starts a gRPC server and blocks, so `__main__.py` holds nothing
but that call with the values from here; tests, the offline runner and
`gpuforge plan` read the same list.
"""

from __future__ import annotations

from typing import Final

from pulumi_policy import EnforcementLevel, Policy

from gpuforge import __version__
from gpuforge.policies.rules_accounting import RDS_DATABASE_HARDENED, RDS_NOT_PUBLIC, RDS_TLS_REQUIRED
from gpuforge.policies.rules_ami import AMI_PINNED, DRIVER_BRANCH_EOL
from gpuforge.policies.rules_bucket_policies import S3_NO_PUBLIC_PRINCIPAL, S3_TLS_ONLY
from gpuforge.policies.rules_eks import (
    EKS_ACCESS_ENTRIES,
    EKS_ADDON_PINNED,
    EKS_CONTROL_PLANE_LOGS,
    EKS_PRIVATE_ENDPOINT,
    EKS_SECRETS_ENCRYPTED,
)
from gpuforge.policies.rules_iam import IAM_NO_WILDCARD
from gpuforge.policies.rules_kubernetes import (
    KUBERNETES_GPU_POD,
    KUBERNETES_GPU_SHM,
    KUBERNETES_IMAGE_DIGEST,
    KUBERNETES_WORKLOAD_CHECKED,
)
from gpuforge.policies.rules_kubernetes_grace import KUBERNETES_GRACE_PERIOD
from gpuforge.policies.rules_node_access import IMDS_HOP_LIMIT, NO_SSH_KEY
from gpuforge.policies.rules_nodes import (
    EBS_ENCRYPTED,
    EFA_NETWORK_INTERFACES,
    IMDSV2_REQUIRED,
    NO_PUBLIC_IP,
    P_FAMILY_CAPACITY,
)
from gpuforge.policies.rules_placement import EFA_PLACEMENT
from gpuforge.policies.rules_scheduler import SLURM_CONTROLLER_CPU
from gpuforge.policies.rules_security_groups import EFA_SECURITY_GROUP, NODE_OPEN_INGRESS
from gpuforge.policies.rules_storage import FSX_S3_LINK, FSX_SUBNET, S3_BUCKET_PROTECTION
from gpuforge.policies.rules_tags import COST_ALLOCATION_TAGS

PACK_NAME: Final = "gpuforge"
PACK_VERSION: Final = __version__
PACK_DESCRIPTION: Final = (
    "Rejects GPU training stacks that are not pinned to catalog AMIs or not EFA-correct and hardened."
)
# Each policy states its own level; this applies only to one that does not.
PACK_ENFORCEMENT_LEVEL: Final = EnforcementLevel.MANDATORY

POLICIES: Final[list[Policy]] = [
    AMI_PINNED,
    EFA_NETWORK_INTERFACES,
    EFA_PLACEMENT,
    EFA_SECURITY_GROUP,
    IMDSV2_REQUIRED,
    IMDS_HOP_LIMIT,
    NO_SSH_KEY,
    NO_PUBLIC_IP,
    EBS_ENCRYPTED,
    NODE_OPEN_INGRESS,
    FSX_SUBNET,
    FSX_S3_LINK,
    S3_BUCKET_PROTECTION,
    S3_TLS_ONLY,
    S3_NO_PUBLIC_PRINCIPAL,
    IAM_NO_WILDCARD,
    P_FAMILY_CAPACITY,
    COST_ALLOCATION_TAGS,
    DRIVER_BRANCH_EOL,
    SLURM_CONTROLLER_CPU,
    RDS_DATABASE_HARDENED,
    RDS_NOT_PUBLIC,
    RDS_TLS_REQUIRED,
    EKS_PRIVATE_ENDPOINT,
    EKS_SECRETS_ENCRYPTED,
    EKS_CONTROL_PLANE_LOGS,
    EKS_ACCESS_ENTRIES,
    EKS_ADDON_PINNED,
    KUBERNETES_IMAGE_DIGEST,
    KUBERNETES_GPU_POD,
    KUBERNETES_GPU_SHM,
    KUBERNETES_WORKLOAD_CHECKED,
    KUBERNETES_GRACE_PERIOD,
]
