"""Where an EKS cluster's nodes pull the add-on images from, and which `api_access` lets them.

With `api_access: endpoints` a VPC gpuforge makes has no internet gateway and no NAT: the nodes reach AWS
services through interface endpoints and S3's gateway endpoint only. An image is then pullable only from a
private ECR registry of the cluster's own region (the `ecr.dkr` endpoint serves its own region's registries,
and their layers come from S3 in that region: EKS user guide, "Deploy private clusters with limited internet
access", PRIVATE_CLUSTERS_DOC). The add-ons gpuforge applies take their images from nvcr.io and
registry.k8s.io (gpuforge/data/kubernetes_addons.yaml), so such a cluster would be declared whole and its
device plugin and Kueue would never start: refused at plan time instead, naming the registries.

`api_access: existing` is the owner's word that the VPC already has a path; gpuforge cannot see which.
"""

from __future__ import annotations

import re

from gpuforge.components.input_errors import invalid
from gpuforge.components.specs import NetworkSpec
from gpuforge.kubernetes import addons

PRIVATE_CLUSTERS_DOC = "https://docs.aws.amazon.com/eks/latest/userguide/private-clusters.html"
# A private ECR registry's host: <account>.dkr.ecr.<region>.amazonaws.com (.com.cn in China)
# (Amazon ECR User Guide, "Private registry concepts": https://docs.aws.amazon.com/AmazonECR/latest/userguide/Registries.html).
_PRIVATE_ECR = re.compile(r"\d{12}\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?")


def registries_beyond_aws(region: str) -> dict[str, list[str]]:
    """Registry host -> the add-ons whose applied images come from it, for hosts outside `region`'s private ECR.

    Only add-ons gpuforge renders count (an add-on with an unsourced image is not applied at all).
    """
    hosts: dict[str, list[str]] = {}
    for name, addon in addons.pins().addons.items():
        if addon.unsourced is not None:
            continue
        for image in addon.images:
            host = image.repository.split("/", 1)[0]
            ecr = _PRIVATE_ECR.fullmatch(host)
            if ecr is None or ecr["region"] != region:
                hosts.setdefault(host, []).append(name)
    return hosts


def check_image_pulls(network: NetworkSpec, region: str) -> None:
    """Refuse an endpoints-only network when an add-on image comes from a registry outside the region's ECR."""
    if network.api_access != "endpoints":
        return
    beyond = registries_beyond_aws(region)
    if not beyond:
        return
    named = ", ".join(f"{host} ({', '.join(sorted(set(users)))})" for host, users in sorted(beyond.items()))
    raise invalid(
        "network.api_access",
        network.api_access,
        "with interface endpoints and no NAT the nodes reach AWS services only, and the add-on images come from "
        f"registries on the internet: {named}; their pods would never start",
        "use network.api_access: nat (a VPC gpuforge makes; stacks get it for scheduler type kubernetes), "
        "existing (a VPC whose own routes reach those registries), or mirror the images to ECR in "
        f"{region} (gpuforge has no setting for a mirror yet)",
        source=PRIVATE_CLUSTERS_DOC,
    )
