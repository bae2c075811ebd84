"""Digests of AWS's EKS add-on images, read from ECR when applying (moto's server on 127.0.0.1)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from gpuforge.errors import GpuforgeError, InputError
from gpuforge.kubernetes import ecr_images
from gpuforge.regions import aws_regions

ACCOUNT = "602401143452"  # AWS's EKS add-on account in us-west-2 (gpuforge/data/eks_image_registries.yaml)
REGION = "us-west-2"
REPOSITORY = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/eks/aws-efa-k8s-device-plugin"
TAG = "v0.5.21-eksbuild.9"


@pytest.fixture
def ecr(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """An ECR client acting in AWS's add-on account, where moto holds the plugin's repository and tag.

    moto keeps one backend per account and resolves the caller's account from its credentials, so the
    test assumes a role in that account (moto's STS) and reads the registry as that account.
    """
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    sts = boto3.client("sts", region_name=REGION, endpoint_url=moto_server)
    credentials = sts.assume_role(RoleArn=f"arn:aws:iam::{ACCOUNT}:role/publisher", RoleSessionName="test")[
        "Credentials"
    ]
    client = boto3.client(
        "ecr",
        region_name=REGION,
        endpoint_url=moto_server,
        aws_access_key_id=credentials["AccessKeyId"],
        aws_secret_access_key=credentials["SecretAccessKey"],
        aws_session_token=credentials["SessionToken"],
    )
    client.create_repository(repositoryName="eks/aws-efa-k8s-device-plugin")
    yield client
    client.delete_repository(repositoryName="eks/aws-efa-k8s-device-plugin", force=True)


def _push(ecr: Any, tag: str) -> None:
    """An image under `tag` (moto computes its digest; the test reads it back from DescribeImages)."""
    manifest = json.dumps(
        {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "tag": tag}
    )
    ecr.put_image(repositoryName="eks/aws-efa-k8s-device-plugin", imageManifest=manifest, imageTag=tag)


def test_the_digest_is_the_one_ecr_gives_for_the_pinned_tag(ecr: Any) -> None:
    _push(ecr, "v0.5.19")
    _push(ecr, TAG)
    found = ecr_images.resolve_digest(ecr, REPOSITORY, TAG)
    described = ecr.describe_images(
        repositoryName="eks/aws-efa-k8s-device-plugin", imageIds=[{"imageTag": TAG}]
    )
    assert found == described["imageDetails"][0]["imageDigest"]
    assert found.startswith("sha256:") and len(found) == 71
    assert found != ecr_images.resolve_digest(ecr, REPOSITORY, "v0.5.19")


def test_a_tag_ecr_does_not_have_is_a_bad_pin_with_the_command_to_check(ecr: Any) -> None:
    _push(ecr, TAG)
    with pytest.raises(InputError) as caught:
        ecr_images.resolve_digest(ecr, REPOSITORY, "v9.9.9")
    message = str(caught.value)
    assert "ImageNotFoundException" in message and caught.value.exit_code == 2
    assert (
        f"aws ecr describe-images --registry-id {ACCOUNT} --repository-name eks/aws-efa-k8s-device-plugin"
        in message
    )


def test_an_unreachable_ecr_is_worth_running_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    from botocore.config import Config

    client = boto3.client(
        "ecr",
        region_name=REGION,
        endpoint_url="http://127.0.0.1:9",  # discard port: nothing listens
        config=Config(retries={"max_attempts": 1}, connect_timeout=2),
    )
    with pytest.raises(GpuforgeError) as caught:
        ecr_images.resolve_digest(client, REPOSITORY, TAG)
    assert caught.value.exit_code == 1 and "nothing was applied" in str(caught.value)


def test_every_registry_in_the_table_is_an_ecr_host_of_its_own_region() -> None:
    table = ecr_images.registries().registries
    assert set(table) <= aws_regions()
    for region, host in table.items():
        assert ecr_images.is_aws_ecr(f"{host}/eks/x"), host
        assert f".dkr.ecr.{region}.amazonaws.com" in host, (region, host)


def test_an_image_moves_to_the_stacks_region_and_an_unknown_region_is_refused() -> None:
    assert ecr_images.in_region(REPOSITORY, "eu-south-1") == (
        "590381155156.dkr.ecr.eu-south-1.amazonaws.com/eks/aws-efa-k8s-device-plugin"
    )
    with pytest.raises(InputError, match="no EKS add-on image registry for region 'ap-east-2'"):
        ecr_images.addon_registry("ap-east-2")
    assert not ecr_images.is_aws_ecr("nvcr.io/nvidia/k8s-device-plugin")
