"""Shared inputs for the Kubernetes render tests (fixtures are re-exported by conftest.py)."""

from __future__ import annotations

import hashlib

import pytest

from gpuforge import hardware
from gpuforge.components.specs import QosSpec, TeamSpec, TeamUser
from gpuforge.kubernetes.addons import Image
from gpuforge.kubernetes.kueue import GpuNodeGroup

# The Kubernetes versions whose official schemas the rendered core objects are checked against:
# the EKS versions in standard support at the time of writing (kubernetes-validate 1.37.0 carries them).
KUBERNETES_VERSIONS = ("1.33.0", "1.34.0", "1.35.0")


def group(instance_type: str = "p5.48xlarge", name: str = "p5-eks-gpu") -> GpuNodeGroup:
    return GpuNodeGroup(name=name, instance_type=hardware.get(instance_type), node_count=4)


def team(name: str, quota: int, *qos: str) -> TeamSpec:
    return TeamSpec(name=name, users=(TeamUser(name=f"{name}user", default=True),), gpu_quota=quota, qos=qos)


def qos(name: str, priority: int, *preempts: str) -> QosSpec:
    return QosSpec(name=name, priority=priority, preempts=preempts)


@pytest.fixture
def teams() -> list[TeamSpec]:
    return [team("llm", 16, "production", "research"), team("vision", 8, "research")]


@pytest.fixture
def qos_block() -> list[QosSpec]:
    return [qos("production", 1000, "research"), qos("research", 100)]


@pytest.fixture
def test_image() -> Image:
    """An image for builder tests only: its digest is the sha256 of a test string, never shipped."""
    return Image(
        repository="registry.invalid/gpuforge-test",
        tag="t",
        digest="sha256:" + hashlib.sha256(b"gpuforge test image").hexdigest(),
        digest_source="test input",
    )
