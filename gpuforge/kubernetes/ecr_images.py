"""Images AWS publishes for EKS in its regional ECR registries, and their digests, read when applying.

Some add-on images (the EFA device plugin) come only from AWS's per-region ECR registries, and no
published source pairs their tags with digests (gpuforge/data/kubernetes_addons.yaml says where
it looked). Applying them by tag would run whatever the tag points at on the day; leaving them out
leaves `vpc.amazonaws.com/efa` pods Pending. So `gpuforge scheduler apply`, which runs with AWS
credentials in the stack's region, asks ECR itself (DescribeImages) which digest the pinned tag names
there, and applies the image by that digest: every object on the cluster still names its image by
digest, and the apply report says where each digest came from.

Nodes pull from their own region's registry (gpuforge/data/eks_image_registries.yaml, from the EKS
user guide's table): the ECR interface endpoints a private VPC has serve their own region only.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel, ConfigDict

from gpuforge.aws_session import setup_error
from gpuforge.errors import GpuforgeError, InputError

if TYPE_CHECKING:
    from gpuforge.kubernetes.addons import Image

REGISTRIES_FILE = "data/eks_image_registries.yaml"
# `<account>.dkr.ecr.<region>.amazonaws.com[.cn]`: the account is the registry id DescribeImages takes.
_ECR_HOST = re.compile(r"(?P<account>[0-9]{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


class Registries(BaseModel):
    source: str
    registries: dict[str, str]

    model_config = ConfigDict(extra="forbid", frozen=True)


@cache
def registries() -> Registries:
    """The shipped table of AWS's EKS add-on registries per region."""
    text = resources.files("gpuforge").joinpath(REGISTRIES_FILE).read_text(encoding="utf-8")
    return Registries.model_validate(yaml.safe_load(text))


def addon_registry(region: str) -> str:
    """The registry host AWS serves EKS add-on images from in `region`; InputError when the table has none."""
    table = registries()
    try:
        return table.registries[region]
    except KeyError:
        raise InputError(
            f"gpuforge/{REGISTRIES_FILE}: no EKS add-on image registry for region {region!r} (the EKS user "
            f"guide's table, {table.source}, lists {', '.join(sorted(table.registries))}). Fix: deploy in one "
            "of those regions, or add the region's row from the guide's current table with its source."
        ) from None


def is_aws_ecr(repository: str) -> bool:
    """Whether `repository` (host/path) is in a private ECR registry, whose tags ECR can resolve."""
    return _ECR_HOST.fullmatch(repository.split("/", 1)[0]) is not None


def in_region(repository: str, region: str) -> str:
    """`repository` moved to `region`'s add-on registry (the path kept): the image a node there can pull."""
    return f"{addon_registry(region)}/{repository.split('/', 1)[1]}"


def resolve_digest(ecr: Any, repository: str, tag: str) -> str:
    """The digest ECR gives for `repository:tag` now (DescribeImages), as `sha256:<hex>`.

    `ecr` is a boto3 ECR client in the registry's region. A missing repository or tag is a bad pin
    (exit 2, the fix named); any other AWS failure is worth running again (exit 1).
    """
    from botocore.exceptions import BotoCoreError, ClientError

    host, path = repository.split("/", 1)
    match = _ECR_HOST.fullmatch(host)
    if match is None:
        raise InputError(
            f"{repository}: not an ECR registry (account.dkr.ecr.region.amazonaws.com): no tag to resolve."
        )
    try:
        answer = ecr.describe_images(
            registryId=match["account"], repositoryName=path, imageIds=[{"imageTag": tag}]
        )
    except ClientError as error:
        code = str(error.response.get("Error", {}).get("Code", ""))
        if code in ("RepositoryNotFoundException", "ImageNotFoundException"):
            raise InputError(
                f"{repository}:{tag}: ECR answers {code} in {match['region']}. Fix: pin a tag AWS publishes "
                "there (gpuforge/data/kubernetes_addons.yaml), checking it with `aws ecr describe-images "
                f"--registry-id {match['account']} --repository-name {path} --region {match['region']}`."
            ) from None
        raise GpuforgeError(
            f"{repository}:{tag}: ECR DescribeImages failed ({code or error}); nothing was applied. "
            "Fix: check the credentials can call ecr:DescribeImages, then run again.",
            exit_code=1,
        ) from None
    except BotoCoreError as error:
        setup = setup_error(error, "gpuforge scheduler apply")
        if setup is not None:
            raise setup from None
        raise GpuforgeError(
            f"{repository}:{tag}: ECR could not be reached ({error}); nothing was applied. Fix: run again "
            "from a host that reaches ECR in that region.",
            exit_code=1,
        ) from None
    details = answer.get("imageDetails") or []
    digests = {str(detail.get("imageDigest", "")) for detail in details}
    if len(digests) != 1 or not _DIGEST.fullmatch(next(iter(digests))):
        raise GpuforgeError(
            f"{repository}:{tag}: ECR gave {sorted(digests) or 'no image'}, not one sha256 digest; nothing was "
            "applied. Fix: run again; if it persists, pin the digest in gpuforge/data/kubernetes_addons.yaml.",
            exit_code=1,
        )
    return next(iter(digests))


def with_digest(image: Image, digest: str, region: str) -> Image:
    """`image` pinned to the digest ECR gave, the source saying so (the apply report and index show it)."""
    return type(image).model_validate(
        {
            **image.model_dump(),
            "digest": digest,
            "digest_source": f"ECR DescribeImages of {image.repository}:{image.tag} in {region}, read by "
            "gpuforge scheduler apply",
            "unsourced": None,
        }
    )
