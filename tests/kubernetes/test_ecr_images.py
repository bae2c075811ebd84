"""Digests of AWS's EKS add-on images, read from ECR when applying (moto's server on 127.0.0.1)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from kube_support import EFA_REPOSITORY, pinned_efa_tag, publish_efa_plugin, push_image

from gpuforge.errors import GpuforgeError, InputError
from gpuforge.kubernetes import ecr_images
from gpuforge.kubernetes.check import check_object
from gpuforge.kubernetes.manifests import stack_addons
from gpuforge.regions import aws_regions

ACCOUNT = "602401143452"  # AWS's EKS add-on account in us-east-1 (gpuforge/data/eks_image_registries.yaml)
REGION = "us-east-1"  # the shipped p5-eks stack's aws:region
STACKS = Path(__file__).resolve().parents[2] / "stacks" / "training"
REPOSITORY = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/eks/aws-efa-k8s-device-plugin"
TAG = pinned_efa_tag()


@pytest.fixture
def ecr(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    client = publish_efa_plugin(moto_server, monkeypatch, REGION)
    yield client
    client.delete_repository(repositoryName=EFA_REPOSITORY, force=True)


def test_the_digest_is_the_one_ecr_gives_for_the_pinned_tag(ecr: Any) -> None:
    push_image(ecr, "v0.5.19")
    published = push_image(ecr, TAG)
    found = ecr_images.resolve_digest(ecr, REPOSITORY, TAG)
    assert found == published
    assert found.startswith("sha256:") and len(found) == 71
    assert found != ecr_images.resolve_digest(ecr, REPOSITORY, "v0.5.19")


def test_a_tag_ecr_does_not_have_is_a_bad_pin_with_the_command_to_check(ecr: Any) -> None:
    push_image(ecr, TAG)
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


def _eks_stack() -> Any:
    from gpuforge.stack_config import load_stack_config

    return load_stack_config(STACKS, "p5-eks")


def _efa_daemonset(files: dict[str, str]) -> dict[str, Any] | None:
    found = [
        yaml.safe_load(text)
        for path, text in files.items()
        if path.startswith("daemonset/") and "efa" in path
    ]
    return found[0] if found else None


def test_render_offline_leaves_the_efa_plugin_out_and_names_the_stacks_regional_copy() -> None:
    config = _eks_stack()
    files = stack_addons(config)
    assert _efa_daemonset(files) is None
    entry = yaml.safe_load(files["index.yaml"])["addons"]["aws-efa-k8s-device-plugin"]
    assert entry["rendered"] is False
    registry = ecr_images.addon_registry(config.region)
    assert entry["images"][0]["repository"] == f"{registry}/eks/aws-efa-k8s-device-plugin"


def test_apply_renders_the_efa_plugin_by_the_digest_ecr_gives_in_the_stacks_region(ecr: Any) -> None:
    config = _eks_stack()
    assert config.region == REGION, "the shipped p5-eks stack's region is the one the fixture publishes in"
    digest = push_image(ecr, TAG)
    files = stack_addons(config, ecr=ecr)
    daemonset = _efa_daemonset(files)
    assert daemonset is not None
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"{REPOSITORY}@{digest}"
    assert check_object(daemonset, "efa daemonset") == []  # by digest: the policy pack takes it
    entry = yaml.safe_load(files["index.yaml"])["addons"]["aws-efa-k8s-device-plugin"]
    assert entry["rendered"] is True
    assert entry["images"][0]["digest"] == digest
    assert (
        "ECR DescribeImages" in entry["images"][0]["digest_source"]
        and REGION in entry["images"][0]["digest_source"]
    )
