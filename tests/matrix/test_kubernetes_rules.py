"""The Kubernetes node parts in a matrix: the `kubernetes` block's shape, its pins, and the `kubernetes.*`
rules (kubelet skew, EKS support on the day of the check, CRI version), each passing and failing.

Facts come from gpuforge/data/kubernetes.yaml through `kubernetes_facts()`, so a date or limit changed
there moves the expectation with it.
"""

from __future__ import annotations

import copy
from datetime import date, timedelta
from typing import Any

import pytest
from matrix_cases import findings, load, rules

from gpuforge.compat import compat
from gpuforge.errors import Severity
from gpuforge.images.kubernetes_rules import rule_eks_supported
from gpuforge.images.matrix import KUBERNETES_KEYS, Matrix
from gpuforge.kubernetes_versions import eks_support, kubernetes_facts

CHECK_DAY = date(2026, 12, 4)


def _eks(data: dict[str, Any], today: date) -> list[tuple[str, Severity, str]]:
    matrix = Matrix.model_validate(data)
    return [(f.rule, f.severity, f.message) for f in rule_eks_supported(matrix, compat(), today=today)]


@pytest.mark.parametrize("name", ["p5-h100-cuda12.yaml", "p5-h100-cuda13.yaml", "p6-b200-cuda12.yaml"])
def test_p5_and_p6_matrices_pin_every_node_part(name: str) -> None:
    data = load(name)
    assert set(data["kubernetes"]) == {"version", *KUBERNETES_KEYS}
    assert rules(data) == set()
    assert _eks(data, CHECK_DAY) == []


@pytest.mark.parametrize("name", ["g6-dev-cuda12.yaml", "p4d-a100-cuda12.yaml"])
def test_a_matrix_without_the_block_is_valid_and_downloads_no_node_part(name: str) -> None:
    data = load(name)
    assert "kubernetes" not in data
    assert not any(f.rule.startswith("kubernetes.") for f in findings(data))
    assert Matrix.model_validate(data).kubernetes_downloads == ()


# --- shape -----------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["version", *KUBERNETES_KEYS])
def test_each_key_of_the_block_is_required(h100: dict[str, Any], key: str) -> None:
    del h100["kubernetes"][key]
    [finding] = findings(h100)
    assert (finding.rule, finding.field) == ("schema.missing-key", f"kubernetes.{key}")


def test_an_unknown_key_is_refused(h100: dict[str, Any]) -> None:
    h100["kubernetes"]["kubectl"] = copy.deepcopy(h100["kubernetes"]["kubelet"])
    [finding] = findings(h100)
    assert (finding.rule, finding.field) == ("schema.unknown-key", "kubernetes.kubectl")


@pytest.mark.parametrize("version", ["1.35.8", "v1.35", "latest", "1"])
def test_the_control_plane_version_is_one_minor(h100: dict[str, Any], version: str) -> None:
    h100["kubernetes"]["version"] = version
    [finding] = findings(h100)
    assert (finding.rule, finding.field) == ("schema.type", "kubernetes.version")


@pytest.mark.parametrize("key", KUBERNETES_KEYS)
def test_every_node_part_goes_through_the_download_pin_rules(h100: dict[str, Any], key: str) -> None:
    pin = h100["kubernetes"][key]
    pin["sha256"] = "0" * 63
    pin["sha256_source"] = "unverified"
    pin["url"] = pin["url"].replace("https://", "http://")
    fields = {(f.rule, f.field) for f in findings(h100) if f.severity is Severity.ERROR}
    assert {
        ("pin.sha256", f"kubernetes.{key}.sha256"),
        ("pin.sha256-source", f"kubernetes.{key}.sha256_source"),
        ("pin.url", f"kubernetes.{key}.url"),
    } <= fields


@pytest.mark.parametrize("key", KUBERNETES_KEYS)
def test_a_floating_version_is_refused(h100: dict[str, Any], key: str) -> None:
    h100["kubernetes"][key]["version"] = "latest"
    assert ("pin.exact", f"kubernetes.{key}.version") in {(f.rule, f.field) for f in findings(h100)}


def test_a_url_that_names_another_release_is_refused(h100: dict[str, Any]) -> None:
    h100["kubernetes"]["containerd"]["version"] = "2.3.3"
    [finding] = findings(h100)
    assert (finding.rule, finding.field) == ("kubernetes.url-version", "kubernetes.containerd.url")
    assert "2.3.3" in finding.message


# --- kubernetes.ecr_credential_provider (the kubelet's credential plugin for private ECR) ---------


def test_the_ecr_credential_provider_is_a_required_node_part(h100: dict[str, Any]) -> None:
    """Without it the kubelet cannot pull the EKS add-ons (aws-node, kube-proxy, the EFA plugin) from ECR."""
    assert "ecr_credential_provider" in KUBERNETES_KEYS
    del h100["kubernetes"]["ecr_credential_provider"]
    [finding] = findings(h100)
    assert (finding.rule, finding.field) == ("schema.missing-key", "kubernetes.ecr_credential_provider")


def test_a_garbled_ecr_credential_provider_pin_is_refused(h100: dict[str, Any]) -> None:
    h100["kubernetes"]["ecr_credential_provider"] = {"version": "1.37.0", "sha256": "0" * 64}
    found = {(f.rule, f.field) for f in findings(h100)}
    assert ("schema.missing-key", "kubernetes.ecr_credential_provider.url") in found


