"""EKS control-plane rules: private API, secrets encrypted with KMS, every control-plane log, access entries.

What EksCluster (components/eks_cluster.py) sets is required of any EKS cluster of the stack, so a
transformation or a hand-written cluster cannot drop it. All four are resource policies, mandatory:

- `eks-private-endpoint`, on `aws:eks/cluster:Cluster`: `vpcConfig.endpointPublicAccess` false and
  `endpointPrivateAccess` true. EKS's default is the reverse (public on, private off:
  https://docs.aws.amazon.com/eks/latest/userguide/cluster-endpoint.html), so an unset value is refused.
- `eks-secrets-encrypted`: an `encryptionConfig` whose resources hold `secrets` and whose provider names a
  KMS key (https://docs.aws.amazon.com/eks/latest/userguide/envelope-encryption.html).
- `eks-control-plane-logs`: `enabledClusterLogTypes` holds all of LOG_TYPES (none is on by default:
  https://docs.aws.amazon.com/eks/latest/userguide/control-plane-logs.html).
- `eks-access-entries`: `accessConfig.authenticationMode` is API, so access is granted by access entries
  only (unset means CONFIG_MAP: https://docs.aws.amazon.com/eks/latest/userguide/grant-k8s-access.html);
  and no `aws-auth` ConfigMap in kube-system is made through the Kubernetes provider.
- `eks-addon-pinned`, on `aws:eks/addon:Addon`: an `addonVersion` is set. Unset, EKS installs its default
  version for the cluster's minor, which changes as EKS publishes builds (CreateAddon, addonVersion:
  https://docs.aws.amazon.com/eks/latest/APIReference/API_CreateAddon.html).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from pulumi_policy import EnforcementLevel, ReportViolation, ResourceValidationArgs, ResourceValidationPolicy

from gpuforge.components import eks_addons
from gpuforge.components.eks_cluster import AUTHENTICATION_MODE, LOG_TYPES
from gpuforge.policies.props import UNKNOWN, at, flag, show, text, texts

EKS_CLUSTER: Final = "aws:eks/cluster:Cluster"
EKS_ADDON: Final = "aws:eks/addon:Addon"
CONFIG_MAP: Final = "kubernetes:core/v1:ConfigMap"


def _cluster(args: ResourceValidationArgs) -> bool:
    return args.resource_type == EKS_CLUSTER


def validate_private_endpoint(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if not _cluster(args):
        return
    public = at(args.props, "vpcConfig", "endpointPublicAccess")
    private = at(args.props, "vpcConfig", "endpointPrivateAccess")
    if public is not UNKNOWN and flag(public) is not False:
        report(
            f"EKS cluster {args.name!r} has endpointPublicAccess {show(public)}: its API server answers from the "
            "internet (EKS's default when unset). Fix: set vpc_config.endpoint_public_access=False.",
            None,
        )
    if private is not UNKNOWN and flag(private) is not True:
        report(
            f"EKS cluster {args.name!r} has endpointPrivateAccess {show(private)}: nodes in the VPC could not reach "
            "the API privately (EKS's default is false). Fix: set vpc_config.endpoint_private_access=True.",
            None,
        )


def validate_secrets_encrypted(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if not _cluster(args):
        return
    config = at(args.props, "encryptionConfig")
    if config is UNKNOWN:
        return
    resources = texts(at(config, "resources"))
    key = text(at(config, "provider", "keyArn"))
    if UNKNOWN in resources or key is UNKNOWN:
        return
    if "secrets" not in resources or not key:
        report(
            f"EKS cluster {args.name!r} has encryptionConfig resources {show(at(config, 'resources'))} with key "
            f"{show(key)}: Kubernetes secrets are not envelope-encrypted with a KMS key. Fix: set encryption_config "
            "with resources=['secrets'] and provider.key_arn of a KMS key (EksCluster makes one, rotation on).",
            None,
        )


def validate_control_plane_logs(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if not _cluster(args):
        return
    enabled = texts(at(args.props, "enabledClusterLogTypes"))
    if UNKNOWN in enabled:
        return
    missing = [kind for kind in LOG_TYPES if kind not in enabled]
    if missing:
        report(
            f"EKS cluster {args.name!r} does not send the {', '.join(missing)} control-plane log(s) to CloudWatch "
            f"Logs (enabledClusterLogTypes {show(at(args.props, 'enabledClusterLogTypes'))}). "
            f"Fix: set enabled_cluster_log_types={list(LOG_TYPES)}.",
            None,
        )


def validate_access_entries(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type == CONFIG_MAP:
        metadata = at(args.props, "metadata")
        if text(at(metadata, "name")) == "aws-auth" and text(at(metadata, "namespace")) == "kube-system":
            report(
                f"ConfigMap {args.name!r} is kube-system/aws-auth: gpuforge grants cluster access through EKS access "
                "entries only (authentication mode API ignores the map). Fix: remove it and add an access entry "
                "(aws.eks.AccessEntry) for the role.",
                None,
            )
        return
    if not _cluster(args):
        return
    mode = at(args.props, "accessConfig", "authenticationMode")
    if mode is not UNKNOWN and text(mode) != AUTHENTICATION_MODE:
        report(
            f"EKS cluster {args.name!r} has authenticationMode {show(mode)} (unset is CONFIG_MAP): the aws-auth "
            "ConfigMap could grant access beside access entries. Fix: set access_config.authentication_mode='API'.",
            None,
        )


def validate_addon_pinned(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != EKS_ADDON:
        return
    version = text(at(args.props, "addonVersion"))
    if version is UNKNOWN or version:
        return
    report(
        f"EKS add-on {args.name!r} ({show(at(args.props, 'addonName'))}) has addonVersion {show(version)}: EKS "
        "installs its default version for the cluster's Kubernetes minor, which changes as EKS publishes builds. "
        f"Fix: set addon_version to the version {eks_addons.SHIPPED} pins for the minor (EksCluster does).",
        None,
    )


def _policy(
    name: str, description: str, validate: Callable[[ResourceValidationArgs, ReportViolation], None]
) -> ResourceValidationPolicy:
    return ResourceValidationPolicy(
        name=name,
        description=description,
        validate=validate,
        enforcement_level=EnforcementLevel.MANDATORY,
    )


EKS_PRIVATE_ENDPOINT = _policy(
    "eks-private-endpoint",
    "An EKS cluster's API endpoint is private only (endpointPublicAccess false, endpointPrivateAccess true).",
    validate_private_endpoint,
)
EKS_SECRETS_ENCRYPTED = _policy(
    "eks-secrets-encrypted",
    "An EKS cluster envelope-encrypts Kubernetes secrets with a KMS key.",
    validate_secrets_encrypted,
)
EKS_CONTROL_PLANE_LOGS = _policy(
    "eks-control-plane-logs",
    "An EKS cluster sends every control-plane log type to CloudWatch Logs.",
    validate_control_plane_logs,
)
EKS_ACCESS_ENTRIES = _policy(
    "eks-access-entries",
    "An EKS cluster uses authentication mode API (access entries); no aws-auth ConfigMap is made.",
    validate_access_entries,
)
EKS_ADDON_PINNED = _policy(
    "eks-addon-pinned",
    "An EKS add-on names its version (addonVersion), never EKS's moving default.",
    validate_addon_pinned,
)
