"""Matrix rules for the Kubernetes node parts (the matrix's optional `kubernetes` block).

Facts come from `gpuforge/data/kubernetes.yaml` (gpuforge.kubernetes_versions), each with its
source. The EKS support rule takes `today` as the other date-based rules do (rule_slurm_series,
rule_driver_eol), so tests fix the day of the check. Pins that are not exact are left to
`pin.exact`; sha256s, their sources and https URLs to `pin.sha256`, `pin.sha256-source`, `pin.url`,
which cover every download of the matrix, these included.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import date

from packaging.version import InvalidVersion, Version

from gpuforge.compat import Compat
from gpuforge.errors import Finding, Severity
from gpuforge.images.matrix import Matrix
from gpuforge.kubernetes_versions import kubernetes_facts

ERROR = Severity.ERROR
WARNING = Severity.WARNING
_EXACT = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")


def _release(text: str) -> Version | None:
    """An exact x.y.z release, or None (pin.exact reports anything else)."""
    if not _EXACT.fullmatch(text):
        return None
    try:
        return Version(text)
    except InvalidVersion:
        return None


def rule_kubelet_skew(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    """The kubelet is never newer than the control plane, and at most N minors older (the skew policy)."""
    spec = matrix.kubernetes
    kubelet = None if spec is None else _release(spec.kubelet.version)
    if spec is None or kubelet is None:
        return
    skew = kubernetes_facts().skew
    plane = Version(spec.version)
    behind = plane.minor - kubelet.minor
    if kubelet.major != plane.major or behind < 0:
        problem = "is newer than the control plane's; a kubelet must never be newer than kube-apiserver"
    elif behind > skew.kubelet_max_minors_older:
        problem = (
            f"is {behind} minor versions older than the control plane's; the policy allows at most "
            f"{skew.kubelet_max_minors_older}"
        )
    else:
        return
    yield Finding(
        "kubernetes.kubelet-skew",
        ERROR,
        "kubernetes.kubelet.version",
        f"kubelet {spec.kubelet.version} {problem} (kubernetes.version {spec.version}). Fix: pin a kubelet "
        f"{spec.version}.x release, the control plane's own minor.",
        skew.source,
    )


def rule_eks_supported(matrix: Matrix, data: Compat, today: date | None = None) -> Iterator[Finding]:
    """The control plane's minor is still in EKS standard or extended support today (`today` lets tests fix
    the date): an error past the end of extended support or for a version EKS's calendar (as gpuforge holds
    it) lacks, a warning during extended support, which AWS bills extra per cluster hour."""
    spec = matrix.kubernetes
    if spec is None:
        return
    eks = kubernetes_facts().eks
    today = today or date.today()
    supported = [v for v, row in eks.versions.items() if row.end_of_extended_support > today]
    standard = [v for v, row in eks.versions.items() if row.end_of_standard_support > today]
    advice = f"use a version in EKS standard support ({', '.join(standard) or 'none recorded'})"
    row = eks.versions.get(spec.version)
    if row is None:
        yield Finding(
            "kubernetes.eks-supported",
            ERROR,
            "kubernetes.version",
            f"Kubernetes {spec.version} is not in gpuforge's copy of EKS's release calendar (it knows "
            f"{', '.join(eks.versions)}). Fix: {advice}, or add {spec.version}'s dates to "
            "gpuforge/data/kubernetes.yaml from the calendar, with the day you read it.",
            eks.source,
        )
        return
    if today >= row.end_of_extended_support:
        yield Finding(
            "kubernetes.eks-supported",
            ERROR,
            "kubernetes.version",
            f"Kubernetes {spec.version} left EKS extended support on {row.end_of_extended_support}; EKS no longer "
            f"runs it and upgrades such clusters itself. Fix: {advice}"
            f"{'' if standard else ' (or extended: ' + ', '.join(supported) + ')'}.",
            eks.source,
        )
        return
    if today >= row.end_of_standard_support:
        yield Finding(
            "kubernetes.eks-supported",
            WARNING,
            "kubernetes.version",
            f"Kubernetes {spec.version} is in EKS extended support (standard support ended "
            f"{row.end_of_standard_support}; extended support, billed extra per cluster hour, ends "
            f"{row.end_of_extended_support}, {(row.end_of_extended_support - today).days} days). Fix: {advice}.",
            eks.source,
        )
    elif (row.end_of_standard_support - today).days <= eks.warn_days_before_eol:
        yield Finding(
            "kubernetes.eks-supported",
            WARNING,
            "kubernetes.version",
            f"Kubernetes {spec.version}'s EKS standard support ends on {row.end_of_standard_support} "
            f"({(row.end_of_standard_support - today).days} days). Fix: plan the move to a newer version.",
            eks.source,
        )


def rule_cri_version(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    """A kubelet that speaks only CRI v1 needs a containerd that serves it, or the node never registers."""
    spec = matrix.kubernetes
    if spec is None:
        return
    kubelet, containerd = _release(spec.kubelet.version), _release(spec.containerd.version)
    if kubelet is None or containerd is None:
        return
    cri = kubernetes_facts().cri
    if kubelet >= Version(cri.kubelet_requires_v1_from) and containerd < Version(
        cri.containerd_serves_v1_from
    ):
        yield Finding(
            "kubernetes.cri-version",
            ERROR,
            "kubernetes.containerd.version",
            f"kubelet {spec.kubelet.version} speaks only CRI v1 (from Kubernetes {cri.kubelet_requires_v1_from}) "
            f"and containerd {spec.containerd.version} does not serve it (CRI v1 from containerd "
            f"{cri.containerd_serves_v1_from}); the kubelet would not register the node. Fix: pin containerd "
            f"{cri.containerd_serves_v1_from} or newer (2.x serves CRI v1 only).",
            cri.source,
        )


def rule_kubernetes_url_version(matrix: Matrix, data: Compat) -> Iterator[Finding]:
    """Each download's URL names its pinned version: a version bumped without its URL would install one
    release and record another (dl.k8s.io and GitHub releases both carry v<version> in the path)."""
    for key, pin in matrix.kubernetes_downloads:
        if _release(pin.version) is None:
            continue  # pin.exact reports it
        if re.search(rf"(?<![0-9.])v?{re.escape(pin.version)}(?![0-9])", pin.url):
            continue
        yield Finding(
            "kubernetes.url-version",
            ERROR,
            f"{key}.url",
            f"{pin.url!r} does not name {key.split('.', 1)[1]} {pin.version}, the pinned release. Fix: point "
            f"{key}.url at that release's file and pin its sha256 from the same release.",
            "README.md, 'Kubernetes node parts'",
        )


KUBERNETES_RULES = (rule_kubelet_skew, rule_eks_supported, rule_cri_version, rule_kubernetes_url_version)