def test_an_ecr_credential_provider_url_of_another_release_is_refused(h100: dict[str, Any]) -> None:
    h100["kubernetes"]["ecr_credential_provider"]["version"] = "1.36.2"
    [finding] = findings(h100)
    assert (finding.rule, finding.field) == (
        "kubernetes.url-version",
        "kubernetes.ecr_credential_provider.url",
    )
    assert "1.36.2" in finding.message


# --- kubernetes.kubelet-skew -----------------------------------------------------------------------


def _with_kubelet(data: dict[str, Any], version: str) -> dict[str, Any]:
    pin = data["kubernetes"]["kubelet"]
    pin["url"] = pin["url"].replace(pin["version"], version)
    pin["version"] = version
    return data


@pytest.mark.parametrize("kubelet", ["1.35.0", "1.34.11", "1.32.1"])
def test_a_kubelet_up_to_three_minors_older_passes(h100: dict[str, Any], kubelet: str) -> None:
    assert kubernetes_facts().skew.kubelet_max_minors_older == 3
    assert rules(_with_kubelet(h100, kubelet)) == set()


@pytest.mark.parametrize(
    ("kubelet", "words"), [("1.36.0", "newer"), ("1.31.9", "4 minor versions older"), ("2.35.0", "newer")]
)
def test_a_kubelet_outside_the_skew_policy_is_refused(h100: dict[str, Any], kubelet: str, words: str) -> None:
    [finding] = findings(_with_kubelet(h100, kubelet))
    assert (finding.rule, finding.field) == ("kubernetes.kubelet-skew", "kubernetes.kubelet.version")
    assert words in finding.message and "Fix: pin a kubelet 1.35.x" in finding.message
    assert "version-skew-policy" in finding.source


# --- kubernetes.eks-supported -----------------------------------------------------------------------


def test_eks_support_follows_the_calendar_day_by_day() -> None:
    row = kubernetes_facts().eks.versions["1.34"]
    assert eks_support("1.34", row.end_of_standard_support - timedelta(days=1)) == "standard"
    assert eks_support("1.34", row.end_of_standard_support) == "extended"
    assert eks_support("1.34", row.end_of_extended_support) == "ended"
    assert eks_support("1.99", CHECK_DAY) == "unknown"


def test_a_control_plane_in_extended_support_warns(h100: dict[str, Any]) -> None:
    row = kubernetes_facts().eks.versions["1.35"]
    [(rule, severity, message)] = _eks(h100, row.end_of_standard_support + timedelta(days=1))
    assert (rule, severity) == ("kubernetes.eks-supported", Severity.WARNING)
    assert "extended support" in message and str(row.end_of_extended_support) in message


def test_a_control_plane_near_the_end_of_standard_support_warns(h100: dict[str, Any]) -> None:
    row = kubernetes_facts().eks.versions["1.35"]
    [(rule, severity, _)] = _eks(h100, row.end_of_standard_support - timedelta(days=30))
    assert (rule, severity) == ("kubernetes.eks-supported", Severity.WARNING)


def test_a_control_plane_past_extended_support_is_refused(h100: dict[str, Any]) -> None:
    row = kubernetes_facts().eks.versions["1.35"]
    [(rule, severity, message)] = _eks(h100, row.end_of_extended_support)
    assert (rule, severity) == ("kubernetes.eks-supported", Severity.ERROR)
    assert f"left EKS extended support on {row.end_of_extended_support}" in message


def test_a_version_not_in_the_calendar_is_refused(h100: dict[str, Any]) -> None:
    h100["kubernetes"]["version"] = "1.36"
    _with_kubelet(h100, "1.36.4")
    [(rule, severity, message)] = _eks(h100, CHECK_DAY)
    assert (rule, severity) == ("kubernetes.eks-supported", Severity.ERROR)
    assert "gpuforge/data/kubernetes.yaml" in message


def test_an_old_control_plane_fails_matrix_check_today(h100: dict[str, Any]) -> None:
    """Through check_data (date.today()): 1.29's extended support ended 2026-03-23, before any day this runs."""
    h100["kubernetes"]["version"] = "1.29"
    _with_kubelet(h100, "1.29.0")
    assert "kubernetes.eks-supported" in rules(h100)


# --- kubernetes.cri-version ----------------------------------------------------------------------


def test_a_containerd_without_cri_v1_is_refused(h100: dict[str, Any]) -> None:
    pin = h100["kubernetes"]["containerd"]
    pin["url"] = pin["url"].replace("2.3.4", "1.5.18")
    pin["version"] = "1.5.18"
    [finding] = findings(h100)
    assert (finding.rule, finding.field) == ("kubernetes.cri-version", "kubernetes.containerd.version")
    assert "CRI v1" in finding.message and "1.6.0" in finding.message


def test_a_containerd_with_cri_v1_passes(h100: dict[str, Any]) -> None:
    pin = h100["kubernetes"]["containerd"]
    pin["url"] = pin["url"].replace("2.3.4", "1.6.0")
    pin["version"] = "1.6.0"
    assert rules(h100) == set()
