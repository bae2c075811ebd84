"""Kubernetes version facts for GPU nodes: kubelet skew, EKS support windows, CRI versions.

The facts live in `gpuforge/data/kubernetes.yaml`, each with its source; the matrix rules
(`gpuforge.images.kubernetes_rules`) read them here, and so can a stack check of the control
plane's version, so a date or a skew limit is written once.
"""

from __future__ import annotations

from datetime import date
from functools import cache
from importlib import resources
from typing import Literal

import yaml
from packaging.version import Version
from pydantic import BaseModel, ConfigDict, Field

KUBERNETES_FILE = "data/kubernetes.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Skew(_Strict):
    kubelet_max_minors_older: int = Field(ge=0)
    source: str


class EksVersion(_Strict):
    """One row of EKS's release calendar (the official table gives all three days for every row)."""

    eks_release: date
    end_of_standard_support: date
    end_of_extended_support: date


class Eks(_Strict):
    source: str
    warn_days_before_eol: int
    versions: dict[str, EksVersion]


class Cri(_Strict):
    kubelet_requires_v1_from: str
    containerd_serves_v1_from: str
    source: str


class KubernetesFacts(_Strict):
    schema_: int = 1
    skew: Skew
    eks: Eks
    cri: Cri


@cache
def kubernetes_facts() -> KubernetesFacts:
    """The Kubernetes facts, parsed and validated once per process."""
    text = resources.files("gpuforge").joinpath(KUBERNETES_FILE).read_text(encoding="utf-8")
    raw = yaml.safe_load(text)
    raw["schema_"] = raw.pop("schema")
    return KubernetesFacts.model_validate(raw)


Support = Literal["standard", "extended", "ended", "unknown"]


def eks_support(minor: str, today: date) -> Support:
    """Where EKS's calendar puts a control plane minor (`1.35`) on `today`."""
    row = kubernetes_facts().eks.versions.get(minor)
    if row is None:
        return "unknown"
    if today < row.end_of_standard_support:
        return "standard"
    if today < row.end_of_extended_support:
        return "extended"
    return "ended"


def minor_of(version: str) -> tuple[int, int]:
    """(major, minor) of `1.35.8` or `1.35`."""
    parsed = Version(version)
    return parsed.major, parsed.minor
