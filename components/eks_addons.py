"""The cluster's own add-ons as Amazon EKS (managed) add-ons: VPC CNI, kube-proxy, CoreDNS, pinned by version.

Why managed add-ons, pinned: left to EKS, a new cluster gets self-managed copies at whatever versions EKS
installs that day, and an unpinned `aws.eks.Addon` takes EKS's default version for the minor, which moves as
EKS publishes builds. gpuforge creates the cluster with bootstrapSelfManagedAddons false (no self-managed
copy: EKS API reference, CreateCluster) and each add-on at the version `gpuforge/data/eks_addons.yaml`
pins for the cluster's Kubernetes minor. EKS picks each add-on version's images, so no image digest is
pinned for them; the policy `eks-addon-pinned` refuses an add-on without a version.

Order (what EKS needs, as terraform-aws-modules/terraform-aws-eks main.tf at commit 38361c48 orders its
`before_compute` add-ons): a node turns Ready only once the VPC CNI runs on it, so the VPC CNI and
kube-proxy (DaemonSets) are made before any node group (`EksCluster.grant_nodes` makes every node group's
access entry wait for them); CoreDNS is a Deployment whose pods need nodes, so it waits for the system node
group. Conflicts: on create OVERWRITE (nothing of EKS's may be left to conflict), on update OVERWRITE too:
gpuforge declares each add-on's whole configuration (EKS's defaults today), so a field changed by hand in the
cluster is drift that an update resets instead of carrying it, untested, into the new version (EKS API
reference, UpdateAddon, resolveConflicts).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import pulumi
import pulumi_aws as aws
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuforge.components.input_errors import from_validation_error, invalid
from gpuforge.errors import InputError

DATA_FILE = "data/eks_addons.yaml"
SHIPPED = f"gpuforge/{DATA_FILE}"
# The add-ons a gpuforge EKS cluster runs, each an Amazon EKS add-on name (EKS user guide, "AWS add-ons").
NAMES = ("vpc-cni", "kube-proxy", "coredns")
# Made only once the system node group exists: CoreDNS's pods need nodes to run on.
AFTER_NODES = frozenset({"coredns"})
RESOLVE_CONFLICTS = "OVERWRITE"
ADDONS_DOC = "https://docs.aws.amazon.com/eks/latest/userguide/workloads-add-ons-available-eks.html"
# An EKS add-on version: v<major>.<minor>.<patch>-eksbuild.<build> (EKS user guide, VPC CNI "Considerations").
_VERSION = re.compile(r"v([0-9]+)\.([0-9]+)\.[0-9]+-eksbuild\.[0-9]+")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AddonPin(_Strict):
    """One add-on's version for one Kubernetes minor and the published page it was copied from."""

    version: str
    source: str


class EksAddonPins(_Strict):
    schema_: int = Field(1, alias="schema")
    kubernetes: dict[str, dict[str, AddonPin]]

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _rule_breaks(pins: EksAddonPins) -> list[str]:
    """What in `pins` breaks the file's rules: every minor has each of NAMES, well-formed, with a source."""
    breaks = []
    for minor, entries in pins.kubernetes.items():
        breaks += [f"{minor} lacks {name}" for name in NAMES if name not in entries]
        breaks += [
            f"{minor} has {name}, which gpuforge does not install" for name in entries if name not in NAMES
        ]
        for name, pin in entries.items():
            match = _VERSION.fullmatch(pin.version)
            if match is None:
                breaks.append(f"{minor}: {name} version {pin.version!r} is not v<x.y.z>-eksbuild.<n>")
            elif name == "kube-proxy" and f"{match[1]}.{match[2]}" != minor:
                # kube-proxy follows the control plane's minor (EKS user guide, kube-proxy "Update information").
                breaks.append(f"{minor}: kube-proxy {pin.version} is not for {minor}")
            if not pin.source.strip():
                breaks.append(f"{minor}: {name} {pin.version} has no source")
    return breaks


def load_pins(path: Traversable | Path) -> EksAddonPins:
    """The add-on versions of a pins file (the shipped one, or a test's); a broken file is an InputError."""
    try:
        pins = EksAddonPins.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    except ValidationError as error:
        raise from_validation_error(str(path), error) from None
    breaks = _rule_breaks(pins)
    if breaks:
        raise InputError(
            f"{path}: " + "; ".join(breaks) + ". Fix: give every Kubernetes minor vpc-cni, kube-proxy and "
            "coredns, each a version the EKS user guide lists for that minor, with the page it came from."
        )
    return pins


@cache
def pins() -> EksAddonPins:
    """The add-on versions shipped in the package."""
    return load_pins(resources.files("gpuforge").joinpath(DATA_FILE))


def for_version(kubernetes_version: str) -> Mapping[str, AddonPin]:
    """Each add-on's pin for the cluster's minor; a minor the file has no entry for is refused, with the fix."""
    entries = pins().kubernetes.get(kubernetes_version)
    if entries is None:
        known = ", ".join(sorted(pins().kubernetes))
        raise invalid(
            "scheduler.kubernetesVersion",
            kubernetes_version,
            f"gpuforge installs {', '.join(NAMES)} as EKS add-ons pinned per Kubernetes minor, and {SHIPPED} "
            f"pins them for {known} only",
            f"use kubernetesVersion {known}, or add a {kubernetes_version} entry to {SHIPPED} with each add-on's "
            "version from the EKS user guide's table for that minor (or `aws eks describe-addon-versions "
            f"--addon-name NAME --kubernetes-version {kubernetes_version}`, run by a person) and its source",
            source=ADDONS_DOC,
        )
    return entries


def make(
    owner: pulumi.Resource,
    name: str,
    *,
    cluster_name: pulumi.Input[str],
    kubernetes_version: str,
    tags: Mapping[str, str],
) -> dict[str, aws.eks.Addon]:
    """The add-ons that need no node (VPC CNI, kube-proxy), made now; `make_after_nodes` makes the rest."""
    return {
        addon: _addon(owner, name, addon, pin, cluster_name, tags, [])
        for addon, pin in for_version(kubernetes_version).items()
        if addon not in AFTER_NODES
    }


def make_after_nodes(
    owner: pulumi.Resource,
    name: str,
    *,
    cluster_name: pulumi.Input[str],
    kubernetes_version: str,
    nodes: pulumi.Resource,
    tags: Mapping[str, str],
) -> dict[str, aws.eks.Addon]:
    """The add-ons whose pods need nodes (CoreDNS), made once the node group `nodes` exists."""
    return {
        addon: _addon(owner, name, addon, pin, cluster_name, tags, [nodes])
        for addon, pin in for_version(kubernetes_version).items()
        if addon in AFTER_NODES
    }


def _addon(
    owner: pulumi.Resource,
    name: str,
    addon: str,
    pin: AddonPin,
    cluster_name: pulumi.Input[str],
    tags: Mapping[str, str],
    depends_on: list[pulumi.Resource],
) -> aws.eks.Addon:
    return aws.eks.Addon(
        f"{name}-{addon}",
        cluster_name=cluster_name,
        addon_name=addon,
        addon_version=pin.version,
        resolve_conflicts_on_create=RESOLVE_CONFLICTS,
        resolve_conflicts_on_update=RESOLVE_CONFLICTS,
        tags=dict(tags),
        opts=pulumi.ResourceOptions(parent=owner, depends_on=depends_on),
    )
