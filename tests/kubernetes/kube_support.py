"""Shared inputs for the Kubernetes render tests (fixtures are re-exported by conftest.py)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from gpuforge import hardware
from gpuforge.components.specs import QosSpec, TeamSpec, TeamUser
from gpuforge.kubernetes.addons import Image, pins
from gpuforge.kubernetes.kueue import GpuNodeGroup

# The Kubernetes versions whose official schemas the rendered core objects are checked against:
# the EKS versions in standard support at the time of writing (kubernetes-validate 1.37.0 carries them).
KUBERNETES_VERSIONS = ("1.33.0", "1.34.0", "1.35.0")


README = Path(__file__).resolve().parents[2] / "README.md"
_EKS_SECTION = re.compile(r"^### Running jobs on EKS\n(.*?)^##", re.S | re.M)
_YAML_BLOCK = re.compile(r"^```yaml\n(.*?)^```$", re.S | re.M)


def readme_example() -> list[dict[str, Any]]:
    """The README's example job ("Running jobs on EKS"), as the documents a user would apply."""
    section = _EKS_SECTION.search(README.read_text(encoding="utf-8"))
    assert section is not None, "README has no 'Running jobs on EKS' section"
    (block,) = _YAML_BLOCK.findall(section.group(1))
    return list(yaml.safe_load_all(block))


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


# AWS's EKS add-on account in us-east-1, the shipped p5-eks stack's region (gpuforge/data/eks_image_registries.yaml).
EKS_ADDON_ACCOUNT = "602401143452"
EFA_REPOSITORY = "eks/aws-efa-k8s-device-plugin"


def publish_efa_plugin(moto_server: str, monkeypatch: pytest.MonkeyPatch, region: str) -> Any:
    """moto's ECR as AWS's add-on registry in `region`, holding the EFA plugin's repository, and this process's
    AWS environment pointed at it (what `gpuforge scheduler apply`'s boto3 client reads); returns the ECR client.

    moto keeps one backend per account and takes the caller's account from its credentials, so the fixture
    assumes a role in the add-on account (moto's STS) and both publishes and reads as that account.
    """
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    sts = boto3.client("sts", region_name=region, endpoint_url=moto_server)
    role = f"arn:aws:iam::{EKS_ADDON_ACCOUNT}:role/publisher"
    credentials = sts.assume_role(RoleArn=role, RoleSessionName="test")["Credentials"]
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", credentials["AccessKeyId"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", credentials["SecretAccessKey"])
    monkeypatch.setenv("AWS_SESSION_TOKEN", credentials["SessionToken"])
    # boto3's default session keeps the credentials it first found: a fresh one reads the environment above.
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    client = boto3.client("ecr", region_name=region)
    client.create_repository(repositoryName=EFA_REPOSITORY)
    return client


def push_image(ecr: Any, tag: str) -> str:
    """An image under `tag` in the EFA plugin's repository; its digest as ECR gives it (moto computes it)."""
    manifest = json.dumps(
        {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "tag": tag}
    )
    ecr.put_image(repositoryName=EFA_REPOSITORY, imageManifest=manifest, imageTag=tag)
    answer = ecr.describe_images(repositoryName=EFA_REPOSITORY, imageIds=[{"imageTag": tag}])
    return str(answer["imageDetails"][0]["imageDigest"])


def pinned_efa_tag() -> str:
    """The EFA device plugin's tag gpuforge pins (gpuforge/data/kubernetes_addons.yaml)."""
    return pins().addons["aws-efa-k8s-device-plugin"].images[0].tag
